//! A reduced Elle list-append checker.
//!
//! Transactions append unique values to per-key lists and read whole lists. Because appends only
//! add at the end, every read of a key must be a prefix of the longest one, which therefore gives
//! the key's version order. From it:
//! - reads that are not prefixes of it are **incompatible orders**; repeated values are
//!   **duplicates**; values nobody appended (or whose transaction failed: G1a) are **unexpected**;
//! - an acknowledged append missing from the version order although a read of its key was invoked
//!   after it completed is **lost**;
//! - a read after the transaction's own append must end with that append (**internal**);
//! - ww (consecutive appends), wr (writer of a read's last value -> reader) and rw (reader -> writer
//!   of the next value) edges plus real-time edges form a graph whose cycles are G0, G1c, G-single
//!   or G2-item (see [`super::graph`]).
//!
//! `ok` transactions are committed; an `info` one counts as committed once one of its appends is
//! read; a `fail` one never committed.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::checker::graph::{DepGraph, RW, WR, WW};
use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::{OpPair, OpType};

/// The list-append workload's `f` and `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub enum AppendOp {
    Txn(Vec<Mop>),
}

/// A micro-operation: `{"f":"append","key":"x","value":3}` or `{"f":"r","key":"x","value":[1,3]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "kebab-case")]
pub enum Mop {
    Append {
        key: String,
        value: i64,
    },
    /// `value` is `null` when invoked, the list when `ok`.
    #[serde(rename = "r")]
    Read {
        key: String,
        value: Option<Vec<i64>>,
    },
}

struct Txn<'a> {
    index: usize,
    outcome: OpType,
    start_ns: u64,
    end_ns: Option<u64>,
    mops: &'a [Mop],
}

/// One read of a key by an `ok` transaction.
struct KeyRead<'a> {
    txn: usize,
    list: &'a [i64],
    /// How many of the list's last values the transaction appended itself.
    own: usize,
}

/// Checks a list-append history.
pub fn check(pairs: &[OpPair<AppendOp>]) -> CheckResult {
    let mut anomalies = Vec::new();
    let txns = transactions(pairs, &mut anomalies);
    let name = |t: usize| format!("op {}", txns[t].index);

    // Who appended what.
    let mut writer: HashMap<(&str, i64), usize> = HashMap::new();
    for (t, txn) in txns.iter().enumerate() {
        for mop in txn.mops {
            if let Mop::Append { key, value } = mop {
                if let Some(first) = writer.insert((key, *value), t) {
                    anomalies.push(Anomaly::new(
                        AnomalyKind::Malformed,
                        format!("{key}={value} appended twice ({} and {})", name(first), name(t)),
                    ));
                }
            }
        }
    }

    let reads = key_reads(&txns, &mut anomalies, &name);

    // Version orders, and the reads consistent with them.
    let mut orders: BTreeMap<&str, &[i64]> = BTreeMap::new();
    let mut compatible: BTreeMap<&str, Vec<&KeyRead>> = BTreeMap::new();
    for (key, key_reads) in &reads {
        let Some(longest) = key_reads.iter().max_by_key(|r| r.list.len()) else { continue };
        orders.insert(key, longest.list);
        for read in key_reads {
            if longest.list.starts_with(read.list) {
                compatible.entry(key).or_default().push(read);
            } else {
                anomalies.push(Anomaly::new(
                    AnomalyKind::IncompatibleOrder,
                    format!(
                        "key {key}: {} read {:?}, which is not a prefix of {:?} read by {}",
                        name(read.txn),
                        read.list,
                        longest.list,
                        name(longest.txn)
                    ),
                ));
            }
        }
    }

    // Values in the version orders must come from appends that did not fail.
    let mut committed: Vec<bool> = txns.iter().map(|t| t.outcome == OpType::Ok).collect();
    for (key, order) in &orders {
        for value in *order {
            match writer.get(&(*key, *value)) {
                None => anomalies.push(Anomaly::new(
                    AnomalyKind::Unexpected,
                    format!("key {key}: {value} was read but never appended"),
                )),
                Some(&t) if txns[t].outcome == OpType::Fail => anomalies.push(Anomaly::new(
                    AnomalyKind::Unexpected,
                    format!("key {key}: {value} was read but its append ({}) failed (G1a)", name(t)),
                )),
                Some(&t) => committed[t] = true,
            }
        }
    }

    lost_appends(&txns, &reads, &orders, &mut anomalies, &name);

    // The dependency graph over committed transactions.
    let mut graph = DepGraph::new(txns.len());
    let writer_of = |key: &str, value: i64| writer.get(&(key, value)).copied().filter(|&t| committed[t]);
    for (key, order) in &orders {
        for pair in order.windows(2) {
            if let (Some(a), Some(b)) = (writer_of(key, pair[0]), writer_of(key, pair[1])) {
                graph.add(a, b, WW);
            }
        }
        for read in compatible.get(key).into_iter().flatten() {
            let seen = &read.list[..read.list.len() - read.own];
            if let Some(w) = seen.last().and_then(|&v| writer_of(key, v)) {
                graph.add(w, read.txn, WR);
            }
            if let Some(w) = order.get(seen.len()).and_then(|&v| writer_of(key, v)) {
                graph.add(read.txn, w, RW);
            }
        }
    }
    let spans: Vec<Option<(u64, Option<u64>)>> =
        txns.iter().zip(&committed).map(|(t, &c)| c.then_some((t.start_ns, t.end_ns))).collect();
    graph.add_realtime(&spans);
    for scc in graph.sccs(u8::MAX) {
        if let Some(cycle) = graph.weakest_cycle(&scc) {
            anomalies.push(Anomaly::new(AnomalyKind::Cycle, graph.describe_cycle(&cycle, name)));
        }
    }
    CheckResult::from_anomalies("list-append", anomalies)
}

