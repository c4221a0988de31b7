//! The benchmark workloads: closed-loop clients that each keep one request outstanding on a shared
//! connection (as etcd's `tools/benchmark` does with `--clients` over `--conns`), and the
//! watch-latency probe, which runs open loop at a fixed put rate.
//!
//! Keys never collide between workloads: puts use 8-byte big-endian sequence numbers (first byte 0),
//! `txn-put` and `load` put a letter first, and the range and watch keys are words.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use futures::StreamExt as _;
use proto::etcdserverpb as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use super::options::{Operation, Shape, Stop};
use super::stats::Stats;
use crate::client::CONNECT_TIMEOUT;
use crate::error::{Error, Result};

/// The value size of every write, as in etcd's performance guide.
pub const VALUE_SIZE: usize = 256;
/// The one key the range workloads read (8 bytes, like the written keys).
pub const RANGE_KEY: &[u8] = b"rangekey";
/// The key the watch-latency probe writes and watches.
const WATCH_KEY: &[u8] = b"watchkey";
/// `txn-put` picks its keys at random among this many, as the anchor runs did.
const TXN_KEY_SPACE: u64 = 100_000;
/// `load` writes this many keys per Txn (etcd's `--max-txn-ops` default is 128).
pub const LOAD_BATCH: u64 = 100;
/// The TTL of the leases `lease-keepalive` renews (etcd's tool uses 100 s).
const LEASE_TTL: i64 = 100;
/// How long watchers may take to deliver the last events after the last put was answered.
const WATCH_GRACE: Duration = Duration::from_secs(5);

/// What one workload measured: one row of the table, or two for watch-latency.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub rows: Vec<(String, Stats)>,
    /// The first error a client saw, for the report.
    pub first_error: Option<String>,
}

/// Everything a workload needs from the round.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The leader's client URL.
    pub leader: String,
    /// Every member's client URL.
    pub members: Vec<String>,
    pub stop: Stop,
    pub timeout: Duration,
    pub watch_rate: u32,
    /// The next sequential put key; shared by every put workload of the round.
    pub put_sequence: Arc<AtomicU64>,
}

/// Runs one workload of `shape` under `name`.
pub async fn run(name: &str, shape: Shape, setup: &Setup) -> Result<Measured> {
    let urls = match shape.endpoints {
        super::options::Endpoints::Leader => vec![setup.leader.clone()],
        super::options::Endpoints::All => setup.members.clone(),
    };
    if shape.operation == Operation::Watch {
        return watch_latency(name, &urls, shape.clients, setup).await;
    }
    let channels = connect_all(&urls, shape.conns).await?;
    let channel_of = |client: usize| channels[client % channels.len()].clone();
    let stop = setup.stop;
    let (stats, first_error) = match shape.operation {
        Operation::Put => {
            let callers = (0..shape.clients).map(|c| Put::new(channel_of(c), Arc::clone(&setup.put_sequence)));
            drive(callers.collect(), stop, setup.timeout).await
        }
        Operation::Range { serializable } => {
            let callers = (0..shape.clients).map(|c| Range::new(channel_of(c), serializable));
            drive(callers.collect(), stop, setup.timeout).await
        }
        Operation::TxnPut => {
            let callers = (0..shape.clients).map(|c| TxnPut::new(channel_of(c), c as u64));
            drive(callers.collect(), stop, setup.timeout).await
        }
        Operation::LeaseKeepAlive => {
            let grants = (0..shape.clients).map(|c| KeepAlive::grant(channel_of(c), setup.timeout));
            let callers: Vec<KeepAlive> = join_all(grants).await.into_iter().collect::<Result<_>>()?;
            drive(callers, stop, setup.timeout).await
        }
        Operation::Load => {
            // A total of keys becomes a total of batches; a duration stays one.
            let stop = match stop {
                Stop::Total(keys) => Stop::Total(keys.div_ceil(LOAD_BATCH)),
                after => after,
            };
            let callers = (0..shape.clients).map(|c| Load::new(channel_of(c)));
            let (mut stats, error) = drive(callers.collect(), stop, setup.timeout).await;
            // The row reports keys per second: every successful Txn wrote a whole batch.
            stats.qps *= LOAD_BATCH as f64;
            (stats, error)
        }
        Operation::Watch => unreachable!("handled above"),
    };
    Ok(Measured { rows: vec![(name.to_string(), stats)], first_error })
}

