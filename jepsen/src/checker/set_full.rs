//! Jepsen's `set-full`: unique elements added to one set, which readers read whole.
//!
//! An element becomes *known* when its add completes `ok` or a read first returns it, whichever
//! completes first. Every read invoked after that moment must contain it. Per element:
//! - **lost**: known, but the last read invoked after it was known does not contain it;
//! - **stale**: known and missing from some read invoked afterwards, but present again in a later
//!   read (an anomaly only when the set is meant to be linearizable);
//! - never read: no read was invoked after it was known (not an anomaly; nothing can be said).
//!
//! Per read: **unexpected** elements (never added, or added by a `fail`ed add) and **duplicated**
//! elements (one add applied twice). An `info` add may or may not be present, until it is seen.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::{OpPair, OpType};

/// The set workload's `f` and `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub enum SetOp {
    Add(i64),
    /// `null` when invoked; the whole set when `ok`.
    Read(Option<Vec<i64>>),
}

struct Add {
    index: usize,
    outcome: OpType,
    end_ns: Option<u64>,
}

struct Read {
    index: usize,
    start_ns: u64,
    end_ns: u64,
    counts: HashMap<i64, usize>,
}

/// Checks a set history. With `linearizable`, stale reads are anomalies too.
pub fn check(pairs: &[OpPair<SetOp>], linearizable: bool) -> CheckResult {
    let mut anomalies = Vec::new();
    let mut adds: BTreeMap<i64, Add> = BTreeMap::new();
    let mut reads: Vec<Read> = Vec::new();
    for pair in pairs {
        match (&pair.invoke.payload, pair.outcome()) {
            (SetOp::Add(element), outcome) => {
                let add = Add { index: pair.index, outcome, end_ns: pair.end_ns() };
                if let Some(first) = adds.insert(*element, add) {
                    anomalies.push(Anomaly::new(
                        AnomalyKind::Malformed,
                        format!("element {element} added twice (ops {} and {})", first.index, pair.index),
                    ));
                }
            }
            (SetOp::Read(_), OpType::Ok) => {
                let (Some(SetOp::Read(Some(elements))), Some(end_ns)) = (pair.ok_payload(), pair.end_ns()) else {
                    anomalies.push(Anomaly::new(
                        AnomalyKind::Malformed,
                        format!("op {}: ok read without a set", pair.index),
                    ));
                    continue;
                };
                let mut counts = HashMap::new();
                for e in elements {
                    *counts.entry(*e).or_insert(0) += 1;
                }
                reads.push(Read { index: pair.index, start_ns: pair.start_ns(), end_ns, counts });
            }
            (SetOp::Read(_), _) => {}
        }
    }
    if reads.is_empty() {
        anomalies.push(Anomaly::new(AnomalyKind::NothingRead, "no read completed"));
        return CheckResult::from_anomalies("set-full", anomalies);
    }
    reads.sort_by_key(|r| (r.start_ns, r.index));

    for read in &reads {
        let mut duplicated: Vec<(i64, usize)> =
            read.counts.iter().filter(|(_, &n)| n > 1).map(|(&e, &n)| (e, n)).collect();
        duplicated.sort_unstable();
        for (element, n) in duplicated {
            anomalies.push(Anomaly::new(
                AnomalyKind::Duplicated,
                format!("read op {} returned {element} {n} times", read.index),
            ));
        }
        let mut unexpected: Vec<i64> = read.counts.keys().copied().filter(|e| unexpected_in(&adds, *e)).collect();
        unexpected.sort_unstable();
        for element in unexpected {
            let why = match adds.get(&element) {
                Some(add) => format!("whose add (op {}) failed", add.index),
                None => "that was never added".to_string(),
            };
            anomalies.push(Anomaly::new(
                AnomalyKind::Unexpected,
                format!("read op {} returned {element}, {why}", read.index),
            ));
        }
    }

    for (element, add) in &adds {
        if add.outcome == OpType::Fail {
            continue;
        }
        let first_seen = reads.iter().filter(|r| r.counts.contains_key(element)).min_by_key(|r| r.end_ns);
        let known = match (add.outcome, add.end_ns, first_seen) {
            (OpType::Ok, Some(t), Some(r)) if r.end_ns < t => (r.end_ns, format!("read op {}", r.index)),
            (OpType::Ok, Some(t), _) => (t, format!("add op {}", add.index)),
            (_, _, Some(r)) => (r.end_ns, format!("read op {}", r.index)),
            _ => continue,
        };
        let later: Vec<&Read> = reads.iter().filter(|r| r.start_ns > known.0).collect();
        let missing: Vec<&&Read> = later.iter().filter(|r| !r.counts.contains_key(element)).collect();
        let (Some(last), Some(first_missing)) = (later.last(), missing.first()) else {
            continue;
        };
        let since = format!("known since {} ns (by {})", known.0, known.1);
        if !last.counts.contains_key(element) {
            anomalies.push(Anomaly::new(
                AnomalyKind::Lost,
                format!(
                    "{element} {since} is missing from read op {} and every read after it ({} reads)",
                    first_missing.index,
                    missing.len()
                ),
            ));
        } else if linearizable {
            anomalies.push(Anomaly::new(
                AnomalyKind::Stale,
                format!(
                    "{element} {since} is missing from {} later read(s), first read op {} invoked at {} ns",
                    missing.len(),
                    first_missing.index,
                    first_missing.start_ns
                ),
            ));
        }
    }
    CheckResult::from_anomalies("set-full", anomalies)
}

