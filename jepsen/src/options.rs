//! The flags of `jepsen test`: what to run, against which server, with which faults, for how long.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

/// The server implementation under test.
/// `--delay-ms` unless given.
pub const DEFAULT_DELAY_MS: u64 = 50;
/// `--delay-jitter-ms` unless given.
pub const DEFAULT_JITTER_MS: u64 = 10;
/// `--loss-percent` unless given.
pub const DEFAULT_LOSS_PERCENT: u8 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Our `raft-node`.
    Ours,
    /// Real etcd (Debian's `/usr/bin/etcd`), for comparison.
    Etcd,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Ours => "ours",
            Target::Etcd => "etcd",
        }
    }
}

/// The workload the clients run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Per-key read, write and compare-and-set with unique values; checked for linearizability.
    Register,
    /// Unique adds to a set through txn compares; final reads; checked with set-full.
    Set,
    /// Elle-style transactions appending to and reading per-key lists; checked for cycles.
    ListAppend,
    /// Writers plus watchers that resume from their last revision; checked with etcd's watch rules.
    Watch,
    /// Puts attached to leases, revokes, keep-alives and expiry.
    Lease,
    /// Mixed etcd traffic (puts, deletes, txns, linearizable and serializable ranges) checked
    /// against the replayed revision history.
    Mixed,
}

/// One kind of fault the nemesis injects and later heals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// No faults at all.
    None,
    /// Cut one random member off from the others.
    PartitionOne,
    /// Cut the current leader off from the others.
    PartitionLeader,
    /// Cut the link between two members only; the third still talks to both.
    Bridge,
    /// SIGKILL one random member; heal restarts it on the same data dir.
    KillOne,
    /// SIGKILL the leader; heal restarts it.
    KillLeader,
    /// SIGKILL every member; heal restarts them all.
    KillAll,
    /// SIGSTOP one random member; heal sends SIGCONT.
    PauseOne,
    /// SIGSTOP the leader (for longer than the election timeout); heal sends SIGCONT.
    PauseLeader,
    /// Remove a random member (sometimes the leader) with MemberRemove, kill it and wipe its data;
    /// heal adds it back as a learner under the same name and peer URL, lets it catch up and
    /// promotes it to voter (it gets a new member id).
    MemberShrinkGrow,
    /// Compact the keyspace a few revisions behind the current one (sometimes physically);
    /// nothing to heal.
    Compact,
    /// Isolate a follower, then write filler entries until the leader has taken a snapshot and
    /// dropped the log the follower still needs; heal lets it catch up by snapshot install. Sets
    /// `--snapshot-count` to 100 unless given.
    BlackholeSnapshot,
    /// Drop packets from one member (the leader when known) to one other only, not back.
    OneWay,
    /// Cut the clients (127.0.0.1) off from one member's client port, both ways; peers still talk.
    ClientCut,
    /// Add `--delay-ms` ± `--delay-jitter-ms` to every peer link, or to one member's links (through
    /// a proxy per link, in the path from the start of the run).
    Delay,
    /// Drop `--loss-percent` of the packets on every peer link, at random.
    Loss,
    /// Slow one member's log syncs (the leader's when known) by 100-800 ms each, or hang them, through
    /// etcd's `raftBeforeSave` failpoint on the member's gofail endpoint; heal turns it off. etcd's
    /// release builds have no failpoints: against etcd the fault does nothing and says so.
    SlowDisk,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::None => "none",
            FaultKind::PartitionOne => "partition-one",
            FaultKind::PartitionLeader => "partition-leader",
            FaultKind::Bridge => "bridge",
            FaultKind::KillOne => "kill-one",
            FaultKind::KillLeader => "kill-leader",
            FaultKind::KillAll => "kill-all",
            FaultKind::PauseOne => "pause-one",
            FaultKind::PauseLeader => "pause-leader",
            FaultKind::MemberShrinkGrow => "member-shrink-grow",
            FaultKind::Compact => "compact",
            FaultKind::BlackholeSnapshot => "blackhole-snapshot",
            FaultKind::OneWay => "one-way",
            FaultKind::ClientCut => "client-cut",
            FaultKind::Delay => "delay",
            FaultKind::Loss => "loss",
            FaultKind::SlowDisk => "slow-disk",
        }
    }
}

