//! Background load for the cluster tests: writers that put unique keys, each through one member,
//! moving on to the next member when a request fails, and recording what was acknowledged.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::task::JoinHandle;

use crate::util::header;

/// Longer than etcd's request timeout (5 s + 2 election timeouts), so that a stuck put ends with
/// the server's error rather than the client's.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed put before the next member is tried.
const BACKOFF: Duration = Duration::from_millis(50);

/// A put the server acknowledged.
#[derive(Debug, Clone)]
pub struct Ack {
    pub key: String,
    pub value: String,
    pub revision: i64,
    pub at: Instant,
}

/// What one writer saw.
#[derive(Debug)]
pub struct WriterReport {
    pub id: usize,
    pub acks: Vec<Ack>,
    /// `(when, endpoint, error)` of every failed put. A failed put may or may not have been
    /// applied; its key is never written again.
    pub failures: Vec<(Instant, String, String)>,
}

impl WriterReport {
    /// Asserts that each acknowledged put got a higher revision than the one before it: the
    /// writer waited for each ack before sending the next put.
    #[track_caller]
    pub fn assert_revisions_increase(&self) {
        for pair in self.acks.windows(2) {
            assert!(
                pair[1].revision > pair[0].revision,
                "writer {}: revision went from {} ({}) to {} ({})",
                self.id,
                pair[0].revision,
                pair[0].key,
                pair[1].revision,
                pair[1].key
            );
        }
    }
}

/// Running writers. Dropping this without [`Load::stop`] aborts them.
pub struct Load {
    stop: Arc<AtomicBool>,
    /// Acks per writer so far.
    acked: Arc<Vec<AtomicUsize>>,
    handles: Vec<JoinHandle<WriterReport>>,
}

impl Load {
    /// Starts `writers` writers putting `<prefix><writer>/<seq>`; writer `i` starts on
    /// `endpoints[i % len]`.
    pub fn start(endpoints: Vec<String>, prefix: &str, writers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Vec<AtomicUsize>> = Arc::new((0..writers).map(|_| AtomicUsize::new(0)).collect());
        let handles = (0..writers)
            .map(|id| {
                let writer = Writer {
                    id,
                    endpoints: endpoints.clone(),
                    prefix: prefix.to_owned(),
                    stop: stop.clone(),
                    acked: acked.clone(),
                };
                tokio::spawn(writer.run())
            })
            .collect();
        Load { stop, acked, handles }
    }

    /// Acks so far, per writer.
    pub fn acked(&self) -> Vec<usize> {
        self.acked.iter().map(|count| count.load(Ordering::Relaxed)).collect()
    }

    /// Waits until `done(acks per writer)` holds; fails after `timeout`.
    pub async fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&[usize]) -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let acked = self.acked();
            if done(&acked) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the writers did not get {what} within {timeout:?}: acks per writer {acked:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every writer has `more` acks beyond `since` (an earlier [`Load::acked`]).
    pub async fn wait_progress(&self, since: &[usize], more: usize, timeout: Duration) -> anyhow::Result<()> {
        let what = format!("{more} more acks each since {since:?}");
        self.wait_for(&what, timeout, |acked| acked.iter().zip(since).all(|(now, then)| *now >= then + more)).await
    }

    /// Stops the writers after their current put and returns their reports.
    pub async fn stop(mut self) -> anyhow::Result<Vec<WriterReport>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut reports = Vec::with_capacity(self.handles.len());
        for handle in std::mem::take(&mut self.handles) {
            reports.push(handle.await?);
        }
        Ok(reports)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for handle in &self.handles {
            handle.abort();
        }
    }
}

struct Writer {
    id: usize,
    endpoints: Vec<String>,
    prefix: String,
    stop: Arc<AtomicBool>,
    acked: Arc<Vec<AtomicUsize>>,
}

impl Writer {
    async fn run(self) -> WriterReport {
        let mut report = WriterReport { id: self.id, acks: Vec::new(), failures: Vec::new() };
        let mut target = self.id % self.endpoints.len();
        let mut client: Option<Client> = None;
        for seq in 0.. {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let endpoint = &self.endpoints[target];
            let key = format!("{}{}/{seq:06}", self.prefix, self.id);
            let value = format!("value-{}-{seq}", self.id);
            let result = match client.as_mut() {
                Some(client) => client.put(key.as_str(), value.as_str(), None).await,
                None => match connect(endpoint).await {
                    Ok(new) => client.insert(new).put(key.as_str(), value.as_str(), None).await,
                    Err(err) => Err(err),
                },
            };
            match result {
                Ok(resp) => {
                    let revision = header(resp.header()).revision();
                    report.acks.push(Ack { key, value, revision, at: Instant::now() });
                    self.acked[self.id].fetch_add(1, Ordering::Relaxed);
                }
                Err(err) => {
                    report.failures.push((Instant::now(), endpoint.clone(), err.to_string()));
                    client = None;
                    target = (target + 1) % self.endpoints.len();
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
        report
    }
}

async fn connect(endpoint: &str) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2)).with_timeout(WRITE_TIMEOUT);
    Client::connect([endpoint], Some(options)).await
}

/// `key -> (value, mod_revision)` of every key under `prefix`.
pub type KeyMap = BTreeMap<String, (String, i64)>;

/// Reads every key under `prefix` through `client`, linearizable or serializable.
pub async fn read_prefix(client: &mut Client, prefix: &str, serializable: bool) -> anyhow::Result<KeyMap> {
    let mut options = GetOptions::new().with_prefix();
    if serializable {
        options = options.with_serializable();
    }
    let resp = client.get(prefix, Some(options)).await?;
    Ok(resp
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                (String::from_utf8_lossy(kv.value()).into_owned(), kv.mod_revision()),
            )
        })
        .collect())
}

/// Asserts that every acknowledged put is in `map` with its value and revision (each key is put
/// once, so it keeps the revision of that put).
#[track_caller]
pub fn assert_acks_present(reports: &[WriterReport], map: &KeyMap, whose: &str) {
    for ack in reports.iter().flat_map(|report| &report.acks) {
        match map.get(&ack.key) {
            Some((value, revision)) => assert_eq!(
                (value.as_str(), *revision),
                (ack.value.as_str(), ack.revision),
                "{whose}: acknowledged {ack:?}"
            ),
            None => panic!("{whose}: acknowledged {ack:?} is missing"),
        }
    }
}
