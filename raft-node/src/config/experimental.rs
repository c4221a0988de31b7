//! etcd 3.5's `--experimental-*` flags (the two already used by the server, initial and periodic corrupt
//! checks and the watch progress interval, sit in [`super::Config`]).

use std::time::Duration;

use super::{parse_bool, parse_duration};

/// The rest of etcd's "Experimental feature" section.
#[derive(Clone, Debug, clap::Args)]
pub struct ExperimentalFlags {
    /// Enable leader to periodically check followers compaction hashes.
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub experimental_compact_hash_check_enabled: bool,

    /// Duration of time between leader checks followers compaction hashes.
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME", default_value = "1m", value_parser = parse_duration)]
    pub experimental_compact_hash_check_time: Duration,

    /// Serve v2 requests through the v3 backend under a given prefix. Deprecated and to be decommissioned in
    /// v3.6.
    #[arg(long, env = "ETCD_EXPERIMENTAL_ENABLE_V2V3", default_value = "")]
    pub experimental_enable_v2v3: String,

    /// Enables the primary lessor to persist lease remainingTTL to prevent indefinite auto-renewal of long
    /// lived leases.
    #[arg(long, env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub experimental_enable_lease_checkpoint: bool,

    /// Enable persisting remainingTTL to prevent indefinite auto-renewal of long lived leases.
    #[arg(long, env = "ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT_PERSIST", default_value = "false",
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub experimental_enable_lease_checkpoint_persist: bool,

    /// Sets the maximum revisions deleted in each compaction batch.
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACTION_BATCH_LIMIT", default_value_t = 1000)]
    pub experimental_compaction_batch_limit: u64,

    /// Sets the sleep interval between each compaction batch.
    #[arg(long, env = "ETCD_EXPERIMENTAL_COMPACTION_SLEEP_INTERVAL", default_value = "10ms",
          value_parser = parse_duration)]
    pub experimental_compaction_sleep_interval: Duration,

    /// Duration of time between two downgrade status checks.
    #[arg(long, env = "ETCD_EXPERIMENTAL_DOWNGRADE_CHECK_TIME", default_value = "5s", value_parser = parse_duration)]
    pub experimental_downgrade_check_time: Duration,

    /// Enable to enforce etcd pages to stay in RAM.
    #[arg(long, env = "ETCD_EXPERIMENTAL_MEMORY_MLOCK", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub experimental_memory_mlock: bool,

    /// Warning is generated if requests take more than this duration.
    #[arg(long, env = "ETCD_EXPERIMENTAL_WARNING_APPLY_DURATION", default_value = "100ms",
          value_parser = parse_duration)]
    pub experimental_warning_apply_duration: Duration,

    /// Enable the write transaction to use a shared buffer in its readonly check operations.
    #[arg(long, env = "ETCD_EXPERIMENTAL_TXN_MODE_WRITE_WITH_SHARED_BUFFER", default_value = "true",
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub experimental_txn_mode_write_with_shared_buffer: bool,

    /// Enable the defrag during bootstrap on condition that it will free at least the provided threshold of
    /// disk space. Needs to be set to non-zero value to take effect.
    #[arg(long, env = "ETCD_EXPERIMENTAL_BOOTSTRAP_DEFRAG_THRESHOLD_MEGABYTES", default_value_t = 0)]
    pub experimental_bootstrap_defrag_threshold_megabytes: u64,

    /// Enable the gRPC service to stop serving client requests on defragmentation.
    #[arg(long, env = "ETCD_EXPERIMENTAL_STOP_GRPC_SERVICE_ON_DEFRAG", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub experimental_stop_grpc_service_on_defrag: bool,

    /// Number of entries for a slow follower to catch-up after compacting the raft storage entries.
    #[arg(long, env = "ETCD_EXPERIMENTAL_SNAPSHOT_CATCHUP_ENTRIES", default_value_t = 5000)]
    pub experimental_snapshot_catchup_entries: u64,
}