/// The transactions, with the micro-ops that count: the completion's for `ok`, else the invocation's.
fn transactions<'a>(pairs: &'a [OpPair<AppendOp>], anomalies: &mut Vec<Anomaly>) -> Vec<Txn<'a>> {
    let mut txns = Vec::with_capacity(pairs.len());
    for pair in pairs {
        let AppendOp::Txn(invoked) = &pair.invoke.payload;
        let mut outcome = pair.outcome();
        let mut mops: &[Mop] = invoked;
        if let Some(AppendOp::Txn(done)) = pair.ok_payload() {
            if same_shape(invoked, done) {
                mops = done;
            } else {
                anomalies.push(Anomaly::new(
                    AnomalyKind::Malformed,
                    format!("op {}: completion does not match its invocation", pair.index),
                ));
                outcome = OpType::Info;
            }
        }
        txns.push(Txn { index: pair.index, outcome, start_ns: pair.start_ns(), end_ns: pair.end_ns(), mops });
    }
    txns
}

fn same_shape(invoked: &[Mop], done: &[Mop]) -> bool {
    invoked.len() == done.len()
        && invoked.iter().zip(done).all(|pair| match pair {
            (Mop::Append { key: a, value: x }, Mop::Append { key: b, value: y }) => a == b && x == y,
            (Mop::Read { key: a, .. }, Mop::Read { key: b, value: Some(_) }) => a == b,
            _ => false,
        })
}

