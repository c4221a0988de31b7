//! etcd's Prometheus metrics: what is counted where it happens (fsyncs, backend commits, peer round
//! trips, proposals, leader changes), and the text exposition `/metrics` answers with.
//!
//! Names, types, label names, HELP texts and histogram buckets are etcd 3.4's, so etcd's Grafana dashboard
//! and alerts work unchanged. As in etcd (whose collectors live in Prometheus' default registry), the
//! counters are process-wide: one member runs per process. Gauges that mirror state (leader, revisions,
//! sizes) are read at scrape time from a [`MemberView`] instead of being copied on every change.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use crate::exposition::{Exposition, Histogram, Labels, COUNTER, GAUGE};
use crate::grpc_metrics::grpc_counters;
use crate::typ::Raft;

/// The counters and histograms fed by the code paths they measure.
pub struct Metrics {
    /// `etcd_disk_wal_fsync_duration_seconds`: our log store's flushes, the fsync behind every append.
    pub wal_fsync: Histogram,
    /// `etcd_disk_backend_commit_duration_seconds`: the state machine's batch commits to the MVCC backend.
    pub backend_commit: Histogram,
    /// `etcd_network_peer_round_trip_time_seconds`, by peer member id.
    peer_rtt: Mutex<BTreeMap<u64, Arc<Histogram>>>,
    pub leader_changes: AtomicU64,
    /// The commit index, as the log store last saved it.
    pub proposals_committed: AtomicU64,
    pub proposals_pending: AtomicI64,
    pub proposals_failed: AtomicU64,
    /// Writes this member forwarded to the leader, and the peer messages that carried them.
    pub forwarded_writes: AtomicU64,
    pub forward_messages: AtomicU64,
    /// Log entries a follower already held, so that the leader's append sent only their last id (see
    /// `network::PeerClient::append_entries`).
    pub append_entries_skipped: AtomicU64,
    /// Appends sent to followers while the leader flushed them (`early_append`), and openraft's appends
    /// answered by one of them instead of being sent again.
    pub early_appends: AtomicU64,
    pub early_answers: AtomicU64,
    /// Commit indexes sent alone after an append answered by an early one (`network`).
    pub early_commit_notices: AtomicU64,
    /// Commit notices of openraft's replication sent without awaiting an answer (`network`).
    pub commit_notices_unanswered: AtomicU64,
    /// The leader's beats sent, and those answered by a member that follows it (`election`).
    pub beats_sent: AtomicU64,
    pub beats_followed: AtomicU64,
    /// RPCs to a peer moved to its other connection after one ran out of time (`network`).
    pub peer_lane_switches: AtomicU64,
    /// Append streams opened to peers (`append_stream`), and the appends sent on them.
    pub peer_append_streams: AtomicU64,
    pub peer_stream_appends: AtomicU64,
    pub health_success: AtomicU64,
    pub health_failures: AtomicU64,
    /// `/livez` and `/readyz` checks by (name, type), Prometheus' order: the last result and the runs by
    /// outcome.
    health_checks: Mutex<BTreeMap<(String, &'static str), HealthCheckCount>>,
}

#[derive(Default, Clone, Copy)]
struct HealthCheckCount {
    last_ok: bool,
    success: u64,
    error: u64,
}

/// The process' metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
        // etcd: prometheus.ExponentialBuckets(0.001, 2, 14), 1 ms to 8 s.
        wal_fsync: Histogram::seconds(0.001, 2.0, 14),
        backend_commit: Histogram::seconds(0.001, 2.0, 14),
        peer_rtt: Mutex::default(),
        leader_changes: AtomicU64::new(0),
        proposals_committed: AtomicU64::new(0),
        proposals_pending: AtomicI64::new(0),
        proposals_failed: AtomicU64::new(0),
        forwarded_writes: AtomicU64::new(0),
        forward_messages: AtomicU64::new(0),
        append_entries_skipped: AtomicU64::new(0),
        early_appends: AtomicU64::new(0),
        early_answers: AtomicU64::new(0),
        early_commit_notices: AtomicU64::new(0),
        commit_notices_unanswered: AtomicU64::new(0),
        beats_sent: AtomicU64::new(0),
        beats_followed: AtomicU64::new(0),
        peer_lane_switches: AtomicU64::new(0),
        peer_append_streams: AtomicU64::new(0),
        peer_stream_appends: AtomicU64::new(0),
        health_success: AtomicU64::new(0),
        health_failures: AtomicU64::new(0),
        health_checks: Mutex::default(),
    });
    &METRICS
}

