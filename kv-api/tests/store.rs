//! Behaviour of the MVCC store, table by table, against etcd 3.4's semantics (checked on a real etcd where
//! the documentation is silent: nested txn headers, the sort quirk, the order of txn checks).
//!
//! Case tables are exempt from rustfmt so that each case stays one row.

use std::sync::Arc;

use kv_api::revision::Revision;
use kv_api::{Bucket, Command, CommandResponse, Error, MemBackend, MvccStore};
use proto::etcdserverpb as pb;
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use proto::etcdserverpb::request_op::Request;
use proto::etcdserverpb::response_op::Response;
use proto::mvccpb::KeyValue;

/// The leases the tests put keys with.
const LEASES: [i64; 4] = [5, 7, 9, 42];

fn open() -> (Arc<MemBackend>, MvccStore) {
    let backend = Arc::new(MemBackend::default());
    let mut store = MvccStore::open(backend.clone()).expect("open an empty store");
    for id in LEASES {
        let grant = pb::LeaseGrantRequest { ttl: 60, id };
        store.apply(&Command::LeaseGrant(grant)).expect("grant a lease");
    }
    store.commit().expect("commit");
    (backend, store)
}

/// `value` changed by `f`; keeps requests with options on one line.
fn with<T>(mut value: T, f: impl FnOnce(&mut T)) -> T {
    f(&mut value);
    value
}

fn kv(key: &str, value: &str, create_revision: i64, mod_revision: i64, version: i64) -> KeyValue {
    KeyValue { key: key.into(), value: value.into(), create_revision, mod_revision, version, lease: 0 }
}

fn leased(kv: KeyValue, lease: i64) -> KeyValue {
    with(kv, |kv| kv.lease = lease)
}

fn put_req(key: &str, value: &str) -> pb::PutRequest {
    pb::PutRequest { key: key.into(), value: value.into(), ..Default::default() }
}

fn del_req(key: &str, range_end: &str) -> pb::DeleteRangeRequest {
    pb::DeleteRangeRequest { key: key.into(), range_end: range_end.into(), ..Default::default() }
}

fn range_req(key: &str, range_end: &str) -> pb::RangeRequest {
    pb::RangeRequest { key: key.into(), range_end: range_end.into(), ..Default::default() }
}

fn all_keys() -> pb::RangeRequest {
    range_req("\0", "\0")
}

fn range_at(revision: i64) -> pb::RangeRequest {
    with(all_keys(), |r| r.revision = revision)
}

fn txn_req(compare: Vec<pb::Compare>, success: Vec<pb::RequestOp>, failure: Vec<pb::RequestOp>) -> pb::TxnRequest {
    pb::TxnRequest { compare, success, failure }
}

fn op(request: Request) -> pb::RequestOp {
    pb::RequestOp { request: Some(request) }
}

fn op_put(key: &str, value: &str) -> pb::RequestOp {
    op(Request::RequestPut(put_req(key, value)))
}

fn op_del(key: &str, range_end: &str) -> pb::RequestOp {
    op(Request::RequestDeleteRange(del_req(key, range_end)))
}

fn op_range(req: pb::RangeRequest) -> pb::RequestOp {
    op(Request::RequestRange(req))
}

fn op_txn(req: pb::TxnRequest) -> pb::RequestOp {
    op(Request::RequestTxn(req))
}

fn cmp(key: &str, target: CompareTarget, result: CompareResult, operand: Option<TargetUnion>) -> pb::Compare {
    pb::Compare {
        key: key.into(),
        target: target as i32,
        result: result as i32,
        target_union: operand,
        ..Default::default()
    }
}

fn header(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { revision, ..Default::default() })
}

fn put(store: &mut MvccStore, req: pb::PutRequest) -> pb::PutResponse {
    match store.apply(&Command::Put(req.clone())) {
        Ok(CommandResponse::Put(resp)) => resp,
        other => panic!("put {req:?}: {other:?}"),
    }
}

fn delete(store: &mut MvccStore, req: pb::DeleteRangeRequest) -> pb::DeleteRangeResponse {
    match store.apply(&Command::DeleteRange(req.clone())) {
        Ok(CommandResponse::DeleteRange(resp)) => resp,
        other => panic!("delete {req:?}: {other:?}"),
    }
}

fn txn(store: &mut MvccStore, req: pb::TxnRequest) -> pb::TxnResponse {
    match store.apply(&Command::Txn(req.clone())) {
        Ok(CommandResponse::Txn(resp)) => resp,
        other => panic!("txn {req:?}: {other:?}"),
    }
}

fn compact(store: &mut MvccStore, revision: i64) -> Result<CommandResponse, Error> {
    let physical = false;
    store.apply(&Command::Compact(pb::CompactionRequest { revision, physical }))
}

fn range(store: &MvccStore, req: pb::RangeRequest) -> pb::RangeResponse {
    store.range(&req).unwrap_or_else(|e| panic!("range {req:?}: {e}"))
}

fn get(store: &MvccStore, key: &str, revision: i64) -> Option<KeyValue> {
    range(store, with(range_req(key, ""), |r| r.revision = revision)).kvs.pop()
}

fn keys(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter().map(|kv| String::from_utf8_lossy(&kv.key).into_owned()).collect()
}

fn header_revision(resp: &CommandResponse) -> i64 {
    let header = match resp {
        CommandResponse::Put(r) => r.header,
        CommandResponse::DeleteRange(r) => r.header,
        CommandResponse::Txn(r) => r.header,
        CommandResponse::Compact(r) => r.header,
        CommandResponse::LeaseGrant(r) => r.header,
        CommandResponse::LeaseRevoke(r) => r.header,
    };
    header.expect("apply fills the header").revision
}

