//! etcd's "Clustering" flags beyond the bootstrap ones in [`super::Config`], and its unsafe ones.

use super::boolean::parse_bool;

/// The rest of etcd's "Clustering" and "Unsafe feature" sections.
#[derive(Clone, Debug, clap::Args)]
pub struct ClusteringFlags {
    /// Discovery URL used to bootstrap the cluster.
    #[arg(long, env = "ETCD_DISCOVERY", default_value = "")]
    pub discovery: String,

    /// Expected behavior ('exit' or 'proxy') when discovery services fails. "proxy" supports v2 API only.
    #[arg(long, env = "ETCD_DISCOVERY_FALLBACK", default_value = "proxy", value_parser = ["exit", "proxy"])]
    pub discovery_fallback: String,

    /// HTTP proxy to use for traffic to discovery service.
    #[arg(long, env = "ETCD_DISCOVERY_PROXY", default_value = "")]
    pub discovery_proxy: String,

    /// DNS srv domain used to bootstrap the cluster.
    #[arg(long, env = "ETCD_DISCOVERY_SRV", default_value = "")]
    pub discovery_srv: String,

    /// Suffix to the dns srv name queried when bootstrapping.
    #[arg(long, env = "ETCD_DISCOVERY_SRV_NAME", default_value = "")]
    pub discovery_srv_name: String,

    /// Reject reconfiguration requests that would cause quorum loss.
    #[arg(long, env = "ETCD_STRICT_RECONFIG_CHECK", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub strict_reconfig_check: bool,

    /// Enable to run an additional Raft election phase.
    #[arg(long, env = "ETCD_PRE_VOTE", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub pre_vote: bool,

    /// Auto compaction retention length. 0 means disable auto compaction.
    #[arg(long, env = "ETCD_AUTO_COMPACTION_RETENTION", default_value = "0")]
    pub auto_compaction_retention: String,

    /// Interpret 'auto-compaction-retention' one of: periodic|revision. 'periodic' for duration based
    /// retention, defaulting to hours if no time unit is provided (e.g. '5m'). 'revision' for revision
    /// number based retention.
    #[arg(long, env = "ETCD_AUTO_COMPACTION_MODE", default_value = "periodic", value_parser = ["periodic", "revision"])]
    pub auto_compaction_mode: String,

    /// Accept etcd V2 client requests. Deprecated and to be decommissioned in v3.6.
    #[arg(long, env = "ETCD_ENABLE_V2", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub enable_v2: bool,

    /// Phase of v2store deprecation: not-yet, write-only, write-only-skip-check, write-only-drop-data, gone.
    #[arg(long, env = "ETCD_V2_DEPRECATION", default_value = "not-yet",
          value_parser = ["not-yet", "write-only", "write-only-skip-check", "write-only-drop-data", "gone"])]
    pub v2_deprecation: String,

    /// Force to create a new one-member cluster.
    #[arg(long, env = "ETCD_FORCE_NEW_CLUSTER", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub force_new_cluster: bool,

    /// Disables fsync, unsafe, will cause data loss.
    #[arg(long, env = "ETCD_UNSAFE_NO_FSYNC", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub unsafe_no_fsync: bool,

    /// Not etcd's: keeps the store's values of 512 bytes or more in a value log beside its sled tree, which
    /// then holds a pointer to each (on by default; `=false` keeps new values in the tree). The space of
    /// compacted values comes back with a defragmentation, which the member also starts on its own.
    #[arg(long, env = "ETCD_EXPERIMENTAL_VALUES_APART", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub experimental_values_apart: bool,
}
