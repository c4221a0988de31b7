//! Behaviour of the MVCC store, table by table, against etcd 3.4's semantics (checked on a real etcd where
//! the documentation is silent: nested txn headers, the sort quirk, the order of txn checks).
//!
//! Case tables are exempt from rustfmt so that each case stays one row.

mod common;

use common::*;

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