/// Every read of `ok` transactions per key, after the per-read checks (duplicates, internal).
fn key_reads<'a>(
    txns: &[Txn<'a>],
    anomalies: &mut Vec<Anomaly>,
    name: &impl Fn(usize) -> String,
) -> BTreeMap<&'a str, Vec<KeyRead<'a>>> {
    let mut reads: BTreeMap<&str, Vec<KeyRead>> = BTreeMap::new();
    for (t, txn) in txns.iter().enumerate().filter(|(_, t)| t.outcome == OpType::Ok) {
        let mut own: HashMap<&str, Vec<i64>> = HashMap::new();
        for mop in txn.mops {
            match mop {
                Mop::Append { key, value } => own.entry(key).or_default().push(*value),
                Mop::Read { key, value: Some(list) } => {
                    let mut sorted = list.clone();
                    sorted.sort_unstable();
                    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                        anomalies.push(Anomaly::new(
                            AnomalyKind::Duplicated,
                            format!("key {key}: {} read {:?}, which holds {} twice", name(t), list, w[0]),
                        ));
                        continue;
                    }
                    let mine = own.get(key.as_str()).map_or(&[][..], Vec::as_slice);
                    if !list.ends_with(mine) {
                        anomalies.push(Anomaly::new(
                            AnomalyKind::Internal,
                            format!("key {key}: {} read {:?} after appending {:?} itself", name(t), list, mine),
                        ));
                        continue;
                    }
                    reads.entry(key).or_default().push(KeyRead { txn: t, list, own: mine.len() });
                }
                Mop::Read { value: None, .. } => {}
            }
        }
    }
    reads
}

