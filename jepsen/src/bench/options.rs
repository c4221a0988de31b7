//! The flags of `jepsen bench` and the workloads it knows, each with the shape etcd's
//! `tools/benchmark` command line gives it (clients, connections, which members).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::scale::options::ScaleOptions;
use super::size::SizeOptions;
use super::soak::SoakOptions;
use crate::options::Target;

/// Which clusters to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchTarget {
    Ours,
    Etcd,
    /// Both, in alternating rounds (ours, etcd, then etcd, ours, ...), each on a fresh cluster.
    Both,
}

impl BenchTarget {
    pub fn targets(self) -> Vec<Target> {
        match self {
            BenchTarget::Ours => vec![Target::Ours],
            BenchTarget::Etcd => vec![Target::Etcd],
            BenchTarget::Both => vec![Target::Ours, Target::Etcd],
        }
    }
}

/// One benchmark workload. The names say the operation, the number of clients and where the
/// connections go (`leader`: every connection to the leader; `all`: spread over the three members).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, Serialize)]
pub enum BenchWorkload {
    /// Put, 8 B sequential keys, 256 B values: 1 client on 1 connection to the leader.
    #[value(name = "put-1-leader")]
    #[serde(rename = "put-1-leader")]
    Put1Leader,
    /// Put: 100 clients on 10 connections to the leader.
    #[value(name = "put-100-leader")]
    #[serde(rename = "put-100-leader")]
    Put100Leader,
    /// Put: 100 clients on 10 connections spread over all members.
    #[value(name = "put-100-all")]
    #[serde(rename = "put-100-all")]
    Put100All,
    /// Put: 1000 clients on 100 connections to the leader.
    #[value(name = "put-1000-leader")]
    #[serde(rename = "put-1000-leader")]
    Put1000Leader,
    /// Put: 1000 clients on 100 connections spread over all members.
    #[value(name = "put-1000-all")]
    #[serde(rename = "put-1000-all")]
    Put1000All,
    /// Linearizable Range of one key (256 B value): 1 client on 1 connection to the leader.
    #[value(name = "range-lin-1")]
    #[serde(rename = "range-lin-1")]
    RangeLin1,
    /// Serializable Range of one key: 1 client on 1 connection to the leader.
    #[value(name = "range-ser-1")]
    #[serde(rename = "range-ser-1")]
    RangeSer1,
    /// Linearizable Range of one key: 100 clients on 10 connections over all members.
    #[value(name = "range-lin-100")]
    #[serde(rename = "range-lin-100")]
    RangeLin100,
    /// Serializable Range of one key: 100 clients on 10 connections over all members.
    #[value(name = "range-ser-100")]
    #[serde(rename = "range-ser-100")]
    RangeSer100,
    /// Txn with one Put (random key of a 100k key space, no compares): 100 clients, 10 connections,
    /// leader.
    #[value(name = "txn-put")]
    #[serde(rename = "txn-put")]
    TxnPut,
    /// Puts at `--watch-rate` per second to the leader while 10 watchers (10 connections over all
    /// members) watch the key; two rows: from the put being sent to each event's arrival, and
    /// (`watch-after-put`, what etcd 3.4's tool measures) from the put's answer to the event.
    #[value(name = "watch-latency")]
    #[serde(rename = "watch-latency")]
    WatchLatency,
    /// LeaseKeepAlive, one request per round trip on a stream of its own (as clientv3's
    /// `KeepAliveOnce`) on a lease granted per client: 100 clients, 10 connections, leader.
    #[value(name = "lease-keepalive")]
    #[serde(rename = "lease-keepalive")]
    LeaseKeepalive,
    /// Loads `--keys` distinct keys (256 B values) in Txns of 100 Puts, 10 clients on 10
    /// connections to the leader; QPS is keys per second. Not in the default set (see `--memory`).
    #[value(name = "load")]
    #[serde(rename = "load")]
    Load,
}

/// Where a workload's connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    Leader,
    All,
}

/// The operation a workload repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Put,
    Range { serializable: bool },
    TxnPut,
    Watch,
    LeaseKeepAlive,
    Load,
}

/// A workload's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub operation: Operation,
    pub clients: usize,
    pub conns: usize,
    pub endpoints: Endpoints,
}

