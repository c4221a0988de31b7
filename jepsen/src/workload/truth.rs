//! Ground truth: every event the cluster persisted under a workload's key prefix, in revision order.
//!
//! The watch and mixed checkers judge what clients saw against this list, so it must be
//! trustworthy. It is collected in [`Workload::finish`](crate::workload::Workload::finish), after the
//! final heal, once every member agrees on a revision R:
//!
//! 1. every member is asked for its history: a Watch of the **whole keyspace** from revision 1,
//!    read until an event at revision R or later arrives. Every revision is made by a write, so
//!    revision R has an event, and watch events come in revision order: once it arrives, everything
//!    up to R has been delivered. (Watching only the prefix would need a progress notification to
//!    know when to stop, and etcd before 3.4.25 may send those ahead of its events, etcd#15220.)
//!    The events under the prefix are the truth; the first member that answers provides it;
//! 2. a background watcher, started with the workload, has followed the same history during the
//!    run (resuming after each break at its last revision + 1, on the next member). If a compaction
//!    removed the history, the watch from revision 1 is refused and this watcher's record becomes
//!    the truth, unless it was itself refused a resume (then the truth is unknown, with a note).
//!    When both exist they must agree;
//! 3. every member's history must equal the truth: from revision 1, or from the compaction on
//!    (a divergence check that, unlike HashKV, also covers the past, and works on a server
//!    without HashKV);
//! 4. the keyspace returned by a Range at revision R must equal the truth replayed up to R.
//!
//! Each workload also checks that every acknowledged write is in the truth at its header revision
//! with its content ([`crate::checker::kv_model`]), which is a lost-write check in itself.
//!
//! The watch streams, their stall detection and the event conversion are in
//! [`crate::workload::watch_client`].

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::join_all;
use proto::etcdserverpb as pb;
use proto::mvccpb;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::checker::kv_model::{self, Model};
use crate::checker::watch::{Event, EventKind};
use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::client::{self, with_timeout};
use crate::error::{Error, Result};
use crate::workload::watch_client::{event, Stall, WatchConn, RETRY_PAUSE, STALL_AFTER, TICK};
use crate::workload::FinishContext;

/// Re-exported because [`TruthWatcher::spawn`] takes it, and the workloads that spawn one name it
/// from here.
pub use crate::workload::watch_client::AckedRevision;

/// How long one member may take to stream its history up to the target revision.
const HISTORY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the background watcher may take to reach the target revision after the heal.
const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(10);

/// [`client::prefix_end`] as a string, for the ranges the checkers compare keys against:
/// `[prefix, prefix_end(prefix))` holds exactly the keys starting with `prefix` (ASCII, non-empty,
/// not ending in `0x7f`, so that the end is ASCII too).
pub fn prefix_end(prefix: &str) -> String {
    String::from_utf8_lossy(&client::prefix_end(prefix.as_bytes())).into_owned()
}

/// A create request for every key from `start_revision` on (etcd's "all keys": `\0` to `\0`).
fn whole_keyspace(start_revision: i64) -> pb::WatchCreateRequest {
    pb::WatchCreateRequest { key: vec![0], range_end: vec![0], start_revision, ..Default::default() }
}

/// What one history watch delivered.
#[derive(Clone, Debug, PartialEq)]
pub struct History {
    /// The events under the prefix.
    pub events: Vec<Event>,
    /// The highest revision delivered (over all keys): the history is complete up to it.
    pub reached: i64,
}

impl History {
    /// Adds a response's events. Revisions at or below `reached` are complete already (a response
    /// holds whole revisions), so any repeat of them, after a resume, is left out.
    fn push(&mut self, response: &pb::WatchResponse, prefix: &str, end: &str) {
        let complete = self.reached;
        for e in &response.events {
            let e = event(e);
            if e.revision <= complete {
                continue;
            }
            self.reached = self.reached.max(e.revision);
            if kv_model::in_range(prefix, end, &e.key) {
                self.events.push(e);
            }
        }
    }
}

/// Why a history watch gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HistoryError {
    /// The history before this revision is gone.
    Compacted(i64),
    Failed(String),
}