/// Acknowledged appends that no read contains although a read of the key began after they completed.
fn lost_appends(
    txns: &[Txn],
    reads: &BTreeMap<&str, Vec<KeyRead>>,
    orders: &BTreeMap<&str, &[i64]>,
    anomalies: &mut Vec<Anomaly>,
    name: &impl Fn(usize) -> String,
) {
    for (t, txn) in txns.iter().enumerate() {
        let (OpType::Ok, Some(end)) = (txn.outcome, txn.end_ns) else { continue };
        for mop in txn.mops {
            let Mop::Append { key, value } = mop else { continue };
            let key_reads = reads.get(key.as_str()).map_or(&[][..], Vec::as_slice);
            if orders.get(key.as_str()).is_some_and(|o| o.contains(value))
                || key_reads.iter().any(|r| r.list.contains(value))
            {
                continue;
            }
            if let Some(later) = key_reads.iter().filter(|r| txns[r.txn].start_ns > end).max_by_key(|r| r.list.len()) {
                anomalies.push(Anomaly::new(
                    AnomalyKind::Lost,
                    format!(
                        "key {key}: {value} appended by {} (completed at {end} ns) is missing from {:?} read by {}, \
                         invoked later, and from every other read",
                        name(t),
                        later.list,
                        name(later.txn)
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{pair, read_jsonl, write_jsonl, Op};
    use crate::Validity;

    fn append(key: &str, value: i64) -> Mop {
        Mop::Append { key: key.to_string(), value }
    }

    fn r(key: &str, list: &[i64]) -> Mop {
        Mop::Read { key: key.to_string(), value: Some(list.to_vec()) }
    }

    /// (process, mops as completed, outcome, invoke time, completion time)
    type Spec = Vec<(u64, Vec<Mop>, OpType, u64, u64)>;

    fn history(spec: &Spec) -> Vec<Op<AppendOp>> {
        let mut ops = Vec::new();
        for (process, mops, outcome, t0, t1) in spec {
            let invoked: Vec<Mop> = mops
                .iter()
                .map(|m| match m {
                    Mop::Read { key, .. } => Mop::Read { key: key.clone(), value: None },
                    m => m.clone(),
                })
                .collect();
            ops.push(Op::invoke(*process, AppendOp::Txn(invoked.clone()), *t0));
            let done = if *outcome == OpType::Ok { mops.clone() } else { invoked };
            ops.push(Op::new(*process, *outcome, AppendOp::Txn(done), *t1));
        }
        ops.sort_by_key(|op| (op.time_ns, op.kind != OpType::Invoke));
        ops
    }

    fn run(spec: &Spec) -> CheckResult {
        check(&pair(history(spec)).expect("well formed"))
    }

    #[test]
    fn table() {
        use OpType::{Fail, Info, Ok};
        type Case = (&'static str, Spec, Validity, Option<(AnomalyKind, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                "serial",
                vec![
                    (0, vec![append("x", 1), r("x", &[1])], Ok, 0, 1),
                    (0, vec![append("x", 2), append("y", 1)], Ok, 2, 3),
                    (1, vec![r("x", &[1, 2]), r("y", &[1])], Ok, 4, 5),
                ],
                Validity::Valid,
                None,
            ),
            (
                "concurrent appends in either order",
                vec![
                    (0, vec![append("x", 1)], Ok, 0, 10),
                    (1, vec![append("x", 2)], Ok, 0, 10),
                    (2, vec![r("x", &[2])], Ok, 1, 9),
                    (2, vec![r("x", &[2, 1])], Ok, 11, 12),
                ],
                Validity::Valid,
                None,
            ),
            (
                "info append seen, fail append unseen",
                vec![
                    (0, vec![append("x", 1)], Info, 0, 1),
                    (1, vec![append("x", 2)], Fail, 0, 1),
                    (2, vec![r("x", &[1])], Ok, 2, 3),
                ],
                Validity::Valid,
                None,
            ),
            (
                "incompatible order",
                vec![
                    (0, vec![append("x", 1)], Ok, 0, 1),
                    (1, vec![append("x", 2)], Ok, 0, 1),
                    (2, vec![r("x", &[1, 2])], Ok, 2, 3),
                    (3, vec![r("x", &[2, 1])], Ok, 2, 3),
                ],
                Validity::Invalid,
                Some((AnomalyKind::IncompatibleOrder, "key x: op")),
            ),
            (
                "duplicate apply",
                vec![(0, vec![append("x", 1)], Ok, 0, 1), (1, vec![r("x", &[1, 1])], Ok, 2, 3)],
                Validity::Invalid,
                Some((AnomalyKind::Duplicated, "holds 1 twice")),
            ),
            (
                "lost append",
                vec![
                    (0, vec![append("x", 1)], Ok, 0, 1),
                    (0, vec![append("x", 2)], Ok, 2, 3),
                    (1, vec![r("x", &[1])], Ok, 4, 5),
                ],
                Validity::Invalid,
                Some((AnomalyKind::Lost, "key x: 2 appended by op 2")),
            ),
            (
                "aborted read",
                vec![(0, vec![append("x", 1)], Fail, 0, 1), (1, vec![r("x", &[1])], Ok, 2, 3)],
                Validity::Invalid,
                Some((AnomalyKind::Unexpected, "G1a")),
            ),
            (
                "garbage read",
                vec![(1, vec![r("x", &[9])], Ok, 2, 3)],
                Validity::Invalid,
                Some((AnomalyKind::Unexpected, "never appended")),
            ),
            (
                "internal",
                vec![(0, vec![append("x", 1), r("x", &[])], Ok, 0, 1)],
                Validity::Invalid,
                Some((AnomalyKind::Internal, "after appending [1] itself")),
            ),
            (
                "stale read is a realtime cycle",
                vec![
                    (0, vec![append("x", 1)], Ok, 0, 1),
                    (0, vec![append("x", 2)], Ok, 2, 3),
                    (1, vec![r("x", &[1])], Ok, 4, 5),
                    (1, vec![r("x", &[1, 2])], Ok, 6, 7),
                ],
                Validity::Invalid,
                Some((AnomalyKind::Cycle, "G-single-realtime: op 2 -rt-> op 4 -rw-> op 2")),
            ),
            (
                "write skew",
                vec![
                    (0, vec![r("x", &[]), append("y", 1)], Ok, 0, 10),
                    (1, vec![r("y", &[]), append("x", 1)], Ok, 0, 10),
                    (2, vec![r("x", &[1]), r("y", &[1])], Ok, 11, 12),
                ],
                Validity::Invalid,
                Some((AnomalyKind::Cycle, "G2-item: op 0 -rw-> op 1 -rw-> op 0")),
            ),
            (
                "G1c",
                vec![
                    (0, vec![append("x", 1), r("y", &[1])], Ok, 0, 10),
                    (1, vec![append("y", 1), r("x", &[1])], Ok, 0, 10),
                ],
                Validity::Invalid,
                Some((AnomalyKind::Cycle, "G1c")),
            ),
        ];
        for (name, spec, want, anomaly) in cases {
            let result = run(&spec);
            assert_eq!(result.valid, want, "{name}: {result}");
            if let Some((kind, text)) = anomaly {
                assert!(
                    result.anomalies.iter().any(|a| a.kind == kind && a.description.contains(text)),
                    "{name}: want {kind:?} containing {text:?}, got {result}"
                );
            }
        }
    }

    /// Strictly serializable runs: each transaction takes effect atomically at a point inside its
    /// interval; some time out, having taken effect or not.
    #[test]
    fn generated_serial_histories_pass() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let workers = 3u64;
            // (effect time, process, completion kind, applies, invoke time, end time, mops)
            let mut plan = Vec::new();
            let mut next_process = workers;
            for worker in 0..workers {
                let (mut process, mut t) = (worker, 0);
                for _ in 0..20 {
                    let start = t + rng.gen_range(1..10);
                    let at = start + rng.gen_range(0..10);
                    let end = at + rng.gen_range(0..10);
                    t = end;
                    let scale = |x: u64| x * workers + worker;
                    let mops: Vec<Mop> = (0..rng.gen_range(1..4))
                        .map(|_| {
                            let key = ["x", "y", "z"][rng.gen_range(0..3)];
                            if rng.gen_bool(0.5) {
                                append(key, 0)
                            } else {
                                Mop::Read { key: key.into(), value: None }
                            }
                        })
                        .collect();
                    let info = rng.gen_bool(0.1);
                    let kind = if info { OpType::Info } else { OpType::Ok };
                    plan.push((scale(at), process, kind, !info || rng.gen_bool(0.5), scale(start), scale(end), mops));
                    if info {
                        process = next_process;
                        next_process += 1;
                    }
                }
            }
            plan.sort_by_key(|p| p.0);
            let mut state: BTreeMap<String, Vec<i64>> = BTreeMap::new();
            let mut next_value = 1;
            let mut ops = Vec::new();
            for (_, process, kind, applies, start, end, mut mops) in plan {
                let mut local = state.clone();
                for mop in &mut mops {
                    match mop {
                        Mop::Append { key, value } => {
                            *value = next_value;
                            next_value += 1;
                            local.entry(key.clone()).or_default().push(*value);
                        }
                        Mop::Read { key, value } => *value = Some(local.get(key).cloned().unwrap_or_default()),
                    }
                }
                if applies {
                    state = local;
                }
                let invoked: Vec<Mop> = mops
                    .iter()
                    .map(|m| match m {
                        Mop::Read { key, .. } => Mop::Read { key: key.clone(), value: None },
                        m => m.clone(),
                    })
                    .collect();
                let done = if kind == OpType::Ok { mops } else { invoked.clone() };
                ops.push(Op::invoke(process, AppendOp::Txn(invoked), start));
                ops.push(Op::new(process, kind, AppendOp::Txn(done), end));
            }
            ops.sort_by_key(|op| (op.time_ns, op.kind != OpType::Invoke));
            let result = check(&pair(ops).expect("well formed"));
            assert!(result.is_valid(), "seed {seed}: {result}");
        }
    }

    #[test]
    fn jsonl_shape() {
        let spec: Spec = vec![(0, vec![append("x", 1), r("x", &[1])], OpType::Ok, 0, 1)];
        let ops = history(&spec);
        let mut buf = Vec::new();
        write_jsonl(&mut buf, &ops).expect("write");
        let text = String::from_utf8(buf.clone()).expect("utf8");
        assert!(text.starts_with(
            r#"{"process":0,"type":"invoke","f":"txn","value":[{"f":"append","key":"x","value":1},{"f":"r","key":"x","value":null}],"time_ns":0}"#
        ), "{text}");
        let back: Vec<Op<AppendOp>> = read_jsonl(&buf[..]).expect("read");
        assert_eq!(back, ops);
    }
}