/// The `--snapshot-count` a run with `blackhole-snapshot` uses unless told otherwise: low enough
/// that a fault window's filler writes pass it several times.
pub const AUTO_SNAPSHOT_COUNT: u64 = 100;

/// `jepsen test`: one run.
#[derive(Debug, Clone, Args, Serialize)]
pub struct TestOptions {
    /// the workload the clients run
    #[arg(long, value_enum, default_value = "register")]
    pub workload: WorkloadKind,

    /// the faults to inject, comma-separated; each fault window picks one of them at random
    #[arg(long, value_enum, value_delimiter = ',', default_value = "partition-leader")]
    pub nemesis: Vec<FaultKind>,

    /// the server implementation under test
    #[arg(long, value_enum, default_value = "ours")]
    pub target: Target,

    /// the server binary (default: `raft-node` next to this binary for ours, /usr/bin/etcd for etcd)
    #[arg(long)]
    pub server_bin: Option<PathBuf>,

    /// seconds of workload (faults included); heal, liveness and convergence checks come after
    #[arg(long, default_value_t = 30)]
    pub time_limit: u64,

    /// seeds every random choice (ops, values, fault kinds, victims), so a run can be repeated
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// target operations per second over all workers: each worker pauses a random time with mean
    /// workers/rate between its ops, so slow answers lower the actual rate
    #[arg(long, default_value_t = 60.0)]
    pub rate: f64,

    /// client workers, each with one outstanding op (default: twice the number of members)
    #[arg(long)]
    pub concurrency: Option<usize>,

    /// seconds without faults at the start
    #[arg(long, default_value_t = 3)]
    pub quiet: u64,

    /// seconds a fault lasts, and seconds of calm between two faults
    #[arg(long, default_value_t = 5)]
    pub nemesis_interval: u64,

    /// milliseconds a client waits for one op before recording it as indeterminate
    #[arg(long, default_value_t = 2000)]
    pub op_timeout: u64,

    /// seconds after the final heal within which a write must succeed
    #[arg(long, default_value_t = 20)]
    pub liveness_timeout: u64,

    /// seconds after the final heal within which all members must reach the same revision
    #[arg(long, default_value_t = 30)]
    pub converge_timeout: u64,

    /// seconds the linearizability search may take before it answers unknown
    #[arg(long, default_value_t = 60)]
    pub check_timeout: u64,

    /// `--heartbeat-interval` of every member, in milliseconds
    #[arg(long, default_value_t = 100)]
    pub heartbeat_interval: u64,

    /// `--election-timeout` of every member, in milliseconds (≥ 1 s keeps a loaded 2-core box from
    /// holding spurious elections)
    #[arg(long, default_value_t = 1000)]
    pub election_timeout: u64,

    /// `--snapshot-count` of every member (default: the server's)
    #[arg(long)]
    pub snapshot_count: Option<u64>,

    /// delay: milliseconds added to each direction of a delayed peer link
    #[arg(long, default_value_t = DEFAULT_DELAY_MS)]
    pub delay_ms: u64,

    /// delay: the added latency varies by up to this many milliseconds either way
    #[arg(long, default_value_t = DEFAULT_JITTER_MS)]
    pub delay_jitter_ms: u64,

    /// loss: the share of peer packets dropped, in percent
    #[arg(long, default_value_t = DEFAULT_LOSS_PERCENT, value_parser = percent)]
    pub loss_percent: u8,

    /// register: how many ops go to one key before the workers move on to a fresh key
    #[arg(long, default_value_t = 50)]
    pub ops_per_key: u64,

    /// register: read with `serializable=true` (the member's local state). Not linearizable: a run
    /// with partitions is expected to be reported invalid.
    #[arg(long)]
    pub serializable_reads: bool,

    /// lease: the TTL the workload asks for, in seconds; must exceed the election timeout (etcd
    /// raises it to at least 1.5 election timeouts)
    #[arg(long, default_value_t = 3)]
    pub lease_ttl: u64,

    /// where report folders go (default: `<temp dir>/jepsen`)
    #[arg(long)]
    pub store: Option<PathBuf>,

    /// keep the members' data dirs in the report even when the run is valid
    #[arg(long)]
    pub keep_data: bool,
}

impl TestOptions {
    pub fn time_limit(&self) -> Duration {
        Duration::from_secs(self.time_limit)
    }

    pub fn op_timeout(&self) -> Duration {
        Duration::from_millis(self.op_timeout)
    }

