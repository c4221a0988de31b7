//! Every KV error through the etcd-client crate: the gRPC code and etcd's exact message (the Go
//! client maps errors back to types by their text), and that a failed request changes nothing.

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};
use tests::{assert_grpc_error, Member, MemberConfig};
use tonic::Code;

use crate::util::{current_revision, put_all};

const KEY_NOT_PROVIDED: &str = "etcdserver: key is not provided";
const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
const FUTURE_REV: &str = "etcdserver: mvcc: required revision is a future revision";
const TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
const DUPLICATE_KEY: &str = "etcdserver: duplicate key given in txn request";
const TOO_LARGE: &str = "etcdserver: request is too large";

const MIB: usize = 1024 * 1024;

fn puts(prefix: &str, n: usize) -> Vec<TxnOp> {
    (0..n).map(|i| TxnOp::put(format!("{prefix}{i}"), "v", None)).collect()
}

#[tokio::test]
async fn empty_key_is_rejected() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    assert_grpc_error(client.get("", None).await, Code::InvalidArgument, KEY_NOT_PROVIDED);
    assert_grpc_error(client.put("", "v", None).await, Code::InvalidArgument, KEY_NOT_PROVIDED);
    assert_grpc_error(client.delete("", None).await, Code::InvalidArgument, KEY_NOT_PROVIDED);
    let compare = Txn::new().when([Compare::value("", CompareOp::Equal, "v")]);
    assert_grpc_error(client.txn(compare).await, Code::InvalidArgument, KEY_NOT_PROVIDED);
    let op = Txn::new().and_then([TxnOp::put("", "v", None)]);
    assert_grpc_error(client.txn(op).await, Code::InvalidArgument, KEY_NOT_PROVIDED);
    assert_eq!(current_revision(&mut client).await?, 1);
    Ok(())
}

#[tokio::test]
async fn compacted_and_future_revisions() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    put_all(&mut client, &[("k", "2"), ("k", "3"), ("k", "4"), ("k", "5")]).await?;

    let at = |revision| Some(GetOptions::new().with_revision(revision));
    assert_grpc_error(client.get("k", at(6)).await, Code::OutOfRange, FUTURE_REV);
    assert_grpc_error(client.compact(6, None).await, Code::OutOfRange, FUTURE_REV);

    let compacted = client.compact(4, None).await?;
    assert_eq!(crate::util::header(compacted.header()).revision(), 5);
    // Compaction itself takes no revision.
    assert_eq!(current_revision(&mut client).await?, 5);

    assert_grpc_error(client.get("k", at(3)).await, Code::OutOfRange, COMPACTED);
    assert_grpc_error(client.get("k", at(2)).await, Code::OutOfRange, COMPACTED);
    // Reading exactly at the compacted revision still works.
    assert_eq!(client.get("k", at(4)).await?.kvs()[0].value(), b"4");
    assert_eq!(client.get("k", at(5)).await?.kvs()[0].value(), b"5");

    assert_grpc_error(client.compact(4, None).await, Code::OutOfRange, COMPACTED);
    assert_grpc_error(client.compact(3, None).await, Code::OutOfRange, COMPACTED);

    // A range inside a txn fails the whole txn with the same errors.
    let old = Txn::new().and_then([TxnOp::put("x", "1", None), TxnOp::get("k", at(3))]);
    assert_grpc_error(client.txn(old).await, Code::OutOfRange, COMPACTED);
    let future = Txn::new().and_then([TxnOp::put("x", "1", None), TxnOp::get("k", at(100))]);
    assert_grpc_error(client.txn(future).await, Code::OutOfRange, FUTURE_REV);
    assert_eq!(client.get("x", None).await?.count(), 0);
    assert_eq!(current_revision(&mut client).await?, 5);

    // Compacting up to the current revision is allowed.
    client.compact(5, None).await?;
    assert_grpc_error(client.get("k", at(4)).await, Code::OutOfRange, COMPACTED);
    Ok(())
}

