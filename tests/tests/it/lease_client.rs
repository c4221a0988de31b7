//! The Lease service through the etcd-client crate: client-chosen IDs, errors with etcd's exact
//! codes and messages, keep-alive and TimeToLive of unknown leases, keys attached and detached,
//! revoke as one revision, and Leases.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::{Client, Error, LeaseGrantOptions, LeaseTimeToLiveOptions, PutOptions, Txn, TxnOp};
use tests::{assert_grpc_error, Member};
use tonic::Code;

use crate::util::{current_revision, header};

const LEASE_EXISTS: &str = "etcdserver: lease already exists";
const LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";
const TTL_TOO_LARGE: &str = "etcdserver: too large lease TTL";
/// How long a keep-alive response may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

fn with_lease(id: i64) -> Option<PutOptions> {
    Some(PutOptions::new().with_lease(id))
}

/// The keys TimeToLive (with `keys`) reports for `id`, sorted.
async fn attached_keys(client: &mut Client, id: i64) -> anyhow::Result<Vec<String>> {
    let ttl = client.lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys())).await?;
    let mut keys: Vec<String> = ttl.keys().iter().map(|key| String::from_utf8_lossy(key).into_owned()).collect();
    keys.sort();
    Ok(keys)
}

async fn listed_leases(client: &mut Client) -> anyhow::Result<BTreeSet<i64>> {
    let leases = client.leases().await?;
    header(leases.header());
    Ok(leases.leases().iter().map(|lease| lease.id()).collect())
}

#[tokio::test]
async fn grant_with_chosen_id() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let id = 0x1234_5678;
    let granted = client.lease_grant(60, Some(LeaseGrantOptions::new().with_id(id))).await?;
    assert_eq!((granted.id(), granted.ttl(), granted.error()), (id, 60, ""));
    // A grant takes no revision.
    assert_eq!(header(granted.header()).revision(), 1);

    for ttl in [60, 30] {
        assert_grpc_error(
            client.lease_grant(ttl, Some(LeaseGrantOptions::new().with_id(id))).await,
            Code::FailedPrecondition,
            LEASE_EXISTS,
        );
    }
    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!((ttl.id(), ttl.granted_ttl()), (id, 60), "the failed grants changed nothing");

    // A server-chosen ID never collides with an existing one.
    let other = client.lease_grant(60, None).await?;
    assert!(other.id() > 0 && other.id() != id, "{other:?}");

    assert_grpc_error(client.lease_grant(9_000_000_001, None).await, Code::OutOfRange, TTL_TOO_LARGE);
    // Below etcd's minimum (1.5 × the 1 s election timeout, rounded up) the TTL is raised.
    assert_eq!(client.lease_grant(1, None).await?.ttl(), 2);
    assert_eq!(listed_leases(&mut client).await?.len(), 3);
    Ok(())
}

#[tokio::test]
async fn unknown_lease_errors() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let unknown = 0x7777;
    assert_grpc_error(client.lease_revoke(unknown).await, Code::NotFound, LEASE_NOT_FOUND);
    assert_grpc_error(client.put("k", "v", with_lease(unknown)).await, Code::NotFound, LEASE_NOT_FOUND);
    let txn = Txn::new().and_then([TxnOp::put("t", "v", None), TxnOp::put("k", "v", with_lease(unknown))]);
    assert_grpc_error(client.txn(txn).await, Code::NotFound, LEASE_NOT_FOUND);
    assert_eq!(current_revision(&mut client).await?, 1, "the failed writes changed nothing");

    // TimeToLive of an unknown lease is no error: TTL -1.
    let ttl = client.lease_time_to_live(unknown, Some(LeaseTimeToLiveOptions::new().with_keys())).await?;
    header(ttl.header());
    assert_eq!((ttl.id(), ttl.ttl(), ttl.granted_ttl()), (unknown, -1, 0));
    assert!(ttl.keys().is_empty(), "{ttl:?}");
    Ok(())
}

#[tokio::test]
async fn keep_alive_of_unknown_lease_answers_ttl_0() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;

    // The crate opens the stream, sends one request and reads one answer: a TTL of 0 (rather than
    // a gRPC status, which would be `Error::GRpcStatus`) makes it give up with this error.
    match client.lease_keep_alive(0x7777).await {
        Err(Error::LeaseKeepAliveError(message)) => assert_eq!(message, "lease not found"),
        other => panic!("expected a TTL 0 answer, got {other:?}"),
    }

    // On a stream that is open already: the answer for a revoked lease is TTL 0, and the stream
    // goes on serving.
    let id = client.lease_grant(60, None).await?.id();
    let (mut keeper, mut stream) = client.lease_keep_alive(id).await?;
    keeper.keep_alive().await?;
    let kept = tokio::time::timeout(ANSWER_TIMEOUT, stream.message()).await??;
    let kept = kept.expect("the stream ended");
    assert_eq!((kept.id(), kept.ttl()), (id, 60));
    header(kept.header());

    client.lease_revoke(id).await?;
    keeper.keep_alive().await?;
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, stream.message()).await??;
    let answer = answer.expect("the stream ended instead of answering TTL 0");
    assert_eq!((answer.id(), answer.ttl()), (id, 0));
    header(answer.header());

    keeper.keep_alive().await?;
    let again = tokio::time::timeout(ANSWER_TIMEOUT, stream.message()).await??;
    assert_eq!(again.map(|a| (a.id(), a.ttl())), Some((id, 0)));
    Ok(())
}