/// Main revisions of the entries in the key bucket, oldest first.
fn stored_revisions(store: &MvccStore) -> Vec<i64> {
    let entries = store.export().expect("export").into_iter();
    let keys = entries.filter(|(bucket, _, _)| *bucket == Bucket::Key).map(|(_, key, _)| key);
    keys.map(|key| Revision::from_bytes(&key).expect("a revision key").main).collect()
}

/// Builds the store most range tests read:
///
/// ```text
/// rev  2: put a=1        rev 7: delete b
/// rev  3: put b=3        rev 8: put b=9
/// rev  4: put c=2, d=5   rev 9: put c=7
/// rev  5: put a=4        rev 10: put ab=6
/// rev  6: put e=0 (lease 7)
///
/// at 10: a=4 (c2 m5 v2)  ab=6 (c10 m10 v1)  b=9 (c8 m8 v1)
///        c=7 (c4 m9 v2)  d=5 (c4 m4 v1)     e=0 (c6 m6 v1, lease 7)
/// ```
fn fixture() -> (Arc<MemBackend>, MvccStore) {
    let (backend, mut store) = open();
    put(&mut store, put_req("a", "1"));
    put(&mut store, put_req("b", "3"));
    txn(&mut store, txn_req(vec![], vec![op_put("c", "2"), op_put("d", "5")], vec![]));
    put(&mut store, put_req("a", "4"));
    put(&mut store, with(put_req("e", "0"), |r| r.lease = 7));
    delete(&mut store, del_req("b", ""));
    put(&mut store, put_req("b", "9"));
    put(&mut store, put_req("c", "7"));
    put(&mut store, put_req("ab", "6"));
    assert_eq!(store.current_revision(), 10);
    (backend, store)
}

#[test]
fn revisions_follow_etcd() {
    use CompareResult::Equal;
    use CompareTarget::Version;
    let (_, mut store) = open();
    assert_eq!(store.current_revision(), 1, "an empty store is at revision 1");
    let never = || vec![cmp("a", Version, Equal, Some(TargetUnion::Version(99)))];
    let puts = vec![op_put("b", ""), op_put("c", ""), op_put("d", "")];
    // (what, command, header revision of the answer = current revision after it)
    #[rustfmt::skip]
    let cases: Vec<(&str, Command, i64)> = vec![
        ("first put",                    Command::Put(put_req("a", "1")), 2),
        ("second put",                   Command::Put(put_req("a", "2")), 3),
        ("delete of a missing key",      Command::DeleteRange(del_req("zz", "")), 3),
        ("delete of an empty range",     Command::DeleteRange(del_req("x", "y")), 3),
        ("txn with three puts",          Command::Txn(txn_req(vec![], puts, vec![])), 4),
        ("read-only txn",                Command::Txn(txn_req(vec![], vec![op_range(range_req("a", ""))], vec![])), 4),
        ("txn, empty failure branch",    Command::Txn(txn_req(never(), vec![op_put("a", "x")], vec![])), 4),
        ("txn deleting no key",          Command::Txn(txn_req(vec![], vec![op_del("zz", ""), op_del("x", "\0")], vec![])), 4),
        ("delete of an existing key",    Command::DeleteRange(del_req("a", "")), 5),
        ("delete of two keys",           Command::DeleteRange(del_req("b", "d")), 6),
        ("compaction",                   Command::Compact(pb::CompactionRequest { revision: 3, physical: false }), 6),
        ("put after a compaction",       Command::Put(put_req("a", "3")), 7),
    ];
    for (what, cmd, want) in cases {
        let resp = store.apply(&cmd).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(header_revision(&resp), want, "{what}: header revision");
        assert_eq!(store.current_revision(), want, "{what}: current revision");
    }
}

#[test]
fn txn_puts_share_one_revision() {
    let (_, mut store) = open();
    put(&mut store, put_req("a", "old"));
    let puts = vec![op_put("a", "new"), op_put("b", "1"), op_put("c", "2")];
    let resp = txn(&mut store, txn_req(vec![], puts, vec![]));
    assert_eq!(resp.header, header(3));
    for response in &resp.responses {
        match &response.response {
            Some(Response::ResponsePut(put)) => assert_eq!(put.header, header(3)),
            other => panic!("expected a put response, got {other:?}"),
        }
    }
    let want = vec![kv("a", "new", 2, 3, 2), kv("b", "1", 3, 3, 1), kv("c", "2", 3, 3, 1)];
    assert_eq!(range(&store, all_keys()).kvs, want);
}

#[test]
fn versions_across_delete_and_recreate() {
    let (_, mut store) = open();
    put(&mut store, put_req("k", "1")); // 2
    put(&mut store, put_req("k", "2")); // 3
    delete(&mut store, del_req("k", "")); // 4
    put(&mut store, put_req("k", "3")); // 5
    put(&mut store, put_req("other", "")); // 6
    put(&mut store, put_req("k", "4")); // 7
    let cases = [
        (1, None),
        (2, Some(kv("k", "1", 2, 2, 1))),
        (3, Some(kv("k", "2", 2, 3, 2))),
        (4, None),
        (5, Some(kv("k", "3", 5, 5, 1))),
        (6, Some(kv("k", "3", 5, 5, 1))),
        (7, Some(kv("k", "4", 5, 7, 2))),
        (0, Some(kv("k", "4", 5, 7, 2))),
    ];
    for (at, want) in cases {
        assert_eq!(get(&store, "k", at), want, "k at {at}");
    }
}

