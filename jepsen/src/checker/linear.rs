//! Linearizability: the Wing–Gong search with Lowe's cache (as in porcupine's `checkSingle`).
//!
//! Every op becomes a call entry and a return entry in a doubly linked list sorted by time (calls
//! before returns on ties, so touching intervals count as concurrent). Walking from the head, a call
//! entry is tried as the next linearized op: if the model accepts it and the pair (set of linearized
//! ops, new state) was not seen before, the op's two entries are lifted out of the list and the walk
//! restarts. Reaching the return entry of an op that is not yet linearized means the current prefix
//! cannot be extended, so the last choice is undone. The history is linearizable when the list empties.
//!
//! Indeterminate ops (`info`: timeouts, resets) have no return entry in time: theirs sorts after
//! every real entry. Such an op may be linearized anywhere after its call, or never: once the walk
//! reaches the first of these trailing entries, every determinate op is linearized, and the
//! indeterminate ones left over simply never took effect. This matches how the client works: it never
//! retries a write, so an indeterminate write takes effect at most once.
//!
//! The search is exponential in the number of concurrent ops; the cache bounds it by the number of
//! distinct (op subset, state) pairs. Splitting the history per key (sound when no op or output links
//! keys) turns one product into a sum, and a deadline turns a runaway search into `Unknown`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::checker::{Anomaly, AnomalyKind, CheckResult};

/// A sequential specification. `step` must be a pure function.
pub trait Model {
    type State: Clone + Eq + Hash + fmt::Debug;
    type Input: fmt::Debug;
    type Output: fmt::Debug;

    fn init(&self) -> Self::State;

    /// The state after applying `input` to `state` and observing `output`, or `None` when `output`
    /// is impossible from `state`. For an indeterminate op `output` is whatever the model uses for
    /// "unknown", and `step` returns the state as if the op took effect.
    fn step(&self, state: &Self::State, input: &Self::Input, output: &Self::Output) -> Option<Self::State>;

    /// How an op is shown in reports.
    fn describe(&self, input: &Self::Input, output: &Self::Output) -> String {
        format!("{input:?} -> {output:?}")
    }
}

/// One op as the search sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// Identifies the op in reports (the history index of its invocation).
    pub id: usize,
    pub process: u64,
    pub input: I,
    pub output: O,
    pub call_ns: u64,
    /// `None` for an indeterminate op: it may take effect at any time after its call, or never.
    pub return_ns: Option<u64>,
}

/// A (sub-)history as the search for model `M` sees it.
pub type ModelOps<M> = Vec<Operation<<M as Model>::Input, <M as Model>::Output>>;

/// Why a history is not linearizable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The op that could not be linearized before it returned, after the longest linearizable
    /// prefix the search found.
    pub op: usize,
    /// The ids of that prefix, in linearization order.
    pub prefix: Vec<usize>,
    /// The model state after the prefix.
    pub state: String,
    pub description: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Linearizable,
    NotLinearizable(Failure),
    /// The deadline expired first.
    Unknown,
}

const NIL: usize = usize::MAX;
/// How many search steps run between two looks at the clock.
const CLOCK_EVERY: u64 = 1024;

struct Entry {
    op: usize,
    is_call: bool,
    /// For a call entry, its return entry.
    ret: usize,
    prev: usize,
    next: usize,
}

/// The search's doubly linked list; the head sentinel is the last element of `entries`.
struct EntryList {
    entries: Vec<Entry>,
    head: usize,
}

