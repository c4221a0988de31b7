//! `jepsen bench --size`: one member of each target holding `--size-gib` of live data (issue 21's
//! "10 GiB on one member"), side by side in the same run. Each target (etcd first, then ours, one at
//! a time) gets a fresh single member with a quota above the data, and then:
//!
//! 1. **load**: puts of `--size-value` bytes to distinct keys (100 clients on 10 connections) until
//!    the data is loaded: puts/s, MB/s, the member's peak RSS during the load and its RSS and disk
//!    use after it;
//! 2. **restart**: SIGTERM (time to exit), a start on the same data dir, and the time until it
//!    answers Status at the loaded revision, with its RSS then;
//! 3. **a new member**: `MemberAdd` of a learner (as etcd advises for a member joining a large
//!    cluster), started on a fresh data dir, and the time until it holds the loaded revision: the
//!    snapshot sent, streamed and installed; both members' peak RSS meanwhile and the new one's
//!    disk use.
//!
//! The table goes to `size.txt`, everything measured to `size.json`, beside each member's log.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tracing::info;

use super::options::{BenchOptions, Stop};
use super::resources;
use super::scale::server::Server;
use super::scale::{create_dir, put, write, Outcome};
use super::table::{side_by_side, Figure};
use crate::client;
use crate::cluster;
use crate::error::{Error, Result};
use crate::member::Member;
use crate::netns;
use crate::options::Target;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const MB: f64 = 1024.0 * 1024.0;
/// The loaded keys' prefix.
const PREFIX: &str = "size/";
/// How long a member may take to exit on SIGTERM, to serve again after its start, and a new member
/// to catch up: far longer than either server needs for 10 GiB on this machine, so that a slow one is
/// measured rather than cut off.
const PHASE_TIMEOUT: Duration = Duration::from_secs(1800);
/// A bound on one Status probe or membership call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting phase asks again.
const POLL: Duration = Duration::from_millis(50);

/// `--size` and its sizes.
#[derive(Debug, Clone, Args, Serialize)]
pub struct SizeOptions {
    /// size mode: one fresh member per target (etcd first, then ours) loaded with --size-gib of
    /// distinct keys, then restarted, then joined by a new member that must catch up from it;
    /// prints one table and writes `size.json` (ignores --workloads, --rounds, --duration)
    #[arg(long, conflicts_with_all = ["memory", "scale"])]
    pub size: bool,

    /// --size: the live data to load, in GiB (values only, every key distinct)
    #[arg(long, default_value_t = 10.0, value_parser = positive_gib)]
    pub size_gib: f64,

    /// --size: the value size of the load's puts, in bytes (etcd's request limit is 1.5 MiB)
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub size_value: u64,
}

impl SizeOptions {
    /// The puts that load `--size-gib` of `--size-value` values.
    pub fn puts(&self) -> u64 {
        ((self.size_gib * GIB) / self.size_value as f64).ceil().max(1.0) as u64
    }

    /// The quota both servers get: the data twice over, so that neither raises NOSPACE while it
    /// also keeps what the load's own bookkeeping takes (etcd warns above 8 GiB and goes on).
    pub fn quota_bytes(&self) -> u64 {
        (self.size_gib * GIB * 2.0) as u64 + (1 << 30)
    }
}

fn positive_gib(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(gib) if gib.is_finite() && gib > 0.0 && gib <= 1024.0 => Ok(gib),
        _ => Err(format!("`{text}` is not a size in GiB between 0 and 1024")),
    }
}

/// What one target measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SizeMeasure {
    pub target: Option<Target>,
    pub puts: u64,
    pub value_size: u64,
    pub revision: i64,
    pub load_secs: f64,
    pub load_puts_per_sec: f64,
    pub load_mb_per_sec: f64,
    pub load_errors: u64,
    pub load_peak_rss_bytes: u64,
    pub rss_after_load_bytes: u64,
    /// The data dir's allocated bytes (blocks, not file lengths) after the load.
    pub disk_after_load_bytes: u64,
    /// SIGTERM to exit.
    pub stop_secs: f64,
    /// Start on the same data dir to answering Status at the loaded revision.
    pub restart_secs: f64,
    pub rss_after_restart_bytes: u64,
    /// MemberAdd sent to the new member answering Status at the loaded revision.
    pub catch_up_secs: f64,
    pub leader_peak_rss_during_catch_up_bytes: u64,
    pub new_member_peak_rss_bytes: u64,
    pub new_member_disk_bytes: u64,
    pub first_error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    options: &'a BenchOptions,
    results: &'a [SizeMeasure],
    duration_secs: f64,
}

