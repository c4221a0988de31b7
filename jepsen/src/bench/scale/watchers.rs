//! The watch probe: many watchers open on one member (etcd's `benchmark watch --streams
//! --watch-per-stream`), the member's RSS once they are all created, then puts to the watched keys
//! from many clients while they stay open, and the events delivered to them per second.
//!
//! Watcher `j` watches key `j % keys` of [`PREFIX`] (at most [`WATCHED_KEYS`] keys), so every key
//! has about the same number of watchers and every put is delivered that many times. The events
//! are only counted (a shared counter), never kept: a full run delivers about a million of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use proto::etcdserverpb as pb;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::options::ScaleOptions;
use super::put::{self, key};
use super::server::Server;
use crate::bench::options::Stop;
use crate::bench::workload::connect_all;
use crate::client;
use crate::error::{Error, Result};

/// The watched keys' prefix.
const PREFIX: &str = "watch/";
/// At most this many distinct keys are watched: 100k watchers give 100 per key.
const WATCHED_KEYS: u64 = 1000;
/// At most this many connections carry the streams (gRPC clients put ~100 streams on one).
const MAX_CONNS: usize = 10;
/// How long creating every watcher may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(300);
/// The member settles this long after the last watcher is created, before its RSS is read.
const SETTLE: Duration = Duration::from_secs(1);
/// Delivery is over when no event has arrived for this long (or every expected one has).
const STALL: Duration = Duration::from_secs(10);

/// What the watch probe measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WatchMeasure {
    pub watchers: u64,
    pub streams: u64,
    pub watched_keys: u64,
    /// From the first Watch stream opened to the last watcher confirmed created.
    pub create_secs: f64,
    /// The member's RSS with every watcher open, before the puts.
    pub rss_bytes: u64,
    pub puts: u64,
    pub put_errors: u64,
    /// Successful puts per second while the watchers were open.
    pub puts_per_sec: f64,
    /// Events the watchers would receive if every put succeeded.
    pub expected_events: u64,
    pub events: u64,
    /// Events received per second, from the first put sent to the last event received.
    pub events_per_sec: f64,
    pub first_error: Option<String>,
}

/// Runs the probe against `server`; the watchers are cancelled (their streams reset) at the end.
pub async fn run(server: &Server, opts: &ScaleOptions, timeout: Duration) -> Result<WatchMeasure> {
    let per_stream = opts.watchers_per_stream();
    let keys = opts.watchers.min(WATCHED_KEYS);
    let channels = connect_all(std::slice::from_ref(&server.url), per_stream.len().min(MAX_CONNS)).await?;
    let events = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(per_stream.len());
    let mut created = Vec::with_capacity(per_stream.len());
    let mut first_watcher = 0;
    for (s, &count) in per_stream.iter().enumerate() {
        let watched: Vec<Vec<u8>> = (first_watcher..first_watcher + count).map(|j| key(PREFIX, j % keys)).collect();
        first_watcher += count;
        let (done, confirmed) = oneshot::channel();
        let stream = StreamWatch { channel: channels[s % channels.len()].clone(), watched };
        tasks.push(tokio::spawn(stream.run(done, Arc::clone(&events), Arc::clone(&first_error))));
        created.push(confirmed);
    }
    let all_created = futures::future::join_all(created);
    let confirmed = tokio::time::timeout(CREATE_TIMEOUT, all_created).await;
    let guard = AbortOnDrop(tasks);
    let create_secs = started.elapsed().as_secs_f64();
    match confirmed {
        Ok(results) if results.iter().all(Result::is_ok) => {}
        Ok(_) => {
            let why = first_error.lock().map(|e| e.clone()).unwrap_or_default();
            return Err(Error::Setup(format!("a Watch stream failed: {}", why.unwrap_or_default())));
        }
        Err(_) => return Err(Error::Setup(format!("the watchers were not created within {CREATE_TIMEOUT:?}"))),
    }
    tokio::time::sleep(SETTLE).await;
    let rss_bytes = server.rss_bytes()?;

    let puts_started = Instant::now();
    let (stats, put_error) =
        put::put_many(&server.url, PREFIX, keys, Stop::Total(opts.watch_puts), opts.value_size(), timeout).await?;
    let expected_events = expected_events(opts.watchers, keys, opts.watch_puts);
    let (received, last_event) = wait_for_events(&events, expected_events, puts_started, STALL).await;
    drop(guard);
    let delivery_secs = last_event.saturating_duration_since(puts_started).as_secs_f64();
    let stream_error = first_error.lock().ok().and_then(|e| e.clone());
    let mut first_error = put_error.or(stream_error);
    if received < expected_events && stats.errors == 0 {
        first_error
            .get_or_insert_with(|| format!("{} of {expected_events} events never arrived", expected_events - received));
    }
    Ok(WatchMeasure {
        watchers: opts.watchers,
        streams: per_stream.len() as u64,
        watched_keys: keys,
        create_secs,
        rss_bytes,
        puts: opts.watch_puts,
        put_errors: stats.errors,
        puts_per_sec: stats.qps,
        expected_events,
        events: received,
        events_per_sec: if delivery_secs > 0.0 { received as f64 / delivery_secs } else { 0.0 },
        first_error,
    })
}

