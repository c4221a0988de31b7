//! A follower that was down while the others wrote catches up after a restart: from the leader's
//! log, or (with a small `--snapshot-count`, once the leader compacted its log) from a snapshot.
//!
//! etcd 3.4 keeps 5,000 entries behind each snapshot for slow followers
//! (`SnapshotCatchUpEntries`), so with etcd the second test still catches up from the log; a server
//! that compacts right at the snapshot has to send the snapshot. Both must end with the same data.

use tests::{Cluster, ClusterConfig};

use crate::cluster_writer::read_prefix;
use crate::util::header;

const PREFIX: &str = "catchup/";

/// Kills a follower, writes `keys` keys (every tenth one twice) through the leader, restarts the
/// follower and checks that all members converge on the same data.
async fn follower_catches_up(config: ClusterConfig, keys: usize) -> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(config).await?;
    let leader = cluster.leader().await?;
    let follower = (leader + 1) % cluster.len();
    cluster.member_mut(follower).kill9()?;

    let mut client = cluster.member(leader).client().await?;
    let mut last_revision = 0;
    for i in 0..keys {
        let key = format!("{PREFIX}{i:04}");
        last_revision = header(client.put(key.as_str(), format!("first-{i}"), None).await?.header()).revision();
        if i % 10 == 0 {
            last_revision = header(client.put(key.as_str(), format!("second-{i}"), None).await?.header()).revision();
        }
    }
    // Acknowledged with the follower down: the other two members were a quorum.
    let mut want = read_prefix(&mut client, PREFIX, false).await?;
    assert_eq!(want.len(), keys);
    assert_eq!(want.get(&format!("{PREFIX}0010")).map(|v| v.0.as_str()), Some("second-10"));

    cluster.member_mut(follower).restart().await?;
    cluster.wait_converged(&[0, 1, 2]).await?;
    for i in 0..cluster.len() {
        let member = cluster.member(i);
        let mut client = member.client().await?;
        let local = read_prefix(&mut client, PREFIX, true).await?;
        assert!(
            local == want,
            "{} holds {} keys, the leader {} (restarted: {})",
            member.name(),
            local.len(),
            want.len(),
            i == follower
        );
        let status = member.status().await?;
        assert_eq!(status.revision, last_revision, "{}: {status:?}", member.name());
    }

    // The restarted follower takes part again: a write through it is seen everywhere.
    let mut client = cluster.member(follower).client().await?;
    client.put(format!("{PREFIX}after"), "restart", None).await?;
    want = read_prefix(&mut client, PREFIX, false).await?;
    assert_eq!(want.len(), keys + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_catches_up_from_the_log() -> anyhow::Result<()> {
    follower_catches_up(ClusterConfig::new(3), 200).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_catches_up_past_a_snapshot() -> anyhow::Result<()> {
    let config = ClusterConfig { snapshot_count: Some(50), ..ClusterConfig::new(3) };
    follower_catches_up(config, 500).await
}
