//! `jepsen bench`: etcd's benchmark workloads (its `tools/benchmark`) over plain etcd gRPC against a
//! fresh three-member cluster of ours and/or of real etcd, started by the same runner as
//! `jepsen test` ([`Cluster`]) in the same private network and PID namespace, without faults.
//!
//! With `--target both` the rounds alternate (ours then etcd, then etcd then ours, ...) so that a
//! slow spell of this shared machine hits both; each round starts a fresh cluster, runs every
//! workload once and measures each member's memory and CPU. The table shows each workload's median
//! over the rounds and the ratio ours/etcd; the report folder holds `bench.json` (every round as
//! measured), `bench.txt` (the table) and the members' logs.
//!
//! - [`options`]: the flags and the workloads' shapes.
//! - [`workload`]: the clients (closed loop, one outstanding request each) and the watch probe.
//! - [`stats`]: latency percentiles and QPS; [`resources`]: RSS and CPU seconds from `/proc`.
//! - [`table`]: rounds, medians and the printed table.
//! - [`leader_stop`]: after the workloads, SIGTERM of the leader under writes (a rolling restart's step).
//! - [`scale`]: `--scale`, one member of each target probed for many watchers, a large load,
//!   compaction and defrag, a slow watch consumer and one large Range.
//! - [`size`]: `--size`, one member of each target loaded with 10 GiB, restarted and caught up by
//!   a new member.
//! - [`soak`]: `--soak`, one member of each target updated at a steady rate for an hour with
//!   periodic compaction, its memory and database size sampled.

pub mod leader_stop;
pub mod options;
pub mod resources;
pub mod scale;
pub mod size;
pub mod soak;
pub mod stats;
pub mod table;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use serde::Serialize;
use tracing::{info, warn};

use self::options::{BenchOptions, BenchWorkload};
use self::table::{MemberUsage, Restart, Round, Row, TargetSummary};
use self::workload::{Setup, RANGE_KEY, VALUE_SIZE};
use crate::client;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::member::Member;
use crate::net::CLIENT_PORT;
use crate::netns;
use crate::options::{FaultKind, Target, TestOptions};

/// How long a fresh cluster may take to elect its first leader.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a restarted member may take to serve the loaded revision again.
const RESTART_TIMEOUT: Duration = Duration::from_secs(600);
/// A bound on the small setup calls (the range key's put, Status probes).
const SETUP_TIMEOUT: Duration = Duration::from_secs(5);

/// What a benchmark produced.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    /// The table, as printed.
    pub table: String,
}

/// `bench.json`.
#[derive(Debug, Serialize)]
struct Report<'a> {
    options: &'a BenchOptions,
    summaries: &'a [TargetSummary],
    rounds: &'a [Round],
    duration_secs: f64,
}

/// Runs the benchmark; the process must already be in private network and PID namespaces, unless
/// `--host-network` asks for the host's.
pub async fn run(opts: BenchOptions) -> Result<Outcome> {
    if opts.scale.scale {
        let outcome = scale::run(&opts).await?;
        return Ok(Outcome { dir: outcome.dir, table: outcome.table });
    }
    if opts.size.size {
        let outcome = size::run(&opts).await?;
        return Ok(Outcome { dir: outcome.dir, table: outcome.table });
    }
    if opts.soak.soak {
        let outcome = soak::run(&opts).await?;
        return Ok(Outcome { dir: outcome.dir, table: outcome.table });
    }
    netns::prepare_for(opts.host_network)?;
    let started = Instant::now();
    let dir = create_dir(&opts)?;
    info!(dir = %dir.display(), "report folder");
    let targets = opts.target.targets();
    let mut rounds = Vec::new();
    for number in 1..=opts.rounds {
        // ABBA order: each target goes first in every other round.
        let mut order = targets.clone();
        if number % 2 == 0 {
            order.reverse();
        }
        for target in order {
            let round = run_round(&opts, target, number, &dir).await?;
            rounds.push(round);
        }
    }
    let summaries: Vec<TargetSummary> = targets.iter().map(|&t| table::summarize(t, &rounds)).collect();
    let table = table::render(&summaries);
    let report = Report {
        options: &opts,
        summaries: &summaries,
        rounds: &rounds,
        duration_secs: started.elapsed().as_secs_f64(),
    };
    let json = serde_json::to_string_pretty(&report).map_err(Error::Encode)?;
    write(&dir.join("bench.json"), &json)?;
    write(&dir.join("bench.txt"), &table)?;
    Ok(Outcome { dir, table })
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(Error::system(format!("write {}", path.display())))
}

/// Debian's package of the etcd server, installed when a run needs etcd and the default binary is
/// missing (a fresh machine).
const ETCD_PACKAGE: &str = "etcd-server";