/// Runs the probes on each target; the process must already be in private namespaces, unless
/// `--host-network` asks for the host's.
pub async fn run(opts: &BenchOptions) -> Result<Outcome> {
    netns::prepare_for(opts.host_network)?;
    let started = Instant::now();
    let dir = create_dir(opts, "size")?;
    info!(dir = %dir.display(), puts = opts.size.puts(), "report folder");
    let mut results = Vec::new();
    for target in super::scale::etcd_first(opts) {
        results.push(measure(opts, target, &dir).await?);
    }
    let table = render(&results);
    let report = Report { options: opts, results: &results, duration_secs: started.elapsed().as_secs_f64() };
    write(&dir.join("size.json"), &serde_json::to_string_pretty(&report).map_err(Error::Encode)?)?;
    write(&dir.join("size.txt"), &table)?;
    Ok(Outcome { dir, table })
}

async fn measure(opts: &BenchOptions, target: Target, dir: &Path) -> Result<SizeMeasure> {
    let (root, binary) = super::scale::target_dir_and_binary(opts, target, dir)?;
    let size = &opts.size;
    let quota = size.quota_bytes();
    let mut server = Server::start(target, &binary, &root, quota).await?;
    let mut m =
        SizeMeasure { target: Some(target), puts: size.puts(), value_size: size.size_value, ..Default::default() };

    // 1. The load, with the member's peak RSS over it.
    let pid = server.host_pid()?;
    resources::reset_peak_rss(pid).map_err(Error::system("reset the member's peak RSS"))?;
    let value_size = usize::try_from(size.size_value).unwrap_or(usize::MAX);
    let (stats, first_error) =
        put::put_many(&server.url, PREFIX, m.puts, Stop::Total(m.puts), value_size, opts.request_timeout()).await?;
    m.load_secs = stats.elapsed_secs;
    m.load_puts_per_sec = stats.qps;
    m.load_mb_per_sec = stats.qps * size.size_value as f64 / MB;
    m.load_errors = stats.errors;
    m.first_error = first_error;
    let memory = resources::memory(pid).map_err(Error::system("read the member's memory"))?;
    m.load_peak_rss_bytes = memory.peak_rss_bytes;
    m.rss_after_load_bytes = memory.rss_bytes;
    m.revision = status(server.member.channel()).await?.revision;
    m.disk_after_load_bytes = disk_bytes(&data_dir(&root, "s1"));
    info!(
        target = target.name(),
        secs = m.load_secs,
        mb_per_sec = m.load_mb_per_sec as u64,
        disk_gib = m.disk_after_load_bytes as f64 / GIB,
        "loaded"
    );

    // 2. SIGTERM and a start on the same data.
    let stopping = Instant::now();
    if !server.member.terminate(PHASE_TIMEOUT).await? {
        return Err(Error::Setup(format!("{} did not exit on SIGTERM", target.name())));
    }
    m.stop_secs = stopping.elapsed().as_secs_f64();
    let starting = Instant::now();
    server.member.start()?;
    wait_for_revision(&mut server.member, m.revision).await?;
    m.restart_secs = starting.elapsed().as_secs_f64();
    m.rss_after_restart_bytes = server.rss_bytes()?;
    info!(target = target.name(), stop_secs = m.stop_secs, restart_secs = m.restart_secs, "restarted");

    // 3. A new member catches up from it.
    let pid = server.host_pid()?;
    resources::reset_peak_rss(pid).map_err(Error::system("reset the member's peak RSS"))?;
    let host = cluster::hosts()[1];
    let cluster_args = vec![
        format!("--initial-cluster=s1={},s2=http://{}:{}", server.member.peer_url(), host.ip, crate::net::PEER_PORT),
        "--initial-cluster-state=existing".to_string(),
        format!("--quota-backend-bytes={quota}"),
    ];
    let mut joiner = Member::new("s2", host, &binary, &root, &cluster_args)?;
    let adding = Instant::now();
    client::member_add(server.member.channel(), &joiner.peer_url(), true, CALL_TIMEOUT)
        .await
        .map_err(|status| Error::Setup(format!("MemberAdd: {}", client::describe(&status))))?;
    joiner.start()?;
    let joined = wait_for_revision(&mut joiner, m.revision).await;
    m.catch_up_secs = adding.elapsed().as_secs_f64();
    let new_pid = joiner.pid().and_then(resources::host_pid);
    m.new_member_peak_rss_bytes = new_pid.and_then(|p| resources::memory(p).ok()).map_or(0, |m| m.peak_rss_bytes);
    m.leader_peak_rss_during_catch_up_bytes = resources::memory(pid).map_or(0, |m| m.peak_rss_bytes);
    m.new_member_disk_bytes = disk_bytes(&data_dir(&root, "s2"));
    info!(target = target.name(), secs = m.catch_up_secs, "new member caught up");
    joiner.kill()?;
    server.member.kill()?;
    for log in [server.log_path(), joiner.log_path().to_path_buf()] {
        let name = log.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let _ = std::fs::copy(&log, dir.join(format!("{}-{name}", target.name())));
    }
    if !opts.keep_data {
        server.member.wipe_data()?;
        joiner.wipe_data()?;
    }
    joined?;
    Ok(m)
}