#[test]
fn range_options() {
    use SortOrder::{Ascend, Descend};
    use SortTarget::{Create, Key, Mod, Value, Version};
    let (_, store) = fixture();
    let all = all_keys;
    let opt = |f: fn(&mut pb::RangeRequest)| with(all(), f);
    let sort = |order: SortOrder, target: SortTarget, limit: i64| {
        with(all(), |r| {
            r.sort_order = order as i32;
            r.sort_target = target as i32;
            r.limit = limit;
        })
    };
    // (what, request, keys returned, count, more). Every answer carries the current revision.
    #[rustfmt::skip]
    let cases: Vec<(&str, pb::RangeRequest, &[&str], i64, bool)> = vec![
        ("single key",               range_req("a", ""),                      &["a"], 1, false),
        ("missing key",              range_req("zz", ""),                     &[], 0, false),
        ("prefix",                   range_req("a", "b"),                     &["a", "ab"], 2, false),
        ("interval",                 range_req("b", "d"),                     &["b", "c"], 2, false),
        ("reversed interval",        range_req("d", "b"),                     &[], 0, false),
        ("from key",                 range_req("b", "\0"),                    &["b", "c", "d", "e"], 4, false),
        ("all keys",                 all(),                                   &["a", "ab", "b", "c", "d", "e"], 6, false),
        ("limit",                    opt(|r| r.limit = 2),                    &["a", "ab"], 6, true),
        ("limit on a range",         with(range_req("b", "\0"), |r| r.limit = 1), &["b"], 4, true),
        ("limit equal to the count", opt(|r| r.limit = 6),                    &["a", "ab", "b", "c", "d", "e"], 6, false),
        ("negative limit",           opt(|r| r.limit = -1),                   &["a", "ab", "b", "c", "d", "e"], 6, false),
        ("past revision",            range_at(4),                             &["a", "b", "c", "d"], 4, false),
        ("past revision, b deleted", range_at(7),                             &["a", "c", "d", "e"], 4, false),
        ("past revision with limit", with(range_at(7), |r| r.limit = 3),      &["a", "c", "d"], 4, true),
        ("sort key descend",         sort(Descend, Key, 0),                   &["e", "d", "c", "b", "ab", "a"], 6, false),
        ("sort key ascend, limit",   sort(Ascend, Key, 2),                    &["a", "ab"], 6, true),
        // A target other than KEY with no order sorts ascending; ties keep key order.
        ("sort version, no order",   sort(SortOrder::None, Version, 0),       &["ab", "b", "d", "e", "a", "c"], 6, false),
        ("sort version descend",     sort(Descend, Version, 0),               &["a", "c", "ab", "b", "d", "e"], 6, false),
        ("sort create ascend",       sort(Ascend, Create, 0),                 &["a", "c", "d", "e", "b", "ab"], 6, false),
        ("sort mod descend",         sort(Descend, Mod, 0),                   &["ab", "c", "b", "e", "a", "d"], 6, false),
        ("sort value ascend",        sort(Ascend, Value, 0),                  &["e", "a", "d", "ab", "c", "b"], 6, false),
        // etcd's quirk: with no order only the first limit + 1 keys (a, ab, b) are fetched, then sorted.
        ("sort mod, no order, limit", sort(SortOrder::None, Mod, 2),          &["a", "b"], 6, true),
        ("sort mod ascend, limit",   sort(Ascend, Mod, 2),                    &["d", "a"], 6, true),
        ("count only",               opt(|r| r.count_only = true),            &[], 6, false),
        ("count only with limit",    opt(|r| { r.count_only = true; r.limit = 2 }), &[], 6, false),
        // The count is taken before the filters.
        ("min mod revision",         opt(|r| r.min_mod_revision = 6),         &["ab", "b", "c", "e"], 6, false),
        ("max mod revision",         opt(|r| r.max_mod_revision = 5),         &["a", "d"], 6, false),
        ("min create revision",      opt(|r| r.min_create_revision = 6),      &["ab", "b", "e"], 6, false),
        ("max create revision",      opt(|r| r.max_create_revision = 4),      &["a", "c", "d"], 6, false),
        ("mod window",               opt(|r| { r.min_mod_revision = 5; r.max_mod_revision = 8 }), &["a", "b", "e"], 6, false),
        ("filter then limit",        opt(|r| { r.min_mod_revision = 6; r.limit = 2 }), &["ab", "b"], 6, true),
        ("filter under the limit",   opt(|r| { r.max_mod_revision = 5; r.limit = 2 }), &["a", "d"], 6, false),
        ("filter at past revision",  with(range_at(7), |r| r.max_create_revision = 4), &["a", "c", "d"], 4, false),
        ("filter, sort and limit",   with(sort(Descend, Value, 2), |r| r.min_create_revision = 4), &["b", "c"], 6, true),
    ];
    for (what, req, want_keys, want_count, want_more) in cases {
        let resp = range(&store, req);
        assert_eq!(keys(&resp.kvs), want_keys, "{what}: keys");
        assert_eq!(resp.count, want_count, "{what}: count");
        assert_eq!(resp.more, want_more, "{what}: more");
        assert_eq!(resp.header, header(10), "{what}: header");
    }
}