/// `conns` connections, spread over `urls` in turn, each connected before the clock starts.
pub async fn connect_all(urls: &[String], conns: usize) -> Result<Vec<Channel>> {
    let connects = (0..conns.max(1)).map(|i| connect(&urls[i % urls.len()]));
    join_all(connects).await.into_iter().collect()
}

/// One HTTP/2 connection (a tonic `Channel` is one connection; its clones share it).
pub async fn connect(url: &str) -> Result<Channel> {
    Endpoint::from_shared(url.to_string())
        .map_err(|err| Error::Setup(format!("bad client URL {url}: {err}")))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|err| Error::Setup(format!("cannot connect to {url}: {err}")))
}

/// One client's request, repeated: `seq` numbers the requests of the whole workload.
pub trait Caller: Send + 'static {
    fn call(&mut self, seq: u64) -> impl Future<Output = Result<(), tonic::Status>> + Send;
}

/// Runs every caller as a closed-loop client until `stop` and summarizes their latencies.
pub async fn drive<C: Caller>(callers: Vec<C>, stop: Stop, timeout: Duration) -> (Stats, Option<String>) {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = match stop {
        Stop::After(duration) => Some(start + duration),
        Stop::Total(_) => None,
    };
    let total = match stop {
        Stop::Total(total) => total,
        Stop::After(_) => u64::MAX,
    };
    let tasks = callers.into_iter().map(|mut caller| {
        let next = Arc::clone(&next);
        tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut first_error = None;
            loop {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if seq >= total || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let sent = Instant::now();
                match tokio::time::timeout(timeout, caller.call(seq)).await {
                    Ok(Ok(())) => latencies.push(sent.elapsed()),
                    Ok(Err(status)) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| crate::client::describe(&status));
                    }
                    Err(_) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| format!("no answer within {timeout:?}"));
                    }
                }
            }
            (latencies, errors, first_error)
        })
    });
    let results = join_all(tasks.collect::<Vec<_>>()).await;
    let elapsed = start.elapsed();
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for result in results {
        match result {
            Ok((mut own, own_errors, own_first)) => {
                latencies.append(&mut own);
                errors += own_errors;
                first_error = first_error.or(own_first);
            }
            Err(err) => {
                errors += 1;
                first_error = first_error.or(Some(format!("a client task died: {err}")));
            }
        }
    }
    (Stats::from_latencies(latencies, errors, elapsed), first_error)
}

/// A 256-byte value that starts with `seq` (big-endian), so a watcher can tell which put it saw.
fn value(seq: u64) -> Vec<u8> {
    let mut value = vec![b'v'; VALUE_SIZE];
    value[..8].copy_from_slice(&seq.to_be_bytes());
    value
}

/// The `seq` a [`value`] starts with.
fn value_seq(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

/// A key of 8 bytes: `prefix`, then the low 7 bytes of `n` (big-endian).
fn prefixed_key(prefix: u8, n: u64) -> Vec<u8> {
    let mut key = n.to_be_bytes().to_vec();
    key[0] = prefix;
    key
}

fn put_request(key: Vec<u8>, value: Vec<u8>) -> pb::PutRequest {
    pb::PutRequest { key, value, ..Default::default() }
}

/// `put`: sequential 8-byte keys.
struct Put {
    kv: pb::kv_client::KvClient<Channel>,
    sequence: Arc<AtomicU64>,
    value: Vec<u8>,
}

impl Put {
    fn new(channel: Channel, sequence: Arc<AtomicU64>) -> Put {
        Put { kv: pb::kv_client::KvClient::new(channel), sequence, value: vec![b'v'; VALUE_SIZE] }
    }
}

impl Caller for Put {
    fn call(&mut self, _seq: u64) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        let key = prefixed_key(0, self.sequence.fetch_add(1, Ordering::Relaxed));
        let request = put_request(key, self.value.clone());
        async move { self.kv.put(request).await.map(|_| ()) }
    }
}

/// `range`: one key, linearizable or serializable.
struct Range {
    kv: pb::kv_client::KvClient<Channel>,
    serializable: bool,
}

impl Range {
    fn new(channel: Channel, serializable: bool) -> Range {
        Range { kv: pb::kv_client::KvClient::new(channel), serializable }
    }
}

