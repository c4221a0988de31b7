//! `lease keep-alive [--once] <id>`, renewing the way clientv3's lessor does: a request at once,
//! then one every TTL/3 after each answer, re-sent every 500 ms while unanswered, over a stream that
//! is reopened when it breaks. The lease counts as gone when an answer has TTL 0 or when no answer
//! came before the deadline (the lease's TTL; `--dial-timeout` + 1 s for the first answer).

use std::io::Write;
use std::time::Duration;

use proto::etcdserverpb as pb;
use tokio::sync::mpsc;
use tokio::time::{interval, sleep, Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use super::bad_connection;
use crate::command::lease_client;
use crate::error::{CliError, EXIT_BAD_CONNECTION};
use crate::global::{Conn, GlobalFlags, WriteOut};
use crate::printer::simple::lease_id_hex;
use crate::printer::Printer;

type LeaseClient = pb::lease_client::LeaseClient<Conn>;

/// clientv3's `retryConnWait`: the send loop's period and the pause before reopening a stream.
const RETRY_WAIT: Duration = Duration::from_millis(500);

/// `--once`: one request, one answer; an answer with TTL 0 means the lease is gone.
pub async fn once(global: &GlobalFlags, printer: Printer, id: i64) -> Result<String, CliError> {
    let mut client = lease_client(global).await?;
    loop {
        match once_attempt(&mut client, id).await {
            Ok(resp) if resp.ttl <= 0 => {
                return Err(CliError::new(EXIT_BAD_CONNECTION, "etcdserver: requested lease not found"))
            }
            Ok(resp) => return printer.lease_keep_alive(&resp),
            // clientv3 retries what it does not count as a halting error.
            Err(status) if matches!(status.code(), Code::Unavailable | Code::Internal) => sleep(RETRY_WAIT).await,
            Err(status) => return Err(bad_connection(status)),
        }
    }
}

async fn once_attempt(client: &mut LeaseClient, id: i64) -> Result<pb::LeaseKeepAliveResponse, tonic::Status> {
    // The sender stays open until the answer is in, as clientv3 never half-closes this stream.
    let (requests, rx) = mpsc::channel(1);
    let _ = requests.send(pb::LeaseKeepAliveRequest { id }).await;
    let mut answers = client.lease_keep_alive(ReceiverStream::new(rx)).await?.into_inner();
    // A stream that ends without an answer is Go's io.EOF, which halts.
    answers.message().await?.ok_or_else(|| tonic::Status::unknown("EOF"))
}

/// What the renewal loop knows between two streams.
struct Renewal {
    id: i64,
    next_send: Instant,
    deadline: Instant,
}

/// Renews until the lease is gone, printing every answer as it arrives; in the simple format a
/// last line says the lease expired or was revoked. The process may also just be killed.
pub async fn stream(global: &GlobalFlags, printer: Printer, id: i64) -> Result<String, CliError> {
    let mut client = lease_client(global).await?;
    let now = Instant::now();
    let mut renewal = Renewal { id, next_send: now, deadline: now + global.dial_timeout + Duration::from_secs(1) };
    while renewal.run_stream(&mut client, printer).await? {
        tokio::select! {
            _ = sleep(RETRY_WAIT) => {}
            _ = tokio::time::sleep_until(renewal.deadline) => break,
        }
    }
    if printer.format == WriteOut::Simple {
        emit(&format!("lease {} expired or revoked.\n", lease_id_hex(id)));
    }
    Ok(String::new())
}

impl Renewal {
    /// One stream's life. `Ok(true)`: the stream broke and another should be opened; `Ok(false)`:
    /// the lease is gone.
    async fn run_stream(&mut self, client: &mut LeaseClient, printer: Printer) -> Result<bool, CliError> {
        let (requests, rx) = mpsc::channel(4);
        // The first tick is immediate: a due request goes out as the stream opens. The send loop
        // runs while the stream opens too, as a gRPC server may answer the call only once it has
        // a request (grpc-go sends its headers with the first answer).
        let mut tick = interval(RETRY_WAIT);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let open = client.lease_keep_alive(ReceiverStream::new(rx));
        tokio::pin!(open);
        let mut answers = loop {
            tokio::select! {
                opened = &mut open => match opened {
                    Ok(answers) => break answers.into_inner(),
                    Err(_) => return Ok(true),
                },
                _ = tick.tick() => if let Some(reopen) = self.on_tick(&requests).await {
                    return Ok(reopen);
                },
            }
        };
        loop {
            tokio::select! {
                _ = tick.tick() => if let Some(reopen) = self.on_tick(&requests).await {
                    return Ok(reopen);
                },
                answer = answers.message() => match answer {
                    Ok(Some(resp)) if resp.id == self.id => {
                        if resp.ttl <= 0 {
                            return Ok(false);
                        }
                        emit(&printer.lease_keep_alive(&resp)?);
                        let now = Instant::now();
                        let ttl = Duration::from_secs(resp.ttl.unsigned_abs());
                        self.next_send = now + ttl / 3;
                        self.deadline = now + ttl;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return Ok(true),
                },
            }
        }
    }

    /// One step of clientv3's send and deadline loops: sends the request when it is due. `Some`
    /// ends the stream: `Some(false)` once the deadline passed unanswered (the lease counts as
    /// gone), `Some(true)` when the stream no longer takes requests.
    async fn on_tick(&self, requests: &mpsc::Sender<pb::LeaseKeepAliveRequest>) -> Option<bool> {
        let now = Instant::now();
        if now >= self.deadline {
            return Some(false);
        }
        if now >= self.next_send && requests.send(pb::LeaseKeepAliveRequest { id: self.id }).await.is_err() {
            return Some(true);
        }
        None
    }
}

/// Streams go to stdout as they arrive, one flushed write per answer.
fn emit(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}