#[test]
fn range_values_and_keys_only() {
    let (_, store) = fixture();
    let e = leased(kv("e", "0", 6, 6, 1), 7);
    let now = range(&store, range_req("c", "\0"));
    assert_eq!(now.kvs, vec![kv("c", "7", 4, 9, 2), kv("d", "5", 4, 4, 1), e.clone()]);

    let then = range(&store, range_at(4));
    let want = vec![kv("a", "1", 2, 2, 1), kv("b", "3", 3, 3, 1), kv("c", "2", 4, 4, 1), kv("d", "5", 4, 4, 1)];
    assert_eq!(then.kvs, want);

    let keys_only = range(&store, with(range_req("c", "\0"), |r| r.keys_only = true));
    let e = with(e, |kv| kv.value.clear());
    assert_eq!(keys_only.kvs, vec![kv("c", "", 4, 9, 2), kv("d", "", 4, 4, 1), e]);
}

#[test]
fn range_revision_errors() {
    let (_, mut store) = fixture();
    compact(&mut store, 5).expect("compact at 5");
    // (read at, value of `a` or the error)
    let cases: [(i64, Result<&str, Error>); 7] = [
        (0, Ok("4")),
        (-1, Ok("4")),
        (5, Ok("4")),
        (10, Ok("4")),
        (4, Err(Error::Compacted)),
        (1, Err(Error::Compacted)),
        (11, Err(Error::FutureRevision)),
    ];
    for (at, want) in cases {
        let req = with(range_req("a", ""), |r| r.revision = at);
        let got = store.range(&req).map(|r| String::from_utf8_lossy(&r.kvs[0].value).into_owned());
        assert_eq!(got, want.map(str::to_owned), "read at {at}");
    }
    // Reading exactly at the compacted revision sees that revision, not the current one.
    let at5 = range(&store, range_at(5));
    assert_eq!(keys(&at5.kvs), ["a", "b", "c", "d"]);
    assert_eq!(at5.header, header(10));
}

#[test]
fn put_options() {
    let (_, mut store) = open();
    let first = put(&mut store, with(put_req("k", "v1"), |r| (r.prev_kv, r.lease) = (true, 42)));
    assert_eq!(first.header, header(2));
    assert_eq!(first.prev_kv, None, "no previous value on a create");
    let v1 = leased(kv("k", "v1", 2, 2, 1), 42);
    assert_eq!(get(&store, "k", 0), Some(v1.clone()), "the lease is stored");

    let second = put(&mut store, with(put_req("k", "v2"), |r| r.prev_kv = true));
    assert_eq!(second.prev_kv, Some(v1), "prev_kv returns the value replaced");
    assert_eq!(get(&store, "k", 0), Some(kv("k", "v2", 2, 3, 2)), "a put without lease drops the lease");

    let keep_value = put(&mut store, with(put_req("k", ""), |r| (r.ignore_value, r.lease) = (true, 9)));
    assert_eq!(keep_value.prev_kv, None, "prev_kv only when asked");
    assert_eq!(get(&store, "k", 0), Some(leased(kv("k", "v2", 2, 4, 3), 9)), "ignore_value keeps the value");

    let keep_lease = put(&mut store, with(put_req("k", "v3"), |r| (r.ignore_lease, r.prev_kv) = (true, true)));
    assert_eq!(get(&store, "k", 0), Some(leased(kv("k", "v3", 2, 5, 4), 9)), "ignore_lease keeps the lease");
    assert_eq!(keep_lease.prev_kv.map(|kv| kv.mod_revision), Some(4));
}

#[test]
fn put_errors_change_nothing() {
    let (_, mut store) = open();
    put(&mut store, put_req("k", "v"));
    delete(&mut store, del_req("k", ""));
    let ignore_value = |key: &str| with(put_req(key, ""), |r| r.ignore_value = true);
    let in_txn = |req: pb::PutRequest| {
        Command::Txn(txn_req(vec![], vec![op_put("other", "x"), op(Request::RequestPut(req))], vec![]))
    };
    #[rustfmt::skip]
    let cases = [
        ("ignore_value, never written", Command::Put(ignore_value("missing"))),
        ("ignore_lease, never written", Command::Put(with(put_req("missing", "v"), |r| r.ignore_lease = true))),
        ("ignore_value, deleted",       Command::Put(ignore_value("k"))),
        ("ignore_value in a txn",       in_txn(with(ignore_value("missing"), |r| r.prev_kv = true))),
    ];
    for (what, cmd) in cases {
        assert_eq!(store.apply(&cmd), Err(Error::KeyNotFound), "{what}");
        assert_eq!(store.current_revision(), 3, "{what}: no revision taken");
    }
    assert_eq!(get(&store, "other", 0), None);
    assert_eq!(put(&mut store, put_req("other", "y")).header, header(4));
}

#[test]
fn delete_range_results() {
    let prev = |req: pb::DeleteRangeRequest| with(req, |r| r.prev_kv = true);
    /// (what, request, deleted, prev_kvs keys, keys left)
    type Keys = &'static [&'static str];
    type Case = (&'static str, pb::DeleteRangeRequest, i64, Keys, Keys);
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("single key",          del_req("a", ""),         1, &[],                &["ab", "b", "c", "d", "e"]),
        ("single key, prev_kv", prev(del_req("a", "")),   1, &["a"],             &["ab", "b", "c", "d", "e"]),
        ("missing key",         prev(del_req("zz", "")),  0, &[],                &["a", "ab", "b", "c", "d", "e"]),
        ("prefix",              prev(del_req("a", "b")),  2, &["a", "ab"],       &["b", "c", "d", "e"]),
        ("from key",            prev(del_req("c", "\0")), 3, &["c", "d", "e"],   &["a", "ab", "b"]),
        ("all keys",            del_req("\0", "\0"),      6, &[],                &[]),
    ];
    for (what, req, deleted, prev, left) in cases {
        let (_, mut store) = fixture();
        let resp = delete(&mut store, req);
        assert_eq!(resp.deleted, deleted, "{what}: deleted");
        assert_eq!(keys(&resp.prev_kvs), prev, "{what}: prev_kvs");
        let want_rev = if deleted > 0 { 11 } else { 10 };
        assert_eq!(resp.header, header(want_rev), "{what}: header");
        assert_eq!(keys(&range(&store, all_keys()).kvs), left, "{what}: keys left");
    }
    let (_, mut store) = fixture();
    let resp = delete(&mut store, prev(del_req("c", "e")));
    assert_eq!(resp.prev_kvs, vec![kv("c", "7", 4, 9, 2), kv("d", "5", 4, 4, 1)], "whole values");
}

