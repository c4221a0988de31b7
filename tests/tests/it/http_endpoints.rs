//! HTTP on the client port, beside gRPC on the same listener: `/health`, `/version` and `/metrics` as
//! etcd 3.4 answers them (bodies, status codes, content types), read with a plain HTTP/1.1 client as
//! `curl` would, and `/metrics` parsed as Prometheus text.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use etcd_client::GetOptions;
use tests::http::{self, Metrics};
use tests::{Cluster, ClusterConfig, Member, Timing};

/// How long a member may take to notice it lost its quorum, or to probe its peers (etcd records its
/// first round trips 5 s after start).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(200);

async fn scrape(client_url: &str) -> anyhow::Result<Metrics> {
    let answer = http::get(client_url, "/metrics").await?;
    assert_eq!(answer.status, 200, "/metrics: {}", answer.body);
    assert_eq!(answer.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    Metrics::parse(&answer.body)
}

/// Scrapes until `done` holds, for up to [`SETTLE_TIMEOUT`].
async fn scrape_until(client_url: &str, what: &str, done: impl Fn(&Metrics) -> bool) -> anyhow::Result<Metrics> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let metrics = scrape(client_url).await?;
        if done(&metrics) {
            return Ok(metrics);
        }
        if Instant::now() > deadline {
            bail!("{what}: not within {SETTLE_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_version_answer_as_etcd() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    cluster.leader().await?;
    for member in cluster.members() {
        let url = member.client_url();
        let health = http::get(&url, "/health").await?;
        assert_eq!((health.status, health.body.as_str()), (200, r#"{"health":"true"}"#), "{}", member.name());
        assert_eq!(health.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(health.header("access-control-allow-origin"), Some("*"));

        // The server version is the one Status reports; the cluster version is its major.minor.0.
        let version = member.client().await?.status().await?.version().to_string();
        let (major_minor, _) = version.rsplit_once('.').context("a version with a patch number")?;
        let answer = http::get(&url, "/version").await?;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-type"), Some("application/json"));
        // etcd 3.6 adds the storage version.
        let want = match member.kind() {
            tests::ServerKind::Etcd => format!(r#"{{"etcdserver":"{version}","etcdcluster":"{major_minor}.0"}}"#),
            tests::ServerKind::Ours => {
                format!(r#"{{"etcdserver":"{version}","etcdcluster":"{major_minor}.0","storage":"{major_minor}.0"}}"#)
            }
        };
        assert_eq!(answer.body, want);
    }

    let url = cluster.member(0).client_url();
    let refused = http::request(&url, "POST", "/health", Some("{}")).await?;
    assert_eq!((refused.status, refused.body.as_str()), (405, "Method Not Allowed\n"));
    assert_eq!(refused.header("allow"), Some("GET"));
    let refused = http::request(&url, "PUT", "/version", Some("{}")).await?;
    assert_eq!((refused.status, refused.body.as_str()), (405, "Method Not Allowed\n"));
    let missing = http::get(&url, "/no/such/path").await?;
    assert_eq!((missing.status, missing.body.as_str()), (404, "404 page not found\n"));

    // gRPC still works on the port that just answered HTTP/1.1.
    cluster.member(0).client().await?.put("http/after", "v", None).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_false_once_the_leader_lost_its_quorum() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::FAST), ..ClusterConfig::new(3) }).await?;
    let leader = cluster.leader().await?;
    let url = cluster.member(leader).client_url();
    assert_eq!(http::get(&url, "/health").await?.status, 200);
    for other in (0..3).filter(|&i| i != leader) {
        cluster.member_mut(other).kill9()?;
    }

    // The quorum read behind the check cannot complete: unhealthy, with etcd's body and status.
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let unhealthy = loop {
        let health = http::get(&url, "/health").await?;
        if health.status != 200 || Instant::now() > deadline {
            break health;
        }
        tokio::time::sleep(POLL).await;
    };
    assert_eq!((unhealthy.status, unhealthy.body.as_str()), (503, "{\"health\":\"false\"}\n"));
    assert_eq!(unhealthy.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(unhealthy.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(http::get(&url, "/health").await?.status, 503, "it stays unhealthy");

    // The failed checks are counted, and the leader, cut off from its quorum, reports no leader (check
    // quorum) within a few election timeouts.
    let metrics = scrape_until(&url, "has_leader 0", |m| m.value("etcd_server_has_leader", &[]) == 0.0).await?;
    assert!(metrics.value("etcd_server_health_failures", &[]) >= 2.0);
    assert!(metrics.value("etcd_server_health_success", &[]) >= 1.0);
    Ok(())
}

/// The families etcd's dashboards read, with their types.
const FAMILIES: &[(&str, &str)] = &[
    ("etcd_server_has_leader", "gauge"),
    ("etcd_server_is_leader", "gauge"),
    ("etcd_server_leader_changes_seen_total", "counter"),
    ("etcd_server_proposals_committed_total", "gauge"),
    ("etcd_server_proposals_applied_total", "gauge"),
    ("etcd_server_proposals_pending", "gauge"),
    ("etcd_server_proposals_failed_total", "counter"),
    ("etcd_server_id", "gauge"),
    ("etcd_server_version", "gauge"),
    ("etcd_mvcc_db_total_size_in_bytes", "gauge"),
    ("etcd_mvcc_db_total_size_in_use_in_bytes", "gauge"),
    ("etcd_debugging_mvcc_keys_total", "gauge"),
    ("etcd_disk_wal_fsync_duration_seconds", "histogram"),
    ("etcd_disk_backend_commit_duration_seconds", "histogram"),
    ("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds", "histogram"),
    ("etcd_debugging_mvcc_db_compaction_keys_total", "counter"),
    ("etcd_network_peer_round_trip_time_seconds", "histogram"),
    ("grpc_server_started_total", "counter"),
    ("grpc_server_handled_total", "counter"),
    ("process_resident_memory_bytes", "gauge"),
    ("etcd_server_quota_backend_bytes", "gauge"),
    ("etcd_mvcc_put_total", "counter"),
    ("etcd_mvcc_range_total", "counter"),
    ("etcd_mvcc_delete_total", "counter"),
    ("etcd_mvcc_txn_total", "counter"),
    ("etcd_network_client_grpc_received_bytes_total", "counter"),
    ("etcd_network_client_grpc_sent_bytes_total", "counter"),
    ("etcd_debugging_mvcc_watch_stream_total", "gauge"),
    ("etcd_debugging_mvcc_watcher_total", "gauge"),
    ("etcd_debugging_mvcc_slow_watcher_total", "gauge"),
    ("etcd_debugging_mvcc_pending_events_total", "gauge"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_cluster_does() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let follower = (leader + 1) % 3;
    let url = cluster.member(leader).client_url();
    let ids: Vec<u64> = cluster.statuses(&[0, 1, 2]).await?.iter().map(|s| s.member_id).collect();

    // Every member has probed its two peers (etcd records its first round trips 5 s after start).
    let mut before = Metrics::default();
    for i in [leader, follower] {
        let peers: Vec<String> = (0..3).filter(|&p| p != i).map(|p| format!("{:x}", ids[p])).collect();
        let metrics = scrape_until(&cluster.member(i).client_url(), "round trips to both peers", |m| {
            peers.iter().all(|to| m.value("etcd_network_peer_round_trip_time_seconds_count", &[("To", to)]) >= 1.0)
        })
        .await?;
        for (name, kind) in FAMILIES {
            assert_eq!(metrics.types.get(*name).map(String::as_str), Some(*kind), "{name} at {}", i);
        }
        assert_eq!(metrics.help["etcd_server_has_leader"], "Whether or not a leader exists. 1 is existence, 0 is not.");
        assert_eq!(metrics.value("etcd_server_has_leader", &[]), 1.0);
        assert_eq!(metrics.value("etcd_server_is_leader", &[]), if i == leader { 1.0 } else { 0.0 });
        assert!(metrics.value("etcd_server_leader_changes_seen_total", &[]) >= 1.0);
        assert_eq!(metrics.value("etcd_server_id", &[("server_id", &format!("{:x}", ids[i]))]), 1.0);
        assert!(metrics.value("etcd_mvcc_db_total_size_in_bytes", &[]) > 0.0);
        // What the member's allocator holds: some, and no more than it has pages for.
        let allocated = metrics.value("raft_node_allocator_allocated_bytes", &[]);
        assert!(allocated > 1e6, "{allocated}");
        assert!(metrics.value("raft_node_allocator_resident_bytes", &[]) >= allocated);
        if i == leader {
            before = metrics;
        }
    }
    let version = cluster.member(leader).client().await?.status().await?.version().to_string();
    assert_eq!(before.value("etcd_server_version", &[("server_version", &version)]), 1.0);

    // Ten new keys, one at a time, and one read that fails.
    let mut client = cluster.member(leader).client().await?;
    for i in 0..10 {
        client.put(format!("metrics/{i}"), "v", None).await?;
    }
    let future = client.get("metrics/0", Some(GetOptions::new().with_revision(1_000_000))).await;
    assert!(future.is_err(), "a future revision is refused");

    let after = scrape(&url).await?;
    let grew = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);
    let put = [("grpc_method", "Put"), ("grpc_service", "etcdserverpb.KV"), ("grpc_type", "unary")];
    assert_eq!(grew("grpc_server_started_total", &put), 10.0);
    assert_eq!(grew("grpc_server_handled_total", &[&put[..], &[("grpc_code", "OK")]].concat()), 10.0);
    let range = [("grpc_method", "Range"), ("grpc_code", "OutOfRange")];
    assert_eq!(grew("grpc_server_handled_total", &range), 1.0);
    assert_eq!(grew("etcd_debugging_mvcc_keys_total", &[]), 10.0);
    assert_eq!(grew("etcd_mvcc_put_total", &[]), 10.0);
    assert_eq!(grew("etcd_mvcc_delete_total", &[]), 0.0);
    // Ten puts of a 10-byte key and a 1-byte value at least, and their answers.
    assert!(grew("etcd_network_client_grpc_received_bytes_total", &[]) >= 110.0);
    assert!(grew("etcd_network_client_grpc_sent_bytes_total", &[]) >= 100.0);
    // etcd's default quota, 2 GiB.
    assert_eq!(after.value("etcd_server_quota_backend_bytes", &[]), 2147483648.0);
    assert!(grew("etcd_server_proposals_committed_total", &[]) >= 10.0);
    assert!(grew("etcd_server_proposals_applied_total", &[]) >= 10.0);
    assert!(grew("etcd_disk_wal_fsync_duration_seconds_count", &[]) >= 1.0);
    assert_eq!(after.value("etcd_server_proposals_pending", &[]), 0.0);
    assert_eq!(after.value("etcd_server_proposals_failed_total", &[]), 0.0);
    let fsyncs = after.value("etcd_disk_wal_fsync_duration_seconds_count", &[]);
    assert_eq!(after.value("etcd_disk_wal_fsync_duration_seconds_bucket", &[("le", "+Inf")]), fsyncs);

    // The backend commits what was applied within its interval; the follower applies the same keys.
    let commits = before.value("etcd_disk_backend_commit_duration_seconds_count", &[]);
    scrape_until(&url, "a backend commit", |m| {
        m.value("etcd_disk_backend_commit_duration_seconds_count", &[]) > commits
    })
    .await?;
    let keys = after.value("etcd_debugging_mvcc_keys_total", &[]);
    scrape_until(&cluster.member(follower).client_url(), "the follower's keys", |m| {
        m.value("etcd_debugging_mvcc_keys_total", &[]) == keys
    })
    .await?;

    // A compaction that frees two old versions is counted once it has deleted them, on every member
    // (etcd observes its histogram at the end of the background compaction).
    client.put("metrics/0", "v2", None).await?;
    let revision = client.put("metrics/0", "v3", None).await?.header().context("a header")?.revision();
    client.compact(revision, None).await?;
    for i in [leader, follower] {
        let compacted = scrape_until(&cluster.member(i).client_url(), "a finished compaction", |m| {
            m.value("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds_count", &[]) >= 1.0
        })
        .await?;
        assert!(compacted.value("etcd_debugging_mvcc_db_compaction_keys_total", &[]) >= 2.0, "at member {i}");
        let count = compacted.value("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds_count", &[]);
        let inf = [("le", "+Inf")];
        assert_eq!(
            compacted.value("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds_bucket", &inf),
            count
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_puts_and_ranges_in_etcds_json() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    cluster.leader().await?;
    let (first, second) = (cluster.member(0).client_url(), cluster.member(1).client_url());

    // Keys and values in base64 ("gw/a" = "Z3cvYQ==", "1" = "MQ=="), 64-bit numbers as strings.
    let put = http::request(&first, "POST", "/v3/kv/put", Some(r#"{"key":"Z3cvYQ==","value":"MQ=="}"#)).await?;
    assert_eq!((put.status, put.header("content-type")), (200, Some("application/json")), "{}", put.body);
    let put: serde_json::Value = serde_json::from_str(&put.body)?;
    let revision = put["header"]["revision"].as_str().context("the revision, as a string")?.to_string();
    assert!(put.get("prev_kv").is_none(), "fields at their default are left out: {put}");
    let got = cluster.member(1).client().await?.get("gw/a", None).await?;
    assert_eq!(got.kvs().first().map(|kv| kv.value()), Some(&b"1"[..]), "the gateway's put is a real one");

    let range = http::request(&second, "POST", "/v3/kv/range", Some(r#"{"key":"Z3cv","range_end":"Z3cw"}"#)).await?;
    assert_eq!(range.status, 200, "{}", range.body);
    let range: serde_json::Value = serde_json::from_str(&range.body)?;
    let want = serde_json::json!([{
        "key": "Z3cvYQ==", "create_revision": revision, "mod_revision": revision, "version": "1", "value": "MQ=="
    }]);
    assert_eq!((&range["kvs"], &range["count"]), (&want, &serde_json::json!("1")));
    assert_eq!(range["header"]["revision"], serde_json::json!(revision));

    let deleted =
        http::request(&second, "POST", "/v3/kv/deleterange", Some(r#"{"key":"Z3cvYQ==","prev_kv":true}"#)).await?;
    let deleted: serde_json::Value = serde_json::from_str(&deleted.body)?;
    assert_eq!((&deleted["deleted"], &deleted["prev_kvs"]), (&serde_json::json!("1"), &want));

    // A gRPC error becomes grpc-gateway's error body, with the HTTP status of its code.
    let refused = http::request(&first, "POST", "/v3/kv/range", Some(r#"{"key":""}"#)).await?;
    assert_eq!(refused.status, 400);
    let message = "etcdserver: key is not provided";
    assert_eq!(refused.body, format!(r#"{{"error":"{message}","message":"{message}","code":3}}"#));
    Ok(())
}

#[tokio::test]
async fn gateway_streams_watch_events_keepalives_and_snapshots_as_json_lines() -> anyhow::Result<()> {
    use tests::http::HttpStream;
    let wait = Duration::from_secs(10);
    let member = Member::start().await?;
    let url = member.client_url();
    // base64 of "gw/key" and "v1".
    let mut watch = HttpStream::open(&url, "/v3/watch", r#"{"create_request":{"key":"Z3cva2V5"}}"#).await?;
    assert_eq!(watch.status, 200);
    let created: serde_json::Value = serde_json::from_str(&watch.next_line(wait).await?)?;
    assert_eq!(created["result"]["created"], true, "{created}");
    http::request(&url, "POST", "/v3/kv/put", Some(r#"{"key":"Z3cva2V5","value":"djE="}"#)).await?;
    let event: serde_json::Value = serde_json::from_str(&watch.next_line(wait).await?)?;
    let kv = &event["result"]["events"][0]["kv"];
    assert_eq!(
        (kv["key"].as_str(), kv["value"].as_str(), kv["version"].as_str()),
        (Some("Z3cva2V5"), Some("djE="), Some("1"))
    );

    let granted = http::request(&url, "POST", "/v3/lease/grant", Some(r#"{"TTL":"60","ID":"77"}"#)).await?;
    assert_eq!(granted.status, 200, "{granted:?}");
    let mut keepalive = HttpStream::open(&url, "/v3/lease/keepalive", r#"{"ID":"77"}"#).await?;
    let renewed: serde_json::Value = serde_json::from_str(&keepalive.next_line(wait).await?)?;
    assert_eq!((renewed["result"]["ID"].as_str(), renewed["result"]["TTL"].as_str()), (Some("77"), Some("60")));

    let mut snapshot = HttpStream::open(&url, "/v3/maintenance/snapshot", "{}").await?;
    let first: serde_json::Value = serde_json::from_str(&snapshot.next_line(wait).await?)?;
    assert!(first["result"]["blob"].as_str().is_some_and(|blob| !blob.is_empty()), "{first}");
    Ok(())
}
