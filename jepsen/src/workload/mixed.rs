//! The mixed workload: etcd-like traffic on a few keys, judged against the replayed ground truth.
//!
//! Workers issue, on keys `<KEY_PREFIX>k0..k4` and with unique values:
//! - `Put` and single-key `DeleteRange`;
//! - `Txn`: compare one key's `mod_revision` or value with what some op last saw there, then put
//!   it and put or delete a second key; on failure, read both keys;
//! - `Range` of one key or of the whole prefix, linearizable or `serializable=true`.
//!
//! No leases. After the heal the ground truth is collected ([`super::truth`]) and
//! [`kv_model::check`] decides whether every `ok` op matches the state at its header revision and
//! whether every revision was made by an invoked write; [`revision::check`] decides whether the
//! linearizable ops respect real time (serializable reads may lag, so they are left out of it).
//!
//! Client rules as in [`super::register`]: a read that errs is `fail`, so is a write that was never
//! sent; any other failed write is `info`, after which the worker continues as a fresh process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use proto::etcdserverpb as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

use crate::checker::kv_model::{self, Compare, Delete, Expect, Kv, KvOp, Put, Range, Txn, TxnWrite};
use crate::checker::revision;
use crate::checker::CheckResult;
use crate::client::{header_revision, with_timeout};
use crate::history::{Op, OpPair};
use crate::recorder::Recorder;
use crate::workload::truth::{self, AckedRevision, Collected, TruthWatcher};
use crate::workload::{self, FinishContext, OpError, WorkerContext, Workload};

/// Keys are `<KEY_PREFIX>k<n>`.
pub const KEY_PREFIX: &str = "jepsen/mixed/";
/// How many keys the workers share: few, so that txns contend and reads see recent writes.
const KEYS: usize = 5;

pub struct MixedWorkload {
    seed: u64,
    next_value: AtomicI64,
    acked: Arc<AckedRevision>,
    /// What some op last saw on each key (value and mod_revision; `None` once deleted): what a
    /// txn compares against, so that some compares hold.
    seen: Mutex<HashMap<String, Option<(String, i64)>>>,
    background: Mutex<Background>,
    collected: Mutex<Option<Collected>>,
    /// Op counts for the notes, filled by `check`.
    counts: Mutex<Vec<String>>,
}

/// The background truth watcher's life: started by the first worker, handed over at the finish.
enum Background {
    NotStarted,
    Running(TruthWatcher),
    Done,
}

impl MixedWorkload {
    pub fn new(seed: u64) -> MixedWorkload {
        MixedWorkload {
            seed,
            next_value: AtomicI64::new(1),
            acked: Arc::new(AckedRevision::default()),
            seen: Mutex::new(HashMap::new()),
            background: Mutex::new(Background::NotStarted),
            collected: Mutex::new(None),
            counts: Mutex::new(Vec::new()),
        }
    }

    fn value(&self) -> String {
        self.next_value.fetch_add(1, Ordering::Relaxed).to_string()
    }

    /// The next op, with fresh values and compares against what was last seen.
    fn next_op(&self, rng: &mut StdRng) -> KvOp {
        let key = |rng: &mut StdRng| format!("{KEY_PREFIX}k{}", rng.gen_range(0..KEYS));
        let all = |serializable| {
            KvOp::Range(Range {
                key: KEY_PREFIX.to_string(),
                range_end: truth::prefix_end(KEY_PREFIX),
                serializable,
                kvs: None,
            })
        };
        let one = |key, serializable| KvOp::Range(Range { key, range_end: String::new(), serializable, kvs: None });
        match rng.gen_range(0..100) {
            0..=14 => KvOp::Put(Put { key: key(rng), value: self.value() }),
            15..=24 => KvOp::Delete(Delete { key: key(rng), deleted: None }),
            25..=44 => {
                let a = key(rng);
                let b = loop {
                    let b = key(rng);
                    if b != a {
                        break b;
                    }
                };
                self.txn(a, b, rng)
            }
            45..=64 => one(key(rng), false),
            65..=74 => all(false),
            75..=89 => one(key(rng), true),
            _ => all(true),
        }
    }

