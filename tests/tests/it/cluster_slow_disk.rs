//! A slow disk must not cost a cluster its leader (etcd #7617, "leader failed to send out heartbeat on
//! time ... likely from slow disk"). Every member's log syncs take 700 ms here (etcd's `raftBeforeSave`
//! failpoint, `GOFAIL_FAILPOINTS`): more than openraft's wait for an answer to an append (a third of
//! the election timeout) and most of an election timeout, while four clients write one key after another.
//! The leader's heartbeats must not wait behind the appends that wait on those syncs: the leader and
//! the term stay the same, every member knows the leader whenever it is asked, and every write
//! succeeds.
//!
//! Against etcd (`KV_TEST_SERVER=etcd`) the failpoint is not compiled into release builds, so there the
//! test only checks a quiet cluster.
//!
//! The leader's beats must not keep a leader whose disk hangs, though: its followers must elect another
//! one, as etcd's do when a hung WAL write holds their leader's loop.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tests::{http, Cluster, ClusterConfig, ServerKind, Timing};

/// How long each log sync takes.
const SYNC_MS: u64 = 700;
/// How long the client writes.
const WRITING: Duration = Duration::from_secs(12);
/// Clients writing at once.
const WRITERS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_log_syncs_keep_the_leader() -> anyhow::Result<()> {
    let config = ClusterConfig {
        timing: Some(Timing::DEFAULT),
        env: vec![("GOFAIL_FAILPOINTS".into(), format!("raftBeforeSave=sleep({SYNC_MS})"))],
        ..ClusterConfig::new(3)
    };
    let cluster = Cluster::start_with(config).await?;
    let leader = cluster.leader().await?;
    let before = cluster.member(leader).status().await?;
    // Writers at once, so that an append is nearly always on its way while heartbeats are due.
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let mut client = cluster.member(leader).client().await?;
        writers.push(tokio::spawn(async move {
            let started = Instant::now();
            let mut written = 0;
            while started.elapsed() < WRITING {
                client.put(format!("k{writer}/{written}"), "v", None).await?;
                written += 1;
            }
            anyhow::Ok(written)
        }));
    }
    let mut looks = Vec::new();
    while writers.iter().any(|w| !w.is_finished()) {
        let statuses = cluster.statuses(&[0, 1, 2]).await?;
        looks.extend(statuses.iter().map(|s| (s.member_id, s.leader, s.raft_term)));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut written = 0;
    for writer in writers {
        written += writer.await??;
    }
    // One put needs the leader's sync and a follower's, which may overlap: 0.7 to 1.4 s.
    eprintln!("{written} puts");
    assert!(written >= 5, "only {written} puts in {WRITING:?}");
    let changed: Vec<_> =
        looks.iter().filter(|(_, leader, term)| (*leader, *term) != (before.leader, before.raft_term)).collect();
    assert!(
        changed.is_empty(),
        "leader {:x} at term {}; members saw (member, leader, term): {changed:x?}",
        before.leader,
        before.raft_term
    );
    let mut reader = cluster.member((leader + 1) % 3).client().await?;
    let got = reader.get("k", Some(etcd_client::GetOptions::new().with_prefix().with_count_only())).await?;
    assert_eq!(got.count(), written as i64);
    Ok(())
}

/// The leader's log sync hangs (`raftBeforeSave=sleep(600000)` set over gofail's HTTP endpoint on the
/// leader alone, then a write): the two followers elect a new leader, which takes writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_hangs_is_replaced() -> anyhow::Result<()> {
    if ServerKind::from_env() == ServerKind::Etcd {
        // etcd's release builds have no failpoints to hang its disk with.
        return Ok(());
    }
    let config = ClusterConfig {
        timing: Some(Timing::DEFAULT),
        env: vec![("GOFAIL_HTTP".into(), "127.0.0.1:0".into())],
        ..ClusterConfig::new(3)
    };
    let cluster = Cluster::start_with(config).await?;
    let leader = cluster.leader().await?;
    let before = cluster.member(leader).status().await?;
    let mut client = cluster.member(leader).client().await?;
    // Writes first, so that the leader's appends are its own early-sent ones, whose syncs run off its
    // runtime's thread: its member goes on running when the disk hangs (a sync on the runtime's thread
    // would stop it all, as a paused process).
    for i in 0..20 {
        client.put(format!("warm/{i}"), "v", None).await?;
    }
    let endpoint = failpoint_endpoint(&cluster.member(leader).log())?;
    let set = http::request(&endpoint, "PUT", "/raftBeforeSave", Some("sleep(600000)")).await?;
    assert_eq!(set.status, 204, "{set:?}");
    assert_eq!(http::get(&endpoint, "/raftBeforeSave").await?.body, "sleep(600000)");

    // A write makes the leader append, and that append's sync does not end.
    let stuck = tokio::spawn(async move { client.put("stuck", "v", None).await });
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let hung = Instant::now();
    let new_leader = loop {
        let statuses = cluster.statuses(&followers).await?;
        let leaders: Vec<u64> = statuses.iter().map(|s| s.leader).collect();
        if leaders[0] == leaders[1] && leaders[0] != 0 && leaders[0] != before.leader {
            break statuses.iter().position(|s| s.member_id == leaders[0]).map(|i| followers[i]);
        }
        if hung.elapsed() > Duration::from_secs(20) {
            bail!("the followers still follow {:x} 20 s after its disk hung: {statuses:x?}", before.leader);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let new_leader = new_leader.context("the new leader is one of the followers")?;
    eprintln!("a new leader {:?} after the old one's disk hung", hung.elapsed());
    let mut client = cluster.member(new_leader).client().await?;
    client.put("after", "v", None).await?;
    stuck.abort();
    Ok(())
}

/// The address a member's log names for gofail's HTTP endpoint, as a URL.
fn failpoint_endpoint(log: &str) -> anyhow::Result<String> {
    let line = log
        .lines()
        .find(|line| line.contains("serving failpoints over HTTP"))
        .context("no failpoint endpoint logged")?;
    let at = line.find("127.0.0.1:").context("no address in the line")?;
    let address: String = line[at..].chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':').collect();
    Ok(format!("http://{address}"))
}
