//! The register workload: read, write and compare-and-set on one key at a time, with unique values.
//!
//! All workers share the current key; after `ops_per_key` invocations they move to a fresh one, so
//! that each key's history stays small enough for the linearizability search (Jepsen's
//! `independent` keys). Requests:
//! - read: `Range` of the key (linearizable, or `serializable=true` with `--serializable-reads`);
//!   the value and the key's `version` go into the history;
//! - write: `Put` with `prev_kv`; the key's new version is `prev_kv.version + 1` (1 when absent);
//! - cas: `Txn` comparing the value, then a `Put` with `prev_kv` on success.
//!
//! A read that errs certainly changed nothing: it is recorded `fail` (the checker drops it). So is a
//! write whose connection was refused (it was never sent). Any other error or a timeout leaves a
//! write or CAS indeterminate: it is recorded `info`, and the worker moves on under a fresh process id.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::etcdserverpb as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

use crate::checker::register::{self, RegisterCas, RegisterOp, RegisterWrite, Versioned};
use crate::checker::revision::{self, Access};
use crate::checker::CheckResult;
use crate::client::{header_revision, with_timeout};
use crate::history::{Op, OpPair};
use crate::recorder::Recorder;
use crate::workload::{perform, OpError, WorkerContext, Workload};

/// Keys are `<KEY_PREFIX><n>`.
pub const KEY_PREFIX: &str = "jepsen/register/";

/// Percent of ops that are reads; of the rest, half are writes and half CAS.
const READ_PERCENT: u32 = 50;

pub struct RegisterWorkload {
    serializable_reads: bool,
    ops_per_key: u64,
    seed: u64,
    cursor: Mutex<Cursor>,
}

/// The shared key rotation and value counter.
struct Cursor {
    key: u64,
    ops_on_key: u64,
    next_value: i64,
    /// The latest value some op saw on the current key: what a CAS expects.
    last_value: Option<i64>,
}

impl RegisterWorkload {
    pub fn new(serializable_reads: bool, ops_per_key: u64, seed: u64) -> RegisterWorkload {
        RegisterWorkload {
            serializable_reads,
            ops_per_key: ops_per_key.max(1),
            seed,
            cursor: Mutex::new(Cursor { key: 0, ops_on_key: 0, next_value: 1, last_value: None }),
        }
    }

    /// How the revision checker treats an `ok` completion: serializable reads may lag by design.
    pub fn access(&self, op: &RegisterOp) -> Access {
        match op {
            RegisterOp::Read(_) if self.serializable_reads => Access::Ignore,
            RegisterOp::Read(_) => Access::Read,
            RegisterOp::Write(_) => Access::Write,
            RegisterOp::Cas(cas) if cas.succeeded == Some(true) => Access::Write,
            RegisterOp::Cas(_) => Access::Read,
        }
    }

    /// The next op and its key; moves to a fresh key every `ops_per_key` ops.
    fn next_op(&self, rng: &mut StdRng) -> (String, RegisterOp) {
        let mut cursor = self.lock();
        cursor.ops_on_key += 1;
        if cursor.ops_on_key > self.ops_per_key {
            cursor.key += 1;
            cursor.ops_on_key = 1;
            cursor.last_value = None;
        }
        let key = format!("{KEY_PREFIX}{}", cursor.key);
        let roll = rng.gen_range(0..100);
        if roll < READ_PERCENT {
            return (key, RegisterOp::Read(None));
        }
        let value = cursor.next_value;
        cursor.next_value += 1;
        let op = match cursor.last_value {
            Some(expect) if roll >= READ_PERCENT + (100 - READ_PERCENT) / 2 => {
                RegisterOp::Cas(RegisterCas { expect, new: value, succeeded: None, version: None })
            }
            _ => RegisterOp::Write(RegisterWrite { value, version: None }),
        };
        (key, op)
    }

    /// Remembers what an `ok` op saw, so that later CAS ops expect a plausible value.
    fn observe(&self, key: &str, payload: &RegisterOp) {
        let seen = match payload {
            RegisterOp::Read(Some(v)) => v.value,
            RegisterOp::Write(w) => Some(w.value),
            RegisterOp::Cas(c) if c.succeeded == Some(true) => Some(c.new),
            _ => None,
        };
        let mut cursor = self.lock();
        if seen.is_some() && key == format!("{KEY_PREFIX}{}", cursor.key) {
            cursor.last_value = seen;
        }
    }