#[test]
fn txn_compares() {
    use CompareResult::{Equal, Greater, Less, NotEqual};
    use CompareTarget::{Create, Lease, Mod, Value, Version};
    use TargetUnion as U;
    let (_, mut store) = open();
    put(&mut store, with(put_req("k", "a"), |r| r.lease = 5)); // 2
    put(&mut store, with(put_req("k", "b"), |r| r.lease = 5)); // 3: k = b (c2 m3 v2 lease 5)
    let v = |s: &str| Some(U::Value(s.into()));
    // (key, target, result, operand, holds)
    #[rustfmt::skip]
    let cases: Vec<(&str, CompareTarget, CompareResult, Option<U>, bool)> = vec![
        ("k", Version, Equal,    Some(U::Version(2)), true),
        ("k", Version, Greater,  Some(U::Version(1)), true),
        ("k", Version, Greater,  Some(U::Version(2)), false),
        ("k", Version, Less,     Some(U::Version(3)), true),
        ("k", Version, NotEqual, Some(U::Version(2)), false),
        ("k", Create,  Equal,    Some(U::CreateRevision(2)), true),
        ("k", Create,  Less,     Some(U::CreateRevision(2)), false),
        ("k", Create,  Greater,  Some(U::CreateRevision(1)), true),
        ("k", Create,  NotEqual, Some(U::CreateRevision(0)), true),
        ("k", Mod,     Equal,    Some(U::ModRevision(3)), true),
        ("k", Mod,     Greater,  Some(U::ModRevision(3)), false),
        ("k", Mod,     Less,     Some(U::ModRevision(4)), true),
        ("k", Mod,     NotEqual, Some(U::ModRevision(3)), false),
        ("k", Value,   Equal,    v("b"), true),
        ("k", Value,   Equal,    v(""), false),
        ("k", Value,   Greater,  v("a"), true),
        ("k", Value,   Less,     v("c"), true),
        ("k", Value,   Less,     v("b"), false),
        ("k", Value,   NotEqual, v("b"), false),
        ("k", Value,   NotEqual, v("bb"), true),
        ("k", Lease,   Equal,    Some(U::Lease(5)), true),
        ("k", Lease,   Greater,  Some(U::Lease(4)), true),
        ("k", Lease,   Less,     Some(U::Lease(5)), false),
        ("k", Lease,   NotEqual, Some(U::Lease(0)), true),
        // An operand of another kind counts as 0, as etcd reads the union.
        ("k", Mod,     Equal,    Some(U::Version(3)), false),
        ("k", Mod,     Greater,  Some(U::Version(3)), true),
        ("k", Version, Greater,  None, true),
        // A missing key is a zero KeyValue, but a value compare on it always fails.
        ("missing", Version, Equal,    Some(U::Version(0)), true),
        ("missing", Version, Greater,  Some(U::Version(0)), false),
        ("missing", Create,  Equal,    Some(U::CreateRevision(0)), true),
        ("missing", Mod,     Equal,    Some(U::ModRevision(0)), true),
        ("missing", Mod,     Less,     Some(U::ModRevision(1)), true),
        ("missing", Lease,   Equal,    Some(U::Lease(0)), true),
        ("missing", Lease,   NotEqual, Some(U::Lease(0)), false),
        ("missing", Value,   Equal,    v(""), false),
        ("missing", Value,   NotEqual, v("x"), false),
        ("missing", Value,   Less,     v("x"), false),
    ];
    for (key, target, result, operand, holds) in cases {
        let what = format!("{key} {target:?} {result:?} {operand:?}");
        let req = txn_req(vec![cmp(key, target, result, operand)], vec![op_range(range_req("k", ""))], vec![]);
        let resp = txn(&mut store, req.clone());
        assert_eq!(resp.succeeded, holds, "{what}");
        assert_eq!(resp.responses.len(), usize::from(holds), "{what}: the branch taken");
        assert_eq!(store.txn_read_only(&req).expect("read-only txn"), resp, "{what}: read-only path");
    }
    assert_eq!(store.current_revision(), 3, "compares take no revision");
}