    fn txn(&self, a: String, b: String, rng: &mut StdRng) -> KvOp {
        let last = self.lock_seen().get(&a).cloned().flatten();
        let expect = match last {
            Some((value, _)) if rng.gen_bool(0.5) => Expect::Value(value),
            Some((_, mod_revision)) => Expect::ModRevision(mod_revision),
            None => Expect::ModRevision(0),
        };
        let second = if rng.gen_bool(0.5) {
            TxnWrite::Put(Put { key: b.clone(), value: self.value() })
        } else {
            TxnWrite::Delete(Delete { key: b.clone(), deleted: None })
        };
        KvOp::Txn(Txn {
            compare: vec![Compare { key: a.clone(), expect }],
            success: vec![TxnWrite::Put(Put { key: a.clone(), value: self.value() }), second],
            failure: vec![a, b],
            succeeded: None,
            reads: Vec::new(),
        })
    }

    /// Remembers what an `ok` op saw or wrote, for later compares.
    fn observe(&self, op: &KvOp, revision: i64) {
        let mut seen = self.lock_seen();
        match op {
            KvOp::Put(p) => {
                seen.insert(p.key.clone(), Some((p.value.clone(), revision)));
            }
            KvOp::Delete(d) => {
                seen.insert(d.key.clone(), None);
            }
            KvOp::Range(r) => {
                if r.range_end.is_empty() {
                    seen.insert(r.key.clone(), None);
                }
                for kv in r.kvs.iter().flatten() {
                    seen.insert(kv.key.clone(), Some((kv.value.clone(), kv.mod_revision)));
                }
            }
            KvOp::Txn(t) if t.succeeded == Some(true) => {
                for write in &t.success {
                    match write {
                        TxnWrite::Put(p) => seen.insert(p.key.clone(), Some((p.value.clone(), revision))),
                        TxnWrite::Delete(d) => seen.insert(d.key.clone(), None),
                    };
                }
            }
            KvOp::Txn(t) => {
                for (key, read) in t.failure.iter().zip(&t.reads) {
                    seen.insert(key.clone(), read.as_ref().map(|kv| (kv.value.clone(), kv.mod_revision)));
                }
            }
        }
    }

    fn start_background(&self, ctx: &WorkerContext) {
        let mut background = self.background.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*background, Background::NotStarted) {
            let members = ctx.members.clone();
            *background =
                Background::Running(TruthWatcher::spawn(members, KEY_PREFIX, Arc::clone(&self.acked), ctx.op_timeout));
        }
    }

    fn lock_seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<(String, i64)>>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Workload for MixedWorkload {
    type Op = KvOp;

    async fn run_worker(self: Arc<Self>, ctx: WorkerContext, recorder: Arc<Recorder<KvOp>>) {
        self.start_background(&ctx);
        let mut rng =
            StdRng::seed_from_u64(self.seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(ctx.index as u64));
        let mut worker = Worker::new(&ctx, &recorder, &self.acked);
        while ctx.pace(&mut rng).await {
            let op = self.next_op(&mut rng);
            if let Some((done, revision)) = worker.perform(op).await {
                self.observe(&done, revision);
            }
        }
    }

    async fn finish(&self, ctx: &FinishContext, _recorder: &Recorder<KvOp>) -> crate::Result<()> {
        let background = {
            let mut slot = self.background.lock().unwrap_or_else(PoisonError::into_inner);
            match std::mem::replace(&mut *slot, Background::Done) {
                Background::Running(watcher) => Some(watcher),
                _ => None,
            }
        };
        let collected = truth::collect(ctx, KEY_PREFIX, background).await;
        if let Some(t) = &collected.truth {
            truth::write(&ctx.dir, t)?;
        }
        *self.collected.lock().unwrap_or_else(PoisonError::into_inner) = Some(collected);
        Ok(())
    }

    fn check(&self, pairs: &[OpPair<KvOp>], _budget: Duration) -> Vec<CheckResult> {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner) = vec![describe_mix(pairs)];
        let collected = self.collected.lock().unwrap_or_else(PoisonError::into_inner);
        let mut results = Vec::new();
        match collected.as_ref() {
            Some(c) => {
                results.push(c.result.clone());
                results.push(match &c.truth {
                    Some(t) => kv_model::check(pairs, &t.events, t.until),
                    None => Collected::undecided("kv-model"),
                });
            }
            None => results.push(Collected::undecided("kv-model")),
        }
        results.push(revision::check(pairs, kv_model::access));
        results
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = self.counts.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(c) = self.collected.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            notes.extend(c.notes.iter().cloned());
        }
        notes
    }
}

