//! etcd's keyspace replayed from a ground truth, and the mixed workload's history judged against it.
//!
//! The ground truth is every event the cluster persisted under the workload's prefix, in revision
//! order (see [`crate::workload::truth`]). Replaying it gives the value, `mod_revision`,
//! `create_revision` and `version` of every key at every revision, so each `ok` op can be checked on
//! its own, at the revision its response header names:
//!
//! - **reads** (Range, linearizable or serializable, and a failed txn's reads) return exactly the
//!   keys the replay holds at their header revision. A serializable read may be old, but it must be
//!   a real past state, and the one its header claims;
//! - **writes** (Put, an effective DeleteRange, a txn that took its success branch) appear in the
//!   truth at their header revision with exactly their content, and a txn's compares held just
//!   before it; a write that changed nothing (deleting a missing key) changed nothing at its header
//!   revision. An acknowledged write that is not there is **lost**;
//! - a txn that took its failure branch had a false compare at its header revision;
//! - every revision of the truth was made by some write that was invoked and not recorded as
//!   failed: by an `ok` write acknowledged at that revision, or by one indeterminate (`info`) write
//!   whose content matches, each used once. Anything else is **unexpected**; a written value that
//!   appears twice is **duplicated**.
//!
//! Values are unique per run, so a revision holding a put is traced to its op by the value. Whether
//! reads and writes also respect real time is the revision checker's part
//! ([`crate::checker::revision`], with [`access`]); with both, a linearizable read is exactly one
//! that returns the state at a revision no older than anything completed before it began.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::checker::revision::Access;
use crate::checker::watch::{Event, EventKind};
use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::{OpPair, OpType};

/// A key as a Range returns it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Kv {
    pub key: String,
    pub value: String,
    pub mod_revision: i64,
    pub create_revision: i64,
    pub version: i64,
}

/// An op of the mixed (and watch) workload: the history's `f` and `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub enum KvOp {
    Put(Put),
    Delete(Delete),
    Txn(Txn),
    Range(Range),
}

/// `Put key=value`; the header revision is the write's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    pub key: String,
    pub value: String,
}

/// `DeleteRange` of one key; `deleted` is the response's count (completions only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delete {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<i64>,
}

/// `Range` of one key (empty `range_end`) or of `[key, range_end)`; `kvs` on completion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub range_end: String,
    #[serde(default)]
    pub serializable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvs: Option<Vec<Kv>>,
}

/// What a compare expects of a key (always with `EQUAL`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The key's `mod_revision`; 0 means the key does not exist.
    ModRevision(i64),
    /// The key's value; etcd fails a value compare on a missing key.
    Value(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    pub key: String,
    pub expect: Expect,
}

/// One write of a txn's success branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnWrite {
    Put(Put),
    Delete(Delete),
}

/// `Txn`: if every compare holds, the `success` writes (with each delete's count on completion);
/// otherwise one single-key Range per `failure` key, whose results land in `reads`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub compare: Vec<Compare>,
    pub success: Vec<TxnWrite>,
    #[serde(default)]
    pub failure: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<bool>,
    /// The failure branch's reads, one per `failure` key (`None`: the key did not exist).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<Option<Kv>>,
}

impl KvOp {
    /// The puts this op asks for (whatever branch a txn takes).
    fn puts(&self) -> Vec<&Put> {
        match self {
            KvOp::Put(put) => vec![put],
            KvOp::Txn(txn) => txn
                .success
                .iter()
                .filter_map(|w| match w {
                    TxnWrite::Put(put) => Some(put),
                    TxnWrite::Delete(_) => None,
                })
                .collect(),
            KvOp::Delete(_) | KvOp::Range(_) => Vec::new(),
        }
    }

    /// The keys this op may delete.
    fn deletes(&self) -> Vec<&str> {
        match self {
            KvOp::Delete(delete) => vec![delete.key.as_str()],
            KvOp::Txn(txn) => txn
                .success
                .iter()
                .filter_map(|w| match w {
                    TxnWrite::Delete(delete) => Some(delete.key.as_str()),
                    TxnWrite::Put(_) => None,
                })
                .collect(),
            KvOp::Put(_) | KvOp::Range(_) => Vec::new(),
        }
    }

