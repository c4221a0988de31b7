//! The watch workload: writers change a few keys while watchers follow them, resuming after every
//! break; the streams are checked with etcd's watch rules against the ground truth.
//!
//! - **Writers** (the run's workers) put unique values to `<KEY_PREFIX>k0..k4`, delete keys, and
//!   now and then put two keys in one txn (so that one revision carries two events, which the
//!   atomicity rule needs). Their history is checked like the mixed workload's writes
//!   ([`kv_model::check`]: every acknowledged write in the truth at its revision, no event that no
//!   write made) and with [`revision::check`].
//! - **Watchers**, two per member, watch the whole prefix, one key, or two keys, always with
//!   `prev_kv`. The first stream starts "from now", from revision 1, or a little in the past. A
//!   stream ends when the member errs or ends it (killed, or no leader: streams carry etcd's
//!   `hasleader`), when it is stalled ([`Stall`](crate::workload::watch_client::Stall): no response
//!   reaches a revision some write was acknowledged at, for a few seconds: a paused member), or,
//!   without faults, after a random lifetime. The watcher then resumes on the next member from its
//!   last revision + 1, as a new [`WatchStream`] (stream id = watcher × 1000 + stream number).
//!   Every tick it asks for a progress notification, which keeps the stall detector informed and,
//!   when the server orders them correctly with its events, is a bookmark the checker holds it to.
//! - After the heal, each watcher must receive every matching event of the truth ("catch up")
//!   within [`CATCH_UP_TIMEOUT`]; the streams go to `watches.jsonl` and are checked with
//!   [`watch::check`].
//!
//! etcd before 3.4.25 and 3.5.8 may send a requested progress notification ahead of events it has
//! not yet sent (etcd#15220, fixed by etcd#15237). On such a server the notifications are recorded
//! as plain empty responses (not bookmarks) and never used to resume, and the report says so.
//!
//! This file holds the workload (writers, finish, checks); the watcher task is in `watcher`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::checker::kv_model::{self, Delete, KvOp, Put, Txn, TxnWrite};
use crate::checker::watch::{self, Event, WatchStream};
use crate::checker::{revision, Anomaly, AnomalyKind, CheckResult};
use crate::recorder::{Clock, Recorder};
use crate::workload::mixed::Worker;
use crate::workload::truth::{self, Collected, TruthWatcher};
use crate::workload::watch_client::AckedRevision;
use crate::workload::{FinishContext, WorkerContext, Workload};
use crate::{history, Error, OpPair};

mod watcher;

use watcher::{Plan, Watcher, WatcherLog};

/// Keys are `<KEY_PREFIX>k<n>`.
pub const KEY_PREFIX: &str = "jepsen/watch/";
const KEYS: usize = 5;
const WATCHERS_PER_MEMBER: usize = 2;
/// How long after the truth is known the watchers may take to receive all of it.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(15);

pub struct WatchWorkload {
    seed: u64,
    next_value: AtomicI64,
    acked: Arc<AckedRevision>,
    session: Mutex<Session>,
    outcome: Mutex<Option<Outcome>>,
}

/// The watchers and the background truth watcher, started by the first worker.
enum Session {
    NotStarted,
    Running { watchers: Vec<JoinHandle<WatcherLog>>, phase: signal::Sender<Phase>, background: TruthWatcher },
    Done,
}

/// What the finish tells the watchers.
#[derive(Clone, Debug)]
enum Phase {
    Run,
    /// Receive every matching event of the truth, then stop.
    CatchUp(Arc<Vec<Event>>),
    Stop,
}

/// What `finish` found, for `check` and `notes`.
struct Outcome {
    collected: Collected,
    logs: Vec<WatcherLog>,
}

impl WatchWorkload {
    pub fn new(seed: u64) -> WatchWorkload {
        WatchWorkload {
            seed,
            next_value: AtomicI64::new(1),
            acked: Arc::new(AckedRevision::default()),
            session: Mutex::new(Session::NotStarted),
            outcome: Mutex::new(None),
        }
    }

