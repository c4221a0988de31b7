//! The flags of `jepsen fuzz` and where its two server binaries are found by default.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::error::{Error, Result};

/// Which servers a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FuzzTarget {
    /// One member of each, every request sent to both and their answers compared.
    Both,
    /// Ours alone: only checks that it never crashes.
    Ours,
    /// etcd alone: only checks that it never crashes (requests known to crash etcd 3.5.1 are held back).
    Etcd,
}

impl FuzzTarget {
    pub fn ours(self) -> bool {
        self != FuzzTarget::Etcd
    }

    pub fn etcd(self) -> bool {
        self != FuzzTarget::Ours
    }
}

/// Whether the servers run with authentication enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMode {
    Off,
    On,
    /// Each seed twice, on fresh servers: once with auth off, then once with auth on.
    Both,
}

impl AuthMode {
    /// The sessions of one seed: `false` for auth off, `true` for auth on.
    pub fn sessions(self) -> Vec<bool> {
        match self {
            AuthMode::Off => vec![false],
            AuthMode::On => vec![true],
            AuthMode::Both => vec![false, true],
        }
    }
}

/// `jepsen fuzz`: random requests built from the protobuf descriptors, sent to one member of ours and one
/// of etcd 3.5.1, their answers compared.
#[derive(Debug, Clone, Args, Serialize)]
pub struct FuzzOptions {
    /// the servers to start; `both` compares their answers, a single one is only checked for crashes
    #[arg(long, value_enum, default_value = "both")]
    pub target: FuzzTarget,

    /// run this one seed
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,

    /// run seeds 1..=K (default: seed 1 only)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: Option<u64>,

    /// requests per seed and auth mode
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,

    /// run each seed with auth off, with auth on (root, three users, three roles), or both
    #[arg(long, value_enum, default_value = "both")]
    pub auth: AuthMode,

    /// our server binary (default: `raft-node` next to this binary)
    #[arg(long)]
    pub server_bin: Option<PathBuf>,

    /// the etcd 3.5.1 binary (default: `$KV_ETCD35_DIR/etcd`, else `<workspace>/target/tools/etcd-3.5.1/etcd`,
    /// where `scripts/test` puts it)
    #[arg(long)]
    pub etcd_bin: Option<PathBuf>,

    /// where `fuzz.json` and the servers' logs go (default: a new `jepsen-fuzz-<unix time>` in the temp dir)
    #[arg(long)]
    pub out: Option<PathBuf>,

    /// send the requests known to crash etcd 3.5.1 to etcd anyway (to check that they still do); etcd is
    /// restarted empty after each crash
    #[arg(long)]
    pub send_known_crashes: bool,

    /// milliseconds a unary call may take before its answer counts as "timeout"
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,

    /// milliseconds to wait for a stream's first response (Watch, LeaseKeepAlive); etcd sends none for
    /// some requests (a cancel of an unknown watch), so this is paid often: keep it short
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub stream_timeout_ms: u64,
}

impl FuzzOptions {
    /// The seeds to run, in order.
    pub fn seed_list(&self) -> Vec<u64> {
        match (self.seed, self.seeds) {
            (Some(seed), _) => vec![seed],
            (None, Some(count)) => (1..=count).collect(),
            (None, None) => vec![1],
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    pub fn stream_timeout(&self) -> Duration {
        Duration::from_millis(self.stream_timeout_ms)
    }

    /// `--server-bin`, or `raft-node` next to the running `jepsen`.
    pub fn server_bin(&self) -> Result<PathBuf> {
        match &self.server_bin {
            Some(path) => Ok(path.clone()),
            None => std::env::current_exe()
                .map(|exe| exe.with_file_name("raft-node"))
                .map_err(Error::system("find the jepsen executable")),
        }
    }

    /// `--etcd-bin`, or etcd 3.5.1 where `scripts/test` downloads it.
    pub fn etcd_bin(&self) -> PathBuf {
        self.etcd_bin.clone().unwrap_or_else(default_etcd_bin)
    }
}

/// `$KV_ETCD35_DIR/etcd`, else `<workspace>/target/tools/etcd-3.5.1/etcd`.
pub fn default_etcd_bin() -> PathBuf {
    std::env::var_os("KV_ETCD35_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/etcd-3.5.1"), PathBuf::from)
        .join("etcd")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        fuzz: FuzzOptions,
    }

    fn parse(args: &[&str]) -> std::result::Result<FuzzOptions, clap::Error> {
        Cli::try_parse_from(["fuzz"].iter().chain(args)).map(|cli| cli.fuzz)
    }

    #[test]
    fn defaults_compare_both_servers_with_and_without_auth_on_seed_one() {
        let opts = parse(&[]).expect("defaults parse");
        assert_eq!((opts.target, opts.auth, opts.requests), (FuzzTarget::Both, AuthMode::Both, 20_000));
        assert_eq!(opts.seed_list(), vec![1]);
        assert_eq!(opts.auth.sessions(), vec![false, true]);
        assert!(opts.target.ours() && opts.target.etcd());
        assert_eq!(opts.timeout(), Duration::from_secs(5));
    }

    #[test]
    fn seeds_flags_pick_the_seed_list() {
        assert_eq!(parse(&["--seeds", "3"]).expect("valid").seed_list(), vec![1, 2, 3]);
        assert_eq!(parse(&["--seed", "42"]).expect("valid").seed_list(), vec![42]);
        let ours = parse(&["--target", "ours", "--auth", "on"]).expect("valid");
        assert!(ours.target.ours() && !ours.target.etcd());
        assert_eq!(ours.auth.sessions(), vec![true]);
        for bad in [&["--seed", "1", "--seeds", "2"][..], &["--seeds", "0"], &["--target", "mine"], &["--auth", "x"]] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