/// Makes sure the etcd binary exists when the run measures etcd: the default `/usr/bin/etcd` is
/// installed with apt-get (`etcd-server`, etcd 3.4 on Debian) if missing; a `--etcd-bin` given by
/// hand must exist.
pub fn ensure_etcd(opts: &BenchOptions) -> std::result::Result<(), String> {
    if !opts.target.targets().contains(&Target::Etcd) || opts.etcd_bin.is_file() {
        return Ok(());
    }
    if opts.etcd_bin != Path::new(options::DEFAULT_ETCD_BIN) {
        return Err(format!("{} does not exist", opts.etcd_bin.display()));
    }
    eprintln!("jepsen: {} is missing; installing Debian's {ETCD_PACKAGE}", opts.etcd_bin.display());
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|status| status.success())
    };
    // A fresh machine may have no package lists yet.
    let installed =
        apt(&["install", "-y", ETCD_PACKAGE]) || (apt(&["update"]) && apt(&["install", "-y", ETCD_PACKAGE]));
    if installed && opts.etcd_bin.is_file() {
        Ok(())
    } else {
        Err(format!(
            "could not install {ETCD_PACKAGE} (apt-get install -y {ETCD_PACKAGE}); or give --etcd-bin, or --target ours"
        ))
    }
}

/// Quiet time before each round, after `sync`.
const SETTLE_PAUSE: Duration = Duration::from_secs(2);

/// `<store>/bench-<target>-<unix time>`.
fn create_dir(opts: &BenchOptions) -> Result<PathBuf> {
    let store = opts.store.clone().unwrap_or_else(|| std::env::temp_dir().join("jepsen"));
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let target = match opts.target {
        options::BenchTarget::Ours => "ours",
        options::BenchTarget::Etcd => "etcd",
        options::BenchTarget::Both => "both",
    };
    let mode = if opts.memory { "-memory" } else { "" };
    let dir = store.join(format!("bench-{target}{mode}-{stamp}"));
    std::fs::create_dir_all(&dir).map_err(Error::system(format!("create {}", dir.display())))?;
    Ok(dir)
}

/// `jepsen test`'s options with their defaults, for [`Cluster::start`]: the same members, flags
/// and timings as a test run, no faults.
fn cluster_options(opts: &BenchOptions, target: Target) -> Result<TestOptions> {
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        test: TestOptions,
    }
    let mut test =
        Defaults::try_parse_from(["jepsen"]).map_err(|err| Error::Setup(format!("default test options: {err}")))?.test;
    test.target = target;
    test.nemesis = vec![FaultKind::None];
    test.server_bin = match target {
        Target::Ours => opts.server_bin.clone(),
        Target::Etcd => Some(opts.etcd_bin.clone()),
    };
    Ok(test)
}

fn client_url(member: &Member) -> String {
    format!("http://{}:{CLIENT_PORT}", member.host.ip)
}

/// One round: a fresh cluster of `target` in `<dir>/<target>-round<n>`, every workload, the
/// members' usage, (memory mode) a follower restart, the leader's SIGTERM; then the members are killed.
async fn run_round(opts: &BenchOptions, target: Target, number: u32, dir: &Path) -> Result<Round> {
    let started = Instant::now();
    settle().await;
    let root = dir.join(format!("{}-round{number}", target.name()));
    std::fs::create_dir_all(&root).map_err(Error::system(format!("create {}", root.display())))?;
    let mut cluster = Cluster::start(&cluster_options(opts, target)?, &root)?;
    cluster.wait_ready(READY_TIMEOUT).await?;
    let leader = leader_of(&cluster).await;
    info!(target = target.name(), round = number, leader = %cluster.members[leader].name, "cluster ready");
    let value = "v".repeat(VALUE_SIZE);
    let range_key = String::from_utf8_lossy(RANGE_KEY).into_owned();
    client::put(cluster.members[leader].channel(), &range_key, &value, SETUP_TIMEOUT)
        .await
        .map_err(|status| Error::Setup(format!("cannot write the range key: {}", client::describe(&status))))?;

    let client_cpu = resources::own_cpu_secs();
    let put_sequence = Arc::new(AtomicU64::new(0));
    let mut rows = Vec::new();
    for workload in opts.round_workloads() {
        let leader = leader_of(&cluster).await;
        let setup = Setup {
            leader: client_url(&cluster.members[leader]),
            members: cluster.members.iter().map(client_url).collect(),
            stop: if workload == BenchWorkload::Load { options::Stop::Total(opts.load_keys()) } else { opts.stop() },
            timeout: opts.request_timeout(),
            watch_rate: opts.watch_rate,
            put_sequence: Arc::clone(&put_sequence),
        };
        let cpu_before = cluster_cpu(&cluster);
        let measured = workload::run(workload.name(), workload.shape(), &setup).await;
        let cluster_cpu_secs = cluster_cpu(&cluster) - cpu_before;
        match measured {
            Ok(measured) => {
                for (name, stats) in measured.rows {
                    info!(target = target.name(), round = number, workload = %name, qps = stats.qps as u64, p99_ms = stats.p99_ms, errors = stats.errors, "measured");
                    rows.push(Row {
                        workload: name,
                        stats,
                        cluster_cpu_secs,
                        first_error: measured.first_error.clone(),
                    });
                }
                if let Some(error) = measured.first_error {
                    warn!(target = target.name(), workload = workload.name(), error, "requests failed");
                }
            }
            // A workload that cannot run (say, an unimplemented RPC) leaves an empty row, not a
            // missing one, and the others still run.
            Err(err) => {
                warn!(target = target.name(), workload = workload.name(), %err, "workload could not run");
                rows.push(Row {
                    workload: workload.name().to_string(),
                    stats: stats::Stats::default(),
                    cluster_cpu_secs,
                    first_error: Some(err.to_string()),
                });
            }
        }
    }
    let members = usage_of(&cluster, &root);
    let restart = if opts.memory { Some(restart_follower(&mut cluster).await?) } else { None };
    let stopped = leader_of(&cluster).await;
    let leader_stop = match leader_stop::run(&mut cluster, stopped, opts.request_timeout()).await {
        Ok(stop) => Some(stop),
        Err(err) => {
            warn!(target = target.name(), %err, "the leader-stop probe could not run");
            None
        }
    };
    let client_cpu_secs = resources::own_cpu_secs() - client_cpu;
    let leader = cluster.members[leader].name.clone();
    cluster.kill_all()?;
    if !opts.keep_data {
        for member in &mut cluster.members {
            member.wipe_data()?;
        }
    }
    Ok(Round {
        target,
        round: number,
        leader,
        rows,
        members,
        client_cpu_secs,
        restart,
        leader_stop,
        duration_secs: started.elapsed().as_secs_f64(),
    })
}