#[tokio::test]
async fn txn_op_limit_default() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    assert_grpc_error(client.txn(Txn::new().and_then(puts("k", 129))).await, Code::InvalidArgument, TOO_MANY_OPS);
    let compares: Vec<Compare> = (0..129).map(|i| Compare::version(format!("k{i}"), CompareOp::Equal, 0)).collect();
    assert_grpc_error(client.txn(Txn::new().when(compares)).await, Code::InvalidArgument, TOO_MANY_OPS);
    assert_eq!(current_revision(&mut client).await?, 1);

    let resp = client.txn(Txn::new().and_then(puts("k", 128))).await?;
    assert_eq!(resp.op_responses().len(), 128);
    assert_eq!(client.get("k", Some(GetOptions::new().with_prefix())).await?.count(), 128);
    Ok(())
}

#[tokio::test]
async fn txn_op_limit_flag() -> anyhow::Result<()> {
    let member = Member::start_with(MemberConfig { max_txn_ops: Some(4), ..MemberConfig::default() }).await?;
    let mut client = member.client().await?;
    assert_grpc_error(client.txn(Txn::new().and_then(puts("a", 5))).await, Code::InvalidArgument, TOO_MANY_OPS);
    assert_grpc_error(client.txn(Txn::new().or_else(puts("a", 5))).await, Code::InvalidArgument, TOO_MANY_OPS);
    client.txn(Txn::new().and_then(puts("a", 4))).await?;
    // The limit applies to each list on its own, not to their sum.
    client.txn(Txn::new().and_then(puts("b", 4)).or_else(puts("c", 4))).await?;
    assert_eq!(current_revision(&mut client).await?, 3);
    Ok(())
}

#[tokio::test]
async fn duplicate_keys_in_txn() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let put = |key: &str| TxnOp::put(key, "v", None);
    let del = |key: &str| TxnOp::delete(key, None);
    let rejected = [
        Txn::new().and_then([put("d"), put("d")]),
        Txn::new().and_then([put("d"), del("d")]),
        Txn::new().or_else([del("d"), put("d")]),
        Txn::new().and_then([put("d/1"), TxnOp::delete("d/", Some(DeleteOptions::new().with_prefix()))]),
        Txn::new().and_then([put("d"), TxnOp::txn(Txn::new().and_then([put("d")]))]),
    ];
    for txn in rejected {
        assert_grpc_error(client.txn(txn.clone()).await, Code::InvalidArgument, DUPLICATE_KEY);
    }
    assert_eq!(current_revision(&mut client).await?, 1);

    let accepted = [
        // The branches never both run.
        Txn::new().and_then([put("d")]).or_else([put("d")]),
        // Reads and repeated deletes do not conflict.
        Txn::new().and_then([TxnOp::get("d", None), put("d"), TxnOp::get("d", None)]),
        Txn::new().and_then([del("d"), del("d")]),
    ];
    for txn in accepted {
        client.txn(txn).await?;
    }
    Ok(())
}

/// The size of a PutRequest for a 1-byte key on the wire: key (tag, length, byte) and value (tag,
/// varint length, bytes).
fn put_request_len(value_len: usize) -> usize {
    let varint_len = (usize::BITS - value_len.leading_zeros()).div_ceil(7).max(1) as usize;
    3 + 1 + varint_len + value_len
}

async fn put_of(client: &mut Client, value_len: usize) -> Result<etcd_client::PutResponse, etcd_client::Error> {
    client.put("a", vec![b'x'; value_len], None).await
}

#[tokio::test]
async fn request_too_large_default() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    put_of(&mut client, 14 * MIB / 10).await?;
    // A proposal above max-request-bytes (1.5 MiB, counting the request's envelope) is refused.
    assert_grpc_error(put_of(&mut client, 3 * MIB / 2).await, Code::InvalidArgument, TOO_LARGE);
    assert_grpc_error(put_of(&mut client, 16 * MIB / 10).await, Code::InvalidArgument, TOO_LARGE);
    assert_eq!(current_revision(&mut client).await?, 2);
    assert_eq!(client.get("a", None).await?.kvs()[0].value().len(), 14 * MIB / 10);
    Ok(())
}

