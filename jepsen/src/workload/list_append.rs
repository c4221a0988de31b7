//! The list-append workload (Elle's): transactions of one to four micro-ops, each appending a unique
//! value to a key's list or reading a whole list, checked for dependency cycles by
//! [`crate::checker::list_append`].
//!
//! A list is one key, `<KEY_PREFIX><n>`, holding its values comma-separated (`3,8,12`; an absent key
//! is the empty list). A few keys are active at a time; a key retires after
//! [`MAX_APPENDS_PER_KEY`] appends and a fresh one takes its place, so lists stay short and the
//! checker fast (Elle's `max-writes-per-key`).
//!
//! etcd has no append, so a transaction is a read-modify-write:
//! 1. **pre-read**: one `Txn` of `Range`s over the keys the transaction appends to (one snapshot),
//!    remembering each key's `mod_revision` (0 when absent);
//! 2. **commit**: one `Txn` whose compares require each appended key unchanged since the pre-read
//!    (`mod_revision` equal, or `create_revision == 0` when it was absent) and whose success branch
//!    first ranges every key the transaction reads, then puts the appended keys' new lists. The
//!    failure branch is empty, so a failed compare wrote nothing: the transaction is `fail`.
//!
//! The reads recorded for a committed transaction are the success branch's ranges: the state at the
//! commit point itself, where the puts also take effect, so the transaction is atomic at one revision
//! whatever happened between pre-read and commit to keys it only reads (hence no compares on those).
//! A read after the transaction's own append of that key ends with that append, as Elle expects. The
//! compares guarantee that the ranged state of an appended key equals its pre-read; a server that
//! breaks this overwrites a concurrent append, which the checker reports as lost or misordered.
//!
//! A transaction without appends is a single `Txn` of ranges. Client rules as in
//! [`super::register`]: anything that certainly wrote nothing (pre-read errors, read-only
//! transactions that err, a refused connection, a failed compare) is `fail`; a commit that errs or
//! times out is `info` and the worker continues under a fresh process id.
//!
//! After the final heal, [`Workload::finish`] reads every key ever used, through every member.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::request_op::Request;
use proto::etcdserverpb::response_op::Response;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;
use tracing::warn;

use crate::checker::list_append::{self, AppendOp, Mop};
use crate::checker::revision::{self, Access};
use crate::checker::CheckResult;
use crate::client::{header_revision, with_timeout};
use crate::history::OpPair;
use crate::recorder::Recorder;
use crate::workload::set::{unparsable_answers, UNPARSABLE};
use crate::workload::{self, FinishContext, OpError, WorkerContext, Workload};

/// Lists are keys `<KEY_PREFIX><n>`.
pub const KEY_PREFIX: &str = "jepsen/append/";

/// How many keys transactions pick from at a time.
const ACTIVE_KEYS: usize = 4;

/// Appends a key receives before it retires.
pub const MAX_APPENDS_PER_KEY: u32 = 32;

/// Micro-ops per transaction: 1 to this many.
const MAX_MOPS: usize = 4;

/// Keys per final read; etcd refuses txns of more than 128 ops by default.
const FINAL_READ_BATCH: usize = 32;

/// How often a final read is tried per member and batch.
const FINAL_READ_ATTEMPTS: usize = 5;

/// The pause between two attempts of a final read.
const FINAL_READ_PAUSE: Duration = Duration::from_millis(300);

pub struct ListAppendWorkload {
    seed: u64,
    keys: Mutex<KeyPool>,
    /// The next value to append; shared by every worker, so values are unique across keys too.
    next_value: AtomicI64,
}

/// The active keys and how many appends each has been given.
struct KeyPool {
    active: Vec<(u64, u32)>,
    next_key: u64,
}

impl ListAppendWorkload {
    pub fn new(seed: u64) -> ListAppendWorkload {
        let active = (0..ACTIVE_KEYS as u64).map(|k| (k, 0)).collect();
        ListAppendWorkload {
            seed,
            keys: Mutex::new(KeyPool { active, next_key: ACTIVE_KEYS as u64 }),
            next_value: AtomicI64::new(1),
        }
    }

