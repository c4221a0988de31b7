//! Txn through the etcd-client crate: compares on every target, both branches, nested txns, the
//! responses inside a txn, and how txns spend revisions.

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use tests::Member;

use crate::util::{header, keys, put_all, values};

#[tokio::test]
async fn compares_choose_the_branch() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    // a: create 2, mod 3, version 2, value "2"; b: create 4, mod 4, version 1, value "x".
    put_all(&mut client, &[("a", "1"), ("a", "2"), ("b", "x")]).await?;

    use CompareOp::{Equal, Greater, Less, NotEqual};
    let cases: Vec<(Compare, bool)> = vec![
        (Compare::mod_revision("a", Equal, 3), true),
        (Compare::mod_revision("a", Equal, 2), false),
        (Compare::mod_revision("a", Greater, 2), true),
        (Compare::mod_revision("a", Less, 3), false),
        (Compare::version("a", Equal, 2), true),
        (Compare::version("a", NotEqual, 2), false),
        (Compare::version("a", Less, 3), true),
        (Compare::create_revision("a", Equal, 2), true),
        (Compare::create_revision("b", Greater, 4), false),
        (Compare::value("a", Equal, "2"), true),
        (Compare::value("a", Equal, "1"), false),
        (Compare::value("a", Greater, "1"), true),
        (Compare::value("a", Less, "10"), false),
        (Compare::value("a", NotEqual, "1"), true),
        // A missing key compares as a zero KeyValue ...
        (Compare::mod_revision("missing", Equal, 0), true),
        (Compare::create_revision("missing", Equal, 0), true),
        (Compare::version("missing", Equal, 0), true),
        (Compare::version("missing", Greater, 0), false),
        // ... except that a VALUE compare on it always fails, even `!=`.
        (Compare::value("missing", Equal, ""), false),
        (Compare::value("missing", NotEqual, "x"), false),
        // A range compare holds only if it holds for every key in the range.
        (Compare::version("a", Greater, 0).with_range("c"), true),
        (Compare::version("a", Equal, 2).with_range("c"), false),
        (Compare::create_revision("\0", Greater, 1).with_range("\0"), true),
        (Compare::create_revision("\0", Greater, 2).with_range("\0"), false),
    ];
    for (compare, want) in cases {
        let txn = Txn::new().when([compare.clone()]).and_then([TxnOp::get("a", None)]).or_else([TxnOp::get("b", None)]);
        let resp = client.txn(txn).await?;
        assert_eq!(resp.succeeded(), want, "{compare:?}");
        let [TxnOpResponse::Get(get)] = &resp.op_responses()[..] else { panic!("one range response") };
        assert_eq!(keys(get.kvs()), [if want { "a" } else { "b" }], "{compare:?}");
    }

    // All compares must hold; an empty list holds.
    let both = Txn::new().when([Compare::version("a", Equal, 2), Compare::value("b", Equal, "y")]);
    assert!(!client.txn(both).await?.succeeded());
    assert!(client.txn(Txn::new()).await?.succeeded());
    Ok(())
}

