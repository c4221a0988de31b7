//! Member configuration: etcd's flag names, defaults and `ETCD_*` environment variables.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// An etcd-compatible key-value store member.
#[derive(Clone, Debug, Parser)]
#[command(name = "raft-node", version, about)]
pub struct Config {
    /// Human-readable name for this member.
    #[arg(long, env = "ETCD_NAME", default_value = "default")]
    pub name: String,

    /// Path to the data directory (default: `<name>.etcd`).
    #[arg(long, env = "ETCD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// List of URLs to listen on for client traffic.
    #[arg(long, env = "ETCD_LISTEN_CLIENT_URLS", default_value = "http://localhost:2379", value_delimiter = ',')]
    pub listen_client_urls: Vec<String>,

    /// List of this member's client URLs to advertise to the public.
    #[arg(long, env = "ETCD_ADVERTISE_CLIENT_URLS", default_value = "http://localhost:2379", value_delimiter = ',')]
    pub advertise_client_urls: Vec<String>,

    /// List of URLs to listen on for peer traffic.
    #[arg(long, env = "ETCD_LISTEN_PEER_URLS", default_value = "http://localhost:2380", value_delimiter = ',')]
    pub listen_peer_urls: Vec<String>,

    /// List of this member's peer URLs to advertise to the rest of the cluster.
    #[arg(
        long,
        env = "ETCD_INITIAL_ADVERTISE_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ','
    )]
    pub initial_advertise_peer_urls: Vec<String>,

    /// Initial cluster configuration for bootstrapping, `name=peerURL,...`.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER", default_value = "default=http://localhost:2380")]
    pub initial_cluster: String,

    /// Initial cluster state ('new' or 'existing').
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_STATE", default_value = "new", value_parser = ["new", "existing"])]
    pub initial_cluster_state: String,

    /// Initial cluster token for the cluster during bootstrap.
    #[arg(long, env = "ETCD_INITIAL_CLUSTER_TOKEN", default_value = "etcd-cluster")]
    pub initial_cluster_token: String,

    /// Client and peer TLS (`--cert-file`, `--peer-cert-file`, ...).
    #[command(flatten)]
    pub tls: crate::tls::TlsFlags,

    /// Maximum number of operations permitted in a transaction.
    #[arg(long, env = "ETCD_MAX_TXN_OPS", default_value_t = 128)]
    pub max_txn_ops: usize,

    /// Maximum client request size in bytes the server will accept.
    #[arg(long, env = "ETCD_MAX_REQUEST_BYTES", default_value_t = 1536 * 1024)]
    pub max_request_bytes: usize,

    /// Number of committed transactions to trigger a snapshot to disk.
    #[arg(long, env = "ETCD_SNAPSHOT_COUNT", default_value_t = 100_000)]
    pub snapshot_count: u64,

    /// Time (in milliseconds) of a heartbeat interval.
    #[arg(long, env = "ETCD_HEARTBEAT_INTERVAL", default_value_t = 100)]
    pub heartbeat_interval: u64,

    /// Time (in milliseconds) for an election to timeout.
    #[arg(long, env = "ETCD_ELECTION_TIMEOUT", default_value_t = 1000)]
    pub election_timeout: u64,

    /// etcd version reported by Maintenance.Status (clients gate features on it).
    #[arg(long, env = "ETCD_EMULATED_VERSION", default_value = kv_api::ETCD_VERSION)]
    pub emulated_version: String,

    /// Duration of periodic watch progress notifications.
    #[arg(
        long,
        env = "ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL",
        default_value = "10m",
        value_parser = parse_duration
    )]
    pub experimental_watch_progress_notify_interval: Duration,

    /// Raise alarms when backend size exceeds the given quota (0 defaults to low space quota, 2 GiB;
    /// negative disables the quota).
    #[arg(long, env = "ETCD_QUOTA_BACKEND_BYTES", default_value_t = 0, allow_negative_numbers = true)]
    pub quota_backend_bytes: i64,

    /// Specify a v3 authentication token type and its options ('simple' or 'jwt'; only 'simple' here).
    #[arg(long, env = "ETCD_AUTH_TOKEN", default_value = "simple")]
    pub auth_token: String,

    /// Specify the cost / strength of the bcrypt algorithm for hashing auth passwords. Valid values are
    /// between 4 and 31.
    #[arg(long, env = "ETCD_BCRYPT_COST", default_value_t = kv_api::service::DEFAULT_BCRYPT_COST,
          value_parser = clap::value_parser!(u32).range(4..=31))]
    pub bcrypt_cost: u32,

    /// Time (in seconds) of the auth-token-ttl.
    #[arg(long, env = "ETCD_AUTH_TOKEN_TTL", default_value_t = 300)]
    pub auth_token_ttl: u64,

    /// Enable to check data corruption before serving any client/peer traffic.
    #[arg(long, env = "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub experimental_initial_corrupt_check: bool,

    /// Duration of time between cluster corruption check passes (0s: never).
    #[arg(long, env = "ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", default_value = "0s", value_parser = parse_duration)]
    pub experimental_corrupt_check_time: Duration,

    /// Configures log level. Only supports debug, info, warn, error, panic, or fatal (`RUST_LOG`, when
    /// set, overrides it).
    #[arg(
        long,
        env = "ETCD_LOG_LEVEL",
        default_value = "info",
        value_parser = ["debug", "info", "warn", "error", "panic", "fatal"]
    )]
    pub log_level: String,

    /// Log line format: 'text', or 'json' (one JSON object a line). Default: 'json' with
    /// `--logger=zap`, 'text' otherwise.
    #[arg(long, env = "ETCD_LOG_FORMAT", value_parser = ["json", "text"])]
    pub log_format: Option<String>,

    /// Specify 'zap' for structured logging (JSON lines, as etcd's zap logger) or 'capnslog' (text).
    #[arg(long, env = "ETCD_LOGGER", default_value = "capnslog", value_parser = ["zap", "capnslog"])]
    pub logger: String,

    /// Where logs go: 'default' or 'stderr', 'stdout', or a file path (appended to).
    #[arg(long, env = "ETCD_LOG_OUTPUTS", default_value = "default")]
    pub log_outputs: String,
}

