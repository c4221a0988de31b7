//! The flags of `jepsen bench --scale` and the sizes they give. Every size is a flag so that CI can
//! run a tiny version of the same probes; the defaults are the sizes of our issue 21 (100k watchers,
//! 400k puts of 1 KB over 200k keys). `--keys` is `jepsen bench`'s own flag (see
//! [`crate::bench::options::BenchOptions::scale_keys`]).

use clap::Args;
use serde::Serialize;

/// The key space of the load when `--keys` is not given.
pub const DEFAULT_KEYS: u64 = 200_000;

/// etcd's own suggested maximum (8 GiB): the default 2 GiB quota of both servers might not hold the
/// load with its history before compaction, and an alarm would end the probe early.
const DEFAULT_QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// `--scale` and the sizes of its probes.
#[derive(Debug, Clone, Args, Serialize)]
pub struct ScaleOptions {
    /// scale mode: one fresh single-member server per target (etcd first, then ours), probed for
    /// many watchers, a large load, compaction and defrag, a Watch stream left unread while writers
    /// put, and one Range of the whole load; prints one table and writes
    /// `scale.json`, `scale.png` and `scale.html` (ignores --workloads, --rounds, --duration)
    #[arg(long, conflicts_with = "memory")]
    pub scale: bool,

    /// --scale: watchers opened on the member, spread evenly over --watch-streams
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub watchers: u64,

    /// --scale: Watch streams the watchers are spread over (over 10 connections at most)
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub watch_streams: u64,

    /// --scale: puts sent while the watchers are open (each is delivered to every watcher of its key)
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub watch_puts: u64,

    /// --scale: puts of the load, cycling over --keys keys
    #[arg(long, default_value_t = 400_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub puts: u64,

    /// --scale: the value size of the watch probe's and the load's puts, in bytes (the concurrent
    /// writer's are 64 B)
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub value_size: u64,

    /// --scale: the `--quota-backend-bytes` both servers get
    #[arg(long, default_value_t = DEFAULT_QUOTA_BYTES)]
    pub quota_backend_bytes: u64,
}

impl ScaleOptions {
    /// The watchers of each stream: `--watchers` spread over the streams, the first ones one more.
    pub fn watchers_per_stream(&self) -> Vec<u64> {
        let streams = self.watch_streams.min(self.watchers);
        (0..streams).map(|s| self.watchers / streams + u64::from(s < self.watchers % streams)).collect()
    }

    pub fn value_size(&self) -> usize {
        usize::try_from(self.value_size).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        scale: ScaleOptions,
        #[arg(long)]
        memory: bool,
    }

    fn parse(args: &[&str]) -> Result<ScaleOptions, clap::Error> {
        Cli::try_parse_from(["bench"].iter().chain(args)).map(|cli| cli.scale)
    }

    #[test]
    fn defaults_are_the_issue_sizes() {
        let opts = parse(&["--scale"]).expect("defaults parse");
        assert!(opts.scale);
        assert_eq!((opts.watchers, opts.watch_streams, opts.puts, opts.value_size), (100_000, 100, 400_000, 1024));
        assert_eq!(opts.watchers_per_stream(), vec![1000; 100]);
        assert_eq!(opts.quota_backend_bytes, 8 << 30);
    }

    #[test]
    fn watchers_spread_evenly_and_never_leave_a_stream_empty() {
        let opts = parse(&["--scale", "--watchers", "10", "--watch-streams", "4"]).expect("parses");
        assert_eq!(opts.watchers_per_stream(), vec![3, 3, 2, 2]);
        let few = parse(&["--scale", "--watchers", "2", "--watch-streams", "5"]).expect("parses");
        assert_eq!(few.watchers_per_stream(), vec![1, 1], "no stream without a watcher");
    }

    #[test]
    fn bad_sizes_and_memory_mode_are_refused() {
        for bad in [&["--watchers", "0"][..], &["--value-size", "0"], &["--puts", "-1"], &["--scale", "--memory"]] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