#[tokio::test]
async fn txn_writes_share_one_revision() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    client.put("old", "1", None).await?; // rev 2

    let txn = Txn::new().when([Compare::version("old", CompareOp::Equal, 1)]).and_then([
        TxnOp::put("t1", "a", None),
        TxnOp::put("t2", "b", None),
        TxnOp::put("old", "2", Some(PutOptions::new().with_prev_key())),
        TxnOp::delete("missing", None),
        TxnOp::get("t", Some(GetOptions::new().with_prefix())),
    ]);
    let resp = client.txn(txn).await?;
    assert!(resp.succeeded());
    assert_eq!(header(resp.header()).revision(), 3);
    let ops = resp.op_responses();
    assert_eq!(ops.len(), 5);
    let TxnOpResponse::Put(put) = &ops[2] else { panic!("put response: {:?}", ops[2]) };
    assert_eq!(put.prev_key().map(|kv| kv.value()), Some(&b"1"[..]));
    let TxnOpResponse::Delete(delete) = &ops[3] else { panic!("delete response: {:?}", ops[3]) };
    assert_eq!(delete.deleted(), 0);
    // A range after the puts in the same txn sees them.
    let TxnOpResponse::Get(get) = &ops[4] else { panic!("range response: {:?}", ops[4]) };
    assert_eq!(keys(get.kvs()), ["t1", "t2"]);

    // The headers inside a txn response carry only the revision.
    for op in &ops {
        let inner = match op {
            TxnOpResponse::Put(r) => r.header(),
            TxnOpResponse::Get(r) => r.header(),
            TxnOpResponse::Delete(r) => r.header(),
            TxnOpResponse::Txn(r) => r.header(),
        };
        let inner = header(inner);
        assert_eq!(
            (inner.revision(), inner.cluster_id(), inner.member_id(), inner.raft_term()),
            (3, 0, 0, 0),
            "{op:?}"
        );
    }

    let all = client.get("", Some(GetOptions::new().with_all_keys())).await?;
    assert_eq!(keys(all.kvs()), ["old", "t1", "t2"]);
    assert!(all.kvs().iter().all(|kv| kv.mod_revision() == 3));
    assert_eq!(header(all.header()).revision(), 3);

    // The failure branch runs when a compare fails; a read-only txn takes no revision.
    let txn = Txn::new()
        .when([Compare::version("old", CompareOp::Equal, 1)])
        .and_then([TxnOp::put("never", "x", None)])
        .or_else([TxnOp::get("old", None)]);
    let resp = client.txn(txn).await?;
    assert!(!resp.succeeded());
    assert_eq!(header(resp.header()).revision(), 3);
    let TxnOpResponse::Get(get) = &resp.op_responses()[0] else { panic!("range response") };
    assert_eq!(values(get.kvs()), ["2"]);
    assert_eq!(client.get("never", None).await?.count(), 0);

    // A txn whose writes delete nothing also takes no revision.
    let resp = client.txn(Txn::new().and_then([TxnOp::delete("missing", None)])).await?;
    assert_eq!(header(resp.header()).revision(), 3);

    // A failed compare with writes in the failure branch takes one.
    let txn = Txn::new()
        .when([Compare::value("old", CompareOp::Equal, "nope")])
        .or_else([TxnOp::put("e1", "x", None), TxnOp::delete("t1", None)]);
    let resp = client.txn(txn).await?;
    assert!(!resp.succeeded());
    assert_eq!(header(resp.header()).revision(), 4);
    Ok(())
}

#[tokio::test]
async fn nested_txn() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    client.put("flag", "on", None).await?; // rev 2

    let inner = Txn::new()
        .when([Compare::value("flag", CompareOp::Equal, "off")])
        .and_then([TxnOp::put("inner-then", "x", None)])
        .or_else([TxnOp::put("inner-else", "y", None), TxnOp::get("flag", None)]);
    let outer = Txn::new()
        .when([Compare::value("flag", CompareOp::Equal, "on")])
        .and_then([TxnOp::put("outer", "z", None), TxnOp::txn(inner)]);
    let resp = client.txn(outer).await?;
    assert!(resp.succeeded());
    assert_eq!(header(resp.header()).revision(), 3);
    let ops = resp.op_responses();
    let TxnOpResponse::Txn(nested) = &ops[1] else { panic!("nested txn response: {:?}", ops[1]) };
    assert!(!nested.succeeded());
    let nested_ops = nested.op_responses();
    assert_eq!(nested_ops.len(), 2);
    let TxnOpResponse::Get(get) = &nested_ops[1] else { panic!("range response") };
    assert_eq!(values(get.kvs()), ["on"]);

    let all = client.get("", Some(GetOptions::new().with_all_keys())).await?;
    assert_eq!(keys(all.kvs()), ["flag", "inner-else", "outer"]);
    assert!(all.kvs()[1..].iter().all(|kv| kv.mod_revision() == 3));
    Ok(())
}

