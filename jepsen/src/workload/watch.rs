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
//!   `hasleader`), when it is stalled ([`Stall`]: no response reaches a revision some write was
//!   acknowledged at, for a few seconds: a paused member), or, without faults, after a random
//!   lifetime. The watcher then resumes on the next member from its last revision + 1, as a new
//!   [`WatchStream`] (stream id = watcher × 1000 + stream number). Every tick it asks for a progress
//!   notification, which keeps the stall detector informed and, when the server orders them
//!   correctly with its events, is a bookmark the checker holds it to.
//! - After the heal, each watcher must receive every matching event of the truth ("catch up")
//!   within [`CATCH_UP_TIMEOUT`]; the streams go to `watches.jsonl` and are checked with
//!   [`watch::check`].
//!
//! etcd before 3.4.25 and 3.5.8 may send a requested progress notification ahead of events it has
//! not yet sent (etcd#15220, fixed by etcd#15237). On such a server the notifications are recorded
//! as plain empty responses (not bookmarks) and never used to resume, and the report says so.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use proto::etcdserverpb as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::checker::kv_model::{self, Delete, KvOp, Put, Txn, TxnWrite};
use crate::checker::watch::{self, Event, WatchResponse, WatchStream};
use crate::checker::{revision, Anomaly, AnomalyKind, CheckResult};
use crate::recorder::{Clock, Recorder};
use crate::workload::mixed::Worker;
use crate::workload::truth::{self, AckedRevision, Collected, Stall, TruthWatcher, WatchConn};
use crate::workload::{FinishContext, WorkerContext, Workload};
use crate::{history, Error, OpPair};

/// Keys are `<KEY_PREFIX>k<n>`.
pub const KEY_PREFIX: &str = "jepsen/watch/";
const KEYS: usize = 5;
const WATCHERS_PER_MEMBER: usize = 2;
/// How long after the truth is known the watchers may take to receive all of it.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(15);
/// Watchers start this far apart, so that "a little in the past" means something.
const STAGGER: Duration = Duration::from_millis(700);
/// Without faults a stream is moved to the next member after a random lifetime in this range (ms).
const LIFETIME_MS: std::ops::Range<u64> = 3_000..10_000;

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

/// Whether progress notifications of this server version are ordered with its events: etcd#15220
/// was fixed in 3.4.25 and 3.5.8. Versions that do not parse are assumed fixed.
fn progress_is_ordered(version: &str) -> bool {
    let parts: Vec<u64> = version.split('.').map_while(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [3, 4, patch, ..] => *patch >= 25,
        [3, 5, patch, ..] => *patch >= 8,
        [major, minor, ..] => (*major, *minor) >= (3, 6),
        _ => true,
    }
}

/// What one watcher watches and how it starts.
#[derive(Clone, Debug)]
struct Plan {
    index: usize,
    key: String,
    range_end: String,
    /// The member of the first stream.
    member: usize,
    first_start: FirstStart,
    seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirstStart {
    Now,
    Beginning,
    /// This many revisions before the latest acknowledged write.
    Past(i64),
}

impl Plan {
    fn new(index: usize, members: usize, seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ (0x7761_7463_6865_7200 + index as u64));
        let (key, range_end) = match index % 3 {
            0 => (KEY_PREFIX.to_string(), truth::prefix_end(KEY_PREFIX)),
            1 => (format!("{KEY_PREFIX}k{}", rng.gen_range(0..KEYS)), String::new()),
            _ => (format!("{KEY_PREFIX}k1"), format!("{KEY_PREFIX}k3")),
        };
        let first_start = match rng.gen_range(0..3) {
            0 => FirstStart::Now,
            1 => FirstStart::Beginning,
            _ => FirstStart::Past(rng.gen_range(1..30)),
        };
        Plan { index, key, range_end, member: index % members.max(1), first_start, seed }
    }
}

/// Where a watcher's next stream resumes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Position {
    /// Every event up to this revision has been received (or is gone by compaction); 0: nothing
    /// known, so a new stream starts as planned.
    through: i64,
}