/// How many ops of each kind completed `ok`, for the notes.
fn describe_mix(pairs: &[OpPair<KvOp>]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for done in pairs.iter().filter_map(OpPair::ok_payload) {
        let kind = match done {
            KvOp::Put(_) => "put",
            KvOp::Delete(_) => "delete",
            KvOp::Txn(t) if t.succeeded == Some(true) => "txn (success)",
            KvOp::Txn(_) => "txn (failure)",
            KvOp::Range(r) if r.serializable => "serializable range",
            KvOp::Range(_) => "linearizable range",
        };
        *counts.entry(kind).or_default() += 1;
    }
    let parts: Vec<String> = counts.into_iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    format!("ok ops: {}", parts.join(", "))
}

/// One worker's client: sends ops, records them, and follows the client rules. Shared with the
/// watch workload's writers.
pub(crate) struct Worker<'a> {
    recorder: &'a Recorder<KvOp>,
    acked: &'a AckedRevision,
    kv: pb::kv_client::KvClient<Channel>,
    member: String,
    timeout: Duration,
    process: u64,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(ctx: &WorkerContext, recorder: &'a Recorder<KvOp>, acked: &'a AckedRevision) -> Worker<'a> {
        Worker {
            recorder,
            acked,
            kv: pb::kv_client::KvClient::new(ctx.channel.clone()),
            member: ctx.member.clone(),
            timeout: ctx.op_timeout,
            process: recorder.fresh_process(),
        }
    }

    /// Runs `op` by the client rules ([`workload::perform`]); the completed op and its header
    /// revision when it is `ok`.
    pub(crate) async fn perform(&mut self, op: KvOp) -> Option<(KvOp, i64)> {
        let key = single_key(&op);
        let stamp = |o: Op<KvOp>| {
            let o = o.with_member(self.member.as_str());
            match &key {
                Some(k) => o.with_key(k.as_str()),
                None => o,
            }
        };
        let read_only = matches!(op, KvOp::Range(_));
        let request = execute(&mut self.kv, &op, self.timeout);
        let (done, revision) =
            workload::perform(self.recorder, &mut self.process, op.clone(), read_only, stamp, request).await?;
        if kv_model::access(&done) == revision::Access::Write {
            self.acked.observe(revision);
        }
        Some((done, revision))
    }
}

/// The key of a single-key op, for the history's `key` field.
fn single_key(op: &KvOp) -> Option<String> {
    match op {
        KvOp::Put(p) => Some(p.key.clone()),
        KvOp::Delete(d) => Some(d.key.clone()),
        KvOp::Range(r) if r.range_end.is_empty() => Some(r.key.clone()),
        KvOp::Range(_) | KvOp::Txn(_) => None,
    }
}

