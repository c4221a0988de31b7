//! etcd 3.6's names of the flags that were experimental in 3.5, and 3.6's new flags (`--feature-gates`,
//! `--max-learners`, the v3 discovery group). None has a default here: [`super::settings`] applies
//! etcd's defaults once it knows which name was given.

use std::time::Duration;

use super::boolean::parse_bool;
use super::duration::parse_duration;

/// etcd 3.6's flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RenamedFlags {
    /// Comma-separated list of feature gates, `Name=true|false` (InitialCorruptCheck, CompactHashCheck,
    /// LeaseCheckpoint, LeaseCheckpointPersist, StopGRPCServiceOnDefrag, TxnModeWriteWithSharedBuffer,
    /// SetMemberLocalAddr, AllAlpha, AllBeta).
    #[arg(long, env = "ETCD_FEATURE_GATES", default_value = "")]
    pub feature_gates: String,

    /// Duration of periodic watch progress notifications (default 10m).
    #[arg(long, env = "ETCD_WATCH_PROGRESS_NOTIFY_INTERVAL", value_parser = parse_duration)]
    pub watch_progress_notify_interval: Option<Duration>,

    /// Duration of time between cluster corruption check passes (default 0s: never).
    #[arg(long, env = "ETCD_CORRUPT_CHECK_TIME", value_parser = parse_duration)]
    pub corrupt_check_time: Option<Duration>,

    /// Duration of time between leader checks followers compaction hashes (default 1m).
    #[arg(long, env = "ETCD_COMPACT_HASH_CHECK_TIME", value_parser = parse_duration)]
    pub compact_hash_check_time: Option<Duration>,

    /// Sets the maximum revisions deleted in each compaction batch (default 1000).
    #[arg(long, env = "ETCD_COMPACTION_BATCH_LIMIT")]
    pub compaction_batch_limit: Option<u64>,

    /// Sets the sleep interval between each compaction batch (default 10ms).
    #[arg(long, env = "ETCD_COMPACTION_SLEEP_INTERVAL", value_parser = parse_duration)]
    pub compaction_sleep_interval: Option<Duration>,

    /// Duration of time between two downgrade status checks (default 5s).
    #[arg(long, env = "ETCD_DOWNGRADE_CHECK_TIME", value_parser = parse_duration)]
    pub downgrade_check_time: Option<Duration>,

    /// Enable to enforce etcd pages to stay in RAM.
    #[arg(long, env = "ETCD_MEMORY_MLOCK", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub memory_mlock: Option<bool>,

    /// Warning is generated if requests take more than this duration (default 100ms).
    #[arg(long, env = "ETCD_WARNING_APPLY_DURATION", value_parser = parse_duration)]
    pub warning_apply_duration: Option<Duration>,

    /// Time duration after which a warning is generated if a unary request takes more time (default 300ms).
    #[arg(long, env = "ETCD_WARNING_UNARY_REQUEST_DURATION", value_parser = parse_duration)]
    pub warning_unary_request_duration: Option<Duration>,

    /// Enable the defrag during bootstrap on condition that it will free at least the provided threshold of
    /// disk space (default 0: off).
    #[arg(long, env = "ETCD_BOOTSTRAP_DEFRAG_THRESHOLD_MEGABYTES")]
    pub bootstrap_defrag_threshold_megabytes: Option<u64>,

    /// Number of entries for a slow follower to catch-up after compacting the raft storage entries
    /// (default 5000).
    #[arg(long, env = "ETCD_SNAPSHOT_CATCHUP_ENTRIES")]
    pub snapshot_catchup_entries: Option<u64>,

    /// Skip verification of SAN field in client certificate for peer connections.
    #[arg(long, env = "ETCD_PEER_SKIP_CLIENT_SAN_VERIFICATION", num_args = 0..=1, default_missing_value = "true",
          value_parser = parse_bool)]
    pub peer_skip_client_san_verification: Option<bool>,

    /// Sets the maximum number of learners that can be available in the cluster membership.
    #[arg(long, env = "ETCD_MAX_LEARNERS", default_value_t = 1)]
    pub max_learners: usize,

    /// Enable distributed tracing.
    #[arg(long, env = "ETCD_ENABLE_DISTRIBUTED_TRACING", num_args = 0..=1, default_missing_value = "true",
          value_parser = parse_bool)]
    pub enable_distributed_tracing: Option<bool>,

    /// Distributed tracing collector address (default localhost:4317).
    #[arg(long, env = "ETCD_DISTRIBUTED_TRACING_ADDRESS")]
    pub distributed_tracing_address: Option<String>,

    /// Distributed tracing service name, must be same across all etcd instances (default etcd).
    #[arg(long, env = "ETCD_DISTRIBUTED_TRACING_SERVICE_NAME")]
    pub distributed_tracing_service_name: Option<String>,

    /// Distributed tracing instance ID, must be unique per each etcd instance.
    #[arg(long, env = "ETCD_DISTRIBUTED_TRACING_INSTANCE_ID")]
    pub distributed_tracing_instance_id: Option<String>,

    /// Number of samples to collect per million spans for distributed tracing (default 0).
    #[arg(long, env = "ETCD_DISTRIBUTED_TRACING_SAMPLING_RATE")]
    pub distributed_tracing_sampling_rate: Option<u32>,

    /// V3 discovery: comma-separated list of gRPC endpoints of the discovery service.
    #[arg(long, env = "ETCD_DISCOVERY_ENDPOINTS", value_delimiter = ',')]
    pub discovery_endpoints: Vec<String>,

    /// V3 discovery: discovery token for the etcd cluster to be bootstrapped.
    #[arg(long, env = "ETCD_DISCOVERY_TOKEN", default_value = "")]
    pub discovery_token: String,

    /// V3 discovery: dial timeout for client connections.
    #[arg(long, env = "ETCD_DISCOVERY_DIAL_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub discovery_dial_timeout: Duration,

    /// V3 discovery: timeout for discovery requests.
    #[arg(long, env = "ETCD_DISCOVERY_REQUEST_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub discovery_request_timeout: Duration,

    /// V3 discovery: keepalive time for client connections.
    #[arg(long, env = "ETCD_DISCOVERY_KEEPALIVE_TIME", default_value = "2s", value_parser = parse_duration)]
    pub discovery_keepalive_time: Duration,

    /// V3 discovery: keepalive timeout for client connections.
    #[arg(long, env = "ETCD_DISCOVERY_KEEPALIVE_TIMEOUT", default_value = "6s", value_parser = parse_duration)]
    pub discovery_keepalive_timeout: Duration,

    /// V3 discovery: disable transport security for client connections.
    #[arg(long, env = "ETCD_DISCOVERY_INSECURE_TRANSPORT", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub discovery_insecure_transport: bool,

    /// V3 discovery: skip server certificate verification.
    #[arg(long, env = "ETCD_DISCOVERY_INSECURE_SKIP_TLS_VERIFY", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub discovery_insecure_skip_tls_verify: bool,

    /// V3 discovery: identify secure client using this TLS certificate file.
    #[arg(long, env = "ETCD_DISCOVERY_CERT", default_value = "")]
    pub discovery_cert: String,

    /// V3 discovery: identify secure client using this TLS key file.
    #[arg(long, env = "ETCD_DISCOVERY_KEY", default_value = "")]
    pub discovery_key: String,

    /// V3 discovery: verify certificates of TLS-enabled secure servers using this CA bundle.
    #[arg(long, env = "ETCD_DISCOVERY_CACERT", default_value = "")]
    pub discovery_cacert: String,

    /// V3 discovery: username[:password] for authentication.
    #[arg(long, env = "ETCD_DISCOVERY_USER", default_value = "")]
    pub discovery_user: String,

    /// V3 discovery: password for authentication (if this option is used, --discovery-user shouldn't
    /// include a password).
    #[arg(long, env = "ETCD_DISCOVERY_PASSWORD", default_value = "")]
    pub discovery_password: String,
}
