//! The register workload: per-key read, write and compare-and-set, checked for linearizability with
//! a versioned register model (Jepsen's `VersionedRegister`).
//!
//! The state of a key is `(version, value)`, etcd's per-key `version`: 0 while absent, +1 per write.
//! Reads report both (from the `kv`), writes and CAS the version they created (from `prev_kv`), so a
//! write applied twice shows up as a version that cannot exist. Written values are unique, so every
//! read pins the one write it saw. Only per-key data appears in outputs (never the global revision),
//! which keeps splitting the history per key sound; revisions are checked by [`super::revision`].
//!
//! Recording rules: a read that did not complete `ok` is dropped; a `fail` write or CAS certainly had
//! no effect and is dropped; an `info` write or CAS may have taken effect once, or never. A CAS whose
//! compare was false completes `ok` with `succeeded: false` (it observed the value) — not `fail`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checker::linear::{self, Model, Operation};
use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::{OpPair, OpType};

/// The register workload's `f` and `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub enum RegisterOp {
    /// `null` when invoked; what was read when `ok`.
    Read(Option<Versioned>),
    Write(RegisterWrite),
    Cas(RegisterCas),
}

/// A key's value (`None`: absent) and its per-key version (0 while absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Versioned {
    pub value: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterWrite {
    pub value: i64,
    /// The key's version after the write (`ok` only, when known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterCas {
    pub expect: i64,
    pub new: i64,
    /// Whether the compare held (`ok` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<bool>,
    /// The key's version after a successful swap (`ok` only, when known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

/// One key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegisterState {
    pub version: i64,
    pub value: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterInput {
    Read,
    Write(i64),
    Cas { expect: i64, new: i64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterOutput {
    Read {
        value: Option<i64>,
        version: Option<i64>,
    },
    Write {
        version: Option<i64>,
    },
    Cas {
        succeeded: bool,
        version: Option<i64>,
    },
    /// The op is indeterminate.
    Unknown,
}

/// The versioned register, one per key.
pub struct VersionedRegister;

impl VersionedRegister {
    fn written(state: &RegisterState, value: i64, version: Option<i64>) -> Option<RegisterState> {
        let next = RegisterState { version: state.version + 1, value: Some(value) };
        version.is_none_or(|v| v == next.version).then_some(next)
    }
}

impl Model for VersionedRegister {
    type State = RegisterState;
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn init(&self) -> RegisterState {
        RegisterState { version: 0, value: None }
    }

    fn step(&self, state: &RegisterState, input: &RegisterInput, output: &RegisterOutput) -> Option<RegisterState> {
        use RegisterInput as I;
        use RegisterOutput as O;
        match (*input, *output) {
            (I::Read, O::Read { value, version }) => {
                (value == state.value && version.is_none_or(|v| v == state.version)).then_some(*state)
            }
            (I::Read, O::Unknown) => Some(*state),
            (I::Write(value), O::Write { version }) => Self::written(state, value, version),
            (I::Write(value), O::Unknown) => Self::written(state, value, None),
            (I::Cas { expect, new }, O::Cas { succeeded: true, version }) if state.value == Some(expect) => {
                Self::written(state, new, version)
            }
            (I::Cas { expect, .. }, O::Cas { succeeded: false, .. }) if state.value != Some(expect) => Some(*state),
            (I::Cas { expect, new }, O::Unknown) if state.value == Some(expect) => Self::written(state, new, None),
            (I::Cas { .. }, O::Unknown) => Some(*state),
            _ => None,
        }
    }

    fn describe(&self, input: &RegisterInput, output: &RegisterOutput) -> String {
        let version = |v: Option<i64>| v.map_or_else(String::new, |v| format!(" v{v}"));
        let value = |v: Option<i64>| v.map_or_else(|| "nil".to_string(), |v| v.to_string());
        match (input, output) {
            (RegisterInput::Read, RegisterOutput::Read { value: v, version: n }) => {
                format!("read -> {}{}", value(*v), version(*n))
            }
            (RegisterInput::Write(v), RegisterOutput::Write { version: n }) => format!("write {v}{}", version(*n)),
            (RegisterInput::Write(v), _) => format!("write {v} (indeterminate)"),
            (RegisterInput::Cas { expect, new }, RegisterOutput::Cas { succeeded, version: n }) => {
                let verdict = if *succeeded { "ok" } else { "compare failed" };
                format!("cas {expect}->{new} {verdict}{}", version(*n))
            }
            (RegisterInput::Cas { expect, new }, _) => format!("cas {expect}->{new} (indeterminate)"),
            (input, output) => format!("{input:?} -> {output:?}"),
        }
    }
}

type RegisterOperation = Operation<RegisterInput, RegisterOutput>;

/// Turns paired register ops into per-key search input. Ops that break the recording rules are
/// reported as `Malformed`; a malformed write still enters the search as indeterminate, so it cannot
/// make a correct history look wrong.
pub fn operations(pairs: &[OpPair<RegisterOp>]) -> (BTreeMap<String, Vec<RegisterOperation>>, Vec<Anomaly>) {
    let mut partitions: BTreeMap<String, Vec<RegisterOperation>> = BTreeMap::new();
    let mut anomalies = Vec::new();
    for pair in pairs {
        let input = match pair.invoke.payload {
            RegisterOp::Read(_) => RegisterInput::Read,
            RegisterOp::Write(w) => RegisterInput::Write(w.value),
            RegisterOp::Cas(c) => RegisterInput::Cas { expect: c.expect, new: c.new },
        };
        let (output, return_ns) = match pair.outcome() {
            OpType::Fail => continue,
            OpType::Ok => match ok_output(&pair.invoke.payload, pair.ok_payload()) {
                Ok(output) => (output, pair.end_ns()),
                Err(reason) => {
                    anomalies.push(Anomaly::new(AnomalyKind::Malformed, format!("op {}: {reason}", pair.index)));
                    (RegisterOutput::Unknown, None)
                }
            },
            OpType::Info | OpType::Invoke => (RegisterOutput::Unknown, None),
        };
        if input == RegisterInput::Read && output == RegisterOutput::Unknown {
            continue;
        }
        let key = pair.key().unwrap_or("<none>").to_string();
        partitions.entry(key).or_default().push(Operation {
            id: pair.index,
            process: pair.process(),
            input,
            output,
            call_ns: pair.start_ns(),
            return_ns,
        });
    }
    (partitions, anomalies)
}

fn ok_output(invoke: &RegisterOp, ok: Option<&RegisterOp>) -> Result<RegisterOutput, String> {
    match (invoke, ok) {
        (RegisterOp::Read(_), Some(RegisterOp::Read(Some(v)))) => {
            Ok(RegisterOutput::Read { value: v.value, version: v.version })
        }
        (RegisterOp::Write(w), Some(RegisterOp::Write(done))) if w.value == done.value => {
            Ok(RegisterOutput::Write { version: done.version })
        }
        (RegisterOp::Cas(c), Some(RegisterOp::Cas(done))) if (c.expect, c.new) == (done.expect, done.new) => {
            match done.succeeded {
                Some(succeeded) => Ok(RegisterOutput::Cas { succeeded, version: done.version }),
                None => Err("ok cas without `succeeded`".to_string()),
            }
        }
        (_, ok) => Err(format!("completion {ok:?} does not answer {invoke:?}")),
    }
}

/// Checks a register history for linearizability, each key on its own, within `budget`.
pub fn check(pairs: &[OpPair<RegisterOp>], budget: Duration) -> CheckResult {
    let (partitions, mut malformed) = operations(pairs);
    let mut result = linear::check_partitioned("register", &VersionedRegister, &partitions, budget);
    if !malformed.is_empty() {
        malformed.append(&mut result.anomalies);
        result = CheckResult::from_anomalies("register", malformed);
    }
    result
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::history::{pair, read_jsonl, write_jsonl, Op};
    use crate::Validity;

    const BUDGET: Duration = Duration::from_secs(20);

    fn read(value: Option<i64>, version: i64) -> RegisterOp {
        RegisterOp::Read(Some(Versioned { value, version: Some(version) }))
    }

    fn write(value: i64, version: Option<i64>) -> RegisterOp {
        RegisterOp::Write(RegisterWrite { value, version })
    }

    fn cas(expect: i64, new: i64, succeeded: Option<bool>, version: Option<i64>) -> RegisterOp {
        RegisterOp::Cas(RegisterCas { expect, new, succeeded, version })
    }

    /// (process, invoke payload, completion, invoke time, completion time); a `None` completion
    /// leaves the op outstanding (indeterminate).
    type Step = (u64, RegisterOp, Option<(OpType, RegisterOp)>, u64, u64);

    /// Builds a one-key history.
    fn history(spec: &[Step]) -> Vec<OpPair<RegisterOp>> {
        let mut ops = Vec::new();
        for (process, invoke, done, t0, t1) in spec {
            ops.push(Op::invoke(*process, invoke.clone(), *t0).with_key("k"));
            if let Some((kind, payload)) = done {
                ops.push(Op::new(*process, *kind, payload.clone(), *t1).with_key("k"));
            }
        }
        ops.sort_by_key(|op| (op.time_ns, op.kind != OpType::Invoke));
        pair(ops).expect("well-formed history")
    }

    fn ok(payload: RegisterOp) -> Option<(OpType, RegisterOp)> {
        Some((OpType::Ok, payload))
    }

    #[test]
    fn hand_built_histories() {
        use OpType::{Fail, Info};
        let no_read = RegisterOp::Read(None);
        let cases: Vec<(&str, Vec<Step>, Validity)> = vec![
            (
                "sequential",
                vec![
                    (0, no_read.clone(), ok(read(None, 0)), 0, 1),
                    (0, write(1, None), ok(write(1, Some(1))), 2, 3),
                    (0, cas(1, 2, None, None), ok(cas(1, 2, Some(true), Some(2))), 4, 5),
                    (0, cas(1, 3, None, None), ok(cas(1, 3, Some(false), None)), 6, 7),
                    (0, no_read.clone(), ok(read(Some(2), 2)), 8, 9),
                ],
                Validity::Valid,
            ),
            (
                "concurrent writes reordered",
                vec![
                    (0, write(1, None), ok(write(1, Some(2))), 0, 10),
                    (1, write(2, None), ok(write(2, Some(1))), 1, 11),
                    (2, no_read.clone(), ok(read(Some(1), 2)), 12, 13),
                ],
                Validity::Valid,
            ),
            (
                "indeterminate write took effect",
                vec![
                    (0, write(1, None), Some((Info, write(1, None))), 0, 5),
                    (1, no_read.clone(), ok(read(Some(1), 1)), 20, 21),
                ],
                Validity::Valid,
            ),
            (
                "indeterminate write took effect after its timeout",
                vec![
                    (0, write(1, None), Some((Info, write(1, None))), 0, 5),
                    (1, no_read.clone(), ok(read(None, 0)), 6, 7),
                    (1, no_read.clone(), ok(read(Some(1), 1)), 8, 9),
                ],
                Validity::Valid,
            ),
            (
                "indeterminate write never took effect",
                vec![
                    (0, write(1, None), None, 0, 0),
                    (1, write(2, None), ok(write(2, Some(1))), 10, 11),
                    (1, no_read.clone(), ok(read(Some(2), 1)), 12, 13),
                ],
                Validity::Valid,
            ),
            (
                "failed write is dropped",
                vec![
                    (0, write(1, None), Some((Fail, write(1, None))), 0, 1),
                    (1, no_read.clone(), ok(read(None, 0)), 2, 3),
                ],
                Validity::Valid,
            ),
            (
                "stale read",
                vec![
                    (0, write(1, None), ok(write(1, Some(1))), 0, 1),
                    (0, write(2, None), ok(write(2, Some(2))), 2, 3),
                    (1, no_read.clone(), ok(read(Some(1), 1)), 4, 5),
                ],
                Validity::Invalid,
            ),
            (
                "lost write",
                vec![(0, write(1, None), ok(write(1, Some(1))), 0, 1), (1, no_read.clone(), ok(read(None, 0)), 2, 3)],
                Validity::Invalid,
            ),
            (
                "duplicate apply shows as an impossible version",
                vec![
                    (0, write(1, None), ok(write(1, Some(1))), 0, 1),
                    (0, write(2, None), ok(write(2, Some(2))), 2, 3),
                    (1, no_read.clone(), ok(read(Some(1), 3)), 4, 5),
                ],
                Validity::Invalid,
            ),
            (
                "read of a failed write",
                vec![
                    (0, write(1, None), Some((Fail, write(1, None))), 0, 1),
                    (1, no_read.clone(), ok(read(Some(1), 1)), 2, 3),
                ],
                Validity::Invalid,
            ),
            (
                "cas reported failed although the compare held",
                vec![
                    (0, write(1, None), ok(write(1, Some(1))), 0, 1),
                    (0, cas(1, 2, None, None), ok(cas(1, 2, Some(false), None)), 2, 3),
                ],
                Validity::Invalid,
            ),
            (
                "indeterminate write seen and then unseen",
                vec![
                    (0, write(1, None), Some((Info, write(1, None))), 0, 5),
                    (1, no_read.clone(), ok(read(Some(1), 1)), 6, 7),
                    (1, no_read.clone(), ok(read(None, 0)), 8, 9),
                ],
                Validity::Invalid,
            ),
            ("malformed completion", vec![(0, write(1, None), ok(write(7, Some(1))), 0, 1)], Validity::Unknown),
        ];
        for (name, spec, want) in cases {
            let result = check(&history(&spec), BUDGET);
            assert_eq!(result.valid, want, "{name}: {result}");
        }
    }

    #[test]
    fn stale_read_report_names_the_read() {
        let spec = vec![
            (0, write(1, None), ok(write(1, Some(1))), 0, 1),
            (0, write(2, None), ok(write(2, Some(2))), 2, 3),
            (1, RegisterOp::Read(None), ok(read(Some(1), 1)), 4, 5),
        ];
        let result = check(&history(&spec), BUDGET);
        let text = &result.anomalies[0].description;
        assert!(text.contains("op 4 (process 1, read -> 1 v1 over [4, 5] ns)"), "{text}");
        assert!(text.contains("version: 2, value: Some(2)"), "{text}");
    }

    #[test]
    fn history_survives_jsonl() {
        let ops = vec![
            Op::invoke(0, write(1, None), 0).with_key("k"),
            Op::invoke(1, cas(1, 2, None, None), 1).with_key("k"),
            Op::new(0, OpType::Ok, write(1, Some(1)), 2).with_key("k").with_revision(2),
            Op::new(1, OpType::Info, cas(1, 2, None, None), 3).with_key("k").with_error("timeout"),
            Op::invoke(2, RegisterOp::Read(None), 4).with_key("k"),
            Op::new(2, OpType::Ok, read(Some(2), 2), 5).with_key("k").with_revision(3),
        ];
        let mut buf = Vec::new();
        write_jsonl(&mut buf, &ops).expect("write");
        let back: Vec<Op<RegisterOp>> = read_jsonl(&buf[..]).expect("read");
        assert_eq!(back, ops);
        let result = check(&pair(back).expect("pairs"), BUDGET);
        assert!(result.is_valid(), "{result}");
    }

    /// A generated run: each worker's ops take effect at a point inside their interval, applied to a
    /// real versioned register in that order. Some writes time out and took effect, or not.
    fn generated(seed: u64) -> (Vec<Op<RegisterOp>>, StdRng) {
        let mut rng = StdRng::seed_from_u64(seed);
        let keys = ["a", "b"];
        let workers: u64 = 4;
        /// One op; `at` is when it takes effect (if it `applies`).
        struct Planned {
            at: u64,
            process: u64,
            key: &'static str,
            invoke: RegisterOp,
            kind: OpType,
            applies: bool,
            start: u64,
            end: u64,
        }
        let mut plan = Vec::new();
        let mut next_process = workers;
        for worker in 0..workers {
            let mut process = worker;
            let mut t = 0;
            for _ in 0..25 {
                let start = t + rng.gen_range(1..20);
                let at = start + rng.gen_range(0..20);
                let end = at + rng.gen_range(0..20);
                t = end;
                let invoke = match rng.gen_range(0..10) {
                    0..=3 => RegisterOp::Read(None),
                    4..=6 => write(0, None), // value assigned in effect order
                    _ => cas(0, 0, None, None),
                };
                let indeterminate = rng.gen_bool(0.1);
                let kind = if indeterminate { OpType::Info } else { OpType::Ok };
                let applies = !indeterminate || rng.gen_bool(0.5);
                let scale = |x: u64| x * workers + worker;
                let key = keys[rng.gen_range(0..keys.len())];
                plan.push(Planned {
                    at: scale(at),
                    process,
                    key,
                    invoke,
                    kind,
                    applies,
                    start: scale(start),
                    end: scale(end),
                });
                if indeterminate {
                    process = next_process;
                    next_process += 1;
                }
            }
        }
        plan.sort_by_key(|p| p.at);
        let mut state: BTreeMap<&str, RegisterState> = BTreeMap::new();
        let mut next_value = 1;
        let mut ops = Vec::new();
        for p in &mut plan {
            let s = state.entry(p.key).or_insert(RegisterState { version: 0, value: None });
            let done = match &mut p.invoke {
                RegisterOp::Read(_) => read(s.value, s.version),
                RegisterOp::Write(w) => {
                    w.value = next_value;
                    next_value += 1;
                    if p.applies {
                        *s = RegisterState { version: s.version + 1, value: Some(w.value) };
                    }
                    write(w.value, Some(s.version))
                }
                RegisterOp::Cas(c) => {
                    c.expect = match s.value {
                        Some(v) if rng.gen_bool(0.7) => v,
                        _ => rng.gen_range(1..next_value.max(2)),
                    };
                    c.new = next_value;
                    next_value += 1;
                    let succeeded = s.value == Some(c.expect);
                    if succeeded && p.applies {
                        *s = RegisterState { version: s.version + 1, value: Some(c.new) };
                    }
                    cas(c.expect, c.new, Some(succeeded), succeeded.then_some(s.version))
                }
            };
            ops.push(Op::invoke(p.process, p.invoke.clone(), p.start).with_key(p.key));
            let completion = if p.kind == OpType::Ok { done } else { p.invoke.clone() };
            ops.push(Op::new(p.process, p.kind, completion, p.end).with_key(p.key));
        }
        ops.sort_by_key(|op| (op.time_ns, op.kind != OpType::Invoke));
        (ops, rng)
    }

    #[test]
    fn generated_histories_pass_and_one_corrupt_read_fails() {
        for seed in 0..30 {
            let (mut ops, mut rng) = generated(seed);
            let result = check(&pair(ops.clone()).expect("pairs"), BUDGET);
            assert!(result.is_valid(), "seed {seed}: {result}");

            let reads: Vec<usize> = (0..ops.len())
                .filter(|&i| ops[i].kind == OpType::Ok && matches!(ops[i].payload, RegisterOp::Read(_)))
                .collect();
            let victim = reads[rng.gen_range(0..reads.len())];
            let RegisterOp::Read(Some(seen)) = &mut ops[victim].payload else { unreachable!() };
            // Either a value nobody wrote, or the right value at a version it never had.
            if rng.gen_bool(0.5) {
                seen.value = Some(-1);
            } else {
                seen.version = seen.version.map(|v| v + 1);
            }
            let result = check(&pair(ops).expect("pairs"), BUDGET);
            assert_eq!(result.valid, Validity::Invalid, "seed {seed}: corrupting op {victim} went unnoticed");
            assert!(result.has(AnomalyKind::NotLinearizable), "seed {seed}: {result}");
        }
    }
}