impl Metrics {
    /// Counts one run of a `/livez` or `/readyz` check (`kind` is `livez` or `readyz`).
    pub fn record_health_check(&self, kind: &'static str, name: &str, ok: bool) {
        let mut checks = self.health_checks.lock();
        let count = checks.entry((name.to_string(), kind)).or_default();
        count.last_ok = ok;
        if ok {
            count.success += 1;
        } else {
            count.error += 1;
        }
    }

    /// etcd's `etcd_server_healthcheck` and `etcd_server_healthchecks_total`, once a check has run.
    fn render_health_checks(&self, out: &mut Exposition) {
        let checks: Vec<((String, &str), HealthCheckCount)> =
            self.health_checks.lock().iter().map(|(key, count)| (key.clone(), *count)).collect();
        if checks.is_empty() {
            return;
        }
        let gauge: Vec<([(&str, &str); 2], f64)> = checks
            .iter()
            .map(|((name, kind), count)| {
                ([("name", name.as_str()), ("type", *kind)], if count.last_ok { 1.0 } else { 0.0 })
            })
            .collect();
        let series: Vec<(Labels<'_>, f64)> = gauge.iter().map(|(labels, value)| (&labels[..], *value)).collect();
        out.labelled("etcd_server_healthcheck", "The result of each kind of healthcheck.", GAUGE, &series);
        let mut totals: Vec<([(&str, &str); 3], f64)> = Vec::new();
        for ((name, kind), count) in &checks {
            for (status, runs) in [("error", count.error), ("success", count.success)] {
                if runs > 0 {
                    totals.push(([("name", name.as_str()), ("status", status), ("type", *kind)], runs as f64));
                }
            }
        }
        let series: Vec<(Labels<'_>, f64)> = totals.iter().map(|(labels, value)| (&labels[..], *value)).collect();
        out.labelled(
            "etcd_server_healthchecks_total",
            "The total number of each kind of healthcheck.",
            COUNTER,
            &series,
        );
    }

    /// The round-trip histogram to peer `id` (etcd: 0.1 ms to 3.3 s, `ExponentialBuckets(0.0001, 2, 16)`).
    pub fn peer_rtt(&self, id: u64) -> Arc<Histogram> {
        self.peer_rtt.lock().entry(id).or_insert_with(|| Arc::new(Histogram::seconds(0.0001, 2.0, 16))).clone()
    }
}

/// Counts leader changes as etcd does: each time a leader is known that is not the last one seen (a
/// leader lost and found again counts again). Runs until Raft stops. It watches openraft's server
/// metrics, which change with the leader, vote or membership only (its full metrics change several times
/// per write, waking every watcher).
pub async fn count_leader_changes(raft: Raft) {
    let mut watch = raft.server_metrics();
    let mut last = None;
    loop {
        let leader = watch.borrow_and_update().current_leader;
        if leader.is_some() && leader != last {
            metrics().leader_changes.fetch_add(1, Ordering::Relaxed);
        }
        last = leader;
        if watch.changed().await.is_err() {
            return;
        }
    }
}

/// Counts one pending proposal for as long as it lives (etcd's `proposals_pending`).
pub struct PendingProposal(());

impl PendingProposal {
    pub fn start() -> Self {
        metrics().proposals_pending.fetch_add(1, Ordering::Relaxed);
        PendingProposal(())
    }
}

impl Drop for PendingProposal {
    fn drop(&mut self) {
        metrics().proposals_pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the scrape reads from the member's state at the moment of the scrape.
#[derive(Clone, Debug, Default)]
pub struct MemberView {
    pub member_id: u64,
    pub has_leader: bool,
    pub is_leader: bool,
    pub is_learner: bool,
    pub applied_index: u64,
    /// The emulated etcd version (`--emulated-version`).
    pub server_version: String,
    pub db_size: u64,
    pub keys: i64,
    pub current_revision: i64,
    pub compact_revision: i64,
    pub quota_backend_bytes: u64,
    /// The cluster version (`3.6.0`; a downgrade's target once enabled).
    pub cluster_version: String,
    /// The feature gates: name, stage, enabled.
    pub features: Vec<(&'static str, &'static str, bool)>,
    /// What the watchers hold back.
    pub watch_backlog: kv_api::watch::Backlog,
    /// What the key index holds.
    pub index: kv_api::index::IndexSize,
    /// The Raft log's in-memory tail: entries and their encoded bytes.
    pub log_tail: (usize, usize),
    pub process: ProcessView,
}

/// The `process_*` collector's values (Go's client reads the same `/proc` files).
#[derive(Clone, Debug, Default)]
pub struct ProcessView {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub start_time_seconds: f64,
    pub open_fds: f64,
    pub max_fds: f64,
}

impl ProcessView {
    /// Reads `/proc/self`; a value that cannot be read stays 0.
    pub fn read() -> Self {
        // The kernel reports times in USER_HZ (100 on Linux) and memory in pages.
        const TICKS: f64 = 100.0;
        const PAGE: f64 = 4096.0;
        let mut view = ProcessView::default();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // Fields after the command name, which is parenthesised and may hold spaces.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        view.cpu_seconds = (field(14) + field(15)) / TICKS;
        view.virtual_bytes = field(23);
        view.resident_bytes = field(24) * PAGE;
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let boot = boot.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|t| t.trim().parse::<f64>().ok());
        view.start_time_seconds = boot.map_or(0.0, |boot| boot + field(22) / TICKS);
        view.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count()) as f64;
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let max =
            limits.lines().find_map(|l| l.strip_prefix("Max open files")).and_then(|l| l.split_whitespace().next());
        view.max_fds = max.and_then(|m| m.parse().ok()).unwrap_or(0.0);
        view
    }
}

/// The text exposition (format 0.0.4), families in name order as Go's client writes them.
pub fn render(view: &MemberView) -> String {
    let m = metrics();
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
    let db_size = view.db_size as f64;
    let physical = "Total size of the underlying database physically allocated in bytes.";
    let p = &view.process;
    // Families of one unlabelled sample: name, HELP, type, value.
    let singles = [
        (
            "etcd_server_has_leader",
            "Whether or not a leader exists. 1 is existence, 0 is not.",
            GAUGE,
            flag(view.has_leader),
        ),
        (
            "etcd_server_is_leader",
            "Whether or not this member is a leader. 1 if is, 0 otherwise.",
            GAUGE,
            flag(view.is_leader),
        ),
        (
            "etcd_server_is_learner",
            "Whether or not this member is a learner. 1 if is, 0 otherwise.",
            GAUGE,
            flag(view.is_learner),
        ),
        (
            "etcd_server_leader_changes_seen_total",
            "The number of leader changes seen.",
            COUNTER,
            load(&m.leader_changes),
        ),
        (
            "etcd_server_proposals_committed_total",
            "The total number of consensus proposals committed.",
            GAUGE,
            load(&m.proposals_committed),
        ),
        (
            "etcd_server_proposals_applied_total",
            "The total number of consensus proposals applied.",
            GAUGE,
            view.applied_index as f64,
        ),
        (
            "etcd_server_proposals_pending",
            "The current number of pending proposals to commit.",
            GAUGE,
            m.proposals_pending.load(Ordering::Relaxed) as f64,
        ),
        (
            "etcd_server_proposals_failed_total",
            "The total number of failed proposals seen.",
            COUNTER,
            load(&m.proposals_failed),
        ),
        (
            "raft_node_forwarded_writes_total",
            "Writes this member forwarded to the leader.",
            COUNTER,
            load(&m.forwarded_writes),
        ),
        (
            "raft_node_forward_messages_total",
            "Peer messages that carried this member's forwarded writes (many writes to a message under load).",
            COUNTER,
            load(&m.forward_messages),
        ),
        (
            "raft_node_append_entries_skipped_total",
            "Log entries not sent to a follower that already held them (a new leader's first appends).",
            COUNTER,
            load(&m.append_entries_skipped),
        ),
        (
            "raft_node_early_appends_total",
            "Appends the leader sent to a follower while it flushed them itself.",
            COUNTER,
            load(&m.early_appends),
        ),
        (
            "raft_node_early_append_answers_total",
            "Appends of the leader's replication answered by an early append that already carried them.",
            COUNTER,
            load(&m.early_answers),
        ),
        (
            "raft_node_early_commit_notices_total",
            "Commit indexes sent alone to a follower whose append an early one answered without them.",
            COUNTER,
            load(&m.early_commit_notices),
        ),
        (
            "raft_node_commit_notices_unanswered_total",
            "New commit indexes sent to a follower in an empty append that awaits no answer.",
            COUNTER,
            load(&m.commit_notices_unanswered),
        ),
        (
            "raft_node_leader_beats_sent_total",
            "Beats this member sent as leader, apart from Raft's appends.",
            COUNTER,
            load(&m.beats_sent),
        ),
        (
            "raft_node_leader_beats_followed_total",
            "Beats this member sent as leader that a member answered it follows.",
            COUNTER,
            load(&m.beats_followed),
        ),
        (
            "raft_node_peer_connection_switches_total",
            "Times an RPC to a peer ran out of time and later ones moved to the peer's other connection.",
            COUNTER,
            load(&m.peer_lane_switches),
        ),
        (
            "raft_node_peer_append_streams_total",
            "Append streams this member opened to its peers (its appends then go on them, not as calls).",
            COUNTER,
            load(&m.peer_append_streams),
        ),
        (
            "raft_node_peer_stream_appends_total",
            "Appends this member sent to its peers on append streams.",
            COUNTER,
            load(&m.peer_stream_appends),
        ),
        (
            "etcd_server_health_success",
            "The total number of successful health checks",
            COUNTER,
            load(&m.health_success),
        ),
        ("etcd_server_health_failures", "The total number of failed health checks", COUNTER, load(&m.health_failures)),
        ("etcd_mvcc_db_total_size_in_bytes", physical, GAUGE, db_size),
        ("etcd_debugging_mvcc_db_total_size_in_bytes", physical, GAUGE, db_size),
        // sled does not tell its live bytes apart from its allocated ones (Maintenance.Status says the same).
        (
            "etcd_mvcc_db_total_size_in_use_in_bytes",
            "Total size of the underlying database logically in use in bytes.",
            GAUGE,
            db_size,
        ),
        ("etcd_debugging_mvcc_keys_total", "Total number of keys.", GAUGE, view.keys as f64),
        ("etcd_debugging_mvcc_current_revision", "The current revision of store.", GAUGE, view.current_revision as f64),
        (
            "etcd_debugging_mvcc_compact_revision",
            "The revision of the last compaction in store.",
            GAUGE,
            view.compact_revision as f64,
        ),
        (
            "etcd_server_quota_backend_bytes",
            "Current backend storage quota size in bytes.",
            GAUGE,
            view.quota_backend_bytes as f64,
        ),
        ("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", COUNTER, p.cpu_seconds),
        ("process_max_fds", "Maximum number of open file descriptors.", GAUGE, p.max_fds),
        ("process_open_fds", "Number of open file descriptors.", GAUGE, p.open_fds),
        ("process_resident_memory_bytes", "Resident memory size in bytes.", GAUGE, p.resident_bytes),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            GAUGE,
            p.start_time_seconds,
        ),
        ("process_virtual_memory_bytes", "Virtual memory size in bytes.", GAUGE, p.virtual_bytes),
    ];
    let mut out = Exposition::default();
    for (name, help, kind, value) in singles {
        out.labelled(name, help, kind, &[(&[], value)]);
    }
    // etcd registers each of these under two names.
    use kv_api::stats;
    let operations = [
        ("etcd_mvcc_range_total", "etcd_debugging_mvcc_range_total", "ranges", &stats::RANGES),
        ("etcd_mvcc_put_total", "etcd_debugging_mvcc_put_total", "puts", &stats::PUTS),
        ("etcd_mvcc_delete_total", "etcd_debugging_mvcc_delete_total", "deletes", &stats::DELETES),
        ("etcd_mvcc_txn_total", "etcd_debugging_mvcc_txn_total", "txns", &stats::TXNS),
    ];
    // Where the memory goes, as the allocator sees it (etcd has Go's `go_memstats_*` for this): bytes the
    // member's data structures hold, and the allocator's pages. Zero in a binary that does not allocate
    // with jemalloc.
    let _ = tikv_jemalloc_ctl::epoch::advance();
    let allocator = [
        (
            "raft_node_allocator_allocated_bytes",
            "Bytes allocated by the member and not yet freed (including pages never written to).",
            tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0),
        ),
        (
            "raft_node_allocator_resident_bytes",
            "Bytes in the allocator's data pages, allocated or free to reuse: an upper bound of its resident memory.",
            tikv_jemalloc_ctl::stats::resident::read().unwrap_or(0),
        ),
    ];
    for (name, help, bytes) in allocator {
        out.labelled(name, help, GAUGE, &[(&[], bytes as f64)]);
    }
    // What the member's own structures hold, by part; sled's caches are bounded by their configured size
    // (`raft_node_cache_capacity_bytes`), the rest of the allocated bytes are requests in flight.
    let held = [
        ("key_index", view.index.estimated_bytes()),
        ("log_tail", view.log_tail.1 as u64),
        ("watch_pending", view.watch_backlog.pending_bytes),
    ];
    let series: Vec<([(&str, &str); 1], f64)> =
        held.iter().map(|(part, bytes)| ([("part", *part)], *bytes as f64)).collect();
    let series: Vec<(Labels<'_>, f64)> = series.iter().map(|(labels, value)| (&labels[..], *value)).collect();
    out.labelled(
        "raft_node_memory_held_bytes",
        "Bytes held by part: the key index (estimated from its keys, key bytes and revisions), the Raft log's \
         in-memory tail (encoded), the events buffered for watchers (their keys and values).",
        GAUGE,
        &series,
    );
    let counts = [
        ("raft_node_key_index_keys", "Keys in the key index, deleted ones included until compacted.", view.index.keys),
        ("raft_node_key_index_revisions", "Revisions in the key index.", view.index.revisions),
        ("raft_node_log_tail_entries", "Raft log entries kept in memory.", view.log_tail.0 as u64),
    ];
    for (name, help, value) in counts {
        out.labelled(name, help, GAUGE, &[(&[], value as f64)]);
    }
    let caches = [("log", crate::storage::LOG_CACHE_BYTES), ("store", crate::storage::CACHE_BYTES)];
    let series: Vec<([(&str, &str); 1], f64)> =
        caches.iter().map(|(db, bytes)| ([("db", *db)], *bytes as f64)).collect();
    let series: Vec<(Labels<'_>, f64)> = series.iter().map(|(labels, value)| (&labels[..], *value)).collect();
    out.labelled(
        "raft_node_cache_capacity_bytes",
        "The page cache size each sled database is configured with.",
        GAUGE,
        &series,
    );
    let watch_gauges = [
        (
            "etcd_debugging_mvcc_watch_stream_total",
            "Total number of watch streams.",
            stats::read(&stats::WATCH_STREAMS),
        ),
        ("etcd_debugging_mvcc_watcher_total", "Total number of watchers.", stats::read(&stats::WATCHERS)),
        (
            "etcd_debugging_mvcc_slow_watcher_total",
            "Total number of unsynced slow watchers.",
            view.watch_backlog.slow_watchers,
        ),
        (
            "etcd_debugging_mvcc_pending_events_total",
            "Total number of pending events to be sent.",
            view.watch_backlog.pending_events,
        ),
    ];
    for (name, help, value) in watch_gauges {
        out.labelled(name, help, GAUGE, &[(&[], value as f64)]);
    }
    for (name, debugging_name, what, counter) in operations {
        let help = format!("Total number of {what} seen by this member.");
        let value = stats::read(counter) as f64;
        out.labelled(name, &help, COUNTER, &[(&[], value)]);
        out.labelled(debugging_name, &help, COUNTER, &[(&[], value)]);
    }

    // Families of one sample labelled with a value, as etcd's info gauges.
    let id = format!("{:x}", view.member_id);
    let infos = [
        (
            "etcd_server_id",
            "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
            "server_id",
            id.as_str(),
        ),
        (
            "etcd_server_version",
            "Which version is running. 1 for 'server_version' label with current version.",
            "server_version",
            &view.server_version,
        ),
        (
            "etcd_cluster_version",
            "Which version is running. 1 for 'cluster_version' label with current cluster version",
            "cluster_version",
            major_minor(&view.cluster_version),
        ),
    ];
    for (name, help, label, value) in infos {
        out.labelled(name, help, GAUGE, &[(&[(label, value)], 1.0)]);
    }

    out.histograms(
        "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
        "Bucketed histogram of db compaction total duration.",
        &[(&[], &stats::COMPACTION_DURATIONS)],
    );
    out.labelled(
        "etcd_debugging_mvcc_db_compaction_keys_total",
        "Total number of db keys compacted.",
        COUNTER,
        &[(&[], stats::read(&stats::COMPACTED_KEYS) as f64)],
    );
    out.histograms(
        "etcd_disk_wal_fsync_duration_seconds",
        "The latency distributions of fsync called by WAL.",
        &[(&[], &m.wal_fsync)],
    );
    out.histograms(
        "etcd_disk_backend_commit_duration_seconds",
        "The latency distributions of commit called by backend.",
        &[(&[], &m.backend_commit)],
    );
    let peers: Vec<(String, Arc<Histogram>)> =
        m.peer_rtt.lock().iter().map(|(id, h)| (format!("{id:x}"), h.clone())).collect();
    let labels: Vec<[(&str, &str); 1]> = peers.iter().map(|(to, _)| [("To", to.as_str())]).collect();
    let series: Vec<(&[(&str, &str)], &Histogram)> =
        labels.iter().zip(&peers).map(|(labels, (_, h))| (&labels[..], &**h)).collect();
    if !series.is_empty() {
        out.histograms("etcd_network_peer_round_trip_time_seconds", "Round-Trip-Time histogram between peers", &series);
    }

    let features: Vec<([(&str, &str); 2], f64)> = view
        .features
        .iter()
        .map(|(name, stage, on)| ([("name", *name), ("stage", *stage)], if *on { 1.0 } else { 0.0 }))
        .collect();
    let series: Vec<(Labels<'_>, f64)> = features.iter().map(|(labels, value)| (&labels[..], *value)).collect();
    if !series.is_empty() {
        let help = "Whether or not a feature is enabled. 1 is enabled, 0 is not.";
        out.labelled("etcd_server_feature_enabled", help, GAUGE, &series);
    }
    m.render_health_checks(&mut out);
    grpc_counters().render(&mut out);
    out.finish()
}

/// etcd's cluster version label: the major and minor of the version ("3.4.23" → "3.4").
fn major_minor(version: &str) -> &str {
    match version.match_indices('.').nth(1) {
        Some((at, _)) => &version[..at],
        None => version,
    }
}

#[cfg(test)]
#[path = "metrics_test.rs"]
mod tests;
