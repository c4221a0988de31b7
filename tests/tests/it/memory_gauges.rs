//! `/metrics` says where a member's memory goes: the key index's keys, revisions and estimated bytes
//! follow writes, deletes and compaction; the Raft log's in-memory tail and sled's configured caches are
//! reported.

use etcd_client::CompactionOptions;
use tests::http::{self, Metrics};
use tests::Member;

async fn scrape(member: &Member) -> anyhow::Result<Metrics> {
    Metrics::parse(&http::get(&member.client_url(), "/metrics").await?.body)
}

fn index_of(metrics: &Metrics) -> (f64, f64, f64) {
    (
        metrics.value("raft_node_key_index_keys", &[]),
        metrics.value("raft_node_key_index_revisions", &[]),
        metrics.value("raft_node_memory_held_bytes", &[("part", "key_index")]),
    )
}

#[tokio::test]
async fn the_key_index_and_the_log_tail_are_reported_as_they_change() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let (keys, revisions, bytes) = index_of(&scrape(&member).await?);

    // 100 keys written twice each, a tenth of them deleted.
    for round in 0..2 {
        for k in 0..100 {
            client.put(format!("mem/{k:03}"), format!("v{round}"), None).await?;
        }
    }
    for k in 0..10 {
        client.delete(format!("mem/{k:03}"), None).await?;
    }
    let written = scrape(&member).await?;
    let (keys_after, revisions_after, bytes_after) = index_of(&written);
    assert_eq!(keys_after - keys, 100.0, "the deleted keys stay until compacted");
    assert_eq!(revisions_after - revisions, 210.0, "two puts per key and ten tombstones");
    assert!(bytes_after - bytes >= 100.0 * 7.0 + 210.0 * 16.0, "{bytes} -> {bytes_after}");
    assert!(written.value("raft_node_log_tail_entries", &[]) > 0.0);
    assert!(written.value("raft_node_memory_held_bytes", &[("part", "log_tail")]) > 0.0);
    assert_eq!(written.value("raft_node_cache_capacity_bytes", &[("db", "store")]), 16.0 * 1024.0 * 1024.0);

    // Compacting everything leaves one revision per live key, and the deleted keys leave the index.
    let revision = client.put("mem/last", "x", None).await?.header().expect("header").revision();
    client.compact(revision, Some(CompactionOptions::new().with_physical())).await?;
    let compacted = scrape(&member).await?;
    let (keys_now, revisions_now, bytes_now) = index_of(&compacted);
    assert_eq!(keys_now - keys, 91.0, "90 live keys and mem/last");
    assert_eq!(revisions_now - revisions, 91.0);
    assert!(bytes_now < bytes_after, "{bytes_after} -> {bytes_now}");
    Ok(())
}
