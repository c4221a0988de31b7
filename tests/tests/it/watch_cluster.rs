//! Watches on every member of a three-member cluster: followers serve the same events as the leader,
//! and a stream opened with `hasleader` ends with "etcdserver: no leader" when its member loses the
//! leader (and is refused while there is none), as etcd does.

use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, DeleteOptions, Txn, TxnOp, WatchOptions, WatchStream};
use tests::{grpc_error, Cluster, ClusterConfig, ClusterMember, Timing};
use tonic::Code;

use crate::watch_util::{describe, next, recv, within};

/// Receives until `count` events arrived; returns their descriptions.
async fn events(stream: &mut WatchStream, count: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < count {
        let resp = recv(stream).await;
        out.extend(resp.events().iter().map(crate::watch_util::describe_event));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_serves_the_same_events() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let mut live = Vec::new();
    for member in cluster.members() {
        let client = member.client().await?;
        let options = WatchOptions::new().with_prefix().with_prev_key();
        let mut stream = client.watch_client().watch("w/", Some(options)).await?;
        let created = next(&mut stream).await;
        assert!(created.starts_with("id=0 created"), "{created}");
        live.push(stream);
    }

    // Writes through every member, the leader last.
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.push(leader);
    for (round, &i) in order.iter().enumerate() {
        let mut client = cluster.member(i).client().await?;
        client.put(format!("w/{round}"), "a", None).await?;
        client.put(format!("w/{round}"), "b", None).await?;
        let txn = Txn::new()
            .and_then([TxnOp::put(format!("w/{round}-t"), "1", None), TxnOp::delete(format!("w/{round}"), None)]);
        client.txn(txn).await?;
    }
    let mut client = cluster.member(order[0]).client().await?;
    client.delete("w/", Some(DeleteOptions::new().with_prefix())).await?;
    let total = 3 * 4 + 3;

    let mut seen = Vec::new();
    for stream in &mut live {
        seen.push(events(stream, total).await);
    }
    // The same history from revision 1, served by a follower's store.
    let follower = order[0];
    let options = WatchOptions::new().with_prefix().with_prev_key().with_start_revision(1);
    let mut replay = cluster.member(follower).client().await?.watch_client().watch("w/", Some(options)).await?;
    next(&mut replay).await;
    seen.push(events(&mut replay, total).await);
    for (i, other) in seen.iter().enumerate().skip(1) {
        assert_eq!(other, &seen[0], "watcher {i} differs from the first member's");
    }
    assert!(seen[0][2].starts_with("PUT w/0-t=1@"), "{:?}", seen[0]);
    Ok(())
}

async fn leader_watch(member: &ClusterMember) -> anyhow::Result<Result<WatchStream, etcd_client::Error>> {
    let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2)).with_require_leader(true);
    let client = Client::connect([member.endpoint()], Some(options)).await?;
    Ok(client.watch_client().watch("k", None).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hasleader_streams_end_when_the_leader_is_lost() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::FAST), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let survivor = (leader + 1) % 3;
    let mut required = leader_watch(cluster.member(survivor)).await??;
    assert_eq!(next(&mut required).await, "id=0 created rev=1");
    let mut plain = cluster.member(survivor).client().await?.watch_client().watch("k", None).await?;
    assert_eq!(next(&mut plain).await, "id=0 created rev=1");

    for i in (0..3).filter(|&i| i != survivor) {
        cluster.member_mut(i).kill9()?;
    }
    let killed = Instant::now();
    // etcd cancels after three election timeouts without a leader, checked once per election timeout.
    let ended = tokio::time::timeout(Duration::from_secs(20), required.message()).await?;
    match ended {
        Err(err) => {
            assert_eq!(grpc_error(&err), Some((Code::Unavailable, "etcdserver: no leader".to_owned())), "{err}")
        }
        Ok(other) => panic!("expected the stream to fail, got {:?}", other.map(|r| describe(&r))),
    }
    let after = killed.elapsed();
    assert!(after >= Duration::from_millis(1500), "cancelled after only {after:?}");
    // While there is no leader, such streams are refused at once; others still open.
    match leader_watch(cluster.member(survivor)).await? {
        Err(err) => {
            assert_eq!(grpc_error(&err), Some((Code::Unavailable, "etcdserver: no leader".to_owned())), "{err}")
        }
        Ok(_) => panic!("a hasleader stream opened without a leader"),
    }
    assert_eq!(within(&mut plain, Duration::from_millis(500)).await, None);
    let mut another = cluster.member(survivor).client().await?.watch_client().watch("k", None).await?;
    assert_eq!(next(&mut another).await, "id=0 created rev=1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_watch_survives_catching_up_by_snapshot() -> anyhow::Result<()> {
    // A small --snapshot-count: a leader that compacts its log at the snapshot must send the paused
    // follower a snapshot (etcd keeps 5,000 entries and sends the log; watchers must not tell).
    let mut cluster = Cluster::start_with(ClusterConfig { snapshot_count: Some(50), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let follower = (leader + 1) % 3;
    let options = WatchOptions::new().with_prefix().with_prev_key();
    let mut stream = cluster.member(follower).client().await?.watch_client().watch("s/", Some(options)).await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=1");

    cluster.member_mut(follower).pause()?;
    let mut client = cluster.member(leader).client().await?;
    let keys = 300;
    for i in 0..keys {
        client.put(format!("s/{:03}", i % 100), format!("v{i}"), None).await?; // 2..=301
    }
    cluster.member_mut(follower).resume()?;

    let received = events(&mut stream, keys).await;
    for (i, event) in received.iter().enumerate() {
        let rev = i + 2;
        let (key, version) = (format!("s/{:03}", i % 100), i / 100 + 1);
        let mut want = format!("PUT {key}=v{i}@{rev}/c{}/v{version}", (i % 100) + 2);
        if version > 1 {
            want.push_str(&format!(" prev={key}=v{}@{}/c{}/v{}", i - 100, rev - 100, (i % 100) + 2, version - 1));
        }
        assert_eq!(event, &want, "event {i}");
    }
    assert_eq!(within(&mut stream, Duration::from_millis(500)).await, None);
    Ok(())
}