/// The events `puts` puts deliver when put `i` writes key `i % keys` and watcher `j` watches key
/// `j % keys`: each put reaches every watcher of its key.
fn expected_events(watchers: u64, keys: u64, puts: u64) -> u64 {
    let watchers_of = |k: u64| watchers / keys + u64::from(k < watchers % keys);
    let rounds = puts / keys;
    let full: u64 = rounds * watchers;
    full + (0..puts % keys).map(watchers_of).sum::<u64>()
}

/// Waits until `expected` events have arrived or none arrived for `stall`; returns how many
/// arrived and when the last did.
async fn wait_for_events(events: &AtomicU64, expected: u64, since: Instant, stall: Duration) -> (u64, Instant) {
    let mut seen = events.load(Ordering::Relaxed);
    let mut last_change = if seen > 0 { Instant::now() } else { since };
    loop {
        let now = events.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            last_change = Instant::now();
        }
        if seen >= expected || last_change.elapsed() >= stall {
            return (seen, last_change);
        }
        // The poll's period bounds the error of the delivery time (a full run takes seconds).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One Watch stream and the keys of its watchers.
struct StreamWatch {
    channel: Channel,
    watched: Vec<Vec<u8>>,
}

impl StreamWatch {
    /// Creates every watcher at once, says so on `done` once the member confirmed them all, then
    /// counts the events it receives into `events` until the task is aborted.
    async fn run(self, done: oneshot::Sender<()>, events: Arc<AtomicU64>, first_error: Arc<Mutex<Option<String>>>) {
        let fail = |why: String| {
            if let Ok(mut first) = first_error.lock() {
                first.get_or_insert(why);
            }
        };
        let wanted = self.watched.len();
        let creates = self.watched.into_iter().map(|key| {
            let create = pb::WatchCreateRequest { key, ..Default::default() };
            pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) }
        });
        // The request stream stays open while this task lives: `_open` ends it when the task is dropped
        // (aborted), so that the HTTP/2 stream is reset and the member cancels the watchers. (A stream
        // that never ended, driven by the connection rather than this task, kept 100k watchers and their
        // memory on both members through every later probe.)
        let (_open, rest) = futures::channel::mpsc::channel::<pb::WatchRequest>(1);
        let requests = futures::stream::iter(creates.collect::<Vec<_>>()).chain(rest);
        let mut client = pb::watch_client::WatchClient::new(self.channel);
        let mut stream = match client.watch(requests).await {
            Ok(response) => response.into_inner(),
            Err(status) => return fail(format!("Watch: {}", client::describe(&status))),
        };
        let mut confirmed = 0;
        let mut done = Some(done);
        loop {
            match stream.message().await {
                Ok(Some(response)) => {
                    if response.canceled {
                        return fail(format!("a watcher was cancelled: {}", response.cancel_reason));
                    }
                    if response.created {
                        confirmed += 1;
                        if confirmed == wanted {
                            if let Some(done) = done.take() {
                                let _ = done.send(());
                            }
                        }
                    }
                    events.fetch_add(response.events.len() as u64, Ordering::Relaxed);
                }
                Ok(None) => return fail("a Watch stream ended".to_string()),
                Err(status) => return fail(format!("Watch stream: {}", client::describe(&status))),
            }
        }
    }
}

/// Aborts the stream tasks when the probe ends, however it ends: dropping a task's response
/// stream resets it, and the member cancels its watchers.
struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(JoinHandle::abort);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_events_count_every_watcher_of_each_put_key() {
        // 100k watchers on 1000 keys: 100 per key, so 10k puts give a million events.
        assert_eq!(expected_events(100_000, 1000, 10_000), 1_000_000);
        // 10 watchers on 4 keys: keys 0 and 1 have 3, keys 2 and 3 have 2.
        assert_eq!(expected_events(10, 4, 1), 3);
        assert_eq!(expected_events(10, 4, 3), 3 + 3 + 2);
        assert_eq!(expected_events(10, 4, 6), 10 + 3 + 3);
    }

    #[tokio::test]
    async fn waiting_ends_when_every_event_arrived_or_they_stall() {
        let stall = Duration::from_millis(50);
        let events = AtomicU64::new(7);
        let since = Instant::now();
        let (seen, _) = wait_for_events(&events, 7, since, Duration::from_secs(60)).await;
        assert_eq!(seen, 7, "all arrived: no wait for a stall");
        let (seen, last) = wait_for_events(&events, 8, since, stall).await;
        assert_eq!(seen, 7, "one never arrives");
        assert!(Instant::now().duration_since(last) >= stall);
    }
}