impl Caller for Range {
    fn call(&mut self, _seq: u64) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        let request =
            pb::RangeRequest { key: RANGE_KEY.to_vec(), serializable: self.serializable, ..Default::default() };
        async move {
            let response = self.kv.range(request).await?.into_inner();
            // A read that found nothing did not do the work being measured.
            if response.kvs.is_empty() {
                return Err(tonic::Status::not_found("the range key is missing"));
            }
            Ok(())
        }
    }
}

/// `txn-put`: a Txn whose success branch is one Put of a random key; no compares.
struct TxnPut {
    kv: pb::kv_client::KvClient<Channel>,
    rng: StdRng,
}

impl TxnPut {
    fn new(channel: Channel, seed: u64) -> TxnPut {
        TxnPut { kv: pb::kv_client::KvClient::new(channel), rng: StdRng::seed_from_u64(seed) }
    }
}

impl Caller for TxnPut {
    fn call(&mut self, seq: u64) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        let key = prefixed_key(b'T', self.rng.gen_range(0..TXN_KEY_SPACE));
        let request = txn_of_puts(vec![put_request(key, value(seq))]);
        async move { self.kv.txn(request).await.map(|_| ()) }
    }
}

fn txn_of_puts(puts: Vec<pb::PutRequest>) -> pb::TxnRequest {
    let success =
        puts.into_iter().map(|put| pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put)) }).collect();
    pb::TxnRequest { compare: Vec::new(), success, failure: Vec::new() }
}

/// `load`: request `seq` writes keys `seq * LOAD_BATCH ..` in one Txn.
struct Load {
    kv: pb::kv_client::KvClient<Channel>,
}

impl Load {
    fn new(channel: Channel) -> Load {
        Load { kv: pb::kv_client::KvClient::new(channel) }
    }
}

impl Caller for Load {
    fn call(&mut self, seq: u64) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        let first = seq * LOAD_BATCH;
        let puts = (first..first + LOAD_BATCH).map(|n| put_request(prefixed_key(b'L', n), value(n))).collect();
        let request = txn_of_puts(puts);
        async move { self.kv.txn(request).await.map(|_| ()) }
    }
}

/// `lease-keepalive`: one lease per client, renewed one request at a time, each on a stream of its
/// own that stays open until the answer arrives (clientv3's `KeepAliveOnce`).
struct KeepAlive {
    lease: pb::lease_client::LeaseClient<Channel>,
    id: i64,
}

impl KeepAlive {
    async fn grant(channel: Channel, timeout: Duration) -> Result<KeepAlive> {
        let mut lease = pb::lease_client::LeaseClient::new(channel);
        let request = pb::LeaseGrantRequest { ttl: LEASE_TTL, id: 0 };
        let granted = crate::client::with_timeout(timeout, lease.lease_grant(request))
            .await
            .map_err(|status| Error::Setup(format!("LeaseGrant failed: {}", crate::client::describe(&status))))?;
        Ok(KeepAlive { lease, id: granted.id })
    }
}

impl Caller for KeepAlive {
    fn call(&mut self, _seq: u64) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        // The request stream stays open until the answer arrives (closing it earlier could let a
        // server end the response stream before it answers), then ends, which closes the call on
        // both sides. (Leaving it open left every call's stream open on the server until the
        // connection closed: tens of thousands per run, hundreds of MB on either server.)
        let (answered, finished) = tokio::sync::oneshot::channel::<()>();
        let requests = futures::stream::once(futures::future::ready(pb::LeaseKeepAliveRequest { id: self.id }))
            .chain(futures::stream::once(finished).filter_map(|_| futures::future::ready(None)));
        async move {
            let mut responses = self.lease.lease_keep_alive(requests).await?.into_inner();
            let answer = responses.message().await;
            drop(answered);
            match answer? {
                Some(answer) if answer.ttl > 0 => Ok(()),
                Some(_) => Err(tonic::Status::not_found("the lease expired")),
                None => Err(tonic::Status::unavailable("the keep-alive stream ended without an answer")),
            }
        }
    }
}

/// One put of the watch-latency probe: when it was sent and answered (`None`: it failed).
#[derive(Debug, Clone, Copy)]
struct SentPut {
    sent: Instant,
    answered: Option<Instant>,
}

