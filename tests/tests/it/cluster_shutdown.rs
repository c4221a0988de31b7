//! SIGTERM of the leader, as an operator or systemd stops a member: like etcd, the leader hands its
//! leadership to a follower before it exits, so the survivors already follow a new leader when the
//! process is gone (a member that merely vanished would stay their leader for an election timeout).
//! Writes acknowledged through the survivors before, during and after the stop are all there.

use std::time::Duration;

use tests::{Cluster, ClusterConfig, Timing};

use crate::cluster_writer::{assert_acks_present, read_prefix, Load};

const PREFIX: &str = "shutdown/";
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the stopping leader may take: a hand-over waits out one election timeout.
const STOP_GRACE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminated_leader_hands_over_before_it_exits() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::DEFAULT), ..ClusterConfig::new(3) }).await?;
    let old_leader = cluster.leader().await?;
    let old_id = cluster.member(old_leader).status().await?.member_id;
    let survivors: Vec<usize> = (0..3).filter(|&i| i != old_leader).collect();
    let mut survivor_ids = Vec::new();
    for &i in &survivors {
        survivor_ids.push(cluster.member(i).status().await?.member_id);
    }
    let load = Load::start(survivors.iter().map(|&i| cluster.member(i).endpoint()).collect(), PREFIX, 2);
    load.wait_for("acks before the stop", LOAD_TIMEOUT, |acked| acked.iter().sum::<usize>() >= 50).await?;

    let exited = cluster.member_mut(old_leader).terminate(STOP_GRACE).await?;
    assert!(exited, "the leader did not exit cleanly within {STOP_GRACE:?}");
    for &i in &survivors {
        let status = cluster.member(i).status().await?;
        assert_ne!(status.leader, old_id, "{} still follows the stopped leader", cluster.member(i).name());
        assert!(survivor_ids.contains(&status.leader), "{}: leader {:x}", cluster.member(i).name(), status.leader);
    }

    let after_stop = load.acked();
    load.wait_progress(&after_stop, 10, LOAD_TIMEOUT).await?;
    let reports = load.stop().await?;
    cluster.wait_converged(&survivors).await?;
    for &i in &survivors {
        let mut client = cluster.member(i).client().await?;
        let map = read_prefix(&mut client, PREFIX, false).await?;
        assert_acks_present(&reports, &map, cluster.member(i).name());
    }
    Ok(())
}
