//! etcd 3.5's `--experimental-*` flags. etcd 3.6 renamed most of them ([`super::renamed`]) and turned the
//! booleans into feature gates ([`super::gates`]); the old names keep working, with 3.6's deprecation
//! warning, and win when given ([`super::settings`] resolves them). None has a default here: whether a
//! flag was given decides.

use std::time::Duration;

use super::boolean::parse_bool;
use super::duration::parse_duration;

/// etcd's "Experimental feature" section.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ExperimentalFlags {
    /// Enable to check data corruption before serving any client/peer traffic (3.6: --feature-gates=InitialCorruptCheck=true).
    #[arg(long, env = "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", num_args = 0..=1, default_missing_value = "true",
          value_parser = parse_bool)]
    pub experimental_initial_corrupt_check: Option<bool>,

    /// Duration of time between cluster corruption check passes (0s: never; 3.6: --corrupt-check-time).
    #[arg(long, env = "ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", value_parser = parse_duration)]
    pub experimental_corrupt_check_time: Option<Duration>,

    /// Duration of periodic watch progress notifications (10m; 3.6: --watch-progress-notify-interval).
    #[arg(long, env = "ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL", value_parser = parse_duration)]
    pub experimental_watch_progress_notify_interval: Option<Duration>,

    /// Enable leader to periodically check followers compaction hashes (3.6: --feature-gates=CompactHashCheck=true).
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED", num_args = 0..=1, default_missing_value = "true",
          value_parser = parse_bool)]
    pub experimental_compact_hash_check_enabled: Option<bool>,

    /// Duration of time between leader checks followers compaction hashes (1m; 3.6: --compact-hash-check-time).
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME", value_parser = parse_duration)]
    pub experimental_compact_hash_check_time: Option<Duration>,

    /// Serve v2 requests through the v3 backend under a given prefix. Deprecated and to be decommissioned in
    /// v3.6.
    #[arg(long, env = "ETCD_EXPERIMENTAL_ENABLE_V2V3", default_value = "")]
    pub experimental_enable_v2v3: String,

    /// Enables the primary lessor to persist lease remainingTTL to prevent indefinite auto-renewal of long
    /// lived leases (3.6: --feature-gates=LeaseCheckpoint=true).
    #[arg(long, env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT", num_args = 0..=1, default_missing_value = "true",
          value_parser = parse_bool)]
    pub experimental_enable_lease_checkpoint: Option<bool>,

    /// Enable persisting remainingTTL to prevent indefinite auto-renewal of long lived leases (3.6:
    /// --feature-gates=LeaseCheckpointPersist=true).
    #[arg(long, env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT_PERSIST", num_args = 0..=1,
          default_missing_value = "true", value_parser = parse_bool)]
    pub experimental_enable_lease_checkpoint_persist: Option<bool>,

    /// Sets the maximum revisions deleted in each compaction batch (1000; 3.6: --compaction-batch-limit).
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACTION_BATCH_LIMIT")]
    pub experimental_compaction_batch_limit: Option<u64>,

    /// Sets the sleep interval between each compaction batch (10ms; 3.6: --compaction-sleep-interval).
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACTION_SLEEP_INTERVAL", value_parser = parse_duration)]
    pub experimental_compaction_sleep_interval: Option<Duration>,

    /// Duration of time between two downgrade status checks (5s; 3.6: --downgrade-check-time).
    #[arg(long, env = "ETCD_EXPERIMENTAL_DOWNGRADE_CHECK_TIME", value_parser = parse_duration)]
    pub experimental_downgrade_check_time: Option<Duration>,

    /// Enable to enforce etcd pages to stay in RAM (3.6: --memory-mlock).
    #[arg(long, env = "ETCD_EXPERIMENTAL_MEMORY_MLOCK", num_args = 0..=1, default_missing_value = "true",
          value_parser = parse_bool)]
    pub experimental_memory_mlock: Option<bool>,

    /// Warning is generated if requests take more than this duration (100ms; 3.6: --warning-apply-duration).
    #[arg(long, env = "ETCD_EXPERIMENTAL_WARNING_APPLY_DURATION", value_parser = parse_duration)]
    pub experimental_warning_apply_duration: Option<Duration>,

    /// Enable the write transaction to use a shared buffer in its readonly check operations (3.6:
    /// --feature-gates=TxnModeWriteWithSharedBuffer=true).
    #[arg(long, env = "ETCD_EXPERIMENTAL_TXN_MODE_WRITE_WITH_SHARED_BUFFER", num_args = 0..=1,
          default_missing_value = "true", value_parser = parse_bool)]
    pub experimental_txn_mode_write_with_shared_buffer: Option<bool>,

    /// Enable the defrag during bootstrap on condition that it will free at least the provided threshold of
    /// disk space (0; 3.6: --bootstrap-defrag-threshold-megabytes).
    #[arg(long, env = "ETCD_EXPERIMENTAL_BOOTSTRAP_DEFRAG_THRESHOLD_MEGABYTES")]
    pub experimental_bootstrap_defrag_threshold_megabytes: Option<u64>,

    /// Enable the gRPC service to stop serving client requests on defragmentation (3.6:
    /// --feature-gates=StopGRPCServiceOnDefrag=true).
    #[arg(long, env = "ETCD_EXPERIMENTAL_STOP_GRPC_SERVICE_ON_DEFRAG", num_args = 0..=1,
          default_missing_value = "true", value_parser = parse_bool)]
    pub experimental_stop_grpc_service_on_defrag: Option<bool>,

    /// Number of entries for a slow follower to catch-up after compacting the raft storage entries (5000;
    /// 3.6: --snapshot-catchup-entries).
    #[arg(long, env = "ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES")]
    pub experimental_snapshot_catchup_entries: Option<u64>,

    /// Skip verification of SAN field in client certificate for peer connections (3.6:
    /// --peer-skip-client-san-verification).
    #[arg(long, env = "ETCD_EXPERIMENTAL_PEER_SKIP_CLIENT_SAN_VERIFICATION", num_args = 0..=1,
          default_missing_value = "true", value_parser = parse_bool)]
    pub experimental_peer_skip_client_san_verification: Option<bool>,

    /// Time duration after which a warning is generated if a unary request takes more time (300ms; 3.6:
    /// --warning-unary-request-duration).
    #[arg(long, env = "ETCD_EXPERIMENTAL_WARNING_UNARY_REQUEST_DURATION", value_parser = parse_duration)]
    pub experimental_warning_unary_request_duration: Option<Duration>,

    /// Enable experimental distributed tracing (3.6: --enable-distributed-tracing).
    #[arg(long, env = "ETCD_EXPERIMENTAL_ENABLE_DISTRIBUTED_TRACING", num_args = 0..=1,
          default_missing_value = "true", value_parser = parse_bool)]
    pub experimental_enable_distributed_tracing: Option<bool>,

    /// Distributed tracing collector address (3.6: --distributed-tracing-address).
    #[arg(long, env = "ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_ADDRESS")]
    pub experimental_distributed_tracing_address: Option<String>,

    /// Distributed tracing service name (3.6: --distributed-tracing-service-name).
    #[arg(long, env = "ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_SERVICE_NAME")]
    pub experimental_distributed_tracing_service_name: Option<String>,

    /// Distributed tracing instance ID (3.6: --distributed-tracing-instance-id).
    #[arg(long, env = "ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_INSTANCE_ID")]
    pub experimental_distributed_tracing_instance_id: Option<String>,

    /// Number of samples to collect per million spans (3.6: --distributed-tracing-sampling-rate).
    #[arg(long, env = "ETCD_EXPERIMENTAL_DISTRIBUTED_TRACING_SAMPLING_RATE")]
    pub experimental_distributed_tracing_sampling_rate: Option<u32>,
}