    fn is_write(&self) -> bool {
        !matches!(self, KvOp::Range(_))
    }
}

/// How an `ok` completion takes part in the revision checker: serializable reads are ignored (they
/// may lag by design); writes that made a revision are writes; everything else observed one.
pub fn access(op: &KvOp) -> Access {
    match op {
        KvOp::Range(range) if range.serializable => Access::Ignore,
        KvOp::Range(_) => Access::Read,
        KvOp::Put(_) => Access::Write,
        KvOp::Delete(delete) if delete.deleted.is_some_and(|n| n > 0) => Access::Write,
        KvOp::Delete(_) => Access::Read,
        KvOp::Txn(txn) if txn.succeeded == Some(true) && !expected_events(txn).is_empty() => Access::Write,
        KvOp::Txn(_) => Access::Read,
    }
}

/// Whether `key` lies in `[start, range_end)`, or equals `start` when `range_end` is empty.
pub fn in_range(start: &str, range_end: &str, key: &str) -> bool {
    if range_end.is_empty() {
        key == start
    } else {
        key >= start && key < range_end
    }
}

/// One event as the model compares it: kind, key and value.
type Effect = (EventKind, String, String);

/// The events a completed, successful txn made, from its recorded delete counts.
fn expected_events(txn: &Txn) -> Vec<Effect> {
    let mut effects: Vec<Effect> = txn
        .success
        .iter()
        .filter_map(|w| match w {
            TxnWrite::Put(p) => Some((EventKind::Put, p.key.clone(), p.value.clone())),
            TxnWrite::Delete(d) if d.deleted.is_some_and(|n| n > 0) => {
                Some((EventKind::Delete, d.key.clone(), String::new()))
            }
            TxnWrite::Delete(_) => None,
        })
        .collect();
    effects.sort();
    effects
}

fn effects(events: &[Event]) -> Vec<Effect> {
    let mut effects: Vec<Effect> = events.iter().map(|e| (e.kind, e.key.clone(), e.value.clone())).collect();
    effects.sort();
    effects
}

/// The keyspace at every revision, replayed from the ground truth.
pub struct Model {
    /// key -> (revision, the key from that revision on; `None` once deleted)
    keys: BTreeMap<String, Vec<(i64, Option<Kv>)>>,
    /// revision -> the events it made, in truth order
    revisions: BTreeMap<i64, Vec<Event>>,
    /// The truth is complete up to this revision.
    until: i64,
}

impl Model {
    /// Replays `truth` (complete up to `until`); anomalies are events that cannot have happened
    /// (revisions going back, deleting a missing key, two events on one key in one revision).
    pub fn replay(truth: &[Event], until: i64) -> (Model, Vec<Anomaly>) {
        let mut model = Model { keys: BTreeMap::new(), revisions: BTreeMap::new(), until };
        let mut anomalies = Vec::new();
        let mut last = 0;
        for event in truth {
            let at = format!("truth event {:?} {}@{}", event.kind, event.key, event.revision);
            if event.revision < last {
                anomalies.push(Anomaly::new(AnomalyKind::Malformed, format!("{at} follows revision {last}")));
                continue;
            }
            last = event.revision;
            let history = model.keys.entry(event.key.clone()).or_default();
            let before = history.last().and_then(|(_, kv)| kv.clone());
            if history.last().is_some_and(|(r, _)| *r == event.revision) {
                anomalies.push(Anomaly::new(
                    AnomalyKind::Unexpected,
                    format!("{at}: a second event on the key in one revision"),
                ));
                continue;
            }
            let after = match event.kind {
                EventKind::Put => Some(Kv {
                    key: event.key.clone(),
                    value: event.value.clone(),
                    mod_revision: event.revision,
                    create_revision: before.as_ref().map_or(event.revision, |b| b.create_revision),
                    version: before.as_ref().map_or(1, |b| b.version + 1),
                }),
                EventKind::Delete if before.is_none() => {
                    anomalies.push(Anomaly::new(AnomalyKind::Unexpected, format!("{at} deletes a missing key")));
                    continue;
                }
                EventKind::Delete => None,
            };
            history.push((event.revision, after));
            model.revisions.entry(event.revision).or_default().push(event.clone());
        }
        (model, anomalies)
    }