/// A configuration the member cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("--initial-cluster has an invalid entry {0:?} (want name=URL)")]
    BadInitialCluster(String),
    #[error("couldn't find local name {name:?} in the initial cluster configuration")]
    NameNotInCluster { name: String },
    #[error(
        "--initial-cluster has {cluster} but missing from --initial-advertise-peer-urls={advertised} \
         (peer URLs of {name:?} differ)"
    )]
    PeerUrlMismatch { name: String, cluster: String, advertised: String },
}

impl Config {
    /// `--quota-backend-bytes` as it applies: `None` when disabled (negative), etcd's 2 GiB for 0.
    pub fn quota_backend_bytes(&self) -> Option<u64> {
        match self.quota_backend_bytes {
            quota if quota < 0 => None,
            0 => Some(kv_api::service::quota::DEFAULT_QUOTA_BYTES),
            quota => Some(quota as u64),
        }
    }

    /// Whether log lines are JSON objects (`--log-format`, else `--logger=zap`).
    pub fn log_json(&self) -> bool {
        match self.log_format.as_deref() {
            Some(format) => format == "json",
            None => self.logger == "zap",
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(|| PathBuf::from(format!("{}.etcd", self.name)))
    }

    /// `--initial-cluster` as name → peer URLs, in name order.
    pub fn initial_cluster(&self) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
        let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in self.initial_cluster.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, url) = entry.split_once('=').ok_or_else(|| ConfigError::BadInitialCluster(entry.into()))?;
            socket_addr(url)?;
            members.entry(name.to_string()).or_default().push(url.to_string());
        }
        let own = members.get(&self.name).ok_or_else(|| ConfigError::NameNotInCluster { name: self.name.clone() })?;
        let mut own_sorted = own.clone();
        own_sorted.sort();
        let mut advertised = self.initial_advertise_peer_urls.clone();
        advertised.sort();
        if own_sorted != advertised {
            return Err(ConfigError::PeerUrlMismatch {
                name: self.name.clone(),
                cluster: own.join(","),
                advertised: self.initial_advertise_peer_urls.join(","),
            });
        }
        Ok(members)
    }
}

/// The socket address an `http://` or `https://host:port` URL names; `localhost` means 127.0.0.1.
pub fn socket_addr(raw: &str) -> Result<SocketAddr, ConfigError> {
    let bad = |reason: &str| ConfigError::BadUrl { url: raw.to_string(), reason: reason.to_string() };
    let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    let port = url.port().ok_or_else(|| bad("missing port"))?;
    let host = match url.host_str() {
        Some("localhost") => "127.0.0.1",
        Some(host) => host.trim_start_matches('[').trim_end_matches(']'),
        None => return Err(bad("missing host")),
    };
    let ip = host.parse().map_err(|_| bad("the host must be an IP address or localhost"))?;
    Ok(SocketAddr::new(ip, port))
}

