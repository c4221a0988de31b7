//! Txns in the MVCC store, table by table, against etcd 3.4's semantics: compares (with range_end,
//! on missing keys), nested txns, reads that see the txn's own writes, and errors that change nothing.
//!
//! Case tables are exempt from rustfmt so that each case stays one row.

mod common;

use common::*;

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