    /// How the revision checker treats an `ok` completion: a transaction that appended created a
    /// revision; one that only read observed one.
    pub fn access(op: &AppendOp) -> Access {
        let AppendOp::Txn(mops) = op;
        if mops.iter().any(|m| matches!(m, Mop::Append { .. })) {
            Access::Write
        } else {
            Access::Read
        }
    }

    /// A transaction of 1 to [`MAX_MOPS`] micro-ops over the active keys, half appends, half reads.
    fn next_txn(&self, rng: &mut StdRng) -> Vec<Mop> {
        let mut pool = self.lock();
        (0..rng.gen_range(1..=MAX_MOPS))
            .map(|_| {
                let slot = rng.gen_range(0..pool.active.len());
                let key = key_name(pool.active[slot].0);
                if !rng.gen_bool(0.5) {
                    return Mop::Read { key, value: None };
                }
                pool.active[slot].1 += 1;
                if pool.active[slot].1 >= MAX_APPENDS_PER_KEY {
                    pool.active[slot] = (pool.next_key, 0);
                    pool.next_key += 1;
                }
                Mop::Append { key, value: self.next_value.fetch_add(1, Ordering::Relaxed) }
            })
            .collect()
    }

    /// Every key a transaction may have used.
    fn keys_used(&self) -> Vec<String> {
        (0..self.lock().next_key).map(key_name).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeyPool> {
        self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Workload for ListAppendWorkload {
    type Op = AppendOp;

    async fn run_worker(self: Arc<Self>, ctx: WorkerContext, recorder: Arc<Recorder<AppendOp>>) {
        let mut rng =
            StdRng::seed_from_u64(self.seed.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(ctx.index as u64));
        let mut process = recorder.fresh_process();
        let mut kv = pb::kv_client::KvClient::new(ctx.channel.clone());
        while ctx.pace(&mut rng).await {
            let mops = self.next_txn(&mut rng);
            perform(&mut kv, &recorder, &mut process, &ctx.member, mops, ctx.op_timeout).await;
        }
    }

    /// Reads every key ever used, in batches, through every member (each batch retried a few times).
    async fn finish(&self, ctx: &FinishContext, recorder: &Recorder<AppendOp>) -> crate::Result<()> {
        let keys = self.keys_used();
        for (member, channel) in &ctx.members {
            let mut kv = pb::kv_client::KvClient::new(channel.clone());
            for batch in keys.chunks(FINAL_READ_BATCH) {
                let mops: Vec<Mop> = batch.iter().map(|key| Mop::Read { key: key.clone(), value: None }).collect();
                let mut read = false;
                for _ in 0..FINAL_READ_ATTEMPTS {
                    let mut process = recorder.fresh_process();
                    if perform(&mut kv, recorder, &mut process, member, mops.clone(), ctx.op_timeout).await.is_some() {
                        read = true;
                        break;
                    }
                    tokio::time::sleep(FINAL_READ_PAUSE).await;
                }
                if !read {
                    warn!(member, first = batch.first().map(String::as_str), "a final list read did not succeed");
                }
            }
        }
        Ok(())
    }

    fn check(&self, pairs: &[OpPair<AppendOp>], _budget: Duration) -> Vec<CheckResult> {
        vec![
            list_append::check(pairs),
            revision::check(pairs, ListAppendWorkload::access),
            unparsable_answers("list-append-answers", pairs),
        ]
    }
}

/// Runs one transaction under `*process` by the client rules ([`workload::perform`]); the `ok`
/// transaction and revision. Which errors leave it certainly unwritten is for [`execute`] to say
/// (every error of a read-only transaction does), so no op counts as read-only here.
async fn perform(
    kv: &mut pb::kv_client::KvClient<Channel>,
    recorder: &Recorder<AppendOp>,
    process: &mut u64,
    member: &str,
    mops: Vec<Mop>,
    timeout: Duration,
) -> Option<(AppendOp, i64)> {
    let request = async { execute(kv, &mops, timeout).await.map(|(done, revision)| (AppendOp::Txn(done), revision)) };
    workload::perform(recorder, process, AppendOp::Txn(mops.clone()), false, |o| o.with_member(member), request).await
}

/// Sends a transaction; its completed micro-ops and the header revision of the request that decided it.
async fn execute(
    kv: &mut pb::kv_client::KvClient<Channel>,
    mops: &[Mop],
    timeout: Duration,
) -> Result<(Vec<Mop>, i64), OpError> {
    let appended = appended_keys(mops);
    let read = read_keys(mops);
    // Before the commit is sent nothing can have been written, whatever went wrong.
    let before_commit = |err: tonic::Status| OpError { definite: true, ..OpError::status(err) };
    let unparsable = |why: String, definite: bool| OpError { text: format!("{UNPARSABLE}{why}"), definite };

    if appended.is_empty() {
        let response = with_timeout(timeout, kv.txn(ranges_txn(&read))).await.map_err(before_commit)?;
        let committed = parse_ranges(&read, &response.responses).map_err(|why| unparsable(why, true))?;
        let lists = committed.into_iter().map(|(key, seen)| (key, seen.list)).collect();
        return Ok((complete(mops, &lists), header_revision(response.header.as_ref())));
    }

    let response = with_timeout(timeout, kv.txn(ranges_txn(&appended))).await.map_err(before_commit)?;
    let pre = parse_ranges(&appended, &response.responses).map_err(|why| unparsable(why, true))?;

    let commit = commit_request(mops, &read, &pre);
    let response = with_timeout(timeout, kv.txn(commit)).await.map_err(OpError::status)?;
    if !response.succeeded {
        return Err(OpError {
            text: "compare failed: an appended key changed since the pre-read".into(),
            definite: true,
        });
    }
    // It committed: whatever is wrong with the answer from here on, the outcome is unknown, not failed.
    let ranged = response.responses.get(..read.len()).unwrap_or(&response.responses);
    let committed = parse_ranges(&read, ranged).map_err(|why| unparsable(why, false))?;
    for (key, seen) in &committed {
        if let Some(before) = pre.get(key).filter(|before| before.mod_revision != seen.mod_revision) {
            warn!(
                key,
                pre_read = before.mod_revision,
                at_commit = seen.mod_revision,
                "a compare held although the key changed since the pre-read"
            );
        }
    }
    let lists = committed.into_iter().map(|(key, seen)| (key, seen.list)).collect();
    Ok((complete(mops, &lists), header_revision(response.header.as_ref())))
}

/// A key as one range saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    list: Vec<i64>,
    /// 0 when the key was absent.
    mod_revision: i64,
}

fn key_name(n: u64) -> String {
    format!("{KEY_PREFIX}{n}")
}

/// The distinct keys the transaction appends to, in first-use order.
fn appended_keys(mops: &[Mop]) -> Vec<String> {
    distinct(mops.iter().filter_map(|m| match m {
        Mop::Append { key, .. } => Some(key),
        Mop::Read { .. } => None,
    }))
}

/// The distinct keys the transaction reads, in first-use order.
fn read_keys(mops: &[Mop]) -> Vec<String> {
    distinct(mops.iter().filter_map(|m| match m {
        Mop::Read { key, .. } => Some(key),
        Mop::Append { .. } => None,
    }))
}

fn distinct<'a>(keys: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for key in keys {
        if !out.contains(key) {
            out.push(key.clone());
        }
    }
    out
}

