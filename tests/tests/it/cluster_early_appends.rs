//! Writes one after another to the leader: every member stores each at the revision its writer was
//! told. On ours the leader sends each write's entry to its followers while it flushes it itself, and
//! its replication's own append of the entry is answered by the follower's answer to that early one
//! (`raft_node_early_appends_total`, `raft_node_early_append_answers_total`). The appends go on
//! long-lived streams, one per connection (`raft_node_peer_stream_appends_total`), not as calls of their
//! own. Each write's commit reaches the followers in a notice that awaits no answer
//! (`raft_node_commit_notices_unanswered_total`), and they still store every write.

use tests::http::{self, Metrics};
use tests::{Cluster, ClusterMember, ServerKind};

const WRITES: usize = 60;

async fn early(member: &ClusterMember) -> anyhow::Result<(f64, f64, f64, f64)> {
    let metrics = Metrics::parse(&http::get(&member.client_url(), "/metrics").await?.body)?;
    Ok((
        metrics.value("raft_node_early_appends_total", &[]),
        metrics.value("raft_node_early_append_answers_total", &[]),
        metrics.value("raft_node_peer_stream_appends_total", &[]),
        metrics.value("raft_node_commit_notices_unanswered_total", &[]),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serial_writes_reach_every_member_and_the_leader_sends_them_while_it_flushes() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let ours = cluster.kind() == ServerKind::Ours;
    let before = if ours { early(cluster.member(leader)).await? } else { (0.0, 0.0, 0.0, 0.0) };

    let mut client = cluster.member(leader).client().await?;
    let mut told = Vec::new();
    for i in 0..WRITES {
        let response = client.put(format!("early/{i:03}"), format!("v{i}"), None).await?;
        told.push(response.header().expect("header").revision());
    }
    assert_eq!(told, (told[0]..told[0] + WRITES as i64).collect::<Vec<_>>(), "one revision each, in order");

    for index in 0..3 {
        let mut reader = cluster.member(index).client().await?;
        let got = reader.get("early/", Some(etcd_client::GetOptions::new().with_prefix())).await?;
        let stored: Vec<(String, i64)> = got
            .kvs()
            .iter()
            .map(|kv| Ok((kv.value_str()?.to_string(), kv.mod_revision())))
            .collect::<anyhow::Result<_>>()?;
        let want: Vec<(String, i64)> =
            told.iter().enumerate().map(|(i, &revision)| (format!("v{i}"), revision)).collect();
        assert_eq!(stored, want, "{}", cluster.member(index).name());
    }

    if ours {
        let after = early(cluster.member(leader)).await?;
        let (sent, answered) = (after.0 - before.0, after.1 - before.1);
        // Two followers: up to two early appends per write, each answering the replication's append.
        assert!(sent >= WRITES as f64 && sent <= 2.0 * WRITES as f64 + 4.0, "{sent} early appends for {WRITES} writes");
        assert!(answered >= WRITES as f64 && answered <= sent, "{answered} answered by {sent} early appends");
        // Every early append, and the commit notices and heartbeats, are appends; all but those sent while
        // a stream opened go on the streams.
        let streamed = after.2 - before.2;
        assert!(streamed >= sent - 4.0, "{streamed} appends on streams, {sent} early appends");
        // Each write's commit, to each follower, unless the next write's entries carried it first.
        let notices = after.3 - before.3;
        assert!(
            notices >= WRITES as f64 && notices <= 2.0 * WRITES as f64 + 4.0,
            "{notices} unanswered commit notices for {WRITES} writes"
        );
        eprintln!("{WRITES} writes: {sent} early appends, {answered} appends answered by them, {streamed} on streams, {notices} commit notices");
    }
    Ok(())
}