impl Position {
    fn advance(&mut self, revision: i64) {
        self.through = self.through.max(revision);
    }

    /// The start revision of the next stream, once something is known.
    fn resume_from(self) -> Option<i64> {
        (self.through > 0).then_some(self.through + 1)
    }
}

/// What one watcher saw over the run.
#[derive(Debug)]
struct WatcherLog {
    index: usize,
    key: String,
    range_end: String,
    streams: Vec<WatchStream>,
    /// Its position when it stopped.
    reached: i64,
    trusted_progress: bool,
    version: String,
}

/// Why a stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// Broken, stalled or moved: resume on the next member.
    Resume,
    /// Caught up, or told to stop.
    Done,
}

/// A watcher task.
struct Watcher {
    plan: Plan,
    members: Vec<(String, Channel)>,
    clock: Clock,
    acked: Arc<AckedRevision>,
    phase: signal::Receiver<Phase>,
    op_timeout: Duration,
}

impl Watcher {
    async fn run(mut self) -> WatcherLog {
        let mut rng = StdRng::seed_from_u64(self.plan.seed.wrapping_add(1_000 + self.plan.index as u64));
        let delay = STAGGER * u32::try_from(self.plan.index).unwrap_or(0);
        let version = self.version().await;
        let mut log = WatcherLog {
            index: self.plan.index,
            key: self.plan.key.clone(),
            range_end: self.plan.range_end.clone(),
            streams: Vec::new(),
            reached: 0,
            trusted_progress: version.as_deref().is_some_and(progress_is_ordered),
            version: version.unwrap_or_else(|| "unknown".to_string()),
        };
        let mut position = Position::default();
        let mut member = self.plan.member;
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = self.phase.wait_for(|p| !matches!(p, Phase::Run)) => {}
        }
        while !self.finished(position) {
            let start = match position.resume_from() {
                Some(revision) => revision,
                None => match self.plan.first_start {
                    FirstStart::Now => 0,
                    FirstStart::Beginning => 1,
                    FirstStart::Past(lag) => (self.acked.get() - lag).max(1),
                },
            };
            let (name, channel) = self.members[member].clone();
            member = (member + 1) % self.members.len();
            let create = pb::WatchCreateRequest {
                key: self.plan.key.as_bytes().to_vec(),
                range_end: self.plan.range_end.as_bytes().to_vec(),
                start_revision: start,
                prev_kv: true,
                ..Default::default()
            };
            let Ok(mut conn) = WatchConn::open(channel, create, true, self.op_timeout).await else {
                tokio::time::sleep(truth::RETRY_PAUSE).await;
                continue;
            };
            let mut stream = WatchStream {
                id: (self.plan.index * 1000 + log.streams.len()) as u64,
                member: Some(name),
                key: self.plan.key.clone(),
                range_end: self.plan.range_end.clone(),
                start_revision: start,
                prev_kv: true,
                responses: Vec::new(),
            };
            let lifetime = Duration::from_millis(rng.gen_range(LIFETIME_MS));
            let ended = self.follow(&mut conn, &mut stream, &mut position, lifetime, log.trusted_progress).await;
            log.streams.push(stream);
            if ended == Ended::Done {
                break;
            }
        }
        log.reached = position.through;
        log
    }

    /// The server's version, from the first member that answers.
    async fn version(&self) -> Option<String> {
        for (_, channel) in &self.members {
            let mut client = pb::maintenance_client::MaintenanceClient::new(channel.clone());
            if let Ok(status) = crate::client::with_timeout(self.op_timeout, client.status(pb::StatusRequest {})).await
            {
                return Some(status.version);
            }
        }
        None
    }

    /// Whether the watcher is done: told to stop, or caught up with the truth.
    fn finished(&self, position: Position) -> bool {
        if self.phase.has_changed().is_err() {
            return true; // the workload is gone
        }
        match &*self.phase.borrow() {
            Phase::Run => false,
            Phase::Stop => true,
            Phase::CatchUp(truth) => {
                let last = last_matching(truth, &self.plan.key, &self.plan.range_end);
                last == 0 || position.through >= last
            }
        }
    }

    /// Records one stream's responses until it breaks, stalls, outlives `lifetime` or is done.
    async fn follow(
        &mut self,
        conn: &mut WatchConn,
        stream: &mut WatchStream,
        position: &mut Position,
        lifetime: Duration,
        trusted_progress: bool,
    ) -> Ended {
        let retire = Instant::now() + lifetime;
        let mut stall = Stall::default();
        let mut seen = 0;
        let mut ticker = tokio::time::interval(truth::TICK);
        loop {
            let response = tokio::select! {
                changed = self.phase.changed() => {
                    if changed.is_err() || self.finished(*position) {
                        return Ended::Done;
                    }
                    continue;
                }
                _ = ticker.tick() => {
                    if self.finished(*position) {
                        return Ended::Done;
                    }
                    let now = Instant::now();
                    if stall.stalled(seen, self.acked.get(), now, truth::STALL_AFTER) {
                        return Ended::Resume;
                    }
                    if now >= retire && matches!(*self.phase.borrow(), Phase::Run) {
                        return Ended::Resume;
                    }
                    conn.request_progress();
                    continue;
                }
                response = conn.next() => response,
            };
            let Ok(Some(response)) = response else { return Ended::Resume };
            let header = response.header.as_ref().map_or(0, |h| h.revision);
            seen = seen.max(header);
            if response.compact_revision > 0 {
                // The history up to it is gone: resume after it (the checker judges each stream
                // from its own start). Not at it: a compaction at C drops a tombstone made at C, so
                // a watch from C does not deliver that delete (etcd and ours alike).
                position.advance(response.compact_revision);
                return Ended::Resume;
            }
            if response.canceled {
                return Ended::Resume;
            }
            if response.created {
                if stream.start_revision == 0 {
                    // A watch "from now" delivers every event after the revision of its creation.
                    position.advance(header);
                }
                continue;
            }
            let events: Vec<Event> = response.events.iter().map(truth::event).collect();
            let progress_notify = events.is_empty() && trusted_progress;
            if let Some(last) = events.iter().map(|e| e.revision).max() {
                position.advance(last);
            } else if progress_notify {
                position.advance(header);
            }
            stream.responses.push(WatchResponse {
                time_ns: self.clock.now_ns(),
                header_revision: header,
                events,
                progress_notify,
            });
            if self.finished(*position) {
                return Ended::Done;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::watch::EventKind;

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
    fn fixed_versions_order_progress_with_events() {
        let cases = [
            ("3.4.23", false),
            ("3.4.25", true),
            ("3.5.7", false),
            ("3.5.17", true),
            ("3.6.0", true),
            ("4.0.1", true),
            ("dev", true),
        ];
        for (version, ordered) in cases {
            assert_eq!(progress_is_ordered(version), ordered, "{version}");
        }
    }

    #[test]
    fn watchers_cover_every_shape_and_start() {
        let plans: Vec<Plan> = (0..6).map(|i| Plan::new(i, 3, 1)).collect();
        assert!(plans.iter().any(|p| p.range_end == truth::prefix_end(KEY_PREFIX)));
        assert!(plans.iter().any(|p| p.range_end.is_empty()));
        assert!(plans.iter().any(|p| p.range_end.ends_with("k3")));
        assert_eq!(plans.iter().map(|p| p.member).collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2]);
        let starts: std::collections::HashSet<String> =
            (0..30).map(|i| format!("{:?}", Plan::new(i, 3, 7).first_start).chars().take(3).collect()).collect();
        assert_eq!(starts.len(), 3, "{starts:?}");
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

    #[test]
    fn positions_resume_after_what_was_received() {
        let mut position = Position::default();
        assert_eq!(position.resume_from(), None);
        position.advance(7);
        position.advance(5);
        assert_eq!(position.resume_from(), Some(8));
    }
}
