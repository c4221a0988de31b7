//! A follower that stops for a while (SIGSTOP for three election timeouts) and comes back behind
//! the leader's log must not depose the healthy leader: the leader and the term stay the same.
//!
//! etcd 3.4 runs without pre-vote by default (`--pre-vote=false`), yet a stopped process does not
//! tick, so the resumed follower hears from the leader before its election timer fires and never
//! campaigns. (A follower that is partitioned while running would keep campaigning and raise its
//! term; that is not what this test does.) Observed with etcd 3.4.23: leader and term unchanged.

use std::time::Instant;

use tests::{Cluster, ClusterConfig, Timing};

/// etcd's default timing, spelled out: with 50/500 ms a loaded machine might miss heartbeats and
/// hold a real election, which would be a false failure here.
const TIMING: Timing = Timing::DEFAULT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_follower_does_not_depose_the_leader() -> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(ClusterConfig { timing: Some(TIMING), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let before = cluster.member(leader).status().await?;
    let mut client = cluster.member(leader).client().await?;

    for follower in (0..3).filter(|&i| i != leader) {
        let name = cluster.member(follower).name().to_owned();
        cluster.member_mut(follower).pause()?;
        let paused_at = Instant::now();
        // The follower misses these, so it comes back behind the leader.
        for i in 0..20 {
            client.put(format!("{name}/{i}"), "v", None).await?;
        }
        // The pause's length is the point of the test, not a wait for something to happen.
        tokio::time::sleep_until((paused_at + 3 * TIMING.election).into()).await;
        cluster.member_mut(follower).resume()?;

        cluster.wait_converged(&[0, 1, 2]).await?;
        // Give a disruptive election time to happen before looking.
        tokio::time::sleep(2 * TIMING.election).await;
        let statuses = cluster.statuses(&[0, 1, 2]).await?;
        for status in &statuses {
            assert_eq!(
                (status.leader, status.raft_term),
                (before.member_id, before.raft_term),
                "after {name} was paused for {:?}: {statuses:?}",
                3 * TIMING.election
            );
        }
    }
    assert_eq!(cluster.leader().await?, leader);
    Ok(())
}
