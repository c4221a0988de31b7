//! etcd's "Member" flags beyond the basic ones in [`super::Config`]: listeners, gRPC limits, the backend.

use std::path::PathBuf;
use std::time::Duration;

use super::boolean::parse_bool;
use super::duration::parse_duration;

/// The rest of etcd's "Member" section.
#[derive(Clone, Debug, clap::Args)]
pub struct MemberFlags {
    /// Path to the dedicated wal directory.
    #[arg(long, env = "ETCD_WAL_DIR")]
    pub wal_dir: Option<PathBuf>,

    /// Whether to fast-forward initial election ticks on boot for faster election.
    #[arg(long, env = "ETCD_INITIAL_ELECTION_TICK_ADVANCE", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub initial_election_tick_advance: bool,

    /// List of URLs to listen on for http only client traffic. Enabling this flag removes http services
    /// from --listen-client-urls.
    #[arg(long, env = "ETCD_LISTEN_CLIENT_HTTP_URLS", value_delimiter = ',')]
    pub listen_client_http_urls: Vec<String>,

    /// Maximum number of snapshot files to retain (0 is unlimited).
    #[arg(long, env = "ETCD_MAX_SNAPSHOTS", default_value_t = 5)]
    pub max_snapshots: u32,

    /// Maximum number of wal files to retain (0 is unlimited).
    #[arg(long, env = "ETCD_MAX_WALS", default_value_t = 5)]
    pub max_wals: u32,

    /// BackendFreelistType specifies the type of freelist that boltdb backend uses (array and map are
    /// supported types).
    #[arg(long, env = "ETCD_BACKEND_BBOLT_FREELIST_TYPE", default_value = "map", value_parser = ["map", "array"])]
    pub backend_bbolt_freelist_type: String,

    /// BackendBatchInterval is the maximum time before commit the backend transaction.
    #[arg(long, env = "ETCD_BACKEND_BATCH_INTERVAL", value_parser = parse_duration)]
    pub backend_batch_interval: Option<Duration>,

    /// BackendBatchLimit is the maximum operations before commit the backend transaction.
    #[arg(long, env = "ETCD_BACKEND_BATCH_LIMIT", default_value_t = 0)]
    pub backend_batch_limit: u64,

    /// Maximum concurrent streams that each client can open at a time.
    #[arg(long, env = "ETCD_MAX_CONCURRENT_STREAMS", default_value_t = u32::MAX)]
    pub max_concurrent_streams: u32,

    /// Enable GRPC gateway.
    #[arg(long, env = "ETCD_ENABLE_GRPC_GATEWAY", default_value = "true", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub enable_grpc_gateway: bool,

    /// Minimum duration interval that a client should wait before pinging server.
    #[arg(long, env = "ETCD_GRPC_KEEPALIVE_MIN_TIME", default_value = "5s", value_parser = parse_duration)]
    pub grpc_keepalive_min_time: Duration,

    /// Frequency duration of server-to-client ping to check if a connection is alive (0 to disable).
    #[arg(long, env = "ETCD_GRPC_KEEPALIVE_INTERVAL", default_value = "2h", value_parser = parse_duration)]
    pub grpc_keepalive_interval: Duration,

    /// Additional duration of wait before closing a non-responsive connection (0 to disable).
    #[arg(long, env = "ETCD_GRPC_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub grpc_keepalive_timeout: Duration,

    /// Enable to set socket option SO_REUSEPORT on listeners allowing rebinding of a port already in use.
    #[arg(long, env = "ETCD_SOCKET_REUSE_PORT", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub socket_reuse_port: bool,

    /// Enable to set socket option SO_REUSEADDR on listeners allowing binding to an address in TIME_WAIT
    /// state.
    #[arg(long, env = "ETCD_SOCKET_REUSE_ADDRESS", default_value = "false", num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = parse_bool)]
    pub socket_reuse_address: bool,

    /// Comma-separated whitelist of origins for CORS, or cross-origin resource sharing, (empty or * means
    /// allow all).
    #[arg(long, env = "ETCD_CORS", default_value = "*", value_delimiter = ',', value_parser = cors_origin)]
    pub cors: Vec<String>,

    /// Acceptable hostnames from HTTP client requests, if server is not secure (empty or * means allow
    /// all).
    #[arg(long, env = "ETCD_HOST_WHITELIST", default_value = "*", value_delimiter = ',')]
    pub host_whitelist: Vec<String>,

    /// Read timeout set on each rafthttp connection.
    #[arg(long, env = "ETCD_RAFT_READ_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub raft_read_timeout: Duration,

    /// Write timeout set on each rafthttp connection.
    #[arg(long, env = "ETCD_RAFT_WRITE_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub raft_write_timeout: Duration,
}

/// A `--cors` origin as etcd takes it: `*`, or a URL with an explicit `host:port`.
fn cors_origin(text: &str) -> Result<String, String> {
    if text.is_empty() || text == "*" {
        return Ok(text.to_string());
    }
    let authority = text.split_once("://").map(|(_, rest)| rest.trim_end_matches('/')).unwrap_or_default();
    let has_port =
        authority.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !has_port || url::Url::parse(text).is_err() {
        return Err(format!("URL address does not have the form \"host:port\": {text}"));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cors_origins_need_a_port_as_in_etcd() {
        assert_eq!(cors_origin("*").as_deref(), Ok("*"));
        assert_eq!(cors_origin("https://ui.example:8443").as_deref(), Ok("https://ui.example:8443"));
        assert!(cors_origin("https://ui.example").is_err());
        assert!(cors_origin("ui.example:80").is_err(), "a scheme too");
    }
}
