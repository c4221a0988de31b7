//! The slow consumer probe: one Watch stream, on a connection of its own, watches the prefix the
//! writers write; it reads the answer that its watcher was created and then is never read again,
//! while its request half stays open and its response half stays alive. Writers then put
//! [`VALUE_SIZE`]-byte values over [`KEYS`] keys at full speed for [`WRITE_TIME`] (100 clients on
//! 10 connections, as the load): puts/s, and the member's RSS growth from just before the first
//! put to just after the last.
//!
//! HTTP/2 flow control bounds what the unread side can take in: the member may send until the
//! stream's window (hyper's client default under tonic, 2 MiB; 5 MiB for the connection) and the
//! socket buffers are full; then its sends wait. What the member does with the events it cannot
//! send is what the RSS growth shows: a bounded queue, the rest replayed from the store once the
//! watcher reads again (as etcd does with its slow "victim" watchers), keeps it flat; a queue
//! without bound grows by about the bytes put (~1 KiB an event). The store itself grows too (the
//! puts are new revisions), so the growth is never zero; compare the two targets. The watcher has a
//! connection of its own so that the window it fills stalls no writer.
//!
//! Once the writers are done the probe reads the stream again until it has one event per put, or
//! none came for [`STALL`], so the report shows whether the member caught the watcher up, or
//! cancelled it (and why).

use std::time::Duration;

use futures::StreamExt as _;
use proto::etcdserverpb as pb;
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::Streaming;

use super::put;
use super::server::Server;
use crate::bench::options::Stop;
use crate::bench::workload::connect;
use crate::client;
use crate::error::{Error, Result};

/// The written and watched keys' prefix.
const PREFIX: &str = "slow/";
/// The writers cycle over this many keys.
const KEYS: u64 = 1000;
/// How long the writers put.
pub const WRITE_TIME: Duration = Duration::from_secs(10);
/// The bytes of each put's value.
pub const VALUE_SIZE: usize = 1024;
/// How long the member may take to confirm the watcher, and how long it settles after.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_secs(1);
/// Reading again is over when no event came for this long.
const STALL: Duration = Duration::from_secs(5);
/// Reading again is over after this long in any case.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// What the slow consumer probe measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SlowConsumerMeasure {
    pub write_secs: f64,
    pub value_size: u64,
    pub keys: u64,
    /// Successful puts while the watcher was not read.
    pub puts: u64,
    pub put_errors: u64,
    pub puts_per_sec: f64,
    pub p99_ms: f64,
    /// The member's RSS just before the first put, and just after the last was answered.
    pub rss_start_bytes: u64,
    pub rss_end_bytes: u64,
    /// `rss_end_bytes - rss_start_bytes`; negative when the member gave memory back.
    pub rss_growth_bytes: i64,
    /// Events the watcher received once it read again (one per put).
    pub events_after: u64,
    /// From reading again to the last event received.
    pub drain_secs: f64,
    /// How the watch ended while it was read again, when it did not simply stall or complete
    /// (cancelled by the member, the stream ended or failed).
    pub watch_ended: Option<String>,
    pub first_error: Option<String>,
}

pub async fn run(server: &Server, timeout: Duration) -> Result<SlowConsumerMeasure> {
    let mut watch = open_watch(server).await?;
    tokio::time::sleep(SETTLE).await;
    let rss_start_bytes = server.rss_bytes()?;
    let (stats, put_error) =
        put::put_many(&server.url, PREFIX, KEYS, Stop::After(WRITE_TIME), VALUE_SIZE, timeout).await?;
    let rss_end_bytes = server.rss_bytes()?;
    let drained = drain(&mut watch.stream, stats.count).await;
    // Dropping the stream resets it; the member cancels the watcher.
    drop(watch);
    let mut first_error = put_error;
    if drained.events < stats.count && drained.ended.is_none() {
        first_error.get_or_insert_with(|| {
            let missing = stats.count - drained.events;
            format!("{missing} of {} events never arrived once the watcher read again", stats.count)
        });
    }
    Ok(SlowConsumerMeasure {
        write_secs: stats.elapsed_secs,
        value_size: VALUE_SIZE as u64,
        keys: KEYS,
        puts: stats.count,
        put_errors: stats.errors,
        puts_per_sec: stats.qps,
        p99_ms: stats.p99_ms,
        rss_start_bytes,
        rss_end_bytes,
        rss_growth_bytes: growth(rss_start_bytes, rss_end_bytes),
        events_after: drained.events,
        drain_secs: drained.secs,
        watch_ended: drained.ended,
        first_error,
    })
}

