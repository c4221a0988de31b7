//! Helpers shared by the store's behaviour tests: request builders, apply shortcuts, and the fixture most
//! range tests read.

// Each test file uses a part of these.
#![allow(dead_code, unused_imports)]

pub use std::sync::Arc;

pub use kv_api::revision::Revision;
pub use kv_api::{Bucket, Command, CommandResponse, Error, MemBackend, MvccStore};
pub use proto::etcdserverpb as pb;
pub use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
pub use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
pub use proto::etcdserverpb::request_op::Request;
pub use proto::etcdserverpb::response_op::Response;
pub use proto::mvccpb::KeyValue;

/// The leases the tests put keys with.
pub const LEASES: [i64; 4] = [5, 7, 9, 42];

pub fn open() -> (Arc<MemBackend>, MvccStore) {
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
pub fn with<T>(mut value: T, f: impl FnOnce(&mut T)) -> T {
    f(&mut value);
    value
}

pub fn kv(key: &str, value: &str, create_revision: i64, mod_revision: i64, version: i64) -> KeyValue {
    KeyValue { key: key.into(), value: value.into(), create_revision, mod_revision, version, lease: 0 }
}

pub fn leased(kv: KeyValue, lease: i64) -> KeyValue {
    with(kv, |kv| kv.lease = lease)
}

pub fn put_req(key: &str, value: &str) -> pb::PutRequest {
    pb::PutRequest { key: key.into(), value: value.into(), ..Default::default() }
}

pub fn del_req(key: &str, range_end: &str) -> pb::DeleteRangeRequest {
    pb::DeleteRangeRequest { key: key.into(), range_end: range_end.into(), ..Default::default() }
}

pub fn range_req(key: &str, range_end: &str) -> pb::RangeRequest {
    pb::RangeRequest { key: key.into(), range_end: range_end.into(), ..Default::default() }
}

pub fn all_keys() -> pb::RangeRequest {
    range_req("\0", "\0")
}

pub fn range_at(revision: i64) -> pb::RangeRequest {
    with(all_keys(), |r| r.revision = revision)
}

pub fn txn_req(compare: Vec<pb::Compare>, success: Vec<pb::RequestOp>, failure: Vec<pb::RequestOp>) -> pb::TxnRequest {
    pb::TxnRequest { compare, success, failure }
}

pub fn op(request: Request) -> pb::RequestOp {
    pb::RequestOp { request: Some(request) }
}

pub fn op_put(key: &str, value: &str) -> pb::RequestOp {
    op(Request::RequestPut(put_req(key, value)))
}

pub fn op_del(key: &str, range_end: &str) -> pb::RequestOp {
    op(Request::RequestDeleteRange(del_req(key, range_end)))
}

pub fn op_range(req: pb::RangeRequest) -> pb::RequestOp {
    op(Request::RequestRange(req))
}

pub fn op_txn(req: pb::TxnRequest) -> pb::RequestOp {
    op(Request::RequestTxn(req))
}

pub fn cmp(key: &str, target: CompareTarget, result: CompareResult, operand: Option<TargetUnion>) -> pb::Compare {
    pb::Compare {
        key: key.into(),
        target: target as i32,
        result: result as i32,
        target_union: operand,
        ..Default::default()
    }
}

pub fn header(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { revision, ..Default::default() })
}

pub fn put(store: &mut MvccStore, req: pb::PutRequest) -> pb::PutResponse {
    match store.apply(&Command::Put(req.clone())) {
        Ok(CommandResponse::Put(resp)) => resp,
        other => panic!("put {req:?}: {other:?}"),
    }
}

pub fn delete(store: &mut MvccStore, req: pb::DeleteRangeRequest) -> pb::DeleteRangeResponse {
    match store.apply(&Command::DeleteRange(req.clone())) {
        Ok(CommandResponse::DeleteRange(resp)) => resp,
        other => panic!("delete {req:?}: {other:?}"),
    }
}

pub fn txn(store: &mut MvccStore, req: pb::TxnRequest) -> pb::TxnResponse {
    match store.apply(&Command::Txn(req.clone())) {
        Ok(CommandResponse::Txn(resp)) => resp,
        other => panic!("txn {req:?}: {other:?}"),
    }
}

pub fn compact(store: &mut MvccStore, revision: i64) -> Result<CommandResponse, Error> {
    let physical = false;
    store.apply(&Command::Compact(pb::CompactionRequest { revision, physical }))
}

pub fn range(store: &MvccStore, req: pb::RangeRequest) -> pb::RangeResponse {
    store.range(&req).unwrap_or_else(|e| panic!("range {req:?}: {e}"))
}

pub fn get(store: &MvccStore, key: &str, revision: i64) -> Option<KeyValue> {
    range(store, with(range_req(key, ""), |r| r.revision = revision)).kvs.pop()
}

pub fn keys(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter().map(|kv| String::from_utf8_lossy(&kv.key).into_owned()).collect()
}

pub fn header_revision(resp: &CommandResponse) -> i64 {
    let header = match resp {
        CommandResponse::Put(r) => r.header,
        CommandResponse::DeleteRange(r) => r.header,
        CommandResponse::Txn(r) => r.header,
        CommandResponse::Compact(r) => r.header,
        CommandResponse::LeaseGrant(r) => r.header,
        CommandResponse::LeaseRevoke(r) => r.header,
        CommandResponse::Alarm(r) => r.header,
        CommandResponse::Downgrade(r) => r.header,
        CommandResponse::Auth(outcome) => panic!("an auth change has no header: {outcome:?}"),
    };
    header.expect("apply fills the header").revision
}

/// Main revisions of the entries in the key bucket, oldest first.
pub fn stored_revisions(store: &MvccStore) -> Vec<i64> {
    // What is left once the compactor has deleted what compactions freed.
    store.wait_compacted();
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
pub fn fixture() -> (Arc<MemBackend>, MvccStore) {
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

pub fn put_resp(revision: i64) -> Response {
    Response::ResponsePut(pb::PutResponse { header: header(revision), prev_kv: None })
}

pub fn range_resp(kvs: Vec<KeyValue>, revision: i64) -> Response {
    let count = kvs.len() as i64;
    let (header, more) = (header(revision), false);
    Response::ResponseRange(pb::RangeResponse { header, kvs, more, count })
}

pub fn count_resp(count: i64, revision: i64) -> Response {
    let (header, kvs, more) = (header(revision), vec![], false);
    Response::ResponseRange(pb::RangeResponse { header, kvs, more, count })
}

pub fn del_resp(deleted: i64, revision: i64) -> Response {
    let (header, prev_kvs) = (header(revision), vec![]);
    Response::ResponseDeleteRange(pb::DeleteRangeResponse { header, deleted, prev_kvs })
}

/// A nested txn's response: as etcd answers, its header is empty.
pub fn nested_resp(succeeded: bool, responses: Vec<Response>) -> Response {
    let responses = responses.into_iter().map(|r| pb::ResponseOp { response: Some(r) }).collect();
    let header = Some(pb::ResponseHeader::default());
    Response::ResponseTxn(pb::TxnResponse { header, succeeded, responses })
}

pub fn responses(resp: pb::TxnResponse) -> Vec<Response> {
    resp.responses.into_iter().map(|r| r.response.expect("a response")).collect()
}