impl BenchWorkload {
    /// Every workload `jepsen bench` runs by default, in order (writes first; `load` is separate).
    pub const DEFAULT: [BenchWorkload; 12] = [
        BenchWorkload::Put1Leader,
        BenchWorkload::Put100Leader,
        BenchWorkload::Put100All,
        BenchWorkload::Put1000Leader,
        BenchWorkload::Put1000All,
        BenchWorkload::RangeLin1,
        BenchWorkload::RangeSer1,
        BenchWorkload::RangeLin100,
        BenchWorkload::RangeSer100,
        BenchWorkload::TxnPut,
        BenchWorkload::WatchLatency,
        BenchWorkload::LeaseKeepalive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BenchWorkload::Put1Leader => "put-1-leader",
            BenchWorkload::Put100Leader => "put-100-leader",
            BenchWorkload::Put100All => "put-100-all",
            BenchWorkload::Put1000Leader => "put-1000-leader",
            BenchWorkload::Put1000All => "put-1000-all",
            BenchWorkload::RangeLin1 => "range-lin-1",
            BenchWorkload::RangeSer1 => "range-ser-1",
            BenchWorkload::RangeLin100 => "range-lin-100",
            BenchWorkload::RangeSer100 => "range-ser-100",
            BenchWorkload::TxnPut => "txn-put",
            BenchWorkload::WatchLatency => "watch-latency",
            BenchWorkload::LeaseKeepalive => "lease-keepalive",
            BenchWorkload::Load => "load",
        }
    }

    pub fn shape(self) -> Shape {
        use Endpoints::{All, Leader};
        let (operation, clients, conns, endpoints) = match self {
            BenchWorkload::Put1Leader => (Operation::Put, 1, 1, Leader),
            BenchWorkload::Put100Leader => (Operation::Put, 100, 10, Leader),
            BenchWorkload::Put100All => (Operation::Put, 100, 10, All),
            BenchWorkload::Put1000Leader => (Operation::Put, 1000, 100, Leader),
            BenchWorkload::Put1000All => (Operation::Put, 1000, 100, All),
            BenchWorkload::RangeLin1 => (Operation::Range { serializable: false }, 1, 1, Leader),
            BenchWorkload::RangeSer1 => (Operation::Range { serializable: true }, 1, 1, Leader),
            BenchWorkload::RangeLin100 => (Operation::Range { serializable: false }, 100, 10, All),
            BenchWorkload::RangeSer100 => (Operation::Range { serializable: true }, 100, 10, All),
            BenchWorkload::TxnPut => (Operation::TxnPut, 100, 10, Leader),
            BenchWorkload::WatchLatency => (Operation::Watch, 10, 10, All),
            BenchWorkload::LeaseKeepalive => (Operation::LeaseKeepAlive, 100, 10, Leader),
            BenchWorkload::Load => (Operation::Load, 10, 10, Leader),
        };
        Shape { operation, clients, conns, endpoints }
    }
}

/// When a workload stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this many requests (for `watch-latency`: puts; for `load`: keys).
    Total(u64),
    /// When this much time has passed (the requests in flight then still finish and count).
    After(Duration),
}

/// `load`'s keys when `--keys` is not given.
const DEFAULT_LOAD_KEYS: u64 = 1_000_000;

/// Where Debian's etcd-server puts etcd.
pub const DEFAULT_ETCD_BIN: &str = "/usr/bin/etcd";

/// `jepsen bench`: etcd's benchmark workloads against fresh three-member clusters.
#[derive(Debug, Clone, Args, Serialize)]
pub struct BenchOptions {
    /// the clusters to measure; `both` alternates rounds of ours and etcd and prints their ratio
    #[arg(long, value_enum, default_value = "both")]
    pub target: BenchTarget,

    /// the workloads to run, comma-separated, in this order
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = BenchWorkload::DEFAULT.to_vec())]
    pub workloads: Vec<BenchWorkload>,

    /// rounds per target, each on a fresh cluster; the table shows the median of the rounds
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,

    /// seconds each workload runs (ignored with --total)
    #[arg(long, default_value_t = 5.0, value_parser = positive_secs)]
    pub duration: f64,

    /// run each workload for this many requests instead of --duration (watch-latency: puts)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub total: Option<u64>,

    /// memory mode: run only `load` (--keys keys), then report each member's RSS and data size,
    /// and the time a restarted follower takes to serve again at the loaded revision (each round
    /// loads again: `--rounds 1` is usually enough)
    #[arg(long)]
    pub memory: bool,

    /// load: how many distinct keys to write (rounded up to a multiple of 100, the keys per Txn);
    /// --scale: the key space its --puts cycle over [default: 1000000, with --scale 200000]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Option<u64>,

    /// scale mode and its sizes (`--scale`)
    #[command(flatten)]
    pub scale: ScaleOptions,

    /// size mode and its sizes (`--size`)
    #[command(flatten)]
    pub size: SizeOptions,

    /// soak mode and its sizes (`--soak`)
    #[command(flatten)]
    pub soak: SoakOptions,

    /// watch-latency: puts per second
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub watch_rate: u32,

    /// milliseconds one request may take before it counts as an error
    #[arg(long, default_value_t = 10_000)]
    pub request_timeout: u64,

    /// our server binary (default: `raft-node` next to this binary)
    #[arg(long)]
    pub server_bin: Option<PathBuf>,

    /// the etcd binary (the default is installed from Debian's etcd-server when missing)
    #[arg(long, default_value = DEFAULT_ETCD_BIN)]
    pub etcd_bin: PathBuf,

    /// where the report folder goes (default: `<temp dir>/jepsen`)
    #[arg(long)]
    pub store: Option<PathBuf>,

    /// keep the members' data dirs in the report folder
    #[arg(long)]
    pub keep_data: bool,

    /// run the members in the host's own network namespace, on plain loopback as users run them
    /// (127.0.0.11..13, whose client and peer ports must be free), instead of private namespaces
    #[arg(long)]
    pub host_network: bool,
}