/// Sends one request; the completed op (with its results) and the header revision.
async fn execute(
    kv: &mut pb::kv_client::KvClient<Channel>,
    op: &KvOp,
    timeout: Duration,
) -> Result<(KvOp, i64), OpError> {
    match op {
        KvOp::Put(put) => {
            let response = with_timeout(timeout, kv.put(put_request(put))).await.map_err(OpError::status)?;
            Ok((op.clone(), header_revision(response.header.as_ref())))
        }
        KvOp::Delete(delete) => {
            let response =
                with_timeout(timeout, kv.delete_range(delete_request(delete))).await.map_err(OpError::status)?;
            let done = Delete { deleted: Some(response.deleted), ..delete.clone() };
            Ok((KvOp::Delete(done), header_revision(response.header.as_ref())))
        }
        KvOp::Range(range) => {
            let request = pb::RangeRequest {
                key: range.key.as_bytes().to_vec(),
                range_end: range.range_end.as_bytes().to_vec(),
                serializable: range.serializable,
                ..Default::default()
            };
            let response = with_timeout(timeout, kv.range(request)).await.map_err(OpError::status)?;
            let kvs: Vec<Kv> = response.kvs.iter().map(truth::kv_of).collect();
            let done = Range { kvs: Some(kvs), ..range.clone() };
            Ok((KvOp::Range(done), header_revision(response.header.as_ref())))
        }
        KvOp::Txn(txn) => {
            let response = with_timeout(timeout, kv.txn(txn_request(txn))).await.map_err(OpError::status)?;
            let done = txn_result(txn, &response).map_err(OpError::answered)?;
            Ok((KvOp::Txn(done), header_revision(response.header.as_ref())))
        }
    }
}

fn put_request(put: &Put) -> pb::PutRequest {
    pb::PutRequest { key: put.key.as_bytes().to_vec(), value: put.value.as_bytes().to_vec(), ..Default::default() }
}

fn delete_request(delete: &Delete) -> pb::DeleteRangeRequest {
    pb::DeleteRangeRequest { key: delete.key.as_bytes().to_vec(), ..Default::default() }
}

fn txn_request(txn: &Txn) -> pb::TxnRequest {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    use pb::request_op::Request;
    let compare = txn
        .compare
        .iter()
        .map(|c| {
            let (target, union) = match &c.expect {
                Expect::ModRevision(m) => (CompareTarget::Mod, TargetUnion::ModRevision(*m)),
                Expect::Value(v) => (CompareTarget::Value, TargetUnion::Value(v.as_bytes().to_vec())),
            };
            pb::Compare {
                result: CompareResult::Equal as i32,
                target: target as i32,
                key: c.key.as_bytes().to_vec(),
                range_end: Vec::new(),
                target_union: Some(union),
            }
        })
        .collect();
    let success = txn
        .success
        .iter()
        .map(|w| pb::RequestOp {
            request: Some(match w {
                TxnWrite::Put(p) => Request::RequestPut(put_request(p)),
                TxnWrite::Delete(d) => Request::RequestDeleteRange(delete_request(d)),
            }),
        })
        .collect();
    let failure = txn
        .failure
        .iter()
        .map(|k| pb::RequestOp {
            request: Some(Request::RequestRange(pb::RangeRequest { key: k.as_bytes().to_vec(), ..Default::default() })),
        })
        .collect();
    pb::TxnRequest { compare, success, failure }
}

