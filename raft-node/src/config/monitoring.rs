//! etcd's "Profiling and Monitoring", the rest of "Logging", and "v2 Proxy" flags (distributed tracing:
//! [`super::experimental`] and [`super::renamed`]).

use super::boolean::parse_bool;

/// Profiling, metrics, log rotation, tracing and the v2 proxy.
#[derive(Clone, Debug, clap::Args)]
pub struct MonitoringFlags {
    /// Enable runtime profiling data via HTTP server. Address is at client URL + "/debug/pprof/".
    #[arg(long, env = "ETCD_ENABLE_PPROF", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub enable_pprof: bool,

    /// Set level of detail for exported metrics, specify 'extensive' to include server side grpc histogram
    /// metrics.
    #[arg(long, env = "ETCD_METRICS", default_value = "basic", value_parser = ["basic", "extensive"])]
    pub metrics: String,

    /// List of URLs to listen on for the /metrics, /health, /livez and /readyz endpoints. For https, the
    /// client URL TLS info is used.
    #[arg(long, env = "ETCD_LISTEN_METRICS_URLS", value_delimiter = ',')]
    pub listen_metrics_urls: Vec<String>,

    /// Enable log rotation of a single log-outputs file target.
    #[arg(long, env = "ETCD_ENABLE_LOG_ROTATION", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub enable_log_rotation: bool,

    /// Configures log rotation if enabled with a JSON logger config.
    #[arg(
        long,
        env = "ETCD_LOG_ROTATION_CONFIG_JSON",
        default_value = r#"{"maxsize": 100, "maxage": 0, "maxbackups": 0, "localtime": false, "compress": false}"#
    )]
    pub log_rotation_config_json: String,

    /// Proxy mode setting ('off', 'readonly' or 'on').
    #[arg(long, env = "ETCD_PROXY", default_value = "off", value_parser = ["off", "readonly", "on"])]
    pub proxy: String,

    /// Time (in milliseconds) an endpoint will be held in a failed state.
    #[arg(long, env = "ETCD_PROXY_FAILURE_WAIT", default_value_t = 5000)]
    pub proxy_failure_wait: u64,

    /// Time (in milliseconds) of the endpoints refresh interval.
    #[arg(long, env = "ETCD_PROXY_REFRESH_INTERVAL", default_value_t = 30000)]
    pub proxy_refresh_interval: u64,

    /// Time (in milliseconds) for a dial to timeout.
    #[arg(long, env = "ETCD_PROXY_DIAL_TIMEOUT", default_value_t = 1000)]
    pub proxy_dial_timeout: u64,

    /// Time (in milliseconds) for a write to timeout.
    #[arg(long, env = "ETCD_PROXY_WRITE_TIMEOUT", default_value_t = 5000)]
    pub proxy_write_timeout: u64,

    /// Time (in milliseconds) for a read to timeout.
    #[arg(long, env = "ETCD_PROXY_READ_TIMEOUT", default_value_t = 0)]
    pub proxy_read_timeout: u64,
}