    fn value(&self) -> String {
        self.next_value.fetch_add(1, Ordering::Relaxed).to_string()
    }

    /// A writer's next op: mostly puts, some deletes, and some two-key txns without compares.
    fn next_op(&self, rng: &mut StdRng) -> KvOp {
        let key = |rng: &mut StdRng| format!("{KEY_PREFIX}k{}", rng.gen_range(0..KEYS));
        match rng.gen_range(0..100) {
            0..=64 => KvOp::Put(Put { key: key(rng), value: self.value() }),
            65..=84 => KvOp::Delete(Delete { key: key(rng), deleted: None }),
            _ => {
                let a = rng.gen_range(0..KEYS);
                let b = (a + rng.gen_range(1..KEYS)) % KEYS;
                let put = |n| TxnWrite::Put(Put { key: format!("{KEY_PREFIX}k{n}"), value: self.value() });
                KvOp::Txn(Txn {
                    compare: Vec::new(),
                    success: vec![put(a), put(b)],
                    failure: Vec::new(),
                    succeeded: None,
                    reads: Vec::new(),
                })
            }
        }
    }

    fn start(&self, ctx: &WorkerContext, clock: Clock) {
        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(*session, Session::NotStarted) {
            return;
        }
        let background = TruthWatcher::spawn(ctx.members.clone(), KEY_PREFIX, Arc::clone(&self.acked), ctx.op_timeout);
        let (phase, phase_rx) = signal::channel(Phase::Run);
        let watchers = (0..WATCHERS_PER_MEMBER * ctx.members.len())
            .map(|index| {
                let watcher = Watcher {
                    plan: Plan::new(index, ctx.members.len(), self.seed),
                    members: ctx.members.clone(),
                    clock,
                    acked: Arc::clone(&self.acked),
                    phase: phase_rx.clone(),
                    op_timeout: ctx.op_timeout,
                };
                tokio::spawn(watcher.run())
            })
            .collect();
        *session = Session::Running { watchers, phase, background };
    }
}

impl Workload for WatchWorkload {
    type Op = KvOp;

    async fn run_worker(self: Arc<Self>, ctx: WorkerContext, recorder: Arc<Recorder<KvOp>>) {
        self.start(&ctx, recorder.clock());
        let mut rng =
            StdRng::seed_from_u64(self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(ctx.index as u64));
        let mut worker = Worker::new(&ctx, &recorder, &self.acked);
        while ctx.pace(&mut rng).await {
            let op = self.next_op(&mut rng);
            worker.perform(op).await;
        }
    }