#[test]
fn compare_with_range_end() {
    use CompareResult::{Equal, Greater, Less, NotEqual};
    use CompareTarget::{Mod, Value, Version};
    use TargetUnion as U;
    let (_, mut store) = open();
    put(&mut store, put_req("p1", "x")); // 2
    put(&mut store, put_req("p2", "x")); // 3
    put(&mut store, put_req("p2", "y")); // 4: p1 v1, p2 v2
    put(&mut store, put_req("q", "z")); // 5
    let v = |s: &str| U::Value(s.into());
    // (key, range_end, target, result, operand, holds): every key of the range must satisfy the compare.
    #[rustfmt::skip]
    let cases: Vec<(&str, &str, CompareTarget, CompareResult, U, bool)> = vec![
        ("p",  "q",  Version, Greater,  U::Version(0), true),
        ("p",  "q",  Version, Equal,    U::Version(1), false),
        ("p",  "q",  Version, Less,     U::Version(3), true),
        ("p",  "q",  Mod,     Less,     U::ModRevision(4), false),
        ("p",  "q",  Mod,     Less,     U::ModRevision(5), true),
        ("p",  "q",  Value,   NotEqual, v("z"), true),
        ("p",  "q",  Value,   Equal,    v("x"), false),
        ("p",  "\0", Value,   NotEqual, v("z"), false),
        ("p2", "\0", Version, Greater,  U::Version(0), true),
        ("\0", "\0", Mod,     Greater,  U::ModRevision(1), true),
        // An empty range compares as one missing key.
        ("x",  "y",  Mod,     Equal,    U::ModRevision(0), true),
        ("x",  "y",  Version, Greater,  U::Version(0), false),
        ("x",  "y",  Value,   NotEqual, v("a"), false),
        ("r",  "\0", Mod,     Equal,    U::ModRevision(0), true),
    ];
    for (key, end, target, result, operand, holds) in cases {
        let what = format!("[{key:?}, {end:?}) {target:?} {result:?} {operand:?}");
        let compare = with(cmp(key, target, result, Some(operand)), |c| c.range_end = end.into());
        assert_eq!(txn(&mut store, txn_req(vec![compare], vec![], vec![])).succeeded, holds, "{what}");
    }
}

#[test]
fn several_compares_must_all_hold() {
    let (_, mut store) = open();
    put(&mut store, put_req("a", "1"));
    let yes = cmp("a", CompareTarget::Version, CompareResult::Equal, Some(TargetUnion::Version(1)));
    let no = cmp("a", CompareTarget::Value, CompareResult::Equal, Some(TargetUnion::Value("2".into())));
    #[rustfmt::skip]
    let cases = [(vec![], true), (vec![yes.clone()], true), (vec![yes.clone(), no.clone()], false), (vec![no, yes], false)];
    for (compares, holds) in cases {
        let what = format!("{compares:?}");
        assert_eq!(txn(&mut store, txn_req(compares, vec![], vec![])).succeeded, holds, "{what}");
    }
}

fn put_resp(revision: i64) -> Response {
    Response::ResponsePut(pb::PutResponse { header: header(revision), prev_kv: None })
}

fn range_resp(kvs: Vec<KeyValue>, revision: i64) -> Response {
    let count = kvs.len() as i64;
    let (header, more) = (header(revision), false);
    Response::ResponseRange(pb::RangeResponse { header, kvs, more, count })
}

fn count_resp(count: i64, revision: i64) -> Response {
    let (header, kvs, more) = (header(revision), vec![], false);
    Response::ResponseRange(pb::RangeResponse { header, kvs, more, count })
}

fn del_resp(deleted: i64, revision: i64) -> Response {
    let (header, prev_kvs) = (header(revision), vec![]);
    Response::ResponseDeleteRange(pb::DeleteRangeResponse { header, deleted, prev_kvs })
}

/// A nested txn's response: as etcd answers, its header is empty.
fn nested_resp(succeeded: bool, responses: Vec<Response>) -> Response {
    let responses = responses.into_iter().map(|r| pb::ResponseOp { response: Some(r) }).collect();
    let header = Some(pb::ResponseHeader::default());
    Response::ResponseTxn(pb::TxnResponse { header, succeeded, responses })
}

fn responses(resp: pb::TxnResponse) -> Vec<Response> {
    resp.responses.into_iter().map(|r| r.response.expect("a response")).collect()
}

#[test]
fn nested_compares_see_the_store_before_the_txn() {
    use CompareResult::Equal;
    use CompareTarget::{Value, Version};
    let (_, mut store) = open();
    put(&mut store, put_req("k", "old")); // 2
    let saw_old = cmp("k", Value, Equal, Some(TargetUnion::Value("old".into())));
    let inner = txn_req(vec![saw_old], vec![op_put("m", "saw-old")], vec![op_put("m", "saw-new")]);
    let resp = txn(&mut store, txn_req(vec![], vec![op_put("k", "new"), op_txn(inner)], vec![]));
    assert_eq!((resp.header, resp.succeeded), (header(3), true));
    assert_eq!(responses(resp), [put_resp(3), nested_resp(true, vec![put_resp(3)])]);
    assert_eq!(get(&store, "m", 0), Some(kv("m", "saw-old", 3, 3, 1)));

    // A nested txn in the failure branch: its compares too are evaluated before any write.
    let gone = cmp("k", Version, Equal, Some(TargetUnion::Version(0)));
    let never = cmp("k", Version, Equal, Some(TargetUnion::Version(99)));
    let inner = txn_req(vec![gone], vec![op_put("n", "deleted-first")], vec![op_put("n", "existed")]);
    let resp = txn(&mut store, txn_req(vec![never], vec![], vec![op_del("k", ""), op_txn(inner)]));
    assert!(!resp.succeeded);
    assert_eq!(get(&store, "n", 0).map(|kv| kv.value), Some(b"existed".to_vec()));
}

