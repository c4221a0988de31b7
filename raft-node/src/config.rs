//! Member configuration: etcd's flag names, defaults and `ETCD_*` environment variables.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    #[arg(
        long,
        env = "ETCD_LISTEN_CLIENT_URLS",
        default_value = "http://localhost:2379",
        value_delimiter = ','
    )]
    pub listen_client_urls: Vec<String>,

    /// List of this member's client URLs to advertise to the public.
    #[arg(
        long,
        env = "ETCD_ADVERTISE_CLIENT_URLS",
        default_value = "http://localhost:2379",
        value_delimiter = ','
    )]
    pub advertise_client_urls: Vec<String>,

    /// List of URLs to listen on for peer traffic.
    #[arg(
        long,
        env = "ETCD_LISTEN_PEER_URLS",
        default_value = "http://localhost:2380",
        value_delimiter = ','
    )]
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
    PeerUrlMismatch {
        name: String,
        cluster: String,
        advertised: String,
    },
}

impl Config {
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.etcd", self.name)))
    }

    /// `--initial-cluster` as name → peer URLs, in name order.
    pub fn initial_cluster(&self) -> Result<BTreeMap<String, Vec<String>>, ConfigError> {
        let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in self.initial_cluster.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, url) = entry
                .split_once('=')
                .ok_or_else(|| ConfigError::BadInitialCluster(entry.into()))?;
            socket_addr(url)?;
            members.entry(name.to_string()).or_default().push(url.to_string());
        }
        let own = members.get(&self.name).ok_or_else(|| ConfigError::NameNotInCluster {
            name: self.name.clone(),
        })?;
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

/// The socket address an `http://host:port` URL names; `localhost` means 127.0.0.1.
pub fn socket_addr(raw: &str) -> Result<SocketAddr, ConfigError> {
    let bad = |reason: &str| ConfigError::BadUrl {
        url: raw.to_string(),
        reason: reason.to_string(),
    };
    let url = url::Url::parse(raw).map_err(|e| bad(&e.to_string()))?;
    if url.scheme() != "http" {
        return Err(bad(
            "only http:// URLs are supported (TLS arrives with the operations issue)",
        ));
    }
    let port = url.port().ok_or_else(|| bad("missing port"))?;
    let host = match url.host_str() {
        Some("localhost") => "127.0.0.1",
        Some(host) => host.trim_start_matches('[').trim_end_matches(']'),
        None => return Err(bad("missing host")),
    };
    let ip = host
        .parse()
        .map_err(|_| bad("the host must be an IP address or localhost"))?;
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Config {
        Config::try_parse_from(std::iter::once("raft-node").chain(args.iter().copied())).expect("valid flags")
    }

    #[test]
    fn defaults_match_etcd() {
        let config = parse(&[]);
        assert_eq!(config.name, "default");
        assert_eq!(config.data_dir(), PathBuf::from("default.etcd"));
        assert_eq!(config.max_txn_ops, 128);
        assert_eq!(config.max_request_bytes, 1572864);
        assert_eq!(
            socket_addr(&config.listen_client_urls[0]).unwrap(),
            "127.0.0.1:2379".parse().unwrap()
        );
        let cluster = config.initial_cluster().unwrap();
        assert_eq!(cluster["default"], vec!["http://localhost:2380".to_string()]);
    }

    #[test]
    fn initial_cluster_must_name_this_member_with_its_urls() {
        let config = parse(&[
            "--name",
            "n2",
            "--initial-cluster",
            "n1=http://127.0.0.1:1,n3=http://127.0.0.1:3",
        ]);
        assert!(matches!(
            config.initial_cluster(),
            Err(ConfigError::NameNotInCluster { .. })
        ));
        let config = parse(&[
            "--name",
            "n1",
            "--initial-cluster",
            "n1=http://127.0.0.1:1",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:2",
        ]);
        assert!(matches!(
            config.initial_cluster(),
            Err(ConfigError::PeerUrlMismatch { .. })
        ));
        assert!(matches!(
            socket_addr("https://127.0.0.1:1"),
            Err(ConfigError::BadUrl { .. })
        ));
        assert!(matches!(
            socket_addr("http://127.0.0.1"),
            Err(ConfigError::BadUrl { .. })
        ));
    }
}
