//! Check quorum: a leader that has heard from no quorum for an election timeout knows no leader, as
//! etcd's (its raft runs with CheckQuorum and the leader steps down): Status names no leader, the
//! `etcd_server_has_leader` gauge reads 0, requests that require a leader fail with "etcdserver: no
//! leader", and quorum reads fail. Once its followers answer again the cluster serves as before.

use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use tests::http::{self, Metrics};
use tests::{grpc_error, Cluster, ClusterConfig, Timing};
use tonic::Code;

/// How soon the cut-off leader must give up its leadership. etcd checks once per election timeout (1 s
/// here), so it gives up one to two election timeouts after the last answer (measured: about 1.5 s).
const STEP_DOWN_BOUND: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_quorum_knows_no_leader() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::DEFAULT), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let url = cluster.member(leader).client_url();
    assert_eq!(has_leader(&url).await?, 1.0);
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &i in &followers {
        cluster.member_mut(i).pause()?;
    }
    let paused = Instant::now();
    loop {
        let status = cluster.member(leader).status().await?;
        if status.leader == 0 {
            break;
        }
        assert!(paused.elapsed() < STEP_DOWN_BOUND, "still a leader {STEP_DOWN_BOUND:?} without a quorum: {status:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("the cut-off leader knew no leader {:?} after its followers stopped", paused.elapsed());
    assert_eq!(has_leader(&url).await?, 0.0);

    let options = ConnectOptions::new().with_timeout(Duration::from_secs(2)).with_require_leader(true);
    let mut requiring = Client::connect([cluster.member(leader).endpoint()], Some(options)).await?;
    let err = requiring.put("k", "v", None).await.expect_err("a put requiring a leader succeeded");
    assert_eq!(grpc_error(&err), Some((Code::Unavailable, "etcdserver: no leader".to_owned())), "{err}");
    let options = ConnectOptions::new().with_timeout(Duration::from_secs(2));
    let mut plain = Client::connect([cluster.member(leader).endpoint()], Some(options)).await?;
    assert!(plain.get("k", None).await.is_err(), "a quorum read succeeded without a quorum");

    for &i in &followers {
        cluster.member_mut(i).resume()?;
    }
    let leader = cluster.leader().await?;
    cluster.member(leader).client().await?.put("k", "after", None).await?;
    for i in 0..3 {
        assert_eq!(has_leader(&cluster.member(i).client_url()).await?, 1.0, "{}", cluster.member(i).name());
    }
    Ok(())
}

async fn has_leader(client_url: &str) -> anyhow::Result<f64> {
    let answer = http::get(client_url, "/metrics").await?;
    Ok(Metrics::parse(&answer.body)?.value("etcd_server_has_leader", &[]))
}