    async fn finish(&self, ctx: &FinishContext, _recorder: &Recorder<KvOp>) -> crate::Result<()> {
        let session =
            std::mem::replace(&mut *self.session.lock().unwrap_or_else(PoisonError::into_inner), Session::Done);
        let (watchers, phase, background) = match session {
            Session::Running { watchers, phase, background } => (watchers, Some(phase), Some(background)),
            _ => (Vec::new(), None, None),
        };
        let collected = truth::collect(ctx, KEY_PREFIX, background).await;
        if let Some(t) = &collected.truth {
            truth::write(&ctx.dir, t)?;
        }
        if let Some(phase) = &phase {
            match &collected.truth {
                Some(t) => {
                    phase.send_replace(Phase::CatchUp(Arc::new(t.events.clone())));
                }
                None => {
                    phase.send_replace(Phase::Stop);
                }
            }
        }
        let deadline = Instant::now() + CATCH_UP_TIMEOUT;
        let mut logs = Vec::with_capacity(watchers.len());
        for mut handle in watchers {
            let log = match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(log) => log,
                Err(_) => {
                    // Out of time: tell every watcher to stop, and take what this one has.
                    if let Some(phase) = &phase {
                        phase.send_replace(Phase::Stop);
                    }
                    handle.await
                }
            };
            logs.push(log.map_err(|err| Error::Setup(format!("a watcher died: {err}")))?);
        }
        let streams: Vec<&WatchStream> = logs.iter().flat_map(|log| &log.streams).collect();
        let path = ctx.dir.join("watches.jsonl");
        let file = std::fs::File::create(&path).map_err(Error::system(format!("create {}", path.display())))?;
        history::write_jsonl(std::io::BufWriter::new(file), &streams)?;
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(Outcome { collected, logs });
        Ok(())
    }

    fn check(&self, pairs: &[OpPair<KvOp>], _budget: Duration) -> Vec<CheckResult> {
        let outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        let mut results = Vec::new();
        match outcome.as_ref() {
            Some(Outcome { collected, logs }) => {
                results.push(collected.result.clone());
                match &collected.truth {
                    Some(t) => {
                        let mut streams: Vec<WatchStream> =
                            logs.iter().flat_map(|log| log.streams.iter().cloned()).collect();
                        trim(&mut streams, t.until);
                        results.push(watch::check(&streams, &t.events, t.compact_revision));
                        results.push(check_catch_up(logs, &t.events));
                        results.push(kv_model::check(pairs, &t.events, t.until));
                    }
                    None => {
                        for checker in ["watch", "watch-catch-up", "kv-model"] {
                            results.push(Collected::undecided(checker));
                        }
                    }
                }
            }
            None => results.push(Collected::undecided("watch")),
        }
        results.push(revision::check(pairs, kv_model::access));
        results
    }

    fn notes(&self) -> Vec<String> {
        let outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(Outcome { collected, logs }) = outcome.as_ref() else { return Vec::new() };
        let mut notes = vec![describe_streams(logs)];
        let untrusted: Vec<&WatcherLog> = logs.iter().filter(|l| !l.trusted_progress).collect();
        if let Some(first) = untrusted.first() {
            let who: Vec<String> = untrusted.iter().map(|l| l.index.to_string()).collect();
            notes.push(format!(
                "watch: watchers {} recorded progress notifications as plain responses, not bookmarks: server \
                 version {} (etcd before 3.4.25 and 3.5.8 may send them ahead of its events, etcd#15220)",
                who.join(", "),
                first.version
            ));
        }
        notes.extend(collected.notes.iter().cloned());
        notes
    }
}

/// One sentence about what the watchers received.
fn describe_streams(logs: &[WatcherLog]) -> String {
    let streams: usize = logs.iter().map(|l| l.streams.len()).sum();
    let responses = logs.iter().flat_map(|l| &l.streams).flat_map(|s| &s.responses);
    let (mut events, mut progress) = (0, 0);
    for response in responses {
        events += response.events.len();
        progress += usize::from(response.events.is_empty());
    }
    let resumed = logs.iter().flat_map(|l| &l.streams).filter(|s| s.start_revision > 0).count();
    format!(
        "watch: {} watchers opened {streams} streams ({resumed} with a start revision) and received {events} events \
         and {progress} progress notifications",
        logs.len()
    )
}

/// Drops what lies beyond the truth (revisions after `until`), which it cannot judge.
fn trim(streams: &mut [WatchStream], until: i64) {
    for stream in streams {
        for response in &mut stream.responses {
            response.events.retain(|e| e.revision <= until);
        }
        stream.responses.retain(|r| if r.progress_notify { r.header_revision <= until } else { !r.events.is_empty() });
    }
}

/// Every watcher received every matching event of the truth (after the heal, at the latest).
fn check_catch_up(logs: &[WatcherLog], truth: &[Event]) -> CheckResult {
    let mut anomalies = Vec::new();
    for log in logs {
        let last = last_matching(truth, &log.key, &log.range_end);
        if last > 0 && log.reached < last {
            anomalies.push(Anomaly::new(
                AnomalyKind::WatchGap,
                format!(
                    "watcher {} ({}) got no further than revision {}, but the truth has matching events up to {last}; \
                     it did not catch up within {} s of the truth being known",
                    log.index,
                    describe_range(&log.key, &log.range_end),
                    log.reached,
                    CATCH_UP_TIMEOUT.as_secs()
                ),
            ));
        }
    }
    CheckResult::from_anomalies("watch-catch-up", anomalies)
}