/// Reads one member's history from revision `from` until an event at `target` or later.
async fn history(
    channel: Channel,
    prefix: &str,
    from: i64,
    target: i64,
    timeout: Duration,
) -> Result<History, HistoryError> {
    let mut history = History { events: Vec::new(), reached: from - 1 };
    if target < from {
        return Ok(history); // nothing was written since
    }
    let deadline = Instant::now() + timeout;
    let end = prefix_end(prefix);
    let mut conn = WatchConn::open(channel, whole_keyspace(from), false, timeout)
        .await
        .map_err(|err| HistoryError::Failed(client::describe(&err)))?;
    while history.reached < target {
        let response = match tokio::time::timeout_at(deadline, conn.next()).await {
            Err(_) => {
                return Err(HistoryError::Failed(format!(
                    "no event at revision {target} within {} s (reached {})",
                    timeout.as_secs(),
                    history.reached
                )))
            }
            Ok(Err(err)) => return Err(HistoryError::Failed(client::describe(&err))),
            Ok(Ok(None)) => return Err(HistoryError::Failed("the stream ended".to_string())),
            Ok(Ok(Some(response))) => response,
        };
        if response.compact_revision > 0 {
            return Err(HistoryError::Compacted(response.compact_revision));
        }
        if response.canceled {
            return Err(HistoryError::Failed(format!("watch canceled: {:?}", response.cancel_reason)));
        }
        history.push(&response, prefix, &end);
    }
    Ok(history)
}

/// One member's history up to `target`: from revision 1, or, when that is compacted, from the
/// compaction on (the returned revision is where it starts).
async fn member_history(channel: Channel, prefix: &str, target: i64) -> Result<(i64, History), String> {
    match history(channel.clone(), prefix, 1, target, HISTORY_TIMEOUT).await {
        Ok(h) => Ok((1, h)),
        Err(HistoryError::Compacted(from)) => match history(channel, prefix, from, target, HISTORY_TIMEOUT).await {
            Ok(h) => Ok((from, h)),
            Err(HistoryError::Compacted(again)) => Err(format!("compacted up to {from}, then up to {again}")),
            Err(HistoryError::Failed(why)) => Err(format!("compacted up to {from}, then {why}")),
        },
        Err(HistoryError::Failed(why)) => Err(why),
    }
}

/// The ground truth of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Truth {
    pub events: Vec<Event>,
    /// The truth is complete up to this revision (at least the converged revision).
    pub until: i64,
    /// Where it came from, for the report.
    pub source: String,
    /// The highest compaction known; 0 when the whole history was there.
    pub compact_revision: i64,
}

/// What collecting the truth found.
#[derive(Debug)]
pub struct Collected {
    /// `None` when no trustworthy truth could be had.
    pub truth: Option<Truth>,
    /// The `truth` checker: members' histories agree, with the background watcher and with the
    /// final keyspace; `Unknown` when there is no truth.
    pub result: CheckResult,
    pub notes: Vec<String>,
}

impl Collected {
    /// The result of a checker that needs the truth, when there is none.
    pub fn undecided(checker: &str) -> CheckResult {
        let why = "no trustworthy ground truth (see the truth checker), so nothing could be checked";
        CheckResult::from_anomalies(checker, vec![Anomaly::new(AnomalyKind::Malformed, why)])
    }
}