impl EntryList {
    fn new<I, O>(ops: &[Operation<I, O>]) -> Self {
        // (sort key, op, is_call); indeterminate returns sort after everything else.
        let mut order: Vec<((bool, u64, bool), usize, bool)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            order.push(((false, op.call_ns, false), i, true));
            let ret_key = match op.return_ns {
                Some(t) => (false, t, true),
                None => (true, 0, true),
            };
            order.push((ret_key, i, false));
        }
        order.sort_by_key(|&(key, op, _)| (key, op));
        let head = order.len();
        let mut entries: Vec<Entry> = order
            .iter()
            .enumerate()
            .map(|(pos, &(_, op, is_call))| Entry {
                op,
                is_call,
                ret: NIL,
                prev: if pos == 0 { head } else { pos - 1 },
                next: if pos + 1 == head { NIL } else { pos + 1 },
            })
            .collect();
        let mut call_of = vec![NIL; ops.len()];
        for pos in 0..entries.len() {
            let op = entries[pos].op;
            if entries[pos].is_call {
                call_of[op] = pos;
            } else {
                entries[call_of[op]].ret = pos;
            }
        }
        entries.push(Entry { op: NIL, is_call: false, ret: NIL, prev: NIL, next: if head == 0 { NIL } else { 0 } });
        EntryList { entries, head }
    }

    fn first(&self) -> usize {
        self.entries[self.head].next
    }

    fn unlink(&mut self, e: usize) {
        let (prev, next) = (self.entries[e].prev, self.entries[e].next);
        self.entries[prev].next = next;
        if next != NIL {
            self.entries[next].prev = prev;
        }
    }

    /// Undoes `unlink`; valid because lifts are undone in reverse order (dancing links).
    fn relink(&mut self, e: usize) {
        let (prev, next) = (self.entries[e].prev, self.entries[e].next);
        self.entries[prev].next = e;
        if next != NIL {
            self.entries[next].prev = e;
        }
    }

    fn lift(&mut self, call: usize) {
        let ret = self.entries[call].ret;
        self.unlink(call);
        self.unlink(ret);
    }

    fn unlift(&mut self, call: usize) {
        let ret = self.entries[call].ret;
        self.relink(ret);
        self.relink(call);
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Bitset(Vec<u64>);

impl Bitset {
    fn new(bits: usize) -> Self {
        Bitset(vec![0; bits.div_ceil(64)])
    }

    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Checks one (sub-)history against `model`, giving up at `deadline`.
pub fn check<M: Model>(model: &M, ops: &[Operation<M::Input, M::Output>], deadline: Instant) -> Outcome {
    if Instant::now() >= deadline {
        return Outcome::Unknown;
    }
    let mut list = EntryList::new(ops);
    let mut state = model.init();
    let mut linearized = Bitset::new(ops.len());
    let mut cache: HashSet<(Bitset, M::State)> = HashSet::new();
    // (call entry, state before it)
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut failure: Option<Failure> = None;
    let mut steps: u64 = 0;
    let mut entry = list.first();
    loop {
        // An empty list means every op is linearized. (The walk never runs off a non-empty list:
        // it always ends in a return entry, and those backtrack or finish.)
        if entry == NIL {
            return Outcome::Linearizable;
        }
        steps += 1;
        if steps.is_multiple_of(CLOCK_EVERY) && Instant::now() >= deadline {
            return Outcome::Unknown;
        }
        let Entry { op: i, is_call, next, .. } = list.entries[entry];
        let op = &ops[i];
        if is_call {
            if let Some(after) = model.step(&state, &op.input, &op.output) {
                linearized.set(i);
                if cache.insert((linearized.clone(), after.clone())) {
                    stack.push((entry, std::mem::replace(&mut state, after)));
                    list.lift(entry);
                    entry = list.first();
                    continue;
                }
                linearized.clear(i);
            }
            entry = next;
            continue;
        }
        if op.return_ns.is_none() {
            // Only indeterminate ops remain: they never took effect.
            return Outcome::Linearizable;
        }
        // `op` returned without being linearizable: remember the deepest such point, then backtrack.
        if failure.as_ref().is_none_or(|f| stack.len() > f.prefix.len()) {
            failure = Some(Failure {
                op: op.id,
                prefix: stack.iter().map(|&(call, _)| ops[list.entries[call].op].id).collect(),
                state: format!("{state:?}"),
                description: describe_failure(model, ops, i, &stack, &list, &state),
            });
        }
        let Some((call, before)) = stack.pop() else {
            return match failure {
                Some(f) => Outcome::NotLinearizable(f),
                None => Outcome::Unknown,
            };
        };
        linearized.clear(list.entries[call].op);
        state = before;
        list.unlift(call);
        entry = list.entries[call].next;
    }
}

fn describe_failure<M: Model>(
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
    blocked: usize,
    stack: &[(usize, M::State)],
    list: &EntryList,
    state: &M::State,
) -> String {
    let show = |op: &Operation<M::Input, M::Output>| {
        let ret = op.return_ns.map_or_else(|| "?".to_string(), |t| t.to_string());
        format!(
            "op {} (process {}, {} over [{}, {}] ns)",
            op.id,
            op.process,
            model.describe(&op.input, &op.output),
            op.call_ns,
            ret
        )
    };
    let mut text = format!(
        "cannot linearize {} after the longest linearizable prefix ({} ops), whose state is {state:?}",
        show(&ops[blocked]),
        stack.len()
    );
    let tail: Vec<String> = stack.iter().rev().take(3).map(|&(call, _)| show(&ops[list.entries[call].op])).collect();
    if !tail.is_empty() {
        text.push_str("; the prefix ends with ");
        text.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join(", "));
    }
    text
}

/// Checks each partition (usually: each key) on its own, all within one `budget`, and reports every
/// partition that is not linearizable or was not decided in time.
pub fn check_partitioned<M, K>(
    checker: &str,
    model: &M,
    partitions: &BTreeMap<K, ModelOps<M>>,
    budget: Duration,
) -> CheckResult
where
    M: Model,
    K: fmt::Display + Ord,
{
    let deadline = Instant::now() + budget;
    let mut anomalies = Vec::new();
    let mut undecided = Vec::new();
    for (key, ops) in partitions {
        match check(model, ops, deadline) {
            Outcome::Linearizable => {}
            Outcome::NotLinearizable(f) => {
                anomalies.push(Anomaly::new(AnomalyKind::NotLinearizable, format!("key {key}: {}", f.description)))
            }
            Outcome::Unknown => undecided.push(key.to_string()),
        }
    }
    if !undecided.is_empty() {
        let shown: Vec<&str> = undecided.iter().take(10).map(String::as_str).collect();
        anomalies.push(Anomaly::new(
            AnomalyKind::Timeout,
            format!(
                "{} of {} keys undecided within {budget:?}: {}",
                undecided.len(),
                partitions.len(),
                shown.join(", ")
            ),
        ));
    }
    CheckResult::from_anomalies(checker, anomalies)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain register of integers: writes always succeed, reads return the value (0 initially).
    struct Register;

    #[derive(Debug, Clone, Copy)]
    enum In {
        Read,
        Write(i64),
    }

    impl Model for Register {
        type State = i64;
        type Input = In;
        type Output = Option<i64>;

        fn init(&self) -> i64 {
            0
        }

        fn step(&self, state: &i64, input: &In, output: &Option<i64>) -> Option<i64> {
            match (input, output) {
                (In::Write(v), _) => Some(*v),
                (In::Read, Some(v)) if v == state => Some(*state),
                _ => None,
            }
        }
    }

    /// (process, input, output, call, return); a `None` return is indeterminate.
    type Spec = (u64, In, Option<i64>, u64, Option<u64>);

    fn ops(spec: &[Spec]) -> Vec<Operation<In, Option<i64>>> {
        spec.iter()
            .enumerate()
            .map(|(id, &(process, input, output, call_ns, return_ns))| Operation {
                id,
                process,
                input,
                output,
                call_ns,
                return_ns,
            })
            .collect()
    }

    fn run(spec: &[Spec]) -> Outcome {
        check(&Register, &ops(spec), Instant::now() + Duration::from_secs(10))
    }

    use In::{Read, Write};

    #[test]
    fn table() {
        let cases: Vec<(&str, Vec<Spec>, bool)> = vec![
            ("empty", vec![], true),
            ("sequential", vec![(0, Write(1), None, 0, Some(1)), (0, Read, Some(1), 2, Some(3))], true),
            ("initial read", vec![(0, Read, Some(0), 0, Some(1))], true),
            (
                // The read returns before the write is called in list order, but they overlap.
                "concurrent read sees the later write",
                vec![(0, Write(1), None, 0, Some(10)), (1, Read, Some(1), 1, Some(5))],
                true,
            ),
            (
                "needs reordering of two concurrent writes",
                vec![
                    (0, Write(1), None, 0, Some(10)),
                    (1, Write(2), None, 1, Some(10)),
                    (2, Read, Some(2), 11, Some(12)),
                    (3, Read, Some(2), 13, Some(14)),
                ],
                true,
            ),
            (
                "touching intervals count as concurrent",
                vec![(0, Write(1), None, 0, Some(5)), (1, Read, Some(0), 5, Some(6))],
                true,
            ),
            ("stale read", vec![(0, Write(1), None, 0, Some(1)), (1, Read, Some(0), 2, Some(3))], false),
            (
                "stale read after a newer write",
                vec![(0, Write(1), None, 0, Some(1)), (0, Write(2), None, 2, Some(3)), (1, Read, Some(1), 4, Some(5))],
                false,
            ),
            (
                "reads disagree on order",
                vec![
                    (0, Write(1), None, 0, Some(10)),
                    (1, Write(2), None, 0, Some(10)),
                    (2, Read, Some(1), 11, Some(12)),
                    (3, Read, Some(2), 13, Some(14)),
                ],
                false,
            ),
            (
                "indeterminate write that took effect",
                vec![(0, Write(1), None, 0, None), (1, Read, Some(1), 5, Some(6))],
                true,
            ),
            (
                "indeterminate write that never took effect",
                vec![(0, Write(1), None, 0, None), (1, Read, Some(0), 5, Some(6)), (1, Read, Some(0), 7, Some(8))],
                true,
            ),
            (
                "indeterminate write seen then unseen",
                vec![(0, Write(1), None, 0, None), (1, Read, Some(1), 5, Some(6)), (1, Read, Some(0), 7, Some(8))],
                false,
            ),
            (
                "indeterminate write cannot act before its call",
                vec![(1, Read, Some(1), 0, Some(1)), (0, Write(1), None, 2, None)],
                false,
            ),
        ];
        for (name, spec, want) in cases {
            let got = run(&spec);
            assert_eq!(got == Outcome::Linearizable, want, "{name}: {got:?}");
        }
    }

    #[test]
    fn failure_names_the_blocked_op() {
        let spec = [(0, Write(1), None, 0, Some(1)), (0, Write(2), None, 2, Some(3)), (1, Read, Some(1), 4, Some(5))];
        let Outcome::NotLinearizable(f) = run(&spec) else { panic!("must fail") };
        assert_eq!(f.op, 2);
        assert_eq!(f.prefix, vec![0, 1]);
        assert_eq!(f.state, "2");
        assert!(f.description.contains("op 2 (process 1, Read -> Some(1) over [4, 5] ns)"), "{}", f.description);
    }

    #[test]
    fn expired_deadline_is_unknown() {
        let spec = [(0, Write(1), None, 0, Some(1))];
        assert_eq!(check(&Register, &ops(&spec), Instant::now()), Outcome::Unknown);
        let parts = BTreeMap::from([("k", ops(&spec))]);
        let result = check_partitioned("linear", &Register, &parts, Duration::ZERO);
        assert_eq!(result.valid, crate::Validity::Unknown);
        assert!(result.has(AnomalyKind::Timeout));
    }

    #[test]
    fn partitions_are_checked_independently() {
        let good = ops(&[(0, Write(1), None, 0, Some(1)), (0, Read, Some(1), 2, Some(3))]);
        let bad = ops(&[(1, Write(5), None, 0, Some(1)), (1, Read, Some(0), 2, Some(3))]);
        let parts = BTreeMap::from([("a", good), ("b", bad)]);
        let result = check_partitioned("linear", &Register, &parts, Duration::from_secs(10));
        assert_eq!(result.valid, crate::Validity::Invalid);
        assert_eq!(result.anomalies.len(), 1);
        assert!(result.anomalies[0].description.starts_with("key b:"), "{}", result.anomalies[0]);
    }

    #[test]
    fn wide_concurrency_stays_fast_with_the_cache() {
        // 10 concurrent writes then reads: 10! orders without the cache, 10 * 2^10 states with it.
        let mut spec: Vec<_> = (0..10).map(|p| (p, Write(p as i64 + 1), None, 0, Some(100))).collect();
        spec.push((99, Read, Some(1), 101, Some(102)));
        assert_eq!(run(&spec), Outcome::Linearizable);
        spec.push((99, Read, Some(2), 103, Some(104)));
        assert!(matches!(run(&spec), Outcome::NotLinearizable(_)));
    }
}
