//! The set workload: unique integers added to one set, which readers read whole (Jepsen's `set`).
//!
//! Every element is its own key, `<KEY_PREFIX><element>`, holding the element as its value. So:
//! - add: a `Txn` that puts the key only if its `create_revision` is 0 (the key is absent). Elements
//!   are unique, so the compare always holds unless the server applied something twice; a failed
//!   compare is recorded `fail` (this request wrote nothing), and a read that still shows the
//!   element is then reported as unexpected;
//! - read: a linearizable `Range` over the prefix; the set is the parsed keys. A key and its value
//!   must agree and be a canonical decimal, else the answer is garbage (see [`UNPARSABLE`]).
//!
//! After the final heal, [`Workload::finish`] reads the set once through every member, so that
//! every acknowledged add has reads after it and set-full can tell lost elements from unread ones.
//!
//! Client rules as in [`super::register`]: a read that errs is `fail`; an add whose connection was
//! refused (never sent) is `fail`; any other add error or a timeout is `info`, after which the worker
//! continues under a fresh process id.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proto::etcdserverpb as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;
use tracing::warn;

use crate::checker::revision::{self, Access};
use crate::checker::set_full::{self, SetOp};
use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::client::{header_revision, prefix_end, with_timeout};
use crate::history::OpPair;
use crate::recorder::Recorder;
use crate::workload::{self, FinishContext, OpError, WorkerContext, Workload};

/// Elements are keys `<KEY_PREFIX><element>`.
pub const KEY_PREFIX: &str = "jepsen/set/";

/// The error text of an answer the server gave but the workload could not make sense of (a key
/// outside the set's shape, a value that is not the key's element). Such answers are anomalies:
/// `unparsable_answers` reports them.
pub const UNPARSABLE: &str = "unparsable answer: ";

/// Percent of ops that read the whole set; the rest add.
const READ_PERCENT: u32 = 20;

/// How often a final read is tried per member before giving up on that member.
const FINAL_READ_ATTEMPTS: usize = 5;

/// The pause between two attempts of a final read.
const FINAL_READ_PAUSE: Duration = Duration::from_millis(300);

pub struct SetWorkload {
    seed: u64,
    /// The next element to add; shared by every worker, so no element is added twice.
    next_element: AtomicI64,
}

impl SetWorkload {
    pub fn new(seed: u64) -> SetWorkload {
        SetWorkload { seed, next_element: AtomicI64::new(1) }
    }

    /// How the revision checker treats an `ok` completion: a read observes a revision, an add
    /// (recorded `ok` only when its compare held and it put) creates one.
    pub fn access(op: &SetOp) -> Access {
        match op {
            SetOp::Add(_) => Access::Write,
            SetOp::Read(_) => Access::Read,
        }
    }

    /// The next op: a read, or an add of a fresh element.
    fn next_op(&self, rng: &mut StdRng) -> SetOp {
        if rng.gen_range(0..100) < READ_PERCENT {
            SetOp::Read(None)
        } else {
            SetOp::Add(self.next_element.fetch_add(1, Ordering::Relaxed))
        }
    }
}

impl Workload for SetWorkload {
    type Op = SetOp;

    async fn run_worker(self: Arc<Self>, ctx: WorkerContext, recorder: Arc<Recorder<SetOp>>) {
        let mut rng =
            StdRng::seed_from_u64(self.seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(ctx.index as u64));
        let mut process = recorder.fresh_process();
        let mut kv = pb::kv_client::KvClient::new(ctx.channel.clone());
        while ctx.pace(&mut rng).await {
            let op = self.next_op(&mut rng);
            perform(&mut kv, &recorder, &mut process, &ctx.member, op, ctx.op_timeout).await;
        }
    }

    /// One read through every member, retried a few times each (a `fail` read changes nothing).
    async fn finish(&self, ctx: &FinishContext, recorder: &Recorder<SetOp>) -> crate::Result<()> {
        for (member, channel) in &ctx.members {
            let mut kv = pb::kv_client::KvClient::new(channel.clone());
            let mut read = false;
            for _ in 0..FINAL_READ_ATTEMPTS {
                let mut process = recorder.fresh_process();
                if perform(&mut kv, recorder, &mut process, member, SetOp::Read(None), ctx.op_timeout).await.is_some() {
                    read = true;
                    break;
                }
                tokio::time::sleep(FINAL_READ_PAUSE).await;
            }
            if !read {
                warn!(member, attempts = FINAL_READ_ATTEMPTS, "no final set read succeeded");
            }
        }
        Ok(())
    }