impl BenchOptions {
    /// When each workload stops.
    pub fn stop(&self) -> Stop {
        match self.total {
            Some(total) => Stop::Total(total),
            None => Stop::After(Duration::from_secs_f64(self.duration)),
        }
    }

    /// The keys `load` writes (`--keys`, 1,000,000 unless given).
    pub fn load_keys(&self) -> u64 {
        self.keys.unwrap_or(DEFAULT_LOAD_KEYS)
    }

    /// The key space of `--scale`'s load (`--keys`, 200,000 unless given).
    pub fn scale_keys(&self) -> u64 {
        self.keys.unwrap_or(super::scale::options::DEFAULT_KEYS)
    }

    /// The workloads of one round: `load` alone in memory mode, else `--workloads`.
    pub fn round_workloads(&self) -> Vec<BenchWorkload> {
        if self.memory {
            vec![BenchWorkload::Load]
        } else {
            self.workloads.clone()
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout)
    }
}

fn positive_secs(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs < 1e6 => Ok(secs),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchOptions,
    }

    /// `jepsen bench`'s options as `args` give them (the modes' tests use it too).
    pub(crate) fn parse(args: &[&str]) -> Result<BenchOptions, clap::Error> {
        Cli::try_parse_from(["bench"].iter().chain(args)).map(|cli| cli.bench)
    }

    #[test]
    fn defaults_run_every_standard_workload_on_both_for_a_duration() {
        let opts = parse(&[]).expect("defaults parse");
        assert_eq!(opts.target, BenchTarget::Both);
        assert_eq!(opts.target.targets(), vec![Target::Ours, Target::Etcd]);
        assert_eq!(opts.workloads, BenchWorkload::DEFAULT.to_vec());
        assert!(!opts.workloads.contains(&BenchWorkload::Load));
        assert_eq!((opts.rounds, opts.load_keys(), opts.watch_rate), (3, 1_000_000, 100));
        assert_eq!(opts.stop(), Stop::After(Duration::from_secs(5)));
        assert_eq!(opts.round_workloads(), BenchWorkload::DEFAULT.to_vec());
    }

    #[test]
    fn flags_pick_targets_workloads_totals_and_memory_mode() {
        let opts = parse(&["--target", "ours", "--workloads", "range-ser-1,put-1000-all", "--total", "50"])
            .expect("valid flags");
        assert_eq!(opts.target.targets(), vec![Target::Ours]);
        assert_eq!(opts.workloads, vec![BenchWorkload::RangeSer1, BenchWorkload::Put1000All]);
        assert_eq!(opts.stop(), Stop::Total(50));
        let memory = parse(&["--memory", "--keys", "5000", "--target", "etcd"]).expect("valid flags");
        assert_eq!((memory.round_workloads(), memory.load_keys()), (vec![BenchWorkload::Load], 5000));
        for bad in [&["--target", "mine"][..], &["--workloads", "scan"], &["--rounds", "0"], &["--duration", "-1"]] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn every_workload_has_its_names_and_shape() {
        for workload in BenchWorkload::DEFAULT.iter().copied().chain([BenchWorkload::Load]) {
            let value = workload.to_possible_value().expect("a value");
            assert_eq!(value.get_name(), workload.name());
            let json = serde_json::to_string(&workload).expect("serializes");
            assert_eq!(json, format!("\"{}\"", workload.name()));
            let shape = workload.shape();
            assert!(shape.clients >= shape.conns && shape.conns >= 1, "{workload:?}");
        }
        let shape = BenchWorkload::Put1000All.shape();
        assert_eq!((shape.clients, shape.conns, shape.endpoints), (1000, 100, Endpoints::All));
        assert_eq!(BenchWorkload::RangeSer1.shape().operation, Operation::Range { serializable: true });
    }
}