/// Lets the disk settle before a round: the previous round's data dirs were just removed and its
/// writes may still be on their way to disk, which would slow this round's first workload (seen as
/// put-1-leader at half speed after another round).
async fn settle() {
    let _ = tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await;
    tokio::time::sleep(SETTLE_PAUSE).await;
}

/// The leader's index; member 0 (with a warning) when none claims it right now.
async fn leader_of(cluster: &Cluster) -> usize {
    match cluster.leader().await {
        Some(leader) => leader,
        None => {
            warn!("no member claims leadership; using n1 as the leader endpoint");
            0
        }
    }
}

/// The host pid of a running member.
fn host_pid(member: &Member) -> Option<u32> {
    member.pid().and_then(resources::host_pid)
}

/// CPU seconds used by the members so far, summed.
fn cluster_cpu(cluster: &Cluster) -> f64 {
    cluster.members.iter().filter_map(host_pid).filter_map(|pid| resources::usage(pid).ok()).map(|u| u.cpu_secs).sum()
}

/// Each member's RSS, CPU seconds and data size now (zeros for one that cannot be read).
fn usage_of(cluster: &Cluster, root: &Path) -> Vec<MemberUsage> {
    cluster
        .members
        .iter()
        .map(|member| {
            let usage = host_pid(member).and_then(|pid| resources::usage(pid).ok()).unwrap_or_else(|| {
                warn!(member = %member.name, "cannot read the member's usage from /proc");
                resources::Usage::default()
            });
            MemberUsage {
                name: member.name.clone(),
                rss_bytes: usage.rss_bytes,
                cpu_secs: usage.cpu_secs,
                data_bytes: resources::dir_bytes(&root.join("members").join(&member.name)),
            }
        })
        .collect()
}

/// Kills a follower and starts it again on its data dir; measures how long it takes to answer
/// Status at the revision the leader has (it must replay or load everything it stored).
async fn restart_follower(cluster: &mut Cluster) -> Result<Restart> {
    let leader = leader_of(cluster).await;
    let revision = client::status(cluster.members[leader].channel(), SETUP_TIMEOUT)
        .await
        .map_err(|status| Error::Setup(format!("Status of the leader: {}", client::describe(&status))))?
        .revision;
    let index = (leader + 1) % cluster.members.len();
    let member = &mut cluster.members[index];
    member.kill()?;
    let started = Instant::now();
    member.start()?;
    loop {
        if let Ok(status) = client::status(member.channel(), SETUP_TIMEOUT).await {
            if status.revision >= revision {
                break;
            }
        }
        if !member.is_running() {
            return Err(Error::Setup(format!(
                "{} exited after its restart; see {}",
                member.name,
                member.log_path().display()
            )));
        }
        if started.elapsed() > RESTART_TIMEOUT {
            return Err(Error::Setup(format!("{} did not reach revision {revision} after its restart", member.name)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let rss_bytes_after = host_pid(member).and_then(|pid| resources::usage(pid).ok()).map_or(0, |u| u.rss_bytes);
    info!(member = %member.name, secs, revision, "restarted member serves the loaded revision");
    Ok(Restart { member: member.name.clone(), secs, rss_bytes_after })
}