    pub fn until(&self) -> i64 {
        self.until
    }

    /// The key at `revision`, or `None` while it does not exist.
    pub fn get(&self, key: &str, revision: i64) -> Option<&Kv> {
        let history = self.keys.get(key)?;
        let n = history.partition_point(|(r, _)| *r <= revision);
        n.checked_sub(1).and_then(|i| history[i].1.as_ref())
    }

    /// Every existing key of the range at `revision`, in key order (what a Range returns).
    pub fn range(&self, start: &str, range_end: &str, revision: i64) -> Vec<Kv> {
        self.keys
            .keys()
            .filter(|k| in_range(start, range_end, k))
            .filter_map(|k| self.get(k, revision).cloned())
            .collect()
    }

    /// The events of one revision (none when it made no change under the prefix).
    pub fn events_at(&self, revision: i64) -> &[Event] {
        self.revisions.get(&revision).map_or(&[], Vec::as_slice)
    }

    fn holds(&self, compare: &Compare, revision: i64) -> bool {
        let kv = self.get(&compare.key, revision);
        match &compare.expect {
            Expect::ModRevision(m) => kv.map_or(0, |kv| kv.mod_revision) == *m,
            Expect::Value(v) => kv.is_some_and(|kv| &kv.value == v),
        }
    }
}

/// Checks every op of the history against the replayed truth (complete up to `until`).
pub fn check(pairs: &[OpPair<KvOp>], truth: &[Event], until: i64) -> CheckResult {
    let (model, mut anomalies) = Model::replay(truth, until);
    // revision -> the position in `pairs` of the ok write that made it
    let mut claimed: HashMap<i64, usize> = HashMap::new();
    for (i, pair) in pairs.iter().enumerate() {
        let Some(done) = pair.ok_payload() else { continue };
        let name = format!("op {}", pair.index);
        let Some(revision) = pair.revision().filter(|r| *r > 0) else {
            anomalies.push(Anomaly::new(AnomalyKind::Malformed, format!("{name} completed ok without a revision")));
            continue;
        };
        if revision > model.until {
            anomalies.push(Anomaly::new(
                AnomalyKind::Malformed,
                format!("{name} has revision {revision}, beyond the ground truth (complete up to {})", model.until),
            ));
            continue;
        }
        if let Some(made) = check_ok(&name, done, revision, &model, &mut anomalies) {
            claimed.insert(made, i);
        }
    }
    attribute(pairs, &model, &claimed, &mut anomalies);
    CheckResult::from_anomalies("kv-model", anomalies)
}