    pub fn nemesis_interval(&self) -> Duration {
        Duration::from_secs(self.nemesis_interval)
    }

    /// The `--snapshot-count` the members get: the flag, else [`AUTO_SNAPSHOT_COUNT`] when
    /// `blackhole-snapshot` is among the faults (it needs snapshots within one fault window),
    /// else none (the server's default).
    pub fn effective_snapshot_count(&self) -> Option<u64> {
        self.snapshot_count.or(self.nemesis.contains(&FaultKind::BlackholeSnapshot).then_some(AUTO_SNAPSHOT_COUNT))
    }

    /// A note for the report when the run chose `--snapshot-count` by itself.
    pub fn snapshot_count_note(&self) -> Option<String> {
        match (self.snapshot_count, self.effective_snapshot_count()) {
            (None, Some(count)) => Some(format!(
                "--snapshot-count={count} was set on every member because blackhole-snapshot needs frequent snapshots"
            )),
            _ => None,
        }
    }

    /// The server binary: the flag, else the target's default.
    pub fn server_bin(&self) -> PathBuf {
        if let Some(bin) = &self.server_bin {
            return bin.clone();
        }
        match self.target {
            Target::Etcd => PathBuf::from("/usr/bin/etcd"),
            Target::Ours => std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|dir| dir.join("raft-node")))
                .unwrap_or_else(|| PathBuf::from("raft-node")),
        }
    }

    /// A name for the report folder: what ran, with which seed.
    pub fn run_name(&self) -> String {
        let nemesis: Vec<&str> = self.nemesis.iter().map(|f| f.name()).collect();
        format!(
            "{}-{:?}-{}-seed{}{}",
            self.target.name(),
            self.workload,
            nemesis.join("+"),
            self.seed,
            if self.serializable_reads { "-serializable" } else { "" }
        )
        .to_lowercase()
    }
}

/// A whole percentage, 0 to 100 (for `--loss-percent`).
fn percent(text: &str) -> Result<u8, String> {
    match text.parse::<u8>() {
        Ok(value) if value <= 100 => Ok(value),
        _ => Err(format!("`{text}` is not a whole percentage from 0 to 100")),
    }
}

/// `jepsen test`'s flags parsed from `args` (without the program name), for tests anywhere in the crate.
#[cfg(test)]
impl TestOptions {
    pub fn parse(args: &[&str]) -> Result<TestOptions, clap::Error> {
        use clap::Parser;

        #[derive(Debug, Parser)]
        struct Cli {
            #[command(flatten)]
            test: TestOptions,
        }
        Cli::try_parse_from(std::iter::once("jepsen").chain(args.iter().copied())).map(|cli| cli.test)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issue_command_line() {
        let args = ["--workload", "register", "--nemesis", "partition-leader,kill-all", "--seed", "7"];
        let opts = TestOptions::parse(&args).expect("valid flags");
        assert_eq!(opts.nemesis, vec![FaultKind::PartitionLeader, FaultKind::KillAll]);
        assert_eq!((opts.target, opts.time_limit, opts.election_timeout), (Target::Ours, 30, 1000));
        assert_eq!(opts.run_name(), "ours-register-partition-leader+kill-all-seed7");
        let etcd = TestOptions::parse(&["--target", "etcd"]).expect("valid flags");
        assert_eq!(etcd.server_bin(), PathBuf::from("/usr/bin/etcd"));
        assert!(TestOptions::parse(&["--nemesis", "flood"]).is_err());
    }

    #[test]
    fn blackhole_snapshot_lowers_the_snapshot_count_unless_given() {
        let parse = |args: &[&str]| TestOptions::parse(args).expect("valid flags");
        let auto = parse(&["--nemesis", "compact,blackhole-snapshot"]);
        assert_eq!(auto.effective_snapshot_count(), Some(AUTO_SNAPSHOT_COUNT));
        assert!(auto.snapshot_count_note().is_some_and(|note| note.contains("--snapshot-count=100")));
        let given = parse(&["--nemesis", "blackhole-snapshot", "--snapshot-count", "500"]);
        assert_eq!((given.effective_snapshot_count(), given.snapshot_count_note()), (Some(500), None));
        let other = parse(&["--nemesis", "member-shrink-grow"]);
        assert_eq!((other.effective_snapshot_count(), other.snapshot_count_note()), (None, None));
    }
}
