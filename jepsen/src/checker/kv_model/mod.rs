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
//!
//! # Layout
//!
//! The ops ([`KvOp`] and its parts) are in `op`; `model` replays the truth into a [`Model`];
//! this file checks each `ok` op at its revision; `attribute` traces the remaining revisions of the
//! truth to indeterminate writes; `description` renders keys and events for the anomalies.

use std::collections::HashMap;

use crate::checker::revision::Access;
use crate::checker::watch::{Event, EventKind};
use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::OpPair;

mod attribute;
mod description;
mod model;
mod op;

use attribute::attribute;
use description::{describe_range, show_compares, show_effects, show_events, show_kv, show_kvs, show_reads};
pub use model::Model;
use model::{effects, expected_events};
pub use op::{in_range, Compare, Delete, Expect, Kv, KvOp, Put, Range, Txn, TxnWrite};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{pair, Op, OpType};
    use crate::Validity;

    /// a=1@2, b=2@3, {a=3, b deleted}@4 (txn), a deleted@5, b=4@6 (an indeterminate put).
    pub(super) fn truth() -> Vec<Event> {
        vec![
            Event::put("a", "1", 2),
            Event::put("b", "2", 3),
            Event::put("a", "3", 4),
            Event::delete("b", 4),
            Event::delete("a", 5),
            Event::put("b", "4", 6),
        ]
    }

    pub(super) fn kv(key: &str, value: &str, mod_revision: i64, create_revision: i64, version: i64) -> Kv {
        Kv { key: key.into(), value: value.into(), mod_revision, create_revision, version }
    }

    fn put(key: &str, value: &str) -> KvOp {
        KvOp::Put(Put { key: key.into(), value: value.into() })
    }

    pub(super) fn delete(key: &str, deleted: Option<i64>) -> KvOp {
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
            ("unexpected event", |_, t| t.push(Event::put("a", "77", 7)), AnomalyKind::Unexpected),
            ("failed write took effect", |_, t| t.push(Event::put("c", "5", 7)), AnomalyKind::Unexpected),
            ("duplicate apply", |_, t| t.push(Event::put("a", "1", 7)), AnomalyKind::Duplicated),
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
}