/// `watch-latency`: `watchers` streams (one connection each, spread over `urls`) watch one key while
/// puts go to the leader at `watch_rate` per second. Each event's latency is measured from its put
/// being sent (first row) and from its put being answered (second row, clamped at zero: events
/// often arrive before the answer).
async fn watch_latency(name: &str, urls: &[String], watchers: usize, setup: &Setup) -> Result<Measured> {
    let channels = connect_all(urls, watchers).await?;
    let (last_tx, last_rx) = watch::channel(None::<u64>);
    let mut receivers = Vec::with_capacity(watchers);
    for channel in channels {
        let stream = open_watch(channel, setup.timeout).await?;
        receivers.push(tokio::spawn(receive_events(stream, last_rx.clone())));
    }
    let mut kv = pb::kv_client::KvClient::new(connect(&setup.leader).await?);
    let period = Duration::from_secs_f64(1.0 / f64::from(setup.watch_rate));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut puts: Vec<SentPut> = Vec::new();
    let mut put_errors = 0;
    let mut first_error = None;
    loop {
        let done = match setup.stop {
            Stop::Total(total) => puts.len() as u64 >= total,
            Stop::After(duration) => start.elapsed() >= duration,
        };
        if done {
            break;
        }
        ticks.tick().await;
        let seq = puts.len() as u64;
        let sent = Instant::now();
        let request = put_request(WATCH_KEY.to_vec(), value(seq));
        let answered = match crate::client::with_timeout(setup.timeout, kv.put(request)).await {
            Ok(_) => Some(Instant::now()),
            Err(status) => {
                put_errors += 1;
                first_error.get_or_insert_with(|| crate::client::describe(&status));
                None
            }
        };
        puts.push(SentPut { sent, answered });
    }
    // Watchers stop once they have the last answered put's event; with none answered, at once.
    match puts.iter().rposition(|p| p.answered.is_some()) {
        Some(last) => {
            let _ = last_tx.send(Some(last as u64));
        }
        None => receivers.iter().for_each(|receiver| receiver.abort()),
    }
    let mut from_sent = Vec::new();
    let mut from_answer = Vec::new();
    // The same from the put sent, split by where the watcher is: the leader, or a follower.
    let (mut on_leader, mut on_followers) = (Vec::new(), Vec::new());
    let mut missing = 0;
    let mut last_event = start;
    let expected = puts.iter().filter(|p| p.answered.is_some()).count() as u64;
    for (watcher, receiver) in receivers.into_iter().enumerate() {
        let place = if urls[watcher % urls.len()] == setup.leader { &mut on_leader } else { &mut on_followers };
        let (events, error) = receiver.await.unwrap_or_else(|err| (Vec::new(), Some(format!("watcher died: {err}"))));
        if let Some(error) = error {
            first_error.get_or_insert(error);
        }
        let mut seen = 0;
        for (seq, at) in events {
            let Some(put) = usize::try_from(seq).ok().and_then(|i| puts.get(i)) else { continue };
            let Some(answered) = put.answered else { continue };
            seen += 1;
            last_event = last_event.max(at);
            from_sent.push(at.saturating_duration_since(put.sent));
            place.push(at.saturating_duration_since(put.sent));
            from_answer.push(at.saturating_duration_since(answered));
        }
        missing += expected.saturating_sub(seen);
    }
    if missing > 0 {
        first_error.get_or_insert_with(|| format!("{missing} events never arrived"));
    }
    // Both rows count events per second; the put rate fixes it, so compare their latencies.
    let elapsed = last_event.saturating_duration_since(start);
    let (leader, followers) =
        (Stats::from_latencies(on_leader, 0, elapsed), Stats::from_latencies(on_followers, 0, elapsed));
    tracing::info!(
        leader_p50_ms = leader.p50_ms,
        leader_p99_ms = leader.p99_ms,
        leader_events = leader.count,
        followers_p50_ms = followers.p50_ms,
        followers_p99_ms = followers.p99_ms,
        followers_events = followers.count,
        "watch latency by the watcher's member"
    );
    let errors = put_errors * watchers as u64 + missing;
    let rows = vec![
        (name.to_string(), Stats::from_latencies(from_sent, errors, elapsed)),
        ("watch-after-put".to_string(), Stats::from_latencies(from_answer, errors, elapsed)),
    ];
    Ok(Measured { rows, first_error })
}