/// A duration as Go's `time.ParseDuration` reads it (etcd's duration flags): a sequence of decimal numbers
/// each with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), like `10m`, `1.5s`, `1h30m`; `0` alone is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?}");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("missing unit in duration {text:?}")),
            _ => return Err(format!("unknown unit {unit:?} in duration {text:?}")),
        };
        nanos += value * scale;
        rest = tail;
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Config {
        Config::try_parse_from(std::iter::once("raft-node").chain(args.iter().copied())).expect("valid flags")
    }

    #[test]
    fn durations_parse_as_in_go() {
        let ok = [
            ("10m", Duration::from_secs(600)),
            ("5s", Duration::from_secs(5)),
            ("100ms", Duration::from_millis(100)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5s", Duration::from_millis(1500)),
            ("300us", Duration::from_micros(300)),
            ("2\u{b5}s", Duration::from_micros(2)),
            ("0", Duration::ZERO),
            ("+7ns", Duration::from_nanos(7)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "10", "5x", "s", "-1s", "1.2.3s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        let config = parse(&["--experimental-watch-progress-notify-interval", "2s"]);
        assert_eq!(config.experimental_watch_progress_notify_interval, Duration::from_secs(2));
    }

    #[test]
    fn defaults_match_etcd() {
        let config = parse(&[]);
        assert_eq!(config.name, "default");
        assert_eq!(config.data_dir(), PathBuf::from("default.etcd"));
        assert_eq!(config.max_txn_ops, 128);
        assert_eq!(config.max_request_bytes, 1572864);
        assert_eq!(config.experimental_watch_progress_notify_interval, Duration::from_secs(600));
        assert_eq!(config.quota_backend_bytes(), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(config.experimental_corrupt_check_time, Duration::ZERO);
        assert_eq!(config.log_level, "info");
        assert!(!config.log_json());
        assert_eq!(socket_addr(&config.listen_client_urls[0]).unwrap(), "127.0.0.1:2379".parse().unwrap());
        let cluster = config.initial_cluster().unwrap();
        assert_eq!(cluster["default"], vec!["http://localhost:2380".to_string()]);
    }

    #[test]
    fn quota_and_log_flags_read_as_etcd_reads_them() {
        assert_eq!(parse(&["--quota-backend-bytes", "-1"]).quota_backend_bytes(), None);
        assert_eq!((parse(&[]).bcrypt_cost, parse(&[]).auth_token_ttl), (10, 300));
        assert!(Config::try_parse_from(["raft-node", "--bcrypt-cost", "3"]).is_err(), "below bcrypt's minimum");
        assert_eq!(parse(&["--quota-backend-bytes", "65536"]).quota_backend_bytes(), Some(65536));
        assert!(parse(&["--logger", "zap"]).log_json());
        assert!(!parse(&["--logger", "zap", "--log-format", "text"]).log_json());
        assert!(parse(&["--log-format", "json"]).log_json());
        assert!(!parse(&[]).experimental_initial_corrupt_check);
        assert!(parse(&["--experimental-initial-corrupt-check"]).experimental_initial_corrupt_check);
        assert!(!parse(&["--experimental-initial-corrupt-check=false"]).experimental_initial_corrupt_check);
        let bad = Config::try_parse_from(["raft-node", "--log-level", "verbose"]);
        assert!(bad.is_err());
    }

    #[test]
    fn initial_cluster_must_name_this_member_with_its_urls() {
        let config = parse(&["--name", "n2", "--initial-cluster", "n1=http://127.0.0.1:1,n3=http://127.0.0.1:3"]);
        assert!(matches!(config.initial_cluster(), Err(ConfigError::NameNotInCluster { .. })));
        let config = parse(&[
            "--name",
            "n1",
            "--initial-cluster",
            "n1=http://127.0.0.1:1",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:2",
        ]);
        assert!(matches!(config.initial_cluster(), Err(ConfigError::PeerUrlMismatch { .. })));
        assert_eq!(socket_addr("https://127.0.0.1:1").ok(), "127.0.0.1:1".parse().ok());
        assert!(matches!(socket_addr("unix://127.0.0.1:1"), Err(ConfigError::BadUrl { .. })));
        assert!(matches!(socket_addr("http://127.0.0.1"), Err(ConfigError::BadUrl { .. })));
    }
}