#[test]
fn reads_inside_a_txn_see_its_writes() {
    let (_, mut store) = open();
    put(&mut store, put_req("a", "1")); // 2
    put(&mut store, put_req("b", "2")); // 3
    let nested = txn_req(vec![], vec![op_range(range_req("c", ""))], vec![]);
    let c = kv("c", "3", 4, 4, 1);
    // (op, the response etcd gives)
    #[rustfmt::skip]
    let cases = vec![
        // Before any write the txn reads at its begin revision...
        (op_range(range_req("a", "")),                   range_resp(vec![kv("a", "1", 2, 2, 1)], 3)),
        (op_del("zz", ""),                               del_resp(0, 3)),
        (op_put("c", "3"),                               put_resp(4)),
        // ... after one, at the revision it takes.
        (op_range(range_req("c", "")),                   range_resp(vec![c.clone()], 4)),
        (op_del("zz", ""),                               del_resp(0, 4)),
        (op_range(range_at(3)),                          range_resp(vec![kv("a", "1", 2, 2, 1), kv("b", "2", 3, 3, 1)], 4)),
        (op_txn(nested),                                 nested_resp(true, vec![range_resp(vec![c], 4)])),
        (op_del("b", ""),                                del_resp(1, 4)),
        (op_range(with(all_keys(), |r| r.count_only = true)), count_resp(2, 4)),
    ];
    let (ops, want): (Vec<pb::RequestOp>, Vec<Response>) = cases.into_iter().unzip();
    let resp = txn(&mut store, txn_req(vec![], ops, vec![]));
    assert_eq!(resp.header, header(4));
    let got = responses(resp);
    assert_eq!(got.len(), want.len());
    for (i, (got, want)) in got.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "response {i}");
    }
}

#[test]
fn txn_errors_change_nothing() {
    let (_, mut store) = fixture();
    compact(&mut store, 5).expect("compact");
    let at = |revision: i64| op_range(with(range_req("a", ""), |r| r.revision = revision));
    let put_ignoring = |key: &str| op(Request::RequestPut(with(put_req(key, ""), |r| r.ignore_value = true)));
    let nested = |ops: Vec<pb::RequestOp>| op_txn(txn_req(vec![], ops, vec![]));
    let t = |ops: Vec<pb::RequestOp>| txn_req(vec![], ops, vec![]);
    // (what, txn, error)
    #[rustfmt::skip]
    let cases: Vec<(&str, pb::TxnRequest, Error)> = vec![
        ("future read",                    t(vec![op_put("x", ""), at(11)]),                Error::FutureRevision),
        ("compacted read",                 t(vec![op_put("x", ""), at(4)]),                 Error::Compacted),
        ("read-only, future read",         t(vec![at(11)]),                                 Error::FutureRevision),
        ("nested compacted read",          t(vec![nested(vec![at(2)])]),                    Error::Compacted),
        ("ignore_value on a missing key",  t(vec![op_put("x", ""), put_ignoring("zz")]),    Error::KeyNotFound),
        // etcd checks every put of the txn before any range.
        ("put checked before range",       t(vec![at(11), put_ignoring("zz")]),             Error::KeyNotFound),
        // etcd's duplicate check reads a from-key end literally, so these pass validation; etcd then panics
        // when the put finds its key gone. The store refuses them before changing anything.
        ("ignore_value after from-key delete",        t(vec![op_del("b", "\0"), put_ignoring("c")]),  Error::KeyNotFound),
        ("ignore_value after nested from-key delete", t(vec![nested(vec![op_del("\0", "\0")]), put_ignoring("a")]), Error::KeyNotFound),
    ];
    let before = range(&store, all_keys());
    for (what, req, err) in cases {
        let valid = kv_api::validate::check_txn(&req, &Default::default());
        assert_eq!(valid, Ok(()), "{what}: passes validation");
        assert_eq!(store.apply(&Command::Txn(req)), Err(err), "{what}");
        assert_eq!(store.current_revision(), 10, "{what}: no revision taken");
        assert_eq!(range(&store, all_keys()), before, "{what}: nothing changed");
    }
    // One that does not need the deleted key runs as etcd runs it.
    let resp = txn(&mut store, t(vec![op_del("b", "\0"), put_ignoring("a")]));
    assert_eq!(resp.header, header(11));
    assert_eq!(keys(&range(&store, all_keys()).kvs), ["a", "ab"]);
    assert_eq!(get(&store, "a", 0), Some(kv("a", "4", 2, 11, 3)));
    put(&mut store, put_req("z", ""));
    assert_eq!(store.current_revision(), 12);
}

#[test]
fn compaction_bounds() {
    let (_, mut store) = fixture();
    // (compact at, result), in order.
    let cases = [
        (11, Err(Error::FutureRevision)),
        (4, Ok(())),
        (0, Err(Error::Compacted)),
        (4, Err(Error::Compacted)),
        (3, Err(Error::Compacted)),
        (10, Ok(())),
        (10, Err(Error::Compacted)),
    ];
    for (at, want) in cases {
        let got = compact(&mut store, at).map(|resp| assert_eq!(header_revision(&resp), 10, "compact {at}: header"));
        assert_eq!(got, want, "compact at {at}");
    }
    assert_eq!(store.compacted_revision(), 10);
    assert_eq!(store.current_revision(), 10);
}

