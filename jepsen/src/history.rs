//! Histories: what every client asked and what it was told, in Jepsen's shape.
//!
//! One [`Op`] is one line of JSONL:
//!
//! ```json
//! {"process":3,"type":"invoke","f":"write","value":{"value":7},"time_ns":1200,"key":"k1"}
//! {"process":3,"type":"ok","f":"write","value":{"value":7,"version":2},"time_ns":1900,"key":"k1","revision":12}
//! ```
//!
//! `f` and `value` come from the workload's payload type `P` (an enum with `#[serde(tag = "f",
//! content = "value")]`), so each workload keeps typed values while the file stays Jepsen-shaped.
//!
//! The recording rules the checkers rely on:
//! - a process has at most one outstanding invocation, and its completion follows it;
//! - `ok`: it happened and `value` holds the result; `fail`: it certainly did not take effect;
//!   `info`: unknown (timeout, reset, unavailable), it may take effect at any later time or never;
//! - the client never retries a write by itself, and after an `info` the worker continues under a
//!   fresh process id (the old process is "crashed"), so per-process order stays meaningful;
//! - `time_ns` comes from one monotonic clock for the whole run.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Jepsen's op types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// One history entry: an invocation or a completion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op<P> {
    /// The logical client process; fresh after every `info`.
    pub process: u64,
    #[serde(rename = "type")]
    pub kind: OpType,
    /// The workload's `f` and `value`.
    #[serde(flatten)]
    pub payload: P,
    /// Monotonic time since the start of the run.
    pub time_ns: u64,
    /// The key a single-key op addresses; the linearizability checker partitions on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The response header's revision (completions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The member the client talked to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// The error text of a `fail` or `info` completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<P> Op<P> {
    pub fn new(process: u64, kind: OpType, payload: P, time_ns: u64) -> Self {
        Op { process, kind, payload, time_ns, key: None, revision: None, member: None, error: None }
    }

    pub fn invoke(process: u64, payload: P, time_ns: u64) -> Self {
        Self::new(process, OpType::Invoke, payload, time_ns)
    }

    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn with_revision(mut self, revision: i64) -> Self {
        self.revision = Some(revision);
        self
    }

    pub fn with_member(mut self, member: impl Into<String>) -> Self {
        self.member = Some(member.into());
        self
    }

    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }
}

/// Reads JSONL records (usually [`Op`]s); blank lines are skipped. Line numbers in errors start at 1.
pub fn read_jsonl<T: DeserializeOwned>(reader: impl BufRead) -> Result<Vec<T>> {
    let mut records = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(&line).map_err(|source| Error::Json { line: i + 1, source })?;
        records.push(record);
    }
    Ok(records)
}

/// Appends one record as a JSONL line. The runner calls this as ops happen, so a crash of the harness
/// still leaves a readable prefix.
pub fn write_record<T: Serialize>(writer: &mut impl Write, record: &T) -> Result<()> {
    serde_json::to_writer(&mut *writer, record).map_err(Error::Encode)?;
    writer.write_all(b"\n")?;
    Ok(())
}

/// Writes all records as JSONL.
pub fn write_jsonl<T: Serialize>(mut writer: impl Write, records: &[T]) -> Result<()> {
    for record in records {
        write_record(&mut writer, record)?;
    }
    writer.flush()?;
    Ok(())
}

/// An invocation and its completion. A missing completion (the run ended first) counts as `info`.
#[derive(Clone, Debug, PartialEq)]
pub struct OpPair<P> {
    /// The invocation's position in the history, which identifies the op in reports.
    pub index: usize,
    pub invoke: Op<P>,
    pub completion: Option<Op<P>>,
}

impl<P> OpPair<P> {
    pub fn process(&self) -> u64 {
        self.invoke.process
    }

    /// `Ok`, `Fail` or `Info` (never `Invoke`).
    pub fn outcome(&self) -> OpType {
        self.completion.as_ref().map_or(OpType::Info, |c| c.kind)
    }

    pub fn is_ok(&self) -> bool {
        self.outcome() == OpType::Ok
    }

    pub fn start_ns(&self) -> u64 {
        self.invoke.time_ns
    }

    /// The completion time of a determinate op; `None` for an indeterminate one, which may take
    /// effect at any time after its invocation.
    pub fn end_ns(&self) -> Option<u64> {
        match &self.completion {
            Some(c) if c.kind != OpType::Info => Some(c.time_ns),
            _ => None,
        }
    }

    /// The key from the invocation (or, failing that, the completion).
    pub fn key(&self) -> Option<&str> {
        self.invoke.key.as_deref().or_else(|| self.completion.as_ref().and_then(|c| c.key.as_deref()))
    }

    /// The completion's header revision.
    pub fn revision(&self) -> Option<i64> {
        self.completion.as_ref().and_then(|c| c.revision)
    }

    /// The payload of an `ok` completion.
    pub fn ok_payload(&self) -> Option<&P> {
        self.completion.as_ref().filter(|c| c.kind == OpType::Ok).map(|c| &c.payload)
    }
}

