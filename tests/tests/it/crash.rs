//! Crash safety: every write a client saw acknowledged survives `kill -9` and a restart on the same
//! data dir, with its revision.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use tests::{Cluster, ClusterConfig, Member, Timing};

use crate::util::{current_revision, header};

const WRITERS: usize = 4;
/// How long the writers run if the member is not killed first.
const LOAD_DURATION: Duration = Duration::from_secs(3);
/// Acknowledged writes to wait for before the kill, so that it lands mid-load.
const ACKS_BEFORE_KILL: usize = 100;
const ROUNDS: usize = 2;

/// A put the server acknowledged.
#[derive(Debug, Clone)]
struct Ack {
    key: String,
    value: String,
    revision: i64,
}

/// Writes unique keys until the deadline or the first error (the kill), returning what was acked.
async fn writer(member_endpoint: String, round: usize, id: usize, acked: Arc<AtomicUsize>) -> Vec<Ack> {
    let options = etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(5));
    let Ok(mut client) = etcd_client::Client::connect([member_endpoint], Some(options)).await else {
        return Vec::new();
    };
    let deadline = Instant::now() + LOAD_DURATION;
    let mut acks = Vec::new();
    for seq in 0.. {
        if Instant::now() >= deadline {
            break;
        }
        let key = format!("crash/{round}/{id}/{seq:06}");
        let value = format!("value-{round}-{id}-{seq}");
        match client.put(key.as_str(), value.as_str(), None).await {
            Ok(resp) => {
                acks.push(Ack { key, value, revision: header(resp.header()).revision() });
                acked.fetch_add(1, Ordering::Relaxed);
            }
            // The member is gone; an unacknowledged put may or may not have been applied.
            Err(_) => break,
        }
    }
    acks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_kill9() -> anyhow::Result<()> {
    let mut member = Member::start().await?;
    let mut all_acks: Vec<Ack> = Vec::new();

    for round in 0..ROUNDS {
        let acked = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> =
            (0..WRITERS).map(|id| tokio::spawn(writer(member.endpoint(), round, id, acked.clone()))).collect();

        let deadline = Instant::now() + LOAD_DURATION;
        while acked.load(Ordering::Relaxed) < ACKS_BEFORE_KILL && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(acked.load(Ordering::Relaxed) >= ACKS_BEFORE_KILL, "round {round}: too few writes acknowledged");
        member.kill9()?;

        for writer in writers {
            all_acks.extend(writer.await?);
        }
        let max_acked = all_acks.iter().map(|ack| ack.revision).max().unwrap_or(0);

        member.restart().await?;
        let mut client = member.client().await?;
        for ack in &all_acks {
            let resp = client.get(ack.key.as_str(), None).await?;
            let kv = resp.kvs().first().unwrap_or_else(|| panic!("round {round}: acknowledged {ack:?} lost"));
            assert_eq!(kv.value(), ack.value.as_bytes(), "round {round}: {ack:?}");
            // Every key is written once, so it keeps the revision of its put.
            assert_eq!(kv.mod_revision(), ack.revision, "round {round}: {ack:?}");
        }
        let revision = current_revision(&mut client).await?;
        assert!(revision >= max_acked, "round {round}: revision {revision} went back below {max_acked}");
        let next = header(client.put("after-restart", round.to_string(), None).await?.header()).revision();
        assert!(next > revision.max(max_acked), "round {round}: new put got revision {next}");
    }

    // Acknowledged revisions are unique: no two puts were acknowledged at one revision.
    let mut revisions: Vec<i64> = all_acks.iter().map(|ack| ack.revision).collect();
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(revisions.len(), all_acks.len());
    Ok(())
}

/// `kill -9` of every member of a cluster right after two quick puts, then a restart of the old leader
/// first: a linearizable read sent to it while the others are still down sees the second put once it is
/// answered. (The leader had saved the commit index of the first put only, and its state machine had
/// committed the first only; resumed as leader on that saved commit index, it answered the read as soon as
/// a follower confirmed its leadership, with the first value — jepsen's kill-all found it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_after_every_member_restarts_sees_every_acknowledged_write() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::FAST), ..ClusterConfig::new(3) }).await?;
    for round in 0..3 {
        let leader = cluster.leader().await?;
        let mut client = cluster.member(leader).client().await?;
        client.put("crash-all", format!("first-{round}"), None).await?;
        let acked = header(client.put("crash-all", format!("second-{round}"), None).await?.header()).revision();
        for i in 0..3 {
            cluster.member_mut(i).kill9()?;
        }
        cluster.member_mut(leader).relaunch()?;
        let endpoint = cluster.member(leader).endpoint();
        let read = tokio::spawn(async move {
            let options = ConnectOptions::new().with_timeout(Duration::from_secs(2));
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let attempt = async {
                    let mut client = Client::connect([endpoint.as_str()], Some(options.clone())).await?;
                    client.get("crash-all", None).await
                };
                match attempt.await {
                    Ok(resp) => return Ok(resp),
                    // Not listening yet, or no leader yet: etcd answers the same way meanwhile.
                    Err(err) if Instant::now() < deadline => eprintln!("read: {err}"),
                    Err(err) => return Err(err),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        for i in (0..3).filter(|&i| i != leader) {
            cluster.member_mut(i).restart().await?;
        }
        let resp = read.await??;
        let kv = resp.kvs().first().expect("the key exists");
        assert_eq!(kv.value_str()?, format!("second-{round}"), "round {round}");
        assert!(header(resp.header()).revision() >= acked, "round {round}: revision went back below {acked}");
    }
    Ok(())
}