/// The countdown starts when the lease is granted, and TimeToLive rounds the remaining time down
/// (etcd: `int64(Remaining().Seconds())`), so a lease never reports its full TTL after the grant
/// returned: "the lease will expire in under TTL+1 seconds".
#[tokio::test]
async fn countdown_starts_at_the_grant() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let id = client.lease_grant(60, None).await?.id();
    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!((ttl.granted_ttl(), ttl.ttl()), (60, 59), "right after the grant");
    // The same after a keep-alive, which restarts the countdown.
    let (_keeper, _stream) = client.lease_keep_alive(id).await?;
    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!((ttl.granted_ttl(), ttl.ttl()), (60, 59), "right after a keep-alive");
    Ok(())
}

#[tokio::test]
async fn keys_attach_and_detach() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let id = client.lease_grant(60, None).await?.id();
    client.put("a", "1", with_lease(id)).await?;
    client.put("b", "1", with_lease(id)).await?;
    client.put("c", "1", with_lease(id)).await?;
    assert_eq!(attached_keys(&mut client, id).await?, ["a", "b", "c"]);
    let kvs = client.get("a", None).await?;
    assert_eq!(kvs.kvs()[0].lease(), id);

    // Without `keys`, TimeToLive lists none.
    let ttl = client.lease_time_to_live(id, None).await?;
    assert!(ttl.keys().is_empty(), "{ttl:?}");
    assert_eq!(ttl.granted_ttl(), 60);
    assert!((55..=60).contains(&ttl.ttl()), "{ttl:?}");

    // Deleting a key detaches it; so does overwriting it without a lease.
    client.delete("a", None).await?;
    assert_eq!(attached_keys(&mut client, id).await?, ["b", "c"]);
    client.put("b", "2", None).await?;
    assert_eq!(attached_keys(&mut client, id).await?, ["c"]);
    assert_eq!(client.get("b", None).await?.kvs()[0].lease(), 0);

    // Moving a key to another lease detaches it from the first one.
    let other = client.lease_grant(60, None).await?.id();
    client.put("c", "2", with_lease(other)).await?;
    assert!(attached_keys(&mut client, id).await?.is_empty());
    assert_eq!(attached_keys(&mut client, other).await?, ["c"]);

    // So revoking the first lease deletes nothing.
    let before = current_revision(&mut client).await?;
    let revoked = client.lease_revoke(id).await?;
    assert_eq!(header(revoked.header()).revision(), before);
    assert_eq!(client.get("b", None).await?.count(), 1);
    assert_eq!(client.get("c", None).await?.count(), 1);
    Ok(())
}

#[tokio::test]
async fn revoke_deletes_every_key_at_one_revision() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let id = client.lease_grant(60, None).await?.id();
    for key in ["k1", "k2", "k3"] {
        client.put(key, "v", with_lease(id)).await?;
    }
    client.put("other", "v", None).await?;
    let before = current_revision(&mut client).await?;
    assert_eq!(before, 5);

    let revoked = client.lease_revoke(id).await?;
    assert_eq!(header(revoked.header()).revision(), before + 1, "the three deletes share one revision");
    for key in ["k1", "k2", "k3"] {
        assert_eq!(client.get(key, None).await?.count(), 0, "{key} survived the revoke");
    }
    assert_eq!(client.get("other", None).await?.count(), 1);
    assert_eq!(current_revision(&mut client).await?, before + 1);

    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!(ttl.ttl(), -1);
    assert!(listed_leases(&mut client).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn leases_lists_live_leases() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    assert!(listed_leases(&mut client).await?.is_empty());

    let first = client.lease_grant(60, None).await?.id();
    let second = client.lease_grant(10, None).await?.id();
    let chosen = client.lease_grant(30, Some(LeaseGrantOptions::new().with_id(42))).await?.id();
    assert_eq!(chosen, 42);
    assert_eq!(listed_leases(&mut client).await?, BTreeSet::from([first, second, chosen]));

    client.lease_revoke(second).await?;
    assert_eq!(listed_leases(&mut client).await?, BTreeSet::from([first, chosen]));
    Ok(())
}