/// Checks one `ok` op at its header revision; returns the revision it made, if it made one that
/// the truth confirms.
fn check_ok(name: &str, op: &KvOp, revision: i64, model: &Model, anomalies: &mut Vec<Anomaly>) -> Option<i64> {
    let mut push = |kind, text: String| anomalies.push(Anomaly::new(kind, format!("{name}: {text}")));
    let there = model.events_at(revision);
    match op {
        KvOp::Range(range) => {
            let Some(kvs) = &range.kvs else {
                push(AnomalyKind::Malformed, "a range completed without its result".to_string());
                return None;
            };
            let mut got = kvs.clone();
            got.sort();
            let want = model.range(&range.key, &range.range_end, revision);
            if got != want {
                let how = if range.serializable { "serializable" } else { "linearizable" };
                let what = describe_range(&range.key, &range.range_end);
                push(
                    AnomalyKind::InconsistentRead,
                    format!(
                        "{how} range {what} at revision {revision} returned {}, but the keyspace then held {}",
                        show_kvs(&got),
                        show_kvs(&want)
                    ),
                );
            }
            None
        }
        KvOp::Put(put) => {
            let want = vec![(EventKind::Put, put.key.clone(), put.value.clone())];
            if effects(there) == want {
                return Some(revision);
            }
            push(
                AnomalyKind::Lost,
                format!("put {}={} acknowledged at revision {revision}, but it holds {}", put.key, put.value, {
                    show_events(there)
                }),
            );
            None
        }
        KvOp::Delete(delete) => match delete.deleted {
            Some(0) => {
                if let Some(kv) = model.get(&delete.key, revision) {
                    push(
                        AnomalyKind::InconsistentRead,
                        format!("delete of {} found nothing at revision {revision}, but it held {}", delete.key, {
                            show_kv(kv)
                        }),
                    );
                }
                None
            }
            Some(1) => {
                if effects(there) == vec![(EventKind::Delete, delete.key.clone(), String::new())] {
                    return Some(revision);
                }
                push(
                    AnomalyKind::Lost,
                    format!(
                        "delete of {} acknowledged at revision {revision}, but it holds {}",
                        delete.key,
                        show_events(there)
                    ),
                );
                None
            }
            other => {
                push(AnomalyKind::Malformed, format!("a single-key delete reported {other:?} deleted"));
                None
            }
        },
        KvOp::Txn(txn) => check_txn(txn, revision, model, &mut push),
    }
}

