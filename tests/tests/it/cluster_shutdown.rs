//! SIGTERM, as an operator or systemd stops a member. Like etcd, a stopping leader hands its leadership
//! to a caught-up follower before it exits, so the survivors already follow a new leader when the process
//! is gone; a leader that merely vanished would leave them leaderless for an election timeout or more.
//! Writes acknowledged through the survivors before, during and after the stop are all kept, and the
//! stopped member rejoins when started again. A follower stops promptly.

use std::time::{Duration, Instant};

use tests::http::{self, Metrics};
use tests::{Cluster, ClusterConfig, ServerKind, Timing};

use crate::cluster_writer::{assert_acks_present, read_prefix, Load};

const PREFIX: &str = "shutdown/";
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping leader may take: ours waits out a leader lease (one election timeout) to hand over.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How soon after the old leader's exit both survivors must name the same new leader. etcd 3.4.23 hands
/// over before it exits (measured: they agree within 0–30 ms of the exit); survivors that must notice the
/// loss themselves wait out an election timeout first (1 s here, randomized up to 2 s), plus an election.
const AGREEMENT_BOUND: Duration = Duration::from_millis(500);
/// How long a follower may take to stop: it has nothing to hand over (etcd: a few ms).
const FOLLOWER_STOP_BOUND: Duration = Duration::from_secs(3);

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

    let (exited_at, clean) = cluster.member_mut(old_leader).terminate(STOP_GRACE).await?;
    assert!(clean, "the leader did not stop cleanly on SIGTERM");
    // Both survivors name the same survivor, which calls itself leader.
    let agreed = loop {
        let statuses = cluster.statuses(&survivors).await?;
        let leader = statuses[0].leader;
        let agree = survivor_ids.contains(&leader) && statuses.iter().all(|s| s.leader == leader);
        if agree {
            break exited_at.elapsed();
        }
        assert!(
            exited_at.elapsed() < AGREEMENT_BOUND,
            "no agreed new leader {AGREEMENT_BOUND:?} after the old one ({old_id:x}) exited: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!("survivors agreed on a new leader {agreed:?} after the old one exited");

    let after_stop = load.acked();
    load.wait_progress(&after_stop, 10, LOAD_TIMEOUT).await?;
    let reports = load.stop().await?;
    for report in &reports {
        report.assert_revisions_increase();
    }
    let failures: Vec<_> = reports.iter().flat_map(|r| &r.failures).map(|(_, _, err)| err).collect();
    eprintln!("writes that failed around the stop: {failures:?}");
    cluster.wait_converged(&survivors).await?;
    for &i in &survivors {
        let mut client = cluster.member(i).client().await?;
        let map = read_prefix(&mut client, PREFIX, false).await?;
        assert_acks_present(&reports, &map, cluster.member(i).name());
    }

    // The stopped member starts again on its data dir, catches up and has every acknowledged write.
    cluster.member_mut(old_leader).restart().await?;
    cluster.wait_converged(&[0, 1, 2]).await?;
    let rejoined = cluster.member(old_leader);
    assert!(survivor_ids.contains(&rejoined.status().await?.leader), "{} follows no survivor", rejoined.name());
    let map = read_prefix(&mut rejoined.client().await?, PREFIX, true).await?;
    assert_acks_present(&reports, &map, rejoined.name());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminated_follower_exits_promptly() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::DEFAULT), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let leader_id = cluster.member(leader).status().await?.member_id;
    let follower = (0..3).find(|&i| i != leader).expect("three members");
    cluster.member(leader).client().await?.put("shutdown/before", "1", None).await?;

    let sent = Instant::now();
    let (exited_at, clean) = cluster.member_mut(follower).terminate(STOP_GRACE).await?;
    let took = exited_at - sent;
    assert!(clean, "the follower did not stop cleanly on SIGTERM");
    assert!(took < FOLLOWER_STOP_BOUND, "the follower took {took:?} to stop");
    eprintln!("the follower stopped {took:?} after SIGTERM");

    // Nothing moved: the leader still leads, and the two left still make a quorum.
    let others: Vec<usize> = (0..3).filter(|&i| i != follower).collect();
    for status in cluster.statuses(&others).await? {
        assert_eq!(status.leader, leader_id, "{status:?}");
    }
    cluster.member(leader).client().await?.put("shutdown/after", "2", None).await?;
    cluster.member_mut(follower).restart().await?;
    cluster.wait_converged(&[0, 1, 2]).await?;
    let keys = cluster.member(follower).serializable_range("shutdown/").await?;
    assert_eq!(keys.len(), 2, "{keys:?}");
    Ok(())
}

/// `etcdctl move-leader`, the same hand-over on request: the target leads when etcdctl returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn move_leader_makes_the_target_leader() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(ClusterConfig { timing: Some(Timing::DEFAULT), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let leader_id = cluster.member(leader).status().await?.member_id;
    let target = (0..3).find(|&i| i != leader).expect("three members");
    let target_id = cluster.member(target).status().await?.member_id;

    let out = cluster.etcdctl(&["move-leader", &format!("{target_id:x}")]).await?.ok()?;
    assert_eq!(out.trim(), format!("Leadership transferred from {leader_id:x} to {target_id:x}"));
    assert!(cluster.member(target).status().await?.is_leader(), "the target does not lead");
    cluster.member(leader).client().await?.put("shutdown/moved", "1", None).await?;
    Ok(())
}