/// Collects the truth after the final heal (see the module documentation).
pub async fn collect(ctx: &FinishContext, prefix: &str, background: Option<TruthWatcher>) -> Collected {
    let mut anomalies = Vec::new();
    let mut notes = Vec::new();
    let target = match ctx.converged_revision {
        Some(revision) => revision,
        None => {
            let statuses = join_all(ctx.members.iter().map(|(_, ch)| client::status(ch, ctx.op_timeout))).await;
            let highest = statuses.iter().filter_map(|s| s.as_ref().ok().map(|s| s.revision)).max();
            notes.push(format!(
                "truth: the members did not converge; the truth goes up to the highest revision reported, {highest:?}"
            ));
            highest.unwrap_or(0)
        }
    };
    let histories = join_all(ctx.members.iter().map(|(_, ch)| member_history(ch.clone(), prefix, target))).await;
    let mut truth: Option<Truth> = None;
    let mut compacted = 0;
    // (member, first revision, history) of every member that answered
    let mut answered: Vec<(&str, i64, History)> = Vec::new();
    for ((name, _), result) in ctx.members.iter().zip(histories) {
        match result {
            Ok((1, h)) if truth.is_none() => {
                truth = Some(Truth {
                    events: h.events.clone(),
                    until: h.reached,
                    source: format!("a watch from revision 1 on {name}"),
                    compact_revision: 0,
                });
                answered.push((name, 1, h));
            }
            Ok((from, h)) => {
                if from > 1 {
                    compacted = compacted.max(from);
                    notes.push(format!("truth: {name}'s history is compacted up to revision {from}"));
                }
                answered.push((name, from, h));
            }
            Err(why) => notes.push(format!("truth: no history from {name}: {why}")),
        }
    }

    if let Some(background) = background {
        match (background.finish(target, BACKGROUND_TIMEOUT).await, &truth) {
            (Ok(h), Some(t)) => {
                if let Some(diff) = difference(&t.events, &h.events, 1, t.until.min(h.reached)) {
                    anomalies.push(Anomaly::new(
                        AnomalyKind::WatchGap,
                        format!("the background watcher's history differs from the truth ({}): {diff}", t.source),
                    ));
                }
            }
            (Ok(h), None) => {
                truth = Some(Truth {
                    events: h.events,
                    until: h.reached,
                    source: "the background watcher (it followed the history during the run)".to_string(),
                    compact_revision: compacted,
                });
            }
            (Err(why), _) => notes.push(format!("truth: the background watcher has no complete history: {why}")),
        }
    }
    if let Some(t) = &truth {
        // Every member's history (what a compaction left of it) must be the truth's. A watch from
        // the compacted revision C does not replay C itself completely: as in etcd, a compaction
        // drops a tombstone at C, so a delete made at C is not delivered. Compare from C + 1.
        for (name, from, h) in &answered {
            let from = if *from > 1 { from + 1 } else { 1 };
            if let Some(diff) = difference(&t.events, &h.events, from, t.until.min(h.reached)) {
                anomalies.push(Anomaly::new(
                    AnomalyKind::Diverged,
                    format!("{name}'s history differs from the truth ({}): {diff}", t.source),
                ));
            }
        }
    }

    let Some(truth) = truth else {
        notes.push("truth: unknown, so the checks that need it are undecided".to_string());
        let why = format!("no complete history up to revision {target} from any member or the background watcher");
        anomalies.push(Anomaly::new(AnomalyKind::Malformed, why));
        return Collected { truth: None, result: CheckResult::from_anomalies("truth", anomalies), notes };
    };
    let (model, replayed) = Model::replay(&truth.events, truth.until);
    anomalies.extend(replayed);
    match final_keyspace(ctx, prefix, target).await {
        Ok(kvs) => {
            let want = model.range(prefix, &prefix_end(prefix), target);
            if kvs != want {
                anomalies.push(Anomaly::new(
                    AnomalyKind::Diverged,
                    format!(
                        "a Range at revision {target} returned {} keys ({}), but the truth replayed to it holds {} ({})",
                        kvs.len(),
                        summary(kvs.iter().map(|k| format!("{}={}@{}", k.key, k.value, k.mod_revision))),
                        want.len(),
                        summary(want.iter().map(|k| format!("{}={}@{}", k.key, k.value, k.mod_revision))),
                    ),
                ));
            }
        }
        Err(why) => notes.push(format!("truth: the final keyspace was not compared: {why}")),
    }
    notes.push(format!(
        "truth: {} events under {prefix} up to revision {}, from {}",
        truth.events.len(),
        truth.until,
        truth.source
    ));
    Collected { truth: Some(truth), result: CheckResult::from_anomalies("truth", anomalies), notes }
}

/// The keys under `prefix` at `revision`, from the first member that answers.
async fn final_keyspace(ctx: &FinishContext, prefix: &str, revision: i64) -> Result<Vec<kv_model::Kv>, String> {
    let mut last = String::from("no member");
    for (name, channel) in &ctx.members {
        let mut kv = pb::kv_client::KvClient::new(channel.clone());
        let request = pb::RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix).into_bytes(),
            revision,
            ..Default::default()
        };
        match with_timeout(ctx.op_timeout, kv.range(request)).await {
            Ok(response) => return Ok(response.kvs.iter().map(kv_of).collect()),
            Err(err) => last = format!("{name}: {}", client::describe(&err)),
        }
    }
    Err(last)
}