fn unexpected_in(adds: &BTreeMap<i64, Add>, element: i64) -> bool {
    adds.get(&element).is_none_or(|add| add.outcome == OpType::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{pair, Op};
    use crate::Validity;

    enum Step {
        /// (process, element, outcome, invoke, complete)
        Add(u64, i64, OpType, u64, u64),
        /// (process, elements, invoke, complete)
        Read(u64, &'static [i64], u64, u64),
    }
    use Step::{Add as A, Read as R};

    fn pairs(steps: &[Step]) -> Vec<OpPair<SetOp>> {
        let mut ops = Vec::new();
        for step in steps {
            match *step {
                A(p, e, outcome, t0, t1) => {
                    ops.push(Op::invoke(p, SetOp::Add(e), t0));
                    ops.push(Op::new(p, outcome, SetOp::Add(e), t1));
                }
                R(p, elements, t0, t1) => {
                    ops.push(Op::invoke(p, SetOp::Read(None), t0));
                    ops.push(Op::new(p, OpType::Ok, SetOp::Read(Some(elements.to_vec())), t1));
                }
            }
        }
        ops.sort_by_key(|op| (op.time_ns, op.kind != OpType::Invoke));
        pair(ops).expect("well formed")
    }

    #[test]
    fn table() {
        use OpType::{Fail, Info, Ok};
        let cases: Vec<(&str, Vec<Step>, Validity, Option<AnomalyKind>)> = vec![
            ("all present", vec![A(0, 1, Ok, 0, 1), A(1, 2, Ok, 0, 2), R(2, &[1, 2], 3, 4)], Validity::Valid, None),
            (
                "concurrent read may miss",
                vec![A(0, 1, Ok, 0, 10), R(1, &[], 5, 6), R(1, &[1], 11, 12)],
                Validity::Valid,
                None,
            ),
            ("info add present", vec![A(0, 1, Info, 0, 1), R(1, &[1], 2, 3), R(1, &[1], 4, 5)], Validity::Valid, None),
            ("info add absent", vec![A(0, 1, Info, 0, 1), R(1, &[], 2, 3)], Validity::Valid, None),
            ("never read is not an error", vec![R(1, &[], 0, 1), A(0, 1, Ok, 2, 3)], Validity::Valid, None),
            ("no reads", vec![A(0, 1, Ok, 0, 1)], Validity::Unknown, Some(AnomalyKind::NothingRead)),
            (
                "lost",
                vec![A(0, 1, Ok, 0, 1), R(1, &[1], 2, 3), R(1, &[], 4, 5), R(1, &[], 6, 7)],
                Validity::Invalid,
                Some(AnomalyKind::Lost),
            ),
            (
                "lost after being seen only",
                vec![A(0, 1, Info, 0, 1), R(1, &[1], 2, 3), R(1, &[], 4, 5)],
                Validity::Invalid,
                Some(AnomalyKind::Lost),
            ),
            (
                "stale",
                vec![A(0, 1, Ok, 0, 1), R(1, &[], 2, 3), R(1, &[1], 4, 5)],
                Validity::Invalid,
                Some(AnomalyKind::Stale),
            ),
            (
                "unexpected",
                vec![A(0, 1, Ok, 0, 1), R(1, &[1, 9], 2, 3)],
                Validity::Invalid,
                Some(AnomalyKind::Unexpected),
            ),
            (
                "failed add seen",
                vec![A(0, 1, Fail, 0, 1), R(1, &[1], 2, 3)],
                Validity::Invalid,
                Some(AnomalyKind::Unexpected),
            ),
            (
                "duplicated",
                vec![A(0, 1, Ok, 0, 1), R(1, &[1, 1], 2, 3)],
                Validity::Invalid,
                Some(AnomalyKind::Duplicated),
            ),
        ];
        for (name, steps, want, kind) in cases {
            let result = check(&pairs(&steps), true);
            assert_eq!(result.valid, want, "{name}: {result}");
            if let Some(kind) = kind {
                assert!(result.has(kind), "{name}: {result}");
            }
        }
    }

    #[test]
    fn stale_is_allowed_when_not_linearizable() {
        let steps = [A(0, 1, OpType::Ok, 0, 1), R(1, &[], 2, 3), R(1, &[1], 4, 5)];
        assert!(check(&pairs(&steps), false).is_valid());
    }

    #[test]
    fn lost_report_is_readable() {
        let steps = [A(0, 7, OpType::Ok, 0, 1), R(1, &[], 4, 5)];
        let result = check(&pairs(&steps), true);
        assert_eq!(
            result.anomalies[0].description,
            "7 known since 1 ns (by add op 0) is missing from read op 2 and every read after it (1 reads)"
        );
    }
}