async fn status(channel: &tonic::transport::Channel) -> Result<client::MemberStatus> {
    client::status(channel, CALL_TIMEOUT)
        .await
        .map_err(|status| Error::Setup(format!("Status: {}", client::describe(&status))))
}

/// Waits until `member` answers Status at `revision` or later.
async fn wait_for_revision(member: &mut Member, revision: i64) -> Result<()> {
    let started = Instant::now();
    loop {
        if let Ok(status) = client::status(member.channel(), CALL_TIMEOUT).await {
            if status.revision >= revision {
                return Ok(());
            }
        }
        if !member.is_running() {
            return Err(Error::Setup(format!("{} exited; see {}", member.name, member.log_path().display())));
        }
        if started.elapsed() > PHASE_TIMEOUT {
            return Err(Error::Setup(format!("{} did not reach revision {revision}", member.name)));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A member's data dir (as [`Member::new`] lays it out).
fn data_dir(root: &Path, name: &str) -> PathBuf {
    root.join("members").join(name).join("data")
}

/// The bytes the files under `dir` take on disk (their blocks: a file allocated ahead counts whole,
/// a sparse one only for what it holds).
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(std::result::Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_bytes(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// One row per figure, one column per target, and ours/etcd when both ran.
pub fn render(results: &[SizeMeasure]) -> String {
    let Some(first) = results.first() else { return String::new() };
    let rows: Vec<Figure<SizeMeasure>> = vec![
        (format!("load: {} puts of {} B to distinct keys, s", first.puts, first.value_size), |m| m.load_secs, 1),
        ("load: puts/s".into(), |m| m.load_puts_per_sec, 0),
        ("load: MB/s of values".into(), |m| m.load_mb_per_sec, 1),
        ("peak RSS MB during the load".into(), |m| m.load_peak_rss_bytes as f64 / MB, 0),
        ("RSS MB after the load".into(), |m| m.rss_after_load_bytes as f64 / MB, 0),
        ("disk GiB after the load (data dir, allocated)".into(), |m| m.disk_after_load_bytes as f64 / GIB, 2),
        ("SIGTERM to exit, s".into(), |m| m.stop_secs, 2),
        ("restart to serving the loaded revision, s".into(), |m| m.restart_secs, 2),
        ("RSS MB once serving again".into(), |m| m.rss_after_restart_bytes as f64 / MB, 0),
        ("new member (learner): MemberAdd to caught up, s".into(), |m| m.catch_up_secs, 1),
        ("peak RSS MB of the leader meanwhile".into(), |m| m.leader_peak_rss_during_catch_up_bytes as f64 / MB, 0),
        ("peak RSS MB of the new member".into(), |m| m.new_member_peak_rss_bytes as f64 / MB, 0),
        ("disk GiB of the new member".into(), |m| m.new_member_disk_bytes as f64 / GIB, 2),
    ];
    let columns: Vec<_> = results.iter().map(|m| (m.target, m)).collect();
    let mut out = side_by_side(&columns, &rows);
    for m in results {
        let name = m.target.map_or("?", Target::name);
        let _ = writeln!(out, "{name}: revision {} loaded, {} load errors", m.revision, m.load_errors);
        if let Some(error) = &m.first_error {
            let _ = writeln!(out, "{name}: ERROR {error}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        size: SizeOptions,
        #[arg(long)]
        memory: bool,
        #[arg(long)]
        scale: bool,
    }

    fn parse(args: &[&str]) -> std::result::Result<SizeOptions, clap::Error> {
        Cli::try_parse_from(["bench"].iter().chain(args)).map(|cli| cli.size)
    }

    #[test]
    fn the_defaults_load_ten_gib_in_values_of_8_kib() {
        let opts = parse(&["--size"]).expect("parses");
        assert_eq!(opts.puts(), 10 * 1024 * 1024 / 8);
        assert_eq!(opts.quota_bytes(), 21 << 30);
        let small = parse(&["--size", "--size-gib", "0.001", "--size-value", "1000"]).expect("parses");
        assert_eq!(small.puts(), 1074, "rounded up to hold the whole size");
    }

    #[test]
    fn bad_sizes_and_other_modes_are_refused() {
        for bad in [&["--size-gib", "0"][..], &["--size-gib", "nan"], &["--size-value", "0"], &["--size", "--scale"]] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn the_table_gives_each_target_a_column_and_the_ratio() {
        let etcd = SizeMeasure {
            target: Some(Target::Etcd),
            puts: 10,
            value_size: 8,
            restart_secs: 4.0,
            ..Default::default()
        };
        let ours = SizeMeasure { target: Some(Target::Ours), restart_secs: 2.0, ..etcd.clone() };
        let table = render(&[etcd, ours]);
        let line = table.lines().find(|l| l.starts_with("restart to serving")).expect("restart row");
        let cells: Vec<&str> = line.split_whitespace().rev().take(3).collect();
        assert_eq!(cells, ["0.50", "2.00", "4.00"], "{table}");
        assert!(table.lines().next().expect("header").ends_with("ours/etcd"), "{table}");
    }
}