    fn check(&self, pairs: &[OpPair<SetOp>], _budget: Duration) -> Vec<CheckResult> {
        vec![
            set_full::check(pairs, true),
            revision::check(pairs, SetWorkload::access),
            unparsable_answers("set-answers", pairs),
        ]
    }
}

/// Runs `op` under `*process` by the client rules ([`workload::perform`]); the `ok` payload and
/// revision.
async fn perform(
    kv: &mut pb::kv_client::KvClient<Channel>,
    recorder: &Recorder<SetOp>,
    process: &mut u64,
    member: &str,
    op: SetOp,
    timeout: Duration,
) -> Option<(SetOp, i64)> {
    let read_only = matches!(op, SetOp::Read(_));
    let request = execute(kv, &op, timeout);
    workload::perform(recorder, process, op.clone(), read_only, |o| o.with_member(member), request).await
}

/// Sends one request; the completion payload and its header revision.
async fn execute(
    kv: &mut pb::kv_client::KvClient<Channel>,
    op: &SetOp,
    timeout: Duration,
) -> Result<(SetOp, i64), OpError> {
    match op {
        SetOp::Add(element) => {
            let response = with_timeout(timeout, kv.txn(add_request(*element))).await.map_err(OpError::status)?;
            if !response.succeeded {
                // The failure branch is empty: this request wrote nothing, whatever put the key.
                return Err(OpError {
                    text: format!("compare failed: {} already exists", element_key(*element)),
                    definite: true,
                });
            }
            Ok((SetOp::Add(*element), header_revision(response.header.as_ref())))
        }
        SetOp::Read(_) => {
            let response = with_timeout(timeout, kv.range(read_request())).await.map_err(OpError::status)?;
            let elements = parse_set(&response.kvs).map_err(|why| OpError::answered(format!("{UNPARSABLE}{why}")))?;
            Ok((SetOp::Read(Some(elements)), header_revision(response.header.as_ref())))
        }
    }
}

fn element_key(element: i64) -> String {
    format!("{KEY_PREFIX}{element}")
}

/// Put the element's key only while it does not exist.
fn add_request(element: i64) -> pb::TxnRequest {
    let key = element_key(element).into_bytes();
    let absent = pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Create as i32,
        key: key.clone(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::CreateRevision(0)),
    };
    let put = pb::PutRequest { key, value: element.to_string().into_bytes(), ..Default::default() };
    pb::TxnRequest {
        compare: vec![absent],
        success: vec![pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put)) }],
        failure: Vec::new(),
    }
}

/// Every key under the prefix, linearizably.
fn read_request() -> pb::RangeRequest {
    pb::RangeRequest {
        key: KEY_PREFIX.as_bytes().to_vec(),
        range_end: prefix_end(KEY_PREFIX.as_bytes()),
        ..Default::default()
    }
}

/// The elements of a read, in the order the server returned them (duplicates kept: the checker
/// counts them). Every key must be `<KEY_PREFIX><n>` with value `n`, both canonical decimals.
fn parse_set(kvs: &[proto::mvccpb::KeyValue]) -> Result<Vec<i64>, String> {
    kvs.iter()
        .map(|kv| {
            let suffix = kv.key.strip_prefix(KEY_PREFIX.as_bytes());
            let element = suffix
                .and_then(parse_element)
                .ok_or_else(|| format!("key {:?} is not {KEY_PREFIX}<element>", String::from_utf8_lossy(&kv.key)))?;
            if parse_element(&kv.value) != Some(element) {
                return Err(format!(
                    "key {:?} holds {:?}, not its element",
                    String::from_utf8_lossy(&kv.key),
                    String::from_utf8_lossy(&kv.value)
                ));
            }
            Ok(element)
        })
        .collect()
}

/// A canonical decimal (as `i64::to_string` writes it), so that two spellings of one element
/// cannot hide a duplicate.
fn parse_element(bytes: &[u8]) -> Option<i64> {
    let element: i64 = std::str::from_utf8(bytes).ok()?.parse().ok()?;
    (element.to_string().as_bytes() == bytes).then_some(element)
}