#[test]
fn compaction_removes_superseded_revisions() {
    let (_, mut store) = open();
    put(&mut store, put_req("a", "1")); // 2
    put(&mut store, put_req("a", "2")); // 3
    put(&mut store, put_req("a", "3")); // 4
    put(&mut store, put_req("b", "1")); // 5
    delete(&mut store, del_req("b", "")); // 6
    put(&mut store, put_req("c", "1")); // 7
    store.commit().expect("commit");
    assert_eq!(stored_revisions(&store), [2, 3, 4, 5, 6, 7]);
    // (compact at, revisions left, keys at the compacted revision)
    let cases: [(i64, &[i64], &[&str]); 3] = [
        // a keeps 4 (its value at 5); b lives past 5, so its put and tombstone stay.
        (5, &[4, 5, 6, 7], &["a", "b"]),
        // b's life ended by 6: all of it goes.
        (6, &[4, 7], &["a"]),
        (7, &[4, 7], &["a", "c"]),
    ];
    for (at, left, alive) in cases {
        compact(&mut store, at).expect("compact");
        assert_eq!(keys(&range(&store, range_at(at)).kvs), alive, "compact at {at}, before the commit");
        store.commit().expect("commit");
        assert_eq!(stored_revisions(&store), left, "compact at {at}");
        assert_eq!(keys(&range(&store, range_at(at)).kvs), alive, "compact at {at}, after the commit");
    }
    assert_eq!(get(&store, "a", 0), Some(kv("a", "3", 2, 4, 3)));
}

/// Everything a client could read from `store`: ranges with a few option sets at every revision (and just
/// past both ends), and a read-only txn.
fn all_reads(store: &MvccStore) -> Vec<Result<pb::RangeResponse, Error>> {
    let sorted = with(all_keys(), |r| {
        r.sort_order = SortOrder::Descend as i32;
        r.sort_target = SortTarget::Mod as i32;
    });
    let bases = [all_keys(), range_req("a", "b"), range_req("b", ""), with(all_keys(), |r| r.limit = 2), sorted];
    let mut out = Vec::new();
    for revision in 0..=store.current_revision() + 1 {
        for base in &bases {
            out.push(store.range(&with(base.clone(), |r| r.revision = revision)));
        }
    }
    let lookup = txn_req(vec![], vec![op_range(all_keys())], vec![]);
    out.push(store.txn_read_only(&lookup).map(|resp| match responses(resp).pop() {
        Some(Response::ResponseRange(r)) => r,
        other => panic!("unexpected {other:?}"),
    }));
    out
}

fn assert_same_store(a: &MvccStore, b: &MvccStore, what: &str) {
    assert_eq!(a.current_revision(), b.current_revision(), "{what}: current revision");
    assert_eq!(a.compacted_revision(), b.compacted_revision(), "{what}: compacted revision");
    for (i, (x, y)) in all_reads(a).iter().zip(&all_reads(b)).enumerate() {
        assert_eq!(x, y, "{what}: read {i}");
    }
}

#[test]
fn reopened_store_answers_identically() {
    let (backend, mut store) = fixture();
    store.commit().expect("commit");
    assert_same_store(&store, &MvccStore::open(backend.clone()).expect("reopen"), "after commit");
    for at in [3, 7, 10] {
        compact(&mut store, at).expect("compact");
        store.commit().expect("commit");
        let reopened = MvccStore::open(backend.clone()).expect("reopen");
        assert_same_store(&store, &reopened, &format!("after compaction at {at}"));
    }
    // The reopened store goes on as the original does.
    let mut reopened = MvccStore::open(backend.clone()).expect("reopen");
    for s in [&mut store, &mut reopened] {
        let resp = put(s, with(put_req("c", "8"), |r| r.prev_kv = true));
        assert_eq!(resp.prev_kv, Some(kv("c", "7", 4, 9, 2)));
        assert_eq!(put(s, put_req("new", "")).header, header(12));
    }
    assert_same_store(&store, &reopened, "after more writes");

    // A snapshot installed into another store answers the same too.
    store.commit().expect("commit");
    let (_, mut copy) = open();
    copy.install(store.export().expect("export")).expect("install");
    assert_same_store(&store, &copy, "installed snapshot");
}

#[test]
fn reopen_after_compacting_the_newest_tombstones() {
    // (compact at, revisions left in the key bucket)
    let cases: [(i64, &[i64]); 3] = [(3, &[2, 3, 4, 5]), (4, &[3, 5]), (5, &[])];
    for (at, left) in cases {
        let (backend, mut store) = open();
        put(&mut store, put_req("a", "")); // 2
        put(&mut store, put_req("b", "")); // 3
        delete(&mut store, del_req("a", "")); // 4
        delete(&mut store, del_req("b", "")); // 5
        compact(&mut store, at).expect("compact");
        store.commit().expect("commit");
        assert_eq!(stored_revisions(&store), left, "compact at {at}");
        let mut reopened = MvccStore::open(backend.clone()).expect("reopen");
        assert_eq!(reopened.current_revision(), 5, "compact at {at}: the revision does not go back");
        assert_eq!(reopened.compacted_revision(), at);
        assert_same_store(&store, &reopened, &format!("compact at {at}"));
        assert_eq!(put(&mut reopened, put_req("a", "")).header, header(6));
        assert_eq!(get(&reopened, "a", 0), Some(kv("a", "", 6, 6, 1)));
    }
}

#[test]
fn uncommitted_writes_are_readable_and_lost_on_reopen() {
    let (backend, mut store) = open();
    put(&mut store, put_req("a", "1"));
    store.commit().expect("commit");
    put(&mut store, put_req("a", "2"));
    assert_eq!(get(&store, "a", 0), Some(kv("a", "2", 2, 3, 2)), "staged writes are visible at once");
    let reopened = MvccStore::open(backend).expect("reopen");
    assert_eq!(reopened.current_revision(), 2);
    assert_eq!(get(&reopened, "a", 0), Some(kv("a", "1", 2, 2, 1)));
}