fn range_op(key: &str) -> pb::RequestOp {
    let range = pb::RangeRequest { key: key.as_bytes().to_vec(), ..Default::default() };
    pb::RequestOp { request: Some(Request::RequestRange(range)) }
}

/// One snapshot of `keys`: a txn with no compares whose success branch ranges each key.
fn ranges_txn(keys: &[String]) -> pb::TxnRequest {
    pb::TxnRequest { compare: Vec::new(), success: keys.iter().map(|k| range_op(k)).collect(), failure: Vec::new() }
}

/// The commit of a transaction that appends: compares on every appended key against its pre-read,
/// then (success) ranges of the `read` keys followed by puts of the appended keys' new lists.
fn commit_request(mops: &[Mop], read: &[String], pre: &BTreeMap<String, Seen>) -> pb::TxnRequest {
    let mut lists: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for mop in mops {
        if let Mop::Append { key, value } = mop {
            let list = lists.entry(key).or_insert_with(|| {
                order.push(key);
                pre.get(key.as_str()).map(|s| s.list.clone()).unwrap_or_default()
            });
            list.push(*value);
        }
    }
    let compare = order
        .iter()
        .map(|key| {
            let mod_revision = pre.get(*key).map_or(0, |s| s.mod_revision);
            let (target, union) = if mod_revision == 0 {
                (pb::compare::CompareTarget::Create, pb::compare::TargetUnion::CreateRevision(0))
            } else {
                (pb::compare::CompareTarget::Mod, pb::compare::TargetUnion::ModRevision(mod_revision))
            };
            pb::Compare {
                result: pb::compare::CompareResult::Equal as i32,
                target: target as i32,
                key: key.as_bytes().to_vec(),
                range_end: Vec::new(),
                target_union: Some(union),
            }
        })
        .collect();
    let puts = order.iter().map(|key| {
        let put = pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: encode_list(lists.get(key).map_or(&[][..], Vec::as_slice)),
            ..Default::default()
        };
        pb::RequestOp { request: Some(Request::RequestPut(put)) }
    });
    let success = read.iter().map(|k| range_op(k)).chain(puts).collect();
    pb::TxnRequest { compare, success, failure: Vec::new() }
}