/// Completions whose answer the workload could not parse: the server returned something nobody
/// wrote (or in a shape nobody asked for), which the history checker never sees as a value.
pub(crate) fn unparsable_answers<P>(checker: &str, pairs: &[OpPair<P>]) -> CheckResult {
    let anomalies = pairs
        .iter()
        .filter_map(|pair| {
            let error = pair.completion.as_ref()?.error.as_deref()?;
            let why = error.strip_prefix(UNPARSABLE)?;
            Some(Anomaly::new(AnomalyKind::Unexpected, format!("op {}: {why}", pair.index)))
        })
        .collect();
    CheckResult::from_anomalies(checker, anomalies)
}

#[cfg(test)]
mod tests {
    use proto::mvccpb::KeyValue;

    use super::*;
    use crate::history::{pair, Op, OpType};
    use crate::Validity;

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec(), ..Default::default() }
    }

    #[test]
    fn elements_are_unique_and_reads_are_a_fifth() {
        let workload = SetWorkload::new(3);
        let mut rng = StdRng::seed_from_u64(3);
        let ops: Vec<SetOp> = (0..1000).map(|_| workload.next_op(&mut rng)).collect();
        let mut added: Vec<i64> =
            ops.iter().filter_map(|op| if let SetOp::Add(e) = op { Some(*e) } else { None }).collect();
        let reads = ops.len() - added.len();
        assert!((100..300).contains(&reads), "{reads} reads");
        let count = added.len();
        added.sort_unstable();
        added.dedup();
        assert_eq!(added.len(), count, "an element was added twice");
    }

    #[test]
    fn sets_parse_strictly() {
        assert_eq!(parse_set(&[kv("jepsen/set/1", "1"), kv("jepsen/set/10", "10")]), Ok(vec![1, 10]));
        assert_eq!(parse_set(&[kv("jepsen/set/2", "2"), kv("jepsen/set/2", "2")]), Ok(vec![2, 2]), "duplicates kept");
        let bad = [
            kv("jepsen/set/1", "2"),
            kv("jepsen/set/01", "1"),
            kv("jepsen/set/x", "x"),
            kv("jepsen/other/1", "1"),
            kv("jepsen/set/1", ""),
            kv("jepsen/set/+1", "+1"),
        ];
        for kv in bad {
            assert!(parse_set(std::slice::from_ref(&kv)).is_err(), "{kv:?}");
        }
    }

    #[test]
    fn requests_have_etcd_shape() {
        assert_eq!(prefix_end(b"jepsen/set/"), b"jepsen/set0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
        let add = add_request(7);
        assert_eq!(add.compare[0].key, b"jepsen/set/7".to_vec());
        assert_eq!(add.compare[0].target_union, Some(pb::compare::TargetUnion::CreateRevision(0)));
        assert!(add.failure.is_empty(), "a failed compare must write nothing");
        match &add.success[0].request {
            Some(pb::request_op::Request::RequestPut(put)) => assert_eq!(put.value, b"7".to_vec()),
            other => panic!("expected a put, got {other:?}"),
        }
    }

    #[test]
    fn unparsable_answers_are_anomalies() {
        let ops = vec![
            Op::invoke(0, SetOp::Read(None), 0),
            Op::new(0, OpType::Fail, SetOp::Read(None), 1).with_error(format!("{UNPARSABLE}key \"x\" is bad")),
            Op::invoke(0, SetOp::Read(None), 2),
            Op::new(0, OpType::Fail, SetOp::Read(None), 3).with_error("Unavailable: timeout"),
        ];
        let result = unparsable_answers("answers", &pair(ops).expect("well formed"));
        assert_eq!(result.valid, Validity::Invalid);
        assert_eq!(result.anomalies.len(), 1);
        assert_eq!(result.anomalies[0].description, "op 0: key \"x\" is bad");
    }

    #[test]
    fn access_classifies_ops() {
        assert_eq!(SetWorkload::access(&SetOp::Add(1)), Access::Write);
        assert_eq!(SetWorkload::access(&SetOp::Read(Some(vec![1]))), Access::Read);
    }
}