/// The revision of the last truth event in the range (0 when none).
fn last_matching(truth: &[Event], key: &str, range_end: &str) -> i64 {
    truth.iter().filter(|e| kv_model::in_range(key, range_end, &e.key)).map(|e| e.revision).max().unwrap_or(0)
}

fn describe_range(key: &str, range_end: &str) -> String {
    if range_end.is_empty() {
        key.to_string()
    } else {
        format!("[{key}, {range_end})")
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::watch::{EventKind, WatchResponse};

    fn put(key: &str, revision: i64) -> Event {
        Event {
            kind: EventKind::Put,
            key: format!("{KEY_PREFIX}{key}"),
            value: revision.to_string(),
            revision,
            is_create: false,
            prev_kv: None,
        }
    }

    #[test]
    fn writers_write_unique_values_and_two_key_txns() {
        let workload = WatchWorkload::new(3);
        let mut rng = StdRng::seed_from_u64(3);
        let mut values = std::collections::HashSet::new();
        let mut txns = 0;
        for _ in 0..300 {
            let op = workload.next_op(&mut rng);
            let puts: Vec<&Put> = match &op {
                KvOp::Put(p) => vec![p],
                KvOp::Txn(t) => {
                    txns += 1;
                    t.success.iter().filter_map(|w| if let TxnWrite::Put(p) = w { Some(p) } else { None }).collect()
                }
                _ => Vec::new(),
            };
            if let KvOp::Txn(_) = &op {
                assert_eq!(puts.len(), 2);
                assert_ne!(puts[0].key, puts[1].key);
            }
            for p in puts {
                assert!(values.insert(p.value.clone()), "value {} twice", p.value);
            }
        }
        assert!(txns > 10, "{txns}");
    }

    fn log(key: &str, range_end: &str, reached: i64) -> WatcherLog {
        WatcherLog {
            index: 4,
            key: key.into(),
            range_end: range_end.into(),
            streams: Vec::new(),
            reached,
            trusted_progress: true,
            version: "3.5.17".into(),
        }
    }

    #[test]
    fn catch_up_needs_every_matching_event() {
        let truth = vec![put("k0", 2), put("k1", 3), put("k0", 4)];
        let k0 = format!("{KEY_PREFIX}k0");
        let all = (KEY_PREFIX, truth::prefix_end(KEY_PREFIX));
        assert!(check_catch_up(&[log(&k0, "", 4), log(all.0, &all.1, 4)], &truth).is_valid());
        assert!(check_catch_up(&[log(&format!("{KEY_PREFIX}k1"), "", 3)], &truth).is_valid(), "only k1@3 matters");
        assert!(check_catch_up(&[log(&format!("{KEY_PREFIX}k4"), "", 0)], &truth).is_valid(), "nothing to get");
        let behind = check_catch_up(&[log(all.0, &all.1, 3)], &truth);
        assert!(behind.has(AnomalyKind::WatchGap), "{behind}");
        assert!(behind.anomalies[0].description.starts_with("watcher 4 ([jepsen/watch/, jepsen/watch0)) got no"));
    }

    #[test]
    fn trimming_keeps_only_what_the_truth_covers() {
        let response = |events: Vec<Event>, header, progress_notify| WatchResponse {
            time_ns: 0,
            header_revision: header,
            events,
            progress_notify,
        };
        let mut streams = vec![WatchStream {
            id: 0,
            member: None,
            key: KEY_PREFIX.into(),
            range_end: truth::prefix_end(KEY_PREFIX),
            start_revision: 1,
            prev_kv: true,
            responses: vec![
                response(vec![put("k0", 2)], 2, false),
                response(vec![], 3, true),
                response(vec![put("k0", 5), put("k1", 5)], 5, false),
                response(vec![], 6, true),
                response(vec![], 6, false),
            ],
        }];
        trim(&mut streams, 4);
        let left: Vec<(usize, i64)> =
            streams[0].responses.iter().map(|r| (r.events.len(), r.header_revision)).collect();
        assert_eq!(left, vec![(1, 2), (0, 3)]);
    }
}