/// The keys' states from range responses, one per key in order; anything else is unparsable.
fn parse_ranges(keys: &[String], responses: &[pb::ResponseOp]) -> Result<BTreeMap<String, Seen>, String> {
    if responses.len() != keys.len() {
        return Err(format!("{} responses for {} ranges", responses.len(), keys.len()));
    }
    let mut seen = BTreeMap::new();
    for (key, response) in keys.iter().zip(responses) {
        let Some(Response::ResponseRange(range)) = &response.response else {
            return Err(format!("key {key}: expected a range response, got {:?}", response.response));
        };
        let state = match range.kvs.as_slice() {
            [] => Seen { list: Vec::new(), mod_revision: 0 },
            [kv] if kv.key == key.as_bytes() => Seen { list: decode_list(&kv.value)?, mod_revision: kv.mod_revision },
            kvs => return Err(format!("key {key}: the range returned {} other or extra keys", kvs.len())),
        };
        seen.insert(key.clone(), state);
    }
    Ok(seen)
}

/// The completed micro-ops: each read is the committed list of its key plus the transaction's own
/// appends to that key before it; appends are as invoked.
fn complete(mops: &[Mop], committed: &BTreeMap<String, Vec<i64>>) -> Vec<Mop> {
    let mut state = committed.clone();
    mops.iter()
        .map(|mop| match mop {
            Mop::Append { key, value } => {
                state.entry(key.clone()).or_default().push(*value);
                mop.clone()
            }
            Mop::Read { key, .. } => {
                Mop::Read { key: key.clone(), value: Some(state.get(key).cloned().unwrap_or_default()) }
            }
        })
        .collect()
}

/// `3,8,12`. The empty list is never stored (an absent key is empty).
fn encode_list(list: &[i64]) -> Vec<u8> {
    list.iter().map(i64::to_string).collect::<Vec<_>>().join(",").into_bytes()
}