/// Pairs every invocation with its process's next completion, checking the recording rules. Pairs
/// come back in invocation order.
pub fn pair<P>(ops: impl IntoIterator<Item = Op<P>>) -> Result<Vec<OpPair<P>>> {
    let mut pairs: Vec<OpPair<P>> = Vec::new();
    // process -> position in `pairs` of its outstanding invocation
    let mut outstanding: HashMap<u64, usize> = HashMap::new();
    let mut crashed: HashMap<u64, usize> = HashMap::new();
    for (index, op) in ops.into_iter().enumerate() {
        let process = op.process;
        let malformed = |reason: String| Error::Malformed { index, process, reason };
        if op.kind == OpType::Invoke {
            if let Some(&pending) = outstanding.get(&process) {
                return Err(malformed(format!("invoked while op {} is outstanding", pairs[pending].index)));
            }
            if let Some(&info_at) = crashed.get(&process) {
                return Err(malformed(format!("process reused after its info at op {info_at}")));
            }
            outstanding.insert(process, pairs.len());
            pairs.push(OpPair { index, invoke: op, completion: None });
            continue;
        }
        let Some(pending) = outstanding.remove(&process) else {
            return Err(malformed("completion without an invocation".to_string()));
        };
        let entry = &mut pairs[pending];
        if op.time_ns < entry.invoke.time_ns {
            return Err(malformed(format!("completes before its invocation (op {})", entry.index)));
        }
        if op.kind == OpType::Info {
            crashed.insert(process, index);
        }
        entry.completion = Some(op);
    }
    Ok(pairs)
}

/// A register's payload, for the tests of code that takes any payload (pairing, JSONL, reports,
/// plots).
#[cfg(test)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub(crate) enum TestKv {
    Read(Option<i64>),
    Write(i64),
}

#[cfg(test)]
mod tests {
    use super::TestKv as Kv;
    use super::*;

    fn sample() -> Vec<Op<Kv>> {
        vec![
            Op::invoke(0, Kv::Write(1), 10).with_key("k"),
            Op::invoke(1, Kv::Read(None), 11).with_key("k"),
            Op::new(0, OpType::Ok, Kv::Write(1), 20).with_key("k").with_revision(2).with_member("n1"),
            Op::new(1, OpType::Info, Kv::Read(None), 30).with_key("k").with_error("deadline exceeded"),
            Op::invoke(2, Kv::Read(None), 40).with_key("k"),
        ]
    }

    #[test]
    fn jsonl_round_trip_keeps_jepsen_shape() {
        let ops = sample();
        let mut buf = Vec::new();
        write_jsonl(&mut buf, &ops).expect("write");
        let text = String::from_utf8(buf.clone()).expect("utf8");
        let first = text.lines().next().expect("a line");
        assert_eq!(first, r#"{"process":0,"type":"invoke","f":"write","value":1,"time_ns":10,"key":"k"}"#);
        let back: Vec<Op<Kv>> = read_jsonl(&buf[..]).expect("read");
        assert_eq!(back, ops);
    }

    #[test]
    fn bad_line_reports_its_number() {
        let text = "{\"process\":0,\"type\":\"invoke\",\"f\":\"read\",\"value\":null,\"time_ns\":1}\n\nnot json\n";
        match read_jsonl::<Op<Kv>>(text.as_bytes()) {
            Err(Error::Json { line, .. }) => assert_eq!(line, 3),
            other => panic!("expected a JSON error, got {other:?}"),
        }
    }

    #[test]
    fn pairs_invocations_with_completions() {
        let pairs = pair(sample()).expect("well formed");
        assert_eq!(pairs.len(), 3);
        assert_eq!((pairs[0].index, pairs[0].outcome(), pairs[0].end_ns()), (0, OpType::Ok, Some(20)));
        assert_eq!(pairs[0].revision(), Some(2));
        assert_eq!(pairs[0].ok_payload(), Some(&Kv::Write(1)));
        assert_eq!((pairs[1].outcome(), pairs[1].end_ns()), (OpType::Info, None));
        assert_eq!((pairs[2].outcome(), pairs[2].end_ns()), (OpType::Info, None), "never completed");
        assert_eq!(pairs[2].key(), Some("k"));
    }

    #[test]
    fn pairing_rejects_broken_histories() {
        let cases: Vec<(&str, Vec<Op<Kv>>)> = vec![
            ("completion without invocation", vec![Op::new(0, OpType::Ok, Kv::Write(1), 1)]),
            ("two outstanding", vec![Op::invoke(0, Kv::Write(1), 1), Op::invoke(0, Kv::Write(2), 2)]),
            (
                "reuse after info",
                vec![
                    Op::invoke(0, Kv::Write(1), 1),
                    Op::new(0, OpType::Info, Kv::Write(1), 2),
                    Op::invoke(0, Kv::Write(2), 3),
                ],
            ),
            ("time goes back", vec![Op::invoke(0, Kv::Write(1), 5), Op::new(0, OpType::Ok, Kv::Write(1), 4)]),
        ];
        for (name, ops) in cases {
            assert!(matches!(pair(ops), Err(Error::Malformed { .. })), "{name}");
        }
    }
}
