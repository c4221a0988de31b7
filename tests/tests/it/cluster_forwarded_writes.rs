//! Writes sent to a follower all at once: each gets its own answer, its own revision, and is stored once,
//! exactly as if it had been sent to the leader. On ours they reach the leader many to a peer message
//! (`raft_node_forward_messages_total` against `raft_node_forwarded_writes_total`).

use tests::http::{self, Metrics};
use tests::{Cluster, ClusterMember, ServerKind};

const WRITES: usize = 300;

async fn forwarded(member: &ClusterMember) -> anyhow::Result<(f64, f64)> {
    let metrics = Metrics::parse(&http::get(&member.client_url(), "/metrics").await?.body)?;
    Ok((metrics.value("raft_node_forwarded_writes_total", &[]), metrics.value("raft_node_forward_messages_total", &[])))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_through_a_follower_each_get_their_own_revision_and_travel_together() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let follower = cluster.member((leader + 1) % 3);
    let ours = cluster.kind() == ServerKind::Ours;
    let before = if ours { forwarded(follower).await? } else { (0.0, 0.0) };

    let client = follower.client().await?;
    let mut puts = tokio::task::JoinSet::new();
    for i in 0..WRITES {
        let mut client = client.clone();
        puts.spawn(async move {
            let response = client.put(format!("fwd/{i:04}"), format!("v{i}"), None).await?;
            anyhow::Ok((i, response.header().expect("header").revision()))
        });
    }
    let mut answered: Vec<(usize, i64)> = Vec::new();
    while let Some(put) = puts.join_next().await {
        answered.push(put??);
    }
    answered.sort_by_key(|&(_, revision)| revision);
    let revisions: Vec<i64> = answered.iter().map(|&(_, revision)| revision).collect();
    let first = revisions[0];
    assert_eq!(revisions, (first..first + WRITES as i64).collect::<Vec<_>>(), "one revision each, none shared");

    // Every member stores each key once, at the revision its writer was told.
    for index in 0..3 {
        let mut reader = cluster.member(index).client().await?;
        let got = reader.get("fwd/", Some(etcd_client::GetOptions::new().with_prefix())).await?;
        assert_eq!(got.kvs().len(), WRITES, "{}", cluster.member(index).name());
        for kv in got.kvs() {
            let i: usize = kv.key_str()?.trim_start_matches("fwd/").parse()?;
            let told = answered.iter().find(|&&(j, _)| j == i).expect("answered").1;
            assert_eq!((kv.value_str()?, kv.mod_revision()), (format!("v{i}").as_str(), told));
            assert_eq!(kv.version(), 1, "written once");
        }
    }

    if ours {
        let after = forwarded(follower).await?;
        let (writes, messages) = (after.0 - before.0, after.1 - before.1);
        assert_eq!(writes, WRITES as f64, "every write went through the leader");
        assert!(messages >= 1.0 && messages < writes / 2.0, "{writes} writes in {messages} messages");
        eprintln!("{writes} forwarded writes in {messages} peer messages");
    }
    Ok(())
}