/// A stored key as the model compares it.
pub fn kv_of(kv: &mvccpb::KeyValue) -> kv_model::Kv {
    kv_model::Kv {
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        value: String::from_utf8_lossy(&kv.value).into_owned(),
        mod_revision: kv.mod_revision,
        create_revision: kv.create_revision,
        version: kv.version,
    }
}

/// Where two histories disagree in revisions `from..=upto` (events of one revision compared as a
/// set), if they do.
fn difference(a: &[Event], b: &[Event], from: i64, upto: i64) -> Option<String> {
    let set = |events: &[Event]| -> BTreeSet<(i64, String, EventKind, String)> {
        events
            .iter()
            .filter(|e| (from..=upto).contains(&e.revision))
            .map(|e| (e.revision, e.key.clone(), e.kind, e.value.clone()))
            .collect()
    };
    let (a, b) = (set(a), set(b));
    if a == b {
        return None;
    }
    let show = |(r, k, kind, v): &(i64, String, EventKind, String)| format!("{kind:?} {k}={v}@{r}");
    Some(format!(
        "in revisions {from} to {upto}, only in the truth: [{}]; only here: [{}]",
        summary(a.difference(&b).map(show)),
        summary(b.difference(&a).map(show))
    ))
}

fn summary(items: impl Iterator<Item = String>) -> String {
    const SHOWN: usize = 5;
    let items: Vec<String> = items.collect();
    let mut text = items.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(", … ({} more)", items.len() - SHOWN));
    }
    text
}

/// Writes the truth as `truth.jsonl` in the report folder.
pub fn write(dir: &Path, truth: &Truth) -> Result<()> {
    let path = dir.join("truth.jsonl");
    let file = std::fs::File::create(&path).map_err(Error::system(format!("create {}", path.display())))?;
    crate::history::write_jsonl(std::io::BufWriter::new(file), &truth.events)
}

/// A watcher that follows the whole keyspace from revision 1 while the workload runs, so that the
/// truth survives a compaction of the history (see the module documentation).
pub struct TruthWatcher {
    state: Arc<Mutex<Background>>,
    reached: watch::Receiver<i64>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Background {
    history: Option<History>,
    /// Why the record has a hole, if it has one.
    hole: Option<String>,
}

impl TruthWatcher {
    /// Starts following the history under `prefix`; must be called inside the runtime.
    pub fn spawn(
        members: Vec<(String, Channel)>,
        prefix: &str,
        acked: Arc<AckedRevision>,
        op_timeout: Duration,
    ) -> TruthWatcher {
        let state =
            Arc::new(Mutex::new(Background { history: Some(History { events: Vec::new(), reached: 0 }), hole: None }));
        let (reached_tx, reached) = watch::channel(0);
        let (stop, stop_rx) = watch::channel(false);
        let follow = Follow { members, prefix: prefix.to_string(), acked, op_timeout, state: Arc::clone(&state) };
        let task = tokio::spawn(follow.run(reached_tx, stop_rx));
        TruthWatcher { state, reached, stop, task }
    }