/// The unread watcher: its response half, and the client whose channel keeps its connection.
struct SlowWatch {
    _client: pb::watch_client::WatchClient<Channel>,
    /// Keeps the request half open.
    _open: futures::channel::mpsc::Sender<pb::WatchRequest>,
    stream: Streaming<pb::WatchResponse>,
}

/// Opens the watcher of [`PREFIX`] on a connection of its own and waits for the member to confirm
/// it. The request half stays open until the [`SlowWatch`] is dropped; then it ends and the HTTP/2
/// stream is reset, so the member cancels the watcher.
async fn open_watch(server: &Server) -> Result<SlowWatch> {
    let channel = connect(&server.url).await?;
    let create = pb::WatchCreateRequest {
        key: PREFIX.as_bytes().to_vec(),
        range_end: client::prefix_end(PREFIX.as_bytes()),
        ..Default::default()
    };
    let request = pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) };
    let (open, rest) = futures::channel::mpsc::channel::<pb::WatchRequest>(1);
    let requests = futures::stream::iter([request]).chain(rest);
    let setup = |why: String| Error::Setup(format!("slow consumer: {why}"));
    let opened = async {
        let mut watch = pb::watch_client::WatchClient::new(channel);
        let answer = watch.watch(requests).await.map_err(|s| setup(format!("Watch: {}", client::describe(&s))))?;
        let mut stream = answer.into_inner();
        match stream.message().await {
            Ok(Some(response)) if response.created && !response.canceled => {
                Ok(SlowWatch { _client: watch, _open: open, stream })
            }
            Ok(Some(response)) => Err(setup(format!("the watcher was not created: {response:?}"))),
            Ok(None) => Err(setup("the Watch stream ended before the watcher was created".into())),
            Err(status) => Err(setup(format!("Watch stream: {}", client::describe(&status)))),
        }
    };
    tokio::time::timeout(CREATE_TIMEOUT, opened)
        .await
        .map_err(|_| setup(format!("the watcher was not created within {CREATE_TIMEOUT:?}")))?
}

/// What reading the stream again gave.
struct Drained {
    events: u64,
    secs: f64,
    ended: Option<String>,
}

/// Reads `stream` until `expected` events came, none came for [`STALL`], [`DRAIN_LIMIT`] passed
/// or the watch ended.
async fn drain(stream: &mut Streaming<pb::WatchResponse>, expected: u64) -> Drained {
    let started = Instant::now();
    let mut last_event = started;
    let mut events = 0;
    let mut ended = None;
    while events < expected && started.elapsed() < DRAIN_LIMIT {
        match tokio::time::timeout(STALL, stream.message()).await {
            Ok(Ok(Some(response))) => {
                if !response.events.is_empty() {
                    events += response.events.len() as u64;
                    last_event = Instant::now();
                }
                if response.canceled {
                    ended = Some(format!("the member cancelled the watcher: {:?}", response.cancel_reason));
                    break;
                }
            }
            Ok(Ok(None)) => {
                ended = Some("the Watch stream ended".to_string());
                break;
            }
            Ok(Err(status)) => {
                ended = Some(format!("Watch stream: {}", client::describe(&status)));
                break;
            }
            Err(_) => break,
        }
    }
    Drained { events, secs: last_event.duration_since(started).as_secs_f64(), ended }
}

/// `end - start` of two sizes in bytes, negative when it shrank.
fn growth(start: u64, end: u64) -> i64 {
    let signed = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
    signed(end) - signed(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_signed() {
        assert_eq!(growth(100, 250), 150);
        assert_eq!(growth(250, 100), -150);
        assert_eq!(growth(7, 7), 0);
    }
}