    /// Sends one request; the completion payload and its header revision, or the error text.
    async fn execute(
        &self,
        kv: &mut pb::kv_client::KvClient<Channel>,
        key: &str,
        op: &RegisterOp,
        ctx: &WorkerContext,
    ) -> Result<(RegisterOp, i64), OpError> {
        let key_bytes = key.as_bytes().to_vec();
        let timeout = ctx.op_timeout;
        match op {
            RegisterOp::Read(_) => {
                let request =
                    pb::RangeRequest { key: key_bytes, serializable: self.serializable_reads, ..Default::default() };
                let response = with_timeout(timeout, kv.range(request)).await.map_err(OpError::status)?;
                let read = match response.kvs.first() {
                    Some(found) => {
                        let value = parse_value(&found.value).map_err(OpError::answered)?;
                        Versioned { value: Some(value), version: Some(found.version) }
                    }
                    None => Versioned { value: None, version: Some(0) },
                };
                Ok((RegisterOp::Read(Some(read)), header_revision(response.header.as_ref())))
            }
            RegisterOp::Write(write) => {
                let request = put(key_bytes, write.value);
                let response = with_timeout(timeout, kv.put(request)).await.map_err(OpError::status)?;
                let version = new_version(response.prev_kv.as_ref());
                let done = RegisterWrite { value: write.value, version: Some(version) };
                Ok((RegisterOp::Write(done), header_revision(response.header.as_ref())))
            }
            RegisterOp::Cas(cas) => {
                let compare = pb::Compare {
                    result: pb::compare::CompareResult::Equal as i32,
                    target: pb::compare::CompareTarget::Value as i32,
                    key: key_bytes.clone(),
                    range_end: Vec::new(),
                    target_union: Some(pb::compare::TargetUnion::Value(cas.expect.to_string().into_bytes())),
                };
                let success =
                    pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put(key_bytes, cas.new))) };
                let request = pb::TxnRequest { compare: vec![compare], success: vec![success], failure: Vec::new() };
                let response = with_timeout(timeout, kv.txn(request)).await.map_err(OpError::status)?;
                let version = if response.succeeded {
                    let prev_kv = match response.responses.first().and_then(|r| r.response.as_ref()) {
                        Some(pb::response_op::Response::ResponsePut(put)) => put.prev_kv.as_ref(),
                        _ => return Err(OpError::answered("txn succeeded without a put response".to_string())),
                    };
                    Some(new_version(prev_kv))
                } else {
                    None
                };
                let done = RegisterCas { succeeded: Some(response.succeeded), version, ..*cas };
                Ok((RegisterOp::Cas(done), header_revision(response.header.as_ref())))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cursor> {
        self.cursor.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Workload for RegisterWorkload {
    type Op = RegisterOp;

    async fn run_worker(self: Arc<Self>, ctx: WorkerContext, recorder: Arc<Recorder<RegisterOp>>) {
        let mut rng =
            StdRng::seed_from_u64(self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(ctx.index as u64));
        let mut process = recorder.fresh_process();
        let mut kv = pb::kv_client::KvClient::new(ctx.channel.clone());
        while ctx.pace(&mut rng).await {
            let (key, op) = self.next_op(&mut rng);
            let read_only = matches!(op, RegisterOp::Read(_));
            let stamp = |o: Op<RegisterOp>| o.with_key(&key).with_member(&ctx.member);
            let request = self.execute(&mut kv, &key, &op, &ctx);
            if let Some((payload, _)) = perform(&recorder, &mut process, op.clone(), read_only, stamp, request).await {
                self.observe(&key, &payload);
            }
        }
    }

    fn check(&self, pairs: &[OpPair<RegisterOp>], budget: Duration) -> Vec<CheckResult> {
        vec![register::check(pairs, budget), revision::check(pairs, |op| self.access(op))]
    }

    fn notes(&self) -> Vec<String> {
        if self.serializable_reads {
            vec!["reads were serializable: a partition is expected to make the register check invalid".to_string()]
        } else {
            Vec::new()
        }
    }
}

fn put(key: Vec<u8>, value: i64) -> pb::PutRequest {
    pb::PutRequest { key, value: value.to_string().into_bytes(), prev_kv: true, ..Default::default() }
}

/// The key's version after a put that replaced `prev_kv` (no deletes in this workload).
fn new_version(prev_kv: Option<&proto::mvccpb::KeyValue>) -> i64 {
    prev_kv.map_or(1, |kv| kv.version + 1)
}

/// A stored value: the decimal a writer put. Anything else is reported rather than guessed at.
fn parse_value(bytes: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("unexpected value {:?}", String::from_utf8_lossy(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_rotate_and_values_are_unique() {
        let workload = RegisterWorkload::new(false, 4, 7);
        let mut rng = StdRng::seed_from_u64(7);
        let mut values = std::collections::HashSet::new();
        let mut keys = Vec::new();
        for _ in 0..12 {
            let (key, op) = workload.next_op(&mut rng);
            keys.push(key);
            let value = match op {
                RegisterOp::Write(w) => Some(w.value),
                RegisterOp::Cas(c) => Some(c.new),
                RegisterOp::Read(_) => None,
            };
            if let Some(v) = value {
                assert!(values.insert(v), "value {v} written twice");
            }
        }
        assert_eq!(keys[0], "jepsen/register/0");
        assert_eq!(keys[3], "jepsen/register/0");
        assert_eq!(keys[4], "jepsen/register/1");
        assert_eq!(keys[11], "jepsen/register/2");
    }

    #[test]
    fn cas_expects_the_last_value_seen_on_the_key() {
        let workload = RegisterWorkload::new(false, 1000, 1);
        let mut rng = StdRng::seed_from_u64(3);
        workload.observe("jepsen/register/0", &RegisterOp::Write(RegisterWrite { value: 42, version: Some(1) }));
        workload.observe("jepsen/register/9", &RegisterOp::Write(RegisterWrite { value: 7, version: Some(1) }));
        let cas: Vec<RegisterCas> = (0..50)
            .filter_map(|_| match workload.next_op(&mut rng).1 {
                RegisterOp::Cas(c) => Some(c),
                _ => None,
            })
            .collect();
        assert!(!cas.is_empty());
        assert!(cas.iter().all(|c| c.expect == 42), "{cas:?}");
    }

    #[test]
    fn values_parse_strictly() {
        assert_eq!(parse_value(b"17"), Ok(17));
        assert!(parse_value(b"x").is_err());
        assert!(parse_value(&[0xff]).is_err());
    }

    #[test]
    fn serializable_reads_are_not_revision_checked() {
        let read = RegisterOp::Read(Some(Versioned { value: None, version: Some(0) }));
        assert_eq!(RegisterWorkload::new(true, 1, 1).access(&read), Access::Ignore);
        assert_eq!(RegisterWorkload::new(false, 1, 1).access(&read), Access::Read);
    }
}