    /// Waits until the record reaches `until` (at most `timeout`), stops the watcher and returns
    /// the record, or why it is incomplete.
    pub async fn finish(mut self, until: i64, timeout: Duration) -> Result<History, String> {
        let waited = tokio::time::timeout(timeout, self.reached.wait_for(|r| *r >= until)).await;
        let reached = matches!(waited, Ok(Ok(_)));
        drop(waited);
        let _ = self.stop.send(true);
        if tokio::time::timeout(Duration::from_secs(2), &mut self.task).await.is_err() {
            self.task.abort();
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hole) = state.hole.take() {
            return Err(hole);
        }
        let history = state.history.take().unwrap_or(History { events: Vec::new(), reached: 0 });
        if reached || until <= 1 {
            Ok(history)
        } else {
            Err(format!("it reached only revision {} of {until} within {} s", history.reached, timeout.as_secs()))
        }
    }
}

/// The background watcher's task.
struct Follow {
    members: Vec<(String, Channel)>,
    prefix: String,
    acked: Arc<AckedRevision>,
    op_timeout: Duration,
    state: Arc<Mutex<Background>>,
}

impl Follow {
    async fn run(self, reached: watch::Sender<i64>, mut stop: watch::Receiver<bool>) {
        let end = prefix_end(&self.prefix);
        let mut next = 1;
        for member in (0..self.members.len()).cycle() {
            if *stop.borrow() {
                return;
            }
            let channel = self.members[member].1.clone();
            let opened = tokio::select! {
                _ = stop.changed() => return,
                opened = WatchConn::open(channel, whole_keyspace(next), true, self.op_timeout) => opened,
            };
            let Ok(mut conn) = opened else {
                tokio::select! {
                    _ = stop.changed() => return,
                    () = tokio::time::sleep(RETRY_PAUSE) => continue,
                }
            };
            let mut stall = Stall::default();
            let mut seen = 0;
            let mut ticker = tokio::time::interval(TICK);
            loop {
                let response = tokio::select! {
                    _ = stop.changed() => return,
                    _ = ticker.tick() => {
                        conn.request_progress();
                        if stall.stalled(seen, self.acked.get(), Instant::now(), STALL_AFTER) {
                            break;
                        }
                        continue;
                    }
                    response = conn.next() => response,
                };
                let Ok(Some(response)) = response else { break };
                seen = seen.max(response.header.as_ref().map_or(0, |h| h.revision));
                if response.compact_revision > 0 {
                    let mut state = self.lock();
                    state.hole.get_or_insert(format!(
                        "resuming at revision {next}, it was told the history is compacted up to {}",
                        response.compact_revision
                    ));
                    next = next.max(response.compact_revision);
                    break;
                }
                if response.canceled {
                    break;
                }
                let mut state = self.lock();
                if let Some(history) = state.history.as_mut() {
                    history.push(&response, &self.prefix, &end);
                    next = next.max(history.reached + 1);
                    reached.send_replace(history.reached);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Background> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_the_prefix() {
        let end = prefix_end("jepsen/watch/");
        assert_eq!(end, "jepsen/watch0");
        for (key, inside) in [("jepsen/watch/k1", true), ("jepsen/watch0", false), ("jepsen/liveness", false)] {
            assert_eq!(kv_model::in_range("jepsen/watch/", &end, key), inside, "{key}");
        }
    }

    #[test]
    fn differences_are_described() {
        let a = vec![Event::put("k", "1", 2), Event::put("k", "2", 3), Event::put("k", "3", 9)];
        let mut b = a.clone();
        assert_eq!(difference(&a, &b, 1, 9), None);
        b[1].value = "x".into();
        b.pop();
        assert_eq!(
            difference(&a, &b, 1, 3).as_deref(),
            Some("in revisions 1 to 3, only in the truth: [Put k=2@3]; only here: [Put k=x@3]")
        );
        assert_eq!(difference(&a[..1], &b[..1], 1, 8), None, "only up to the shorter one");
        assert_eq!(difference(&a, &a[2..], 9, 9), None, "only from a compaction on");
    }

    #[test]
    fn histories_keep_the_prefix_and_skip_repeats() {
        let put = |key: &str, revision| mvccpb::Event {
            r#type: 0,
            kv: Some(mvccpb::KeyValue {
                key: key.as_bytes().to_vec(),
                value: b"v".to_vec(),
                create_revision: revision,
                mod_revision: revision,
                version: 1,
                lease: 0,
            }),
            prev_kv: None,
        };
        let response = |events| pb::WatchResponse { events, ..Default::default() };
        let mut history = History { events: Vec::new(), reached: 0 };
        let (prefix, end) = ("p/", prefix_end("p/"));
        history.push(&response(vec![put("p/a", 2), put("q", 3)]), prefix, &end);
        history.push(&response(vec![put("p/a", 2), put("p/b", 4), put("p/c", 4)]), prefix, &end);
        let got: Vec<(String, i64)> = history.events.iter().map(|e| (e.key.clone(), e.revision)).collect();
        assert_eq!(got, vec![("p/a".into(), 2), ("p/b".into(), 4), ("p/c".into(), 4)]);
        assert_eq!(history.reached, 4);
    }
}