/// Opens a Watch stream on [`WATCH_KEY`] and waits until the member confirms it was created.
async fn open_watch(channel: Channel, timeout: Duration) -> Result<tonic::Streaming<pb::WatchResponse>> {
    let create = pb::WatchCreateRequest { key: WATCH_KEY.to_vec(), ..Default::default() };
    let request = pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) };
    // The request stream stays open: ending it would cancel the watch.
    let requests = futures::stream::once(futures::future::ready(request)).chain(futures::stream::pending());
    let mut client = pb::watch_client::WatchClient::new(channel);
    let setup_error =
        |status: tonic::Status| Error::Setup(format!("Watch failed: {}", crate::client::describe(&status)));
    let mut stream = crate::client::with_timeout(timeout, client.watch(requests)).await.map_err(setup_error)?;
    match tokio::time::timeout(timeout, stream.message()).await {
        Ok(Ok(Some(response))) if response.created => Ok(stream),
        Ok(Ok(other)) => Err(Error::Setup(format!("Watch answered {other:?} instead of created"))),
        Ok(Err(status)) => Err(setup_error(status)),
        Err(_) => Err(Error::Setup("Watch was not created in time".to_string())),
    }
}

/// Collects `(seq, arrival)` of every event until the last put's event arrived (its seq is sent
/// on `last` when the puts end) or [`WATCH_GRACE`] after that.
async fn receive_events(
    mut stream: tonic::Streaming<pb::WatchResponse>,
    mut last: watch::Receiver<Option<u64>>,
) -> (Vec<(u64, Instant)>, Option<String>) {
    let mut events = Vec::new();
    let mut newest = None;
    let mut deadline = None;
    loop {
        let target = *last.borrow();
        if target.is_some() && newest >= target {
            return (events, None);
        }
        let grace = async move {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            message = stream.message() => match message {
                Ok(Some(response)) => {
                    let at = Instant::now();
                    for event in response.events {
                        if let Some(seq) = event.kv.as_ref().and_then(|kv| value_seq(&kv.value)) {
                            events.push((seq, at));
                            newest = newest.max(Some(seq));
                        }
                    }
                }
                Ok(None) => return (events, Some("the watch stream ended".to_string())),
                Err(status) => return (events, Some(crate::client::describe(&status))),
            },
            changed = last.changed(), if deadline.is_none() => {
                if changed.is_err() || last.borrow().is_some() {
                    deadline = Some(Instant::now() + WATCH_GRACE);
                }
            }
            () = grace => return (events, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_eight_bytes_and_values_carry_their_sequence() {
        assert_eq!(prefixed_key(0, 258), vec![0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(prefixed_key(b'L', 1), b"L\0\0\0\0\0\0\x01".to_vec());
        assert_eq!(RANGE_KEY.len(), 8);
        let v = value(77);
        assert_eq!((v.len(), value_seq(&v)), (VALUE_SIZE, Some(77)));
        assert_eq!(value_seq(b"short"), None);
    }

    #[test]
    fn load_txns_hold_a_batch_of_distinct_keys() {
        let puts: Vec<pb::PutRequest> = (200..300).map(|n| put_request(prefixed_key(b'L', n), value(n))).collect();
        let txn = txn_of_puts(puts);
        assert_eq!(txn.success.len() as u64, LOAD_BATCH);
        assert!(txn.compare.is_empty() && txn.failure.is_empty());
    }

    /// A caller that fails every third request and never touches the network.
    struct Fake;

    impl Caller for Fake {
        async fn call(&mut self, seq: u64) -> Result<(), tonic::Status> {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if seq % 3 == 2 {
                Err(tonic::Status::unavailable("no"))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn a_total_is_shared_by_all_clients_and_errors_are_counted() {
        let (stats, error) = drive(vec![Fake, Fake, Fake, Fake], Stop::Total(30), Duration::from_secs(5)).await;
        assert_eq!((stats.count, stats.errors), (20, 10), "{stats:?}");
        assert!(stats.qps > 0.0 && stats.p50_ms >= 1.0, "{stats:?}");
        assert_eq!(error.as_deref(), Some("Unavailable: no"));
        let (stats, _) = drive(vec![Fake], Stop::After(Duration::from_millis(50)), Duration::from_secs(5)).await;
        assert!(stats.count + stats.errors >= 5 && stats.elapsed_secs >= 0.05, "{stats:?}");
    }
}