#[tokio::test]
async fn revisions_and_headers() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;

    let fresh = client.get("k", None).await?;
    let first = header(fresh.header()).clone();
    assert_eq!(first.revision(), 1, "a fresh store is at revision 1");
    assert_ne!(first.cluster_id(), 0);
    assert_ne!(first.member_id(), 0);
    assert!(first.raft_term() >= 1);

    let put = client.put("k", "v", None).await?;
    let put_header = header(put.header());
    assert_eq!(put_header.revision(), 2);
    assert_eq!((put_header.cluster_id(), put_header.member_id()), (first.cluster_id(), first.member_id()));
    let kv = client.get("k", None).await?.kvs()[0].clone();
    assert_eq!((kv.create_revision(), kv.mod_revision(), kv.version()), (2, 2, 1));

    assert_eq!(header(client.delete("missing", None).await?.header()).revision(), 2);
    assert_eq!(header(client.put("k", "v2", None).await?.header()).revision(), 3);
    assert_eq!(header(client.delete("k", None).await?.header()).revision(), 4);
    // Deleting again changes nothing.
    assert_eq!(header(client.delete("k", None).await?.header()).revision(), 4);

    let three =
        Txn::new().and_then([TxnOp::put("x", "1", None), TxnOp::put("y", "2", None), TxnOp::put("z", "3", None)]);
    assert_eq!(header(client.txn(three).await?.header()).revision(), 5);
    let read_only = Txn::new().and_then([TxnOp::get("x", None), TxnOp::get("y", None)]);
    assert_eq!(header(client.txn(read_only).await?.header()).revision(), 5);

    let status = client.status().await?;
    let status_header = header(status.header());
    assert_eq!((status_header.cluster_id(), status_header.member_id()), (first.cluster_id(), first.member_id()));
    assert_eq!(status_header.revision(), 5);
    Ok(())
}

#[tokio::test]
async fn txn_op_headers_follow_the_writes() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    client.put("a", "1", None).await?; // rev 2

    // A range before the txn's first write reports the revision the txn started at; ops from the
    // first write on report the txn's new revision.
    let txn = Txn::new().and_then([
        TxnOp::get("a", None),
        TxnOp::delete("missing", None),
        TxnOp::put("b", "2", None),
        TxnOp::get("a", None),
    ]);
    let resp = client.txn(txn).await?;
    assert_eq!(header(resp.header()).revision(), 3);
    let revisions: Vec<i64> = resp
        .op_responses()
        .iter()
        .map(|op| match op {
            TxnOpResponse::Put(r) => header(r.header()).revision(),
            TxnOpResponse::Get(r) => header(r.header()).revision(),
            TxnOpResponse::Delete(r) => header(r.header()).revision(),
            TxnOpResponse::Txn(r) => header(r.header()).revision(),
        })
        .collect();
    assert_eq!(revisions, [2, 2, 3, 3]);
    Ok(())
}

#[tokio::test]
async fn compare_on_lease() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let lease = client.lease_grant(60, None).await?.id();
    client.put("l", "leased", Some(PutOptions::new().with_lease(lease))).await?;
    client.put("a", "plain", None).await?;

    let cases = [
        (Compare::lease("l", CompareOp::Equal, lease), true),
        (Compare::lease("l", CompareOp::Equal, 0), false),
        (Compare::lease("l", CompareOp::Greater, 0), true),
        (Compare::lease("a", CompareOp::Equal, 0), true),
        (Compare::lease("missing", CompareOp::Equal, 0), true),
    ];
    for (compare, want) in cases {
        assert_eq!(client.txn(Txn::new().when([compare.clone()])).await?.succeeded(), want, "{compare:?}");
    }
    Ok(())
}
