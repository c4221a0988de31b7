//! Member configuration: etcd's flag names, defaults and `ETCD_*` environment variables, and etcd's YAML
//! configuration file.
//!
//! Every flag of etcd 3.5's and 3.6's `etcd --help` is accepted with etcd's default (the lists are kept in
//! `raft-node/etcd-3.5-flags.txt` and `etcd-3.6-flags.txt`, and a test holds `--help` against them). What each one does here is
//! decided in [`effect`]: most act as in etcd; the few that cannot stop the member with one line saying so
//! and what to use instead, and those that have nothing to act on in this store say so in the log.
//!
//! - [`member`], [`clustering`], [`monitoring`], [`experimental`]: the flag groups of etcd's help text.
//! - [`auth_token`]: `--auth-token`, simple or JWT with its keys.
//! - [`renamed`]: etcd 3.6's names of 3.5's experimental flags, and 3.6's new flags.
//! - [`gates`]: etcd 3.6's feature gates.
//! - [`settings`]: what old and new names come to, with 3.6's deprecation warnings.
//! - [`file`]: `--config-file`, etcd's YAML keys turned into flags.
//! - [`effect`]: flags refused or without effect here.
//! - [`duration`]: Go's duration syntax.

pub mod auth_token;
pub mod boolean;
pub mod clustering;
pub mod duration;
pub mod effect;
pub mod experimental;
pub mod file;
pub mod gates;
pub mod member;
pub mod monitoring;
pub mod renamed;
pub mod settings;

#[cfg(test)]
mod arbitrary_test;

pub use duration::parse_duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

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

    /// Raise alarms when backend size exceeds the given quota (0 defaults to low space quota, 2 GiB;
    /// negative disables the quota).
    #[arg(long, env = "ETCD_QUOTA_BACKEND_BYTES", default_value_t = 0, allow_negative_numbers = true)]
    pub quota_backend_bytes: i64,

    /// Specify a v3 authentication token type and its options ('simple' or 'jwt').
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

    /// Path to the server configuration file. Note that if a configuration file is provided, other command
    /// line flags and environment variables will be ignored.
    #[arg(long, env = "ETCD_CONFIG_FILE")]
    pub config_file: Option<PathBuf>,

    #[command(flatten)]
    pub member: member::MemberFlags,

    #[command(flatten)]
    pub clustering: clustering::ClusteringFlags,

    #[command(flatten)]
    pub monitoring: monitoring::MonitoringFlags,

    #[command(flatten)]
    pub experimental: experimental::ExperimentalFlags,

    #[command(flatten)]
    pub renamed: renamed::RenamedFlags,

    /// Keys of the configuration file that name no flag (etcd ignores them; the member logs them).
    #[arg(skip)]
    pub ignored_file_keys: Vec<String>,
}

/// Why the flags could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Flags(#[from] clap::Error),
    #[error(transparent)]
    File(#[from] file::FileError),
}

impl LoadError {
    /// The problem in one line (clap's message without its usage and tip lines).
    pub fn one_line(&self) -> String {
        match self {
            LoadError::Flags(err) => {
                let rendered = err.render().to_string();
                rendered.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string()
            }
            LoadError::File(err) => err.to_string(),
        }
    }
}

/// Every long flag name the member takes.
pub fn flag_names() -> Vec<String> {
    Config::command().get_arguments().filter_map(|arg| arg.get_long().map(str::to_string)).collect()
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
    /// The configuration as etcd reads it: flags and `ETCD_*` variables, or, when `--config-file` (or
    /// `ETCD_CONFIG_FILE`) names a file, that file alone.
    pub fn load<I, T>(args: I) -> Result<Config, LoadError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let config = Config::try_parse_from(&args)?;
        let Some(path) = config.config_file.clone() else {
            return Ok(config);
        };
        let (flags, unknown) = file::flags_of(&path)?;
        let program = args.first().cloned().unwrap_or_else(|| "raft-node".into());
        // Only the file counts: the command's variables are switched off.
        let command = Config::command().mut_args(|arg| arg.env(None));
        let matches =
            command.try_get_matches_from(std::iter::once(program).chain(flags.into_iter().map(Into::into)))?;
        let mut config = Config::from_arg_matches(&matches)?;
        config.config_file = Some(path);
        config.ignored_file_keys = unknown;
        Ok(config)
    }

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
            address(url)?;
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

/// Where a listen or peer URL points: a TCP address, or a unix socket (`unix://NAME`, as etcd: the socket
/// file is the URL's host and path, `unix://localhost:2379` a file `localhost:2379` in the working dir).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

