//! Leader failure under load: `kill -9` of the leader of three members while four writers put
//! through every member. No acknowledged write is lost, a new leader takes over, and the killed
//! member catches up after a restart.

use std::time::{Duration, Instant};

use tests::{Cluster, ClusterConfig, Timing};

use crate::cluster_writer::{assert_acks_present, read_prefix, Load};

const WRITERS: usize = 4;
const PREFIX: &str = "failover/";
/// Acknowledged writes (in all) before the kill, so that it lands mid-load.
const ACKS_BEFORE_KILL: usize = 200;
/// Acknowledged writes each writer must get after the kill, on a surviving member.
const ACKS_AFTER_KILL: usize = 20;
/// Bounds on load phases; generous because parallel tests share a couple of CPUs.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_leader_kill9() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::FAST), ..ClusterConfig::new(3) }).await?;
    let old_leader = cluster.leader().await?;
    let old_term = cluster.member(old_leader).status().await?.raft_term;
    let endpoints = cluster.members().iter().map(|m| m.endpoint()).collect();
    let load = Load::start(endpoints, PREFIX, WRITERS);

    load.wait_for("acks before the kill", LOAD_TIMEOUT, |acked| acked.iter().sum::<usize>() >= ACKS_BEFORE_KILL)
        .await?;
    cluster.member_mut(old_leader).kill9()?;
    let killed_at = Instant::now();
    let at_kill = load.acked();

    let new_leader = cluster.leader().await?;
    eprintln!(
        "{} replaced {} as leader within {:?} of the kill",
        cluster.member(new_leader).name(),
        cluster.member(old_leader).name(),
        killed_at.elapsed()
    );
    assert_ne!(new_leader, old_leader);
    let new_term = cluster.member(new_leader).status().await?.raft_term;
    assert!(new_term > old_term, "an election raises the term: {old_term} -> {new_term}");

    // Every writer, including those that wrote through the killed member, goes on writing.
    load.wait_progress(&at_kill, ACKS_AFTER_KILL, LOAD_TIMEOUT).await?;
    let reports = load.stop().await?;
    for report in &reports {
        report.assert_revisions_increase();
        assert!(report.acks.iter().any(|ack| ack.at > killed_at), "writer {} acked nothing after the kill", report.id);
        eprintln!(
            "writer {}: {} acks, failures: {:?}",
            report.id,
            report.acks.len(),
            report.failures.iter().map(|(_, at, err)| (at, err)).collect::<Vec<_>>()
        );
    }

    // Each survivor holds every acknowledged write in its own store (serializable read) once they
    // have applied the same log, and serves them linearizably.
    let survivors: Vec<usize> = (0..3).filter(|&i| i != old_leader).collect();
    cluster.wait_converged(&survivors).await?;
    let mut maps = Vec::new();
    for &i in &survivors {
        let member = cluster.member(i);
        let mut client = member.client().await?;
        let local = read_prefix(&mut client, PREFIX, true).await?;
        assert_acks_present(&reports, &local, &format!("serializable read at {}", member.name()));
        let linearizable = read_prefix(&mut client, PREFIX, false).await?;
        assert_acks_present(&reports, &linearizable, &format!("linearizable read at {}", member.name()));
        assert_eq!(local, linearizable, "{}: nothing was written meanwhile", member.name());
        maps.push(local);
    }
    assert!(maps[0] == maps[1], "the survivors differ: {} and {} keys", maps[0].len(), maps[1].len());

    // The killed member restarts with its bootstrap flags and catches up.
    cluster.member_mut(old_leader).restart().await?;
    cluster.wait_converged(&[0, 1, 2]).await?;
    let restarted = cluster.member(old_leader);
    let mut client = restarted.client().await?;
    let local = read_prefix(&mut client, PREFIX, true).await?;
    assert!(
        local == maps[0],
        "{} after its restart holds {} keys, the survivors {}",
        restarted.name(),
        local.len(),
        maps[0].len()
    );
    Ok(())
}