/// Sequential puts before the hand-over, each its own log entry: enough that the new leader's first
/// append (openraft's 300 entries from the middle of the log) does not reach the log's end.
const HANDED_OVER_ENTRIES: usize = 800;

async fn skipped_entries(member: &tests::ClusterMember) -> anyhow::Result<f64> {
    let metrics = Metrics::parse(&http::get(&member.client_url(), "/metrics").await?.body)?;
    Ok(metrics.value("raft_node_append_entries_skipped_total", &[]))
}

/// A new leader does not know how much of its log the followers hold; after a hand-over they hold it
/// all. Ours asks with empty appends instead of sending them the log again (openraft alone resends
/// from the middle of the log, 300 entries to a message), and the log it commits next is everyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_does_not_resend_the_log_its_followers_hold() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(ClusterConfig { timing: Some(Timing::DEFAULT), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let mut client = cluster.member(leader).client().await?;
    for i in 0..HANDED_OVER_ENTRIES {
        client.put(format!("{PREFIX}log/{i:04}"), "v", None).await?;
    }
    let target = (0..3).find(|&i| i != leader).expect("three members");
    let target_id = cluster.member(target).status().await?.member_id;
    let ours = cluster.kind() == ServerKind::Ours;
    let before = if ours { skipped_entries(cluster.member(target)).await? } else { 0.0 };

    cluster.etcdctl(&["move-leader", &format!("{target_id:x}")]).await?.ok()?;
    let put = cluster.member(leader).client().await?.put(format!("{PREFIX}log/after"), "1", None).await?;
    let revision = put.header().expect("header").revision();
    if ours {
        let skipped = skipped_entries(cluster.member(target)).await? - before;
        assert!(skipped >= 300.0, "the new leader sent its followers the log they held ({skipped} entries skipped)");
    }
    for member in 0..3 {
        let got = cluster.member(member).client().await?.get(format!("{PREFIX}log/"), Some(prefix_count())).await?;
        assert_eq!(got.count(), HANDED_OVER_ENTRIES as i64 + 1, "member {member}");
        assert!(got.header().expect("header").revision() >= revision, "member {member}");
    }
    Ok(())
}

fn prefix_count() -> etcd_client::GetOptions {
    etcd_client::GetOptions::new().with_prefix().with_count_only()
}

/// A member stopped by SIGTERM saves its key index, and its next start reads that instead of every
/// stored revision: it then serves exactly what it held (old revisions, deleted keys, leases) and
/// goes on with the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_stopped_by_sigterm_starts_from_its_saved_key_index() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::DEFAULT), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let follower = (0..3).find(|&i| i != leader).expect("three members");
    let mut client = cluster.member(leader).client().await?;
    let first = client.put("saved/a", "1", None).await?.header().expect("header").revision();
    client.put("saved/b", "1", None).await?;
    client.put("saved/b", "2", None).await?;
    let lease = client.lease_grant(600, None).await?.id();
    client.put("saved/c", "leased", Some(etcd_client::PutOptions::new().with_lease(lease))).await?;
    client.delete("saved/b", None).await?;
    client.compact(first + 1, None).await?;
    let last = client.put("saved/d", "1", None).await?.header().expect("header").revision();
    cluster.wait_converged(&[0, 1, 2]).await?;

    let (_, clean) = cluster.member_mut(follower).terminate(STOP_GRACE).await?;
    assert!(clean, "the follower did not stop cleanly on SIGTERM");
    let log = cluster.member(follower).log();
    assert!(log.contains("saved the key index for the next start"), "no save in the log:\n{log}");
    cluster.member_mut(follower).restart().await?;
    cluster.wait_converged(&[0, 1, 2]).await?;
    let member = cluster.member(follower);
    let log = member.log();
    assert!(log.contains("loaded the key index saved at the last clean stop"), "not loaded:\n{log}");

    let keys = member.serializable_range("saved/").await?;
    let pairs: Vec<(String, String)> =
        keys.iter().map(|kv| (kv.key_str().unwrap_or("?").into(), kv.value_str().unwrap_or("?").into())).collect();
    let want = [("saved/a", "1"), ("saved/c", "leased"), ("saved/d", "1")];
    assert_eq!(pairs, want.map(|(k, v)| (k.to_string(), v.to_string())));
    let mut direct = member.client().await?;
    let serializable = || etcd_client::GetOptions::new().with_serializable();
    let old = direct.get("saved/b", Some(serializable().with_revision(last - 2))).await?;
    assert_eq!(old.kvs().first().and_then(|kv| kv.value_str().ok()), Some("2"), "an old revision is read");
    let compacted = direct.get("saved/b", Some(serializable().with_revision(first))).await;
    assert!(compacted.is_err_and(|err| err.to_string().contains("compacted")), "below the compaction");
    let ttl = direct.lease_time_to_live(lease, Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys())).await?;
    assert_eq!(ttl.keys(), [b"saved/c".to_vec()], "the leased key is still on its lease");
    // A write after the restart reaches it, and its next start rebuilds nothing stale.
    client.put("saved/e", "1", None).await?;
    cluster.wait_converged(&[0, 1, 2]).await?;
    assert_eq!(cluster.member(follower).serializable_range("saved/").await?.len(), 4);
    Ok(())
}