/// The [`Address`] of a URL.
pub fn address(raw: &str) -> Result<Address, ConfigError> {
    let bad = |reason: &str| ConfigError::BadUrl { url: raw.to_string(), reason: reason.to_string() };
    let trimmed = raw.trim();
    if let Some(rest) = trimmed.strip_prefix("unix://") {
        let path = rest.split(['?', '#']).next().unwrap_or_default();
        if path.is_empty() {
            return Err(bad("missing the socket's path"));
        }
        return Ok(Address::Unix(PathBuf::from(path)));
    }
    if trimmed.starts_with("unixs://") {
        return Err(bad("TLS over unix sockets (unixs://) is not supported: use unix:// or https://"));
    }
    socket_addr(raw).map(Address::Tcp)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(args: &[&str]) -> Config {
        Config::try_parse_from(std::iter::once("raft-node").chain(args.iter().copied())).expect("valid flags")
    }

    #[test]
    fn every_etcd_flag_is_taken_with_its_variable() {
        let ours = Config::command();
        let longs: Vec<&str> = ours.get_arguments().filter_map(|arg| arg.get_long()).collect();
        for (version, listed) in
            [("3.5", include_str!("../../etcd-3.5-flags.txt")), ("3.6", include_str!("../../etcd-3.6-flags.txt"))]
        {
            let etcd: Vec<&str> =
                listed.lines().filter(|l| !l.starts_with('#')).map(|l| l.trim_start_matches("--")).collect();
            assert!(etcd.len() > 100, "the list holds etcd {version}'s flags");
            // clap adds --help and --version itself.
            let missing: Vec<&&str> = etcd.iter().filter(|f| !longs.contains(f) && **f != "version").collect();
            assert!(missing.is_empty(), "etcd {version} flags raft-node lacks: {missing:?}");
            // Every flag of etcd's is also its ETCD_* variable.
            for arg in ours.get_arguments().filter(|arg| arg.get_long().is_some_and(|long| etcd.contains(&long))) {
                let long = arg.get_long().unwrap_or_default();
                let want = format!("ETCD_{}", long.to_uppercase().replace('-', "_"));
                assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(want.as_str()), "--{long}");
            }
        }
    }

    #[test]
    fn a_config_file_stands_alone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("etcd.yaml");
        std::fs::write(&path, "name: m1\nsnapshot-count: 10000\nstrict-reconfig-check: false\nbogus: 1\n")
            .expect("write");
        let path_flag = format!("--config-file={}", path.display());
        // Other flags are ignored once a file is given, as in etcd.
        let config = Config::load(["raft-node", path_flag.as_str(), "--name=other"]).expect("loads");
        assert_eq!((config.name.as_str(), config.snapshot_count), ("m1", 10000));
        assert!(!config.clustering.strict_reconfig_check);
        assert_eq!(config.ignored_file_keys, ["bogus"]);
        std::fs::write(&path, "snapshot-count: many\n").expect("write");
        let err = Config::load(["raft-node", path_flag.as_str()]).expect_err("refused");
        assert!(err.one_line().contains("'many'") && !err.one_line().contains('\n'), "{}", err.one_line());
    }

    #[test]
    fn bools_read_as_go_reads_them() {
        assert!(!parse(&["--strict-reconfig-check=0"]).clustering.strict_reconfig_check);
        assert!(parse(&["--socket-reuse-port=T"]).member.socket_reuse_port);
        assert!(parse(&["--socket-reuse-port"]).member.socket_reuse_port);
        assert!(Config::try_parse_from(["raft-node", "--pre-vote=yes"]).is_err());
    }

    #[test]
    fn defaults_match_etcd() {
        let config = parse(&[]);
        assert_eq!(config.name, "default");
        assert_eq!(config.data_dir(), PathBuf::from("default.etcd"));
        assert_eq!(config.max_txn_ops, 128);
        assert_eq!(config.max_request_bytes, 1572864);
        assert_eq!(config.quota_backend_bytes(), Some(2 * 1024 * 1024 * 1024));
        assert_eq!(config.log_level, "info");
        assert_eq!(config.member.max_concurrent_streams, u32::MAX);
        assert_eq!(config.member.grpc_keepalive_interval, Duration::from_secs(7200));
        assert!(config.clustering.strict_reconfig_check && config.clustering.pre_vote);
        assert_eq!(config.tls.tls_min_version, "TLS1.2");
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
        assert_eq!(parse(&[]).experimental.experimental_initial_corrupt_check, None);
        assert_eq!(
            parse(&["--experimental-initial-corrupt-check"]).experimental.experimental_initial_corrupt_check,
            Some(true)
        );
        assert_eq!(
            parse(&["--experimental-initial-corrupt-check=false"]).experimental.experimental_initial_corrupt_check,
            Some(false)
        );
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
        assert_eq!(address("unix://localhost:2379").ok(), Some(Address::Unix("localhost:2379".into())));
        assert_eq!(address("unix:///run/etcd.sock").ok(), Some(Address::Unix("/run/etcd.sock".into())));
        assert!(matches!(address("unixs://localhost:2379"), Err(ConfigError::BadUrl { .. })));
        assert_eq!(address("http://127.0.0.1:1").ok(), Some(Address::Tcp("127.0.0.1:1".parse().expect("addr"))));
        assert!(matches!(socket_addr("http://127.0.0.1"), Err(ConfigError::BadUrl { .. })));
    }
}