#[tokio::test]
async fn request_too_large_flag() -> anyhow::Result<()> {
    let config = MemberConfig { max_request_bytes: Some(1024), ..MemberConfig::default() };
    let member = Member::start_with(config).await?;
    let mut client = member.client().await?;
    put_of(&mut client, 900).await?;
    assert_grpc_error(put_of(&mut client, 1100).await, Code::InvalidArgument, TOO_LARGE);
    // The limit is on the whole request, not on each value.
    let txn = Txn::new().and_then([TxnOp::put("a", vec![b'x'; 600], None), TxnOp::put("b", vec![b'x'; 600], None)]);
    assert_grpc_error(client.txn(txn).await, Code::InvalidArgument, TOO_LARGE);
    assert_eq!(current_revision(&mut client).await?, 2);
    Ok(())
}

/// Above max-request-bytes + 512 KiB, gRPC itself refuses to read the message (grpc-go's
/// ResourceExhausted and text; tonic's own limit answers OutOfRange with another text).
#[tokio::test]
async fn grpc_receive_limit() -> anyhow::Result<()> {
    let default = Member::start().await?;
    let config = MemberConfig { max_request_bytes: Some(1024), ..MemberConfig::default() };
    let small = Member::start_with(config).await?;
    for (member, limit, len) in [(&default, 2 * MIB, 3 * MIB), (&small, 1024 + 512 * 1024, 530 * 1024)] {
        let mut client = member.client().await?;
        let message = format!("grpc: received message larger than max ({} vs. {limit})", put_request_len(len));
        assert_grpc_error(put_of(&mut client, len).await, Code::ResourceExhausted, &message);
        assert_eq!(current_revision(&mut client).await?, 1);
    }
    Ok(())
}

#[tokio::test]
async fn put_option_errors() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let ignore_value = || Some(PutOptions::new().with_ignore_value());
    let ignore_lease = || Some(PutOptions::new().with_ignore_lease());
    let not_found = "etcdserver: key not found";

    assert_grpc_error(client.put("missing", "", ignore_value()).await, Code::InvalidArgument, not_found);
    assert_grpc_error(client.put("missing", "v", ignore_lease()).await, Code::InvalidArgument, not_found);
    let in_txn = Txn::new().and_then([TxnOp::put("other", "v", None), TxnOp::put("missing", "", ignore_value())]);
    assert_grpc_error(client.txn(in_txn).await, Code::InvalidArgument, not_found);
    // The request is checked before the store: a value with ignore_value fails even on a missing key.
    assert_grpc_error(
        client.put("missing", "v", ignore_value()).await,
        Code::InvalidArgument,
        "etcdserver: value is provided",
    );

    client.put("k", "v", None).await?;
    assert_grpc_error(
        client.put("k", "v2", ignore_value()).await,
        Code::InvalidArgument,
        "etcdserver: value is provided",
    );
    let with_lease = Some(PutOptions::new().with_ignore_lease().with_lease(7));
    assert_grpc_error(client.put("k", "v2", with_lease).await, Code::InvalidArgument, "etcdserver: lease is provided");

    assert_eq!(current_revision(&mut client).await?, 2);
    assert_eq!(client.get("other", None).await?.count(), 0);
    Ok(())
}

#[tokio::test]
async fn put_with_unknown_lease() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let not_found = "etcdserver: requested lease not found";
    let unknown_lease = || Some(PutOptions::new().with_lease(12345));
    assert_grpc_error(client.put("k", "v", unknown_lease()).await, Code::NotFound, not_found);
    let in_txn = Txn::new().and_then([TxnOp::put("k", "v", unknown_lease())]);
    assert_grpc_error(client.txn(in_txn).await, Code::NotFound, not_found);
    assert_eq!(current_revision(&mut client).await?, 1);
    Ok(())
}