fn check_txn(txn: &Txn, revision: i64, model: &Model, push: &mut impl FnMut(AnomalyKind, String)) -> Option<i64> {
    let describe = |at: i64| {
        txn.compare
            .iter()
            .map(|c| match model.get(&c.key, at) {
                Some(kv) => format!("{} was {}", c.key, show_kv(kv)),
                None => format!("{} was absent", c.key),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match txn.succeeded {
        Some(true) => {
            if txn.success.iter().any(|w| matches!(w, TxnWrite::Delete(d) if !matches!(d.deleted, Some(0 | 1)))) {
                push(AnomalyKind::Malformed, "a txn delete without a 0/1 count".to_string());
                return None;
            }
            let want = expected_events(txn);
            // A txn that changed nothing made no revision: its header names the state it saw.
            let before = if want.is_empty() { revision } else { revision - 1 };
            if !txn.compare.iter().all(|c| model.holds(c, before)) {
                push(
                    AnomalyKind::InconsistentRead,
                    format!(
                        "txn took its success branch at revision {revision}, but its compare {} was false at \
                         revision {before} ({})",
                        show_compares(&txn.compare),
                        describe(before)
                    ),
                );
            }
            for write in &txn.success {
                if let TxnWrite::Delete(d) = write {
                    let existed = model.get(&d.key, before).is_some();
                    if existed != (d.deleted == Some(1)) {
                        push(
                            AnomalyKind::InconsistentRead,
                            format!(
                                "txn deleted {} of {} at revision {revision}, but the key {} at revision {before}",
                                d.deleted.unwrap_or(0),
                                d.key,
                                if existed { "existed" } else { "was absent" }
                            ),
                        );
                    }
                }
            }
            if want.is_empty() {
                return None;
            }
            let there = model.events_at(revision);
            if effects(there) == want {
                return Some(revision);
            }
            push(
                AnomalyKind::Lost,
                format!(
                    "txn writes {} acknowledged at revision {revision}, but it holds {}",
                    show_effects(&want),
                    show_events(there)
                ),
            );
            None
        }
        Some(false) => {
            if txn.compare.iter().all(|c| model.holds(c, revision)) {
                push(
                    AnomalyKind::InconsistentRead,
                    format!(
                        "txn took its failure branch at revision {revision}, but its compare {} held ({})",
                        show_compares(&txn.compare),
                        describe(revision)
                    ),
                );
            }
            let want: Vec<Option<Kv>> = txn.failure.iter().map(|k| model.get(k, revision).cloned()).collect();
            if txn.reads != want {
                push(
                    AnomalyKind::InconsistentRead,
                    format!(
                        "txn failure reads of {} at revision {revision} returned {}, but the keyspace then held {}",
                        txn.failure.join(", "),
                        show_reads(&txn.reads),
                        show_reads(&want)
                    ),
                );
            }
            None
        }
        None => {
            push(AnomalyKind::Malformed, "a txn completed without saying which branch it took".to_string());
            None
        }
    }
}

/// Traces every revision of the truth that no `ok` write claimed to one indeterminate write.
fn attribute(pairs: &[OpPair<KvOp>], model: &Model, claimed: &HashMap<i64, usize>, anomalies: &mut Vec<Anomaly>) {
    // value -> the position of the op that put it (values are unique per run)
    let mut by_value: HashMap<&str, usize> = HashMap::new();
    for (i, pair) in pairs.iter().enumerate() {
        for put in pair.invoke.payload.puts() {
            by_value.entry(put.value.as_str()).or_insert(i);
        }
    }
    let mut used: HashSet<usize> = claimed.values().copied().collect();
    for (&revision, events) in &model.revisions {
        if claimed.contains_key(&revision) {
            continue;
        }
        let shown = show_events(events);
        let put_value = events.iter().find(|e| e.kind == EventKind::Put).map(|e| e.value.as_str());
        let candidate = match put_value {
            Some(value) => {
                let Some(&i) = by_value.get(value) else {
                    anomalies.push(Anomaly::new(
                        AnomalyKind::Unexpected,
                        format!("revision {revision} ({shown}) puts value {value:?}, which no op wrote"),
                    ));
                    continue;
                };
                Some(i)
            }
            // Only deletes: any indeterminate op that could delete exactly these keys.
            None => pairs.iter().enumerate().position(|(i, pair)| {
                !used.contains(&i)
                    && pair.outcome() == OpType::Info
                    && pair.invoke.payload.puts().is_empty()
                    && events.iter().all(|e| pair.invoke.payload.deletes().contains(&e.key.as_str()))
            }),
        };
        let Some(i) = candidate else {
            anomalies.push(Anomaly::new(
                AnomalyKind::Unexpected,
                format!("revision {revision} ({shown}) was made by no invoked, unclaimed write"),
            ));
            continue;
        };
        let pair = &pairs[i];
        let op = &pair.invoke.payload;
        let name = format!("op {}", pair.index);
        let problem = match pair.outcome() {
            OpType::Fail => Some((AnomalyKind::Unexpected, format!("{name} was recorded as failed"))),
            OpType::Ok => match pair.revision() {
                // The op's own revision does not hold exactly its writes: already reported as lost.
                Some(r) if r == revision => continue,
                Some(r) if claimed.get(&r) == Some(&i) => {
                    Some((AnomalyKind::Duplicated, format!("{name} took effect at revision {r} already")))
                }
                Some(r) => Some((AnomalyKind::Unexpected, format!("{name} was acknowledged at revision {r} instead"))),
                None => Some((AnomalyKind::Unexpected, format!("{name} was acknowledged without a revision"))),
            },
            _ if used.contains(&i) => {
                Some((AnomalyKind::Duplicated, format!("{name} already explains an earlier revision")))
            }
            _ if !fits(op, events) => {
                Some((AnomalyKind::Unexpected, format!("its content does not match {name} ({op:?})")))
            }
            _ => None,
        };
        match problem {
            Some((kind, why)) if op.is_write() => {
                anomalies.push(Anomaly::new(kind, format!("revision {revision} ({shown}): {why}")));
            }
            Some((kind, why)) => {
                anomalies.push(Anomaly::new(kind, format!("revision {revision} ({shown}): {why} (not a write)")));
            }
            None => {
                used.insert(i);
            }
        }
    }
}

/// Whether an indeterminate op could have made exactly these events: all of its puts, and deletes
/// only of keys it deletes.
fn fits(op: &KvOp, events: &[Event]) -> bool {
    let mut puts: Vec<Effect> = op.puts().iter().map(|p| (EventKind::Put, p.key.clone(), p.value.clone())).collect();
    puts.sort();
    let made: Vec<Effect> = effects(events).into_iter().filter(|e| e.0 == EventKind::Put).collect();
    let deletes = op.deletes();
    puts == made && events.iter().filter(|e| e.kind == EventKind::Delete).all(|e| deletes.contains(&e.key.as_str()))
}

fn describe_range(key: &str, range_end: &str) -> String {
    if range_end.is_empty() {
        key.to_string()
    } else {
        format!("[{key}, {range_end})")
    }
}

fn show_kv(kv: &Kv) -> String {
    format!("{}={} (mod {}, create {}, version {})", kv.key, kv.value, kv.mod_revision, kv.create_revision, kv.version)
}

fn show_kvs(kvs: &[Kv]) -> String {
    if kvs.is_empty() {
        return "nothing".to_string();
    }
    kvs.iter().map(show_kv).collect::<Vec<_>>().join(", ")
}

fn show_reads(reads: &[Option<Kv>]) -> String {
    let shown: Vec<String> = reads.iter().map(|r| r.as_ref().map_or_else(|| "absent".to_string(), show_kv)).collect();
    format!("[{}]", shown.join("; "))
}

fn show_compares(compares: &[Compare]) -> String {
    let shown: Vec<String> = compares
        .iter()
        .map(|c| match &c.expect {
            Expect::ModRevision(m) => format!("mod_revision({}) == {m}", c.key),
            Expect::Value(v) => format!("value({}) == {v:?}", c.key),
        })
        .collect();
    shown.join(" && ")
}

fn show_effects(effects: &[Effect]) -> String {
    let mut text = String::new();
    for (i, (kind, key, value)) in effects.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        let _ = match kind {
            EventKind::Put => write!(text, "put {key}={value}"),
            EventKind::Delete => write!(text, "delete {key}"),
        };
    }
    text
}

fn show_events(events: &[Event]) -> String {
    if events.is_empty() {
        return "no event under the prefix".to_string();
    }
    show_effects(&effects(events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{pair, Op};
    use crate::Validity;

    fn put_event(key: &str, value: &str, revision: i64) -> Event {
        Event { kind: EventKind::Put, key: key.into(), value: value.into(), revision, is_create: false, prev_kv: None }
    }

    fn delete_event(key: &str, revision: i64) -> Event {
        Event {
            kind: EventKind::Delete,
            key: key.into(),
            value: String::new(),
            revision,
            is_create: false,
            prev_kv: None,
        }
    }

    /// a=1@2, b=2@3, {a=3, b deleted}@4 (txn), a deleted@5, b=4@6 (an indeterminate put).
    fn truth() -> Vec<Event> {
        vec![
            put_event("a", "1", 2),
            put_event("b", "2", 3),
            put_event("a", "3", 4),
            delete_event("b", 4),
            delete_event("a", 5),
            put_event("b", "4", 6),
        ]
    }

    fn kv(key: &str, value: &str, mod_revision: i64, create_revision: i64, version: i64) -> Kv {
        Kv { key: key.into(), value: value.into(), mod_revision, create_revision, version }
    }

    fn put(key: &str, value: &str) -> KvOp {
        KvOp::Put(Put { key: key.into(), value: value.into() })
    }

    fn delete(key: &str, deleted: Option<i64>) -> KvOp {
        KvOp::Delete(Delete { key: key.into(), deleted })
    }

    fn range(key: &str, range_end: &str, serializable: bool, kvs: Option<Vec<Kv>>) -> KvOp {
        KvOp::Range(Range { key: key.into(), range_end: range_end.into(), serializable, kvs })
    }

    fn txn_ab(deleted: Option<i64>, succeeded: Option<bool>) -> KvOp {
        KvOp::Txn(Txn {
            compare: vec![Compare { key: "a".into(), expect: Expect::ModRevision(2) }],
            success: vec![
                TxnWrite::Put(Put { key: "a".into(), value: "3".into() }),
                TxnWrite::Delete(Delete { key: "b".into(), deleted }),
            ],
            failure: vec!["a".into()],
            succeeded,
            reads: Vec::new(),
        })
    }

    fn failed_txn(reads: Vec<Option<Kv>>) -> KvOp {
        KvOp::Txn(Txn {
            compare: vec![Compare { key: "a".into(), expect: Expect::Value("3".into()) }],
            success: vec![TxnWrite::Put(Put { key: "b".into(), value: "9".into() })],
            failure: vec!["a".into()],
            succeeded: Some(false),
            reads,
        })
    }

    /// (invocation, completion, outcome, header revision)
    type Spec = (KvOp, KvOp, OpType, Option<i64>);

    /// A history that fits the truth: every op kind, a stale but consistent serializable read, an
    /// indeterminate put that took effect and a failed one that did not.
    fn history() -> Vec<Spec> {
        let a1 = kv("a", "1", 2, 2, 1);
        let b2 = kv("b", "2", 3, 3, 1);
        vec![
            (put("a", "1"), put("a", "1"), OpType::Ok, Some(2)),
            (put("b", "2"), put("b", "2"), OpType::Ok, Some(3)),
            (range("a", "", false, None), range("a", "", false, Some(vec![a1.clone()])), OpType::Ok, Some(3)),
            (txn_ab(None, None), txn_ab(Some(1), Some(true)), OpType::Ok, Some(4)),
            (range("a", "c", true, None), range("a", "c", true, Some(vec![a1, b2])), OpType::Ok, Some(3)),
            (delete("a", None), delete("a", Some(1)), OpType::Ok, Some(5)),
            (failed_txn(vec![]), failed_txn(vec![None]), OpType::Ok, Some(5)),
            (put("b", "4"), put("b", "4"), OpType::Info, None),
            (delete("a", None), delete("a", Some(0)), OpType::Ok, Some(6)),
            (put("c", "5"), put("c", "5"), OpType::Fail, None),
            (
                range("a", "c", false, None),
                range("a", "c", false, Some(vec![kv("b", "4", 6, 6, 1)])),
                OpType::Ok,
                Some(6),
            ),
        ]
    }

    fn pairs(specs: &[Spec]) -> Vec<OpPair<KvOp>> {
        let mut ops = Vec::new();
        for (p, (invoke, done, kind, revision)) in specs.iter().enumerate() {
            let t = 10 * p as u64;
            ops.push(Op::invoke(p as u64, invoke.clone(), t));
            let mut completion = Op::new(p as u64, *kind, done.clone(), t + 5);
            completion.revision = *revision;
            ops.push(completion);
        }
        pair(ops).expect("well formed")
    }

    fn run(specs: &[Spec], truth: &[Event]) -> CheckResult {
        check(&pairs(specs), truth, 6)
    }

    #[test]
    fn a_history_that_fits_the_truth_passes() {
        let result = run(&history(), &truth());
        assert!(result.is_valid(), "{result}");
        // The delete at revision 5 may as well have been indeterminate.
        let mut specs = history();
        specs[5].2 = OpType::Info;
        specs[5].3 = None;
        let result = run(&specs, &truth());
        assert!(result.is_valid(), "{result}");
    }

    #[test]
    fn replay_tracks_versions_and_generations() {
        let (model, anomalies) = Model::replay(&truth(), 6);
        assert!(anomalies.is_empty(), "{anomalies:?}");
        assert_eq!(model.get("a", 4), Some(&kv("a", "3", 4, 2, 2)));
        assert_eq!(model.get("a", 5), None);
        assert_eq!(model.get("b", 6), Some(&kv("b", "4", 6, 6, 1)), "a new generation after the delete");
        assert_eq!(model.range("a", "c", 3).len(), 2);
        assert_eq!(model.events_at(4).len(), 2);
        let (_, bad) = Model::replay(&[delete_event("a", 2), put_event("a", "1", 3), put_event("b", "2", 1)], 3);
        assert_eq!(bad.len(), 2, "{bad:?}");
    }

    #[test]
    fn each_anomaly_is_caught() {
        type Corrupt = fn(&mut Vec<Spec>, &mut Vec<Event>);
        let cases: Vec<(&str, Corrupt, AnomalyKind)> = vec![
            (
                "stale serializable read (value not of its header revision)",
                |h, _| h[4].1 = range("a", "c", true, Some(vec![kv("a", "3", 4, 2, 2), kv("b", "2", 3, 3, 1)])),
                AnomalyKind::InconsistentRead,
            ),
            (
                "linearizable read with a wrong mod_revision",
                |h, _| h[2].1 = range("a", "", false, Some(vec![kv("a", "1", 3, 2, 1)])),
                AnomalyKind::InconsistentRead,
            ),
            (
                "lost write",
                |_, t| {
                    t.remove(1);
                },
                AnomalyKind::Lost,
            ),
            (
                "lost txn half",
                |_, t| {
                    t.remove(3);
                },
                AnomalyKind::Lost,
            ),
            ("unexpected event", |_, t| t.push(put_event("a", "77", 7)), AnomalyKind::Unexpected),
            ("failed write took effect", |_, t| t.push(put_event("c", "5", 7)), AnomalyKind::Unexpected),
            ("duplicate apply", |_, t| t.push(put_event("a", "1", 7)), AnomalyKind::Duplicated),
            (
                "delete nobody asked for",
                |h, _| h[5] = (range("a", "", false, None), range("a", "", false, Some(vec![])), OpType::Ok, Some(5)),
                AnomalyKind::Unexpected,
            ),
            (
                "failed txn read a wrong value",
                |h, _| h[6].1 = failed_txn(vec![Some(kv("a", "3", 4, 2, 2))]),
                AnomalyKind::InconsistentRead,
            ),
            ("failed txn whose compare held", |h, _| h[6].3 = Some(4), AnomalyKind::InconsistentRead),
            (
                "txn succeeded although its compare was false",
                |h, _| {
                    if let KvOp::Txn(txn) = &mut h[3].1 {
                        txn.compare[0].expect = Expect::ModRevision(1);
                    }
                },
                AnomalyKind::InconsistentRead,
            ),
            ("empty delete of an existing key", |h, _| h[8].3 = Some(4), AnomalyKind::InconsistentRead),
        ];
        for (name, corrupt, kind) in cases {
            let (mut specs, mut truth) = (history(), truth());
            corrupt(&mut specs, &mut truth);
            let result = run(&specs, &truth);
            assert_eq!(result.valid, Validity::Invalid, "{name}: {result}");
            assert!(result.has(kind), "{name}: want {kind:?}, got {result}");
        }
    }

    #[test]
    fn reports_are_readable() {
        let mut specs = history();
        specs[4].1 = range("a", "c", true, Some(vec![kv("a", "3", 4, 2, 2)]));
        let result = run(&specs, &truth());
        assert_eq!(
            result.anomalies[0].description,
            "op 8: serializable range [a, c) at revision 3 returned a=3 (mod 4, create 2, version 2), but the \
             keyspace then held a=1 (mod 2, create 2, version 1), b=2 (mod 3, create 3, version 1)"
        );
    }

    #[test]
    fn beyond_the_truth_is_undecided() {
        let specs = vec![(put("a", "1"), put("a", "1"), OpType::Ok, Some(9))];
        let result = run(&specs, &truth());
        assert!(result.has(AnomalyKind::Malformed), "{result}");
    }

    #[test]
    fn access_classifies_completions() {
        assert_eq!(access(&range("a", "", true, Some(vec![]))), Access::Ignore);
        assert_eq!(access(&range("a", "", false, Some(vec![]))), Access::Read);
        assert_eq!(access(&delete("a", Some(0))), Access::Read);
        assert_eq!(access(&delete("a", Some(1))), Access::Write);
        assert_eq!(access(&txn_ab(Some(0), Some(true))), Access::Write, "the put still writes");
        assert_eq!(access(&failed_txn(vec![None])), Access::Read);
    }

    #[test]
    fn ops_keep_their_jsonl_shape() {
        let op = Op::invoke(1, delete("k", None), 3);
        let text = serde_json::to_string(&op).expect("encode");
        assert_eq!(text, r#"{"process":1,"type":"invoke","f":"delete","value":{"key":"k"},"time_ns":3}"#);
        let back: Op<KvOp> = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, op);
    }
}
