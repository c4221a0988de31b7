//! A slow disk must not cost a cluster its leader (etcd #7617, "leader failed to send out heartbeat on
//! time ... likely from slow disk"). Every member's log syncs take 700 ms here (etcd's `raftBeforeSave`
//! failpoint, `GOFAIL_FAILPOINTS`): more than openraft's wait for an answer to an append (a third of
//! the election timeout) and most of an election timeout, while a client writes one key after another.
//! The leader's heartbeats must not wait behind the appends that wait on those syncs: the leader and
//! the term stay the same, every member knows the leader whenever it is asked, and every write
//! succeeds.
//!
//! Against etcd (`KV_TEST_SERVER=etcd`) the failpoint is not compiled into release builds, so there the
//! test only checks a quiet cluster.

use std::time::{Duration, Instant};

use tests::{Cluster, ClusterConfig, Timing};

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