/// The inverse of [`encode_list`], strictly: only what it writes parses (no spaces, signs, leading
/// zeros or empty items), so a corrupted value is reported rather than read as something else.
fn decode_list(bytes: &[u8]) -> Result<Vec<i64>, String> {
    let bad = || format!("value {:?} is not a comma-separated list of integers", String::from_utf8_lossy(bytes));
    let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
    let list = text.split(',').map(|item| item.parse::<i64>().map_err(|_| bad())).collect::<Result<Vec<_>, _>>()?;
    if encode_list(&list) != bytes {
        return Err(bad());
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proto::mvccpb::KeyValue;

    use super::*;
    use crate::history::{Op, OpType};

    fn append(key: &str, value: i64) -> Mop {
        Mop::Append { key: key.to_string(), value }
    }

    fn read(key: &str) -> Mop {
        Mop::Read { key: key.to_string(), value: None }
    }

    fn r(key: &str, list: &[i64]) -> Mop {
        Mop::Read { key: key.to_string(), value: Some(list.to_vec()) }
    }

    fn range_response(kvs: Vec<KeyValue>) -> pb::ResponseOp {
        pb::ResponseOp { response: Some(Response::ResponseRange(pb::RangeResponse { kvs, ..Default::default() })) }
    }

    fn kv(key: &str, value: &str, mod_revision: i64) -> KeyValue {
        KeyValue { key: key.into(), value: value.into(), mod_revision, ..Default::default() }
    }

    #[test]
    fn lists_round_trip_and_parse_strictly() {
        for list in [vec![1], vec![3, 8, 12], vec![-4, 0, i64::MAX]] {
            assert_eq!(decode_list(&encode_list(&list)), Ok(list));
        }
        assert_eq!(encode_list(&[3, 8, 12]), b"3,8,12".to_vec());
        for bad in ["", "1,", ",1", "1,,2", " 1", "1, 2", "+1", "01", "1;2", "x"] {
            assert!(decode_list(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(decode_list(&[0xff]).is_err());
    }

    #[test]
    fn transactions_use_few_keys_and_unique_values() {
        let workload = ListAppendWorkload::new(5);
        let mut rng = StdRng::seed_from_u64(5);
        let mut values = HashSet::new();
        let mut appends_per_key: BTreeMap<String, u32> = BTreeMap::new();
        for _ in 0..2000 {
            let mops = workload.next_txn(&mut rng);
            assert!((1..=MAX_MOPS).contains(&mops.len()));
            for mop in mops {
                if let Mop::Append { key, value } = mop {
                    assert!(values.insert(value), "value {value} appended twice");
                    *appends_per_key.entry(key).or_default() += 1;
                }
            }
        }
        assert!(values.len() > 1500, "about half the mops append: {}", values.len());
        assert!(appends_per_key.values().all(|&n| n <= MAX_APPENDS_PER_KEY), "{appends_per_key:?}");
        assert!(appends_per_key.len() > values.len() / MAX_APPENDS_PER_KEY as usize, "keys rotate");
        let used = workload.keys_used();
        assert!(appends_per_key.keys().all(|k| used.contains(k)), "final reads cover every key");
        assert_eq!(workload.lock().active.len(), ACTIVE_KEYS);
    }

    #[test]
    fn reads_see_the_committed_list_and_own_earlier_appends() {
        let mops = vec![read("x"), append("x", 5), read("x"), append("y", 6), append("x", 7), read("x"), read("z")];
        let committed: BTreeMap<String, Vec<i64>> = [("x".to_string(), vec![1, 2]), ("z".to_string(), vec![])].into();
        assert_eq!(
            complete(&mops, &committed),
            vec![
                r("x", &[1, 2]),
                append("x", 5),
                r("x", &[1, 2, 5]),
                append("y", 6),
                append("x", 7),
                r("x", &[1, 2, 5, 7]),
                r("z", &[])
            ]
        );
        // The history built this way is what the checker accepts as internally consistent.
        let ops = vec![
            Op::invoke(0, AppendOp::Txn(mops.clone()), 0),
            Op::new(0, OpType::Ok, AppendOp::Txn(complete(&mops, &committed)), 1),
            Op::invoke(0, AppendOp::Txn(vec![read("x"), read("y")]), 2),
            Op::new(0, OpType::Ok, AppendOp::Txn(vec![r("x", &[1, 2, 5, 7]), r("y", &[6])]), 3),
        ];
        let mut all = vec![
            Op::invoke(1, AppendOp::Txn(vec![append("x", 1), append("x", 2)]), 0),
            Op::new(1, OpType::Info, AppendOp::Txn(vec![append("x", 1), append("x", 2)]), 0),
        ];
        all.extend(ops);
        let result = list_append::check(&crate::history::pair(all).expect("well formed"));
        assert!(result.is_valid(), "{result}");
    }

    #[test]
    fn commit_compares_appended_keys_and_ranges_reads_before_puts() {
        let mops = vec![append("a", 3), read("b"), append("a", 4), append("c", 5), read("a")];
        let pre: BTreeMap<String, Seen> = [
            ("a".to_string(), Seen { list: vec![1], mod_revision: 9 }),
            ("c".to_string(), Seen { list: vec![], mod_revision: 0 }),
        ]
        .into();
        let read = read_keys(&mops);
        assert_eq!(read, vec!["b", "a"]);
        assert_eq!(appended_keys(&mops), vec!["a", "c"]);
        let txn = commit_request(&mops, &read, &pre);
        let compares: Vec<(&[u8], i32, Option<pb::compare::TargetUnion>)> =
            txn.compare.iter().map(|c| (c.key.as_slice(), c.target, c.target_union.clone())).collect();
        assert_eq!(
            compares,
            vec![
                (&b"a"[..], pb::compare::CompareTarget::Mod as i32, Some(pb::compare::TargetUnion::ModRevision(9))),
                (
                    &b"c"[..],
                    pb::compare::CompareTarget::Create as i32,
                    Some(pb::compare::TargetUnion::CreateRevision(0))
                ),
            ]
        );
        assert!(txn.failure.is_empty(), "a failed compare must write nothing");
        let success: Vec<(String, Option<String>)> = txn
            .success
            .iter()
            .map(|op| match &op.request {
                Some(Request::RequestRange(r)) => (String::from_utf8_lossy(&r.key).into_owned(), None),
                Some(Request::RequestPut(p)) => {
                    (String::from_utf8_lossy(&p.key).into_owned(), Some(String::from_utf8_lossy(&p.value).into_owned()))
                }
                other => panic!("unexpected op {other:?}"),
            })
            .collect();
        assert_eq!(
            success,
            vec![
                ("b".to_string(), None),
                ("a".to_string(), None),
                ("a".to_string(), Some("1,3,4".to_string())),
                ("c".to_string(), Some("5".to_string())),
            ]
        );
    }

    #[test]
    fn range_responses_parse_strictly() {
        let keys = vec!["a".to_string(), "b".to_string()];
        let good = [range_response(vec![kv("a", "1,2", 7)]), range_response(vec![])];
        let parsed = parse_ranges(&keys, &good).expect("parses");
        assert_eq!(parsed["a"], Seen { list: vec![1, 2], mod_revision: 7 });
        assert_eq!(parsed["b"], Seen { list: vec![], mod_revision: 0 });
        let cases: Vec<(&str, Vec<pb::ResponseOp>)> = vec![
            ("too few", vec![range_response(vec![])]),
            ("other key", vec![range_response(vec![kv("z", "1", 1)]), range_response(vec![])]),
            ("garbage", vec![range_response(vec![kv("a", "1,x", 1)]), range_response(vec![])]),
            ("two keys", vec![range_response(vec![kv("a", "1", 1), kv("a", "2", 2)]), range_response(vec![])]),
            ("not a range", vec![pb::ResponseOp { response: None }, range_response(vec![])]),
        ];
        for (name, responses) in cases {
            assert!(parse_ranges(&keys, &responses).is_err(), "{name}");
        }
    }

    #[test]
    fn access_follows_appends() {
        assert_eq!(ListAppendWorkload::access(&AppendOp::Txn(vec![r("x", &[])])), Access::Read);
        assert_eq!(ListAppendWorkload::access(&AppendOp::Txn(vec![r("x", &[]), append("x", 1)])), Access::Write);
    }
}