/// The txn with its outcome: delete counts on success, reads on failure.
fn txn_result(txn: &Txn, response: &pb::TxnResponse) -> Result<Txn, &'static str> {
    use pb::response_op::Response;
    let answers: Vec<Option<&Response>> = response.responses.iter().map(|r| r.response.as_ref()).collect();
    let mut done = Txn { succeeded: Some(response.succeeded), ..txn.clone() };
    if response.succeeded {
        if answers.len() != done.success.len() {
            return Err("txn success: one response per request expected");
        }
        for (write, answer) in done.success.iter_mut().zip(answers) {
            match (write, answer) {
                (TxnWrite::Put(_), Some(Response::ResponsePut(_))) => {}
                (TxnWrite::Delete(d), Some(Response::ResponseDeleteRange(r))) => d.deleted = Some(r.deleted),
                _ => return Err("txn success: a response of the wrong kind"),
            }
        }
    } else {
        if answers.len() != done.failure.len() {
            return Err("txn failure: one response per request expected");
        }
        for answer in answers {
            match answer {
                Some(Response::ResponseRange(r)) => done.reads.push(r.kvs.first().map(truth::kv_of)),
                _ => return Err("txn failure: a response of the wrong kind"),
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(workload: &MixedWorkload, n: usize) -> Vec<KvOp> {
        let mut rng = StdRng::seed_from_u64(5);
        (0..n).map(|_| workload.next_op(&mut rng)).collect()
    }

    #[test]
    fn the_mix_has_every_kind_and_unique_values() {
        let workload = MixedWorkload::new(1);
        let ops = ops(&workload, 400);
        let mut values = std::collections::HashSet::new();
        let mut kinds = std::collections::HashSet::new();
        for op in &ops {
            let kind = match op {
                KvOp::Put(_) => "put",
                KvOp::Delete(_) => "delete",
                KvOp::Txn(_) => "txn",
                KvOp::Range(r) => match (r.serializable, r.range_end.is_empty()) {
                    (false, true) => "get",
                    (false, false) => "scan",
                    (true, true) => "serializable get",
                    (true, false) => "serializable scan",
                },
            };
            kinds.insert(kind);
            for put in op_puts(op) {
                assert!(put.key.starts_with(KEY_PREFIX), "{put:?}");
                assert!(values.insert(put.value.clone()), "value {} written twice", put.value);
            }
            if let KvOp::Txn(t) = op {
                assert_ne!(t.failure[0], t.failure[1], "a txn touches two distinct keys");
            }
        }
        assert_eq!(kinds.len(), 7, "{kinds:?}");
    }

    fn op_puts(op: &KvOp) -> Vec<Put> {
        match op {
            KvOp::Put(p) => vec![p.clone()],
            KvOp::Txn(t) => t
                .success
                .iter()
                .filter_map(|w| match w {
                    TxnWrite::Put(p) => Some(p.clone()),
                    TxnWrite::Delete(_) => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn txns_compare_against_what_was_seen() {
        let workload = MixedWorkload::new(1);
        let key = format!("{KEY_PREFIX}k0");
        workload.observe(&KvOp::Put(Put { key: key.clone(), value: "7".into() }), 12);
        let mut rng = StdRng::seed_from_u64(9);
        let expects: Vec<Expect> = (0..40)
            .map(|_| match workload.txn(key.clone(), format!("{KEY_PREFIX}k1"), &mut rng) {
                KvOp::Txn(t) => t.compare[0].expect.clone(),
                other => panic!("not a txn: {other:?}"),
            })
            .collect();
        assert!(expects.contains(&Expect::Value("7".into())), "{expects:?}");
        assert!(expects.contains(&Expect::ModRevision(12)), "{expects:?}");
        workload.observe(&KvOp::Delete(Delete { key: key.clone(), deleted: Some(1) }), 13);
        match workload.txn(key, format!("{KEY_PREFIX}k1"), &mut rng) {
            KvOp::Txn(t) => assert_eq!(t.compare[0].expect, Expect::ModRevision(0), "absent keys have mod 0"),
            other => panic!("not a txn: {other:?}"),
        }
    }

    #[test]
    fn txn_results_are_read_from_the_response() {
        use pb::response_op::Response;
        let workload = MixedWorkload::new(1);
        let txn = match workload.txn("a".into(), "b".into(), &mut StdRng::seed_from_u64(2)) {
            KvOp::Txn(t) => t,
            other => panic!("not a txn: {other:?}"),
        };
        let answer = |r| pb::ResponseOp { response: Some(r) };
        let failed = pb::TxnResponse {
            header: None,
            succeeded: false,
            responses: vec![
                answer(Response::ResponseRange(pb::RangeResponse {
                    kvs: vec![proto::mvccpb::KeyValue {
                        key: b"a".to_vec(),
                        value: b"3".to_vec(),
                        mod_revision: 4,
                        create_revision: 2,
                        version: 2,
                        lease: 0,
                    }],
                    ..Default::default()
                })),
                answer(Response::ResponseRange(pb::RangeResponse::default())),
            ],
        };
        let done = txn_result(&txn, &failed).expect("well formed");
        assert_eq!(done.succeeded, Some(false));
        assert_eq!(done.reads.len(), 2);
        assert_eq!(done.reads[0].as_ref().map(|kv| kv.mod_revision), Some(4));
        assert_eq!(done.reads[1], None);
        let short = pb::TxnResponse { succeeded: true, ..Default::default() };
        assert!(txn_result(&txn, &short).is_err());
    }
}
