//! One `jepsen test` run, phase by phase:
//!
//! 1. check that we are in a private network namespace; create the report folder; start the
//!    cluster and the firewall table; wait for a leader;
//! 2. workers run the workload until the time limit while the nemesis injects faults (quiet start,
//!    then fault and calm windows);
//! 3. at the time limit, heal everything; the workers finish their last op;
//! 4. liveness: a write must succeed within `--liveness-timeout` of the heal;
//! 5. convergence: every member reaches the same revision, then HashKV at that revision;
//! 6. the workload's final reads; stop the members, then check the history (linearizability, revisions), the probes and logs,
//!    and write the report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;
use tracing::info;

use crate::checker::convergence::{self, MemberState};
use crate::checker::{liveness, logs, overall, Anomaly, AnomalyKind, CheckResult, Validity};
use crate::client::{self, HashAnswer};
use crate::cluster::{Cluster, SIZE};
use crate::error::Result;
use crate::history;
use crate::nemesis::Nemesis;
use crate::net::{Net, Shaping};
use crate::options::{FaultKind, TestOptions, WorkloadKind};
use crate::recorder::{Clock, Recorder};
use crate::report;
use crate::summary::{OpCounts, Summary};
use crate::workload::lease::{LeaseConfig, LeaseWorkload};
use crate::workload::list_append::ListAppendWorkload;
use crate::workload::mixed::MixedWorkload;
use crate::workload::register::RegisterWorkload;
use crate::workload::set::SetWorkload;
use crate::workload::watch::WatchWorkload;
use crate::workload::{FinishContext, WorkerContext, Workload};
use crate::{netns, Error};

/// How long the cluster may take to elect its first leader.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause between two probes while waiting for liveness or convergence.
const PROBE_PAUSE: Duration = Duration::from_millis(200);
/// The key liveness probes write; outside the workload's keys, so they never enter its history.
const LIVENESS_KEY: &str = "jepsen/liveness";

/// What a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    pub summary: Summary,
}

/// Runs one test; the process must already be in a private network namespace.
pub async fn run(opts: TestOptions) -> Result<Outcome> {
    let pauses = opts.nemesis.iter().any(|f| matches!(f, FaultKind::PauseOne | FaultKind::PauseLeader));
    if pauses && opts.nemesis_interval() <= Duration::from_millis(opts.election_timeout) {
        return Err(Error::Setup(format!(
            "a pause must outlast the election timeout: --nemesis-interval {} s <= --election-timeout {} ms",
            opts.nemesis_interval, opts.election_timeout
        )));
    }
    match opts.workload {
        WorkloadKind::Register => {
            run_workload(RegisterWorkload::new(opts.serializable_reads, opts.ops_per_key, opts.seed), opts).await
        }
        WorkloadKind::Set => run_workload(SetWorkload::new(opts.seed), opts).await,
        WorkloadKind::ListAppend => run_workload(ListAppendWorkload::new(opts.seed), opts).await,
        WorkloadKind::Watch => run_workload(WatchWorkload::new(opts.seed), opts).await,
        WorkloadKind::Lease => run_workload(LeaseWorkload::new(LeaseConfig::from_options(&opts)?), opts).await,
        WorkloadKind::Mixed => run_workload(MixedWorkload::new(opts.seed), opts).await,
    }
}

/// Phases 1 to 6 for one workload.
async fn run_workload<W: Workload>(workload: W, opts: TestOptions) -> Result<Outcome> {
    netns::prepare()?;
    let dir = report::create_dir(&opts)?;
    info!(dir = %dir.display(), "report folder");
    let clock = Clock::start();
    // The network first: with `delay`, the link proxies must be in the path of the members' very
    // first peer connections (NAT redirects only new connections).
    let net = Net::setup_with(crate::cluster::hosts(), Shaping::of(&opts)).await?;
    let mut cluster = Cluster::start(&opts, &dir)?;
    cluster.wait_ready(READY_TIMEOUT).await?;
    info!("cluster ready");

    let recorder: Arc<Recorder<W::Op>> = Arc::new(Recorder::create(&dir.join("history.jsonl"), clock)?);
    let workload = Arc::new(workload);
    let end = Instant::now() + opts.time_limit();
    let workers = opts.concurrency.unwrap_or(2 * SIZE).max(1);
    let period = Duration::from_secs_f64(workers as f64 / opts.rate.max(0.1));
    let members: Vec<(String, Channel)> = cluster.names().into_iter().zip(cluster.channels()).collect();
    let mut handles = Vec::with_capacity(workers);
    for index in 0..workers {
        let (member, channel) = members[index % members.len()].clone();
        let ctx = WorkerContext {
            index,
            channel,
            member,
            members: members.clone(),
            period,
            op_timeout: opts.op_timeout(),
            end,
        };
        handles.push(tokio::spawn(Arc::clone(&workload).run_worker(ctx, Arc::clone(&recorder))));
    }

    let mut nemesis = Nemesis::new(&opts.nemesis, opts.seed, clock, &dir.join("nemesis.jsonl"))?;
    nemesis.run(&mut cluster, &net, Duration::from_secs(opts.quiet), opts.nemesis_interval(), end).await?;
    let healed = Instant::now();
    for handle in handles {
        handle.await.map_err(|err| Error::Setup(format!("a worker died: {err}")))?;
    }
    info!("workload done; checking liveness and convergence");

    let window = Duration::from_secs(opts.liveness_timeout);
    let first_ok = first_write_after(&cluster, healed, window, opts.op_timeout()).await;
    let mut notes = Vec::new();
    let probe = converge(&cluster, Duration::from_secs(opts.converge_timeout), opts.op_timeout()).await;
    if !probe.hash_skipped.is_empty() {
        notes.push(format!(
            "convergence: HashKV answered Unimplemented on {}, so only revisions were compared (hash check skipped)",
            probe.hash_skipped.join(", ")
        ));
    }
    let finish = FinishContext {
        members: members.clone(),
        op_timeout: opts.op_timeout(),
        dir: dir.clone(),
        converged_revision: probe.agreed_revision,
    };
    let finished = workload.finish(&finish, &recorder).await;
    cluster.kill_all()?;
    finished?;

    let ops = recorder.finish()?;
    let counts = OpCounts::of(&ops);
    let mut results = Vec::new();
    match history::pair(ops) {
        Ok(pairs) => {
            info!(ops = pairs.len(), "checking the history");
            results.extend(workload.check(&pairs, Duration::from_secs(opts.check_timeout)));
        }
        Err(err) => {
            let anomaly = Anomaly::new(AnomalyKind::Malformed, format!("the history could not be paired: {err}"));
            results.push(CheckResult::from_anomalies("history", vec![anomaly]));
        }
    }
    results.push(convergence::check(&probe.members, &probe.unreachable));
    let member_logs: Vec<(String, String)> = cluster.members.iter().map(|m| (m.name.clone(), m.log())).collect();
    results.push(logs::check(&member_logs));
    results.push(liveness::check(first_ok, window));
    if let Some(after) = first_ok {
        notes.push(format!(
            "liveness: the first write after the final heal succeeded after {:.2} s",
            after.as_secs_f64()
        ));
    }
    notes.extend(workload.notes());
    notes.extend(opts.snapshot_count_note());
    notes.extend(nemesis.notes());
    results.push(nemesis.check());
    let valid = overall(&results);

    let mut summary = Summary {
        run: opts.run_name(),
        valid,
        options: opts.clone(),
        ops: counts,
        results,
        notes,
        faults: nemesis.events().to_vec(),
        duration_secs: clock.elapsed().as_secs_f64(),
    };
    report::write(&dir, &summary)?;
    // Plots and index.html; never fails the run (a problem becomes a note in the summary).
    report::write_pages(&dir, &mut summary);
    if valid == Validity::Valid && !opts.keep_data {
        let data = dir.join("members");
        std::fs::remove_dir_all(&data).map_err(Error::system(format!("remove {}", data.display())))?;
    }
    Ok(Outcome { dir, summary })
}

/// How long after `healed` the first write succeeded (trying the members in turn), or `None` when
/// none did within `window`.
async fn first_write_after(
    cluster: &Cluster,
    healed: Instant,
    window: Duration,
    op_timeout: Duration,
) -> Option<Duration> {
    let channels = cluster.channels();
    let mut attempt = 0usize;
    while healed.elapsed() <= window {
        let channel = &channels[attempt % channels.len()];
        let remaining = window.saturating_sub(healed.elapsed());
        let value = format!("attempt-{attempt}");
        if client::put(channel, LIVENESS_KEY, &value, op_timeout.min(remaining)).await.is_ok() {
            return Some(healed.elapsed());
        }
        attempt += 1;
        tokio::time::sleep(PROBE_PAUSE).await;
    }
    None
}

/// What the end-of-run convergence probe found.
struct Probe {
    /// The revision every member reported, when they agreed before the timeout.
    agreed_revision: Option<i64>,
    members: Vec<MemberState>,
    unreachable: Vec<String>,
    /// Members whose HashKV is unimplemented: their hash is left at 0, so only revisions compare.
    hash_skipped: Vec<String>,
}

/// Polls Status until every member reports the same revision (or `timeout` passes), then asks each
/// for HashKV at that revision.
async fn converge(cluster: &Cluster, timeout: Duration, op_timeout: Duration) -> Probe {
    let deadline = Instant::now() + timeout;
    let names = cluster.names();
    let (statuses, agreed_revision) = loop {
        let statuses = cluster.statuses(op_timeout).await;
        let revisions: Vec<i64> = statuses.iter().filter_map(|s| s.as_ref().ok().map(|s| s.revision)).collect();
        let agreed = revisions.len() == names.len() && revisions.windows(2).all(|w| w[0] == w[1]);
        if agreed {
            break (statuses, revisions.first().copied());
        }
        if Instant::now() >= deadline {
            break (statuses, None);
        }
        tokio::time::sleep(PROBE_PAUSE).await;
    };
    let mut probe = Probe { agreed_revision, members: Vec::new(), unreachable: Vec::new(), hash_skipped: Vec::new() };
    let channels = cluster.channels();
    for ((name, status), channel) in names.iter().zip(&statuses).zip(&channels) {
        let Ok(status) = status else {
            probe.unreachable.push(name.clone());
            continue;
        };
        let (hash, compact_revision) = match client::hash_kv(channel, status.revision, op_timeout).await {
            Ok(HashAnswer::Hash { hash, compact_revision }) => (hash, compact_revision),
            Ok(HashAnswer::Unimplemented) => {
                probe.hash_skipped.push(name.clone());
                (0, 0)
            }
            Err(err) => {
                probe.unreachable.push(format!("{name} (HashKV: {})", client::describe(&err)));
                continue;
            }
        };
        probe.members.push(MemberState { member: name.clone(), revision: status.revision, compact_revision, hash });
    }
    probe
}

/// The exit code for a verdict: 0 valid, 1 invalid, 2 unknown.
pub fn exit_code(valid: Validity) -> u8 {
    match valid {
        Validity::Valid => 0,
        Validity::Invalid => 1,
        Validity::Unknown => 2,
    }
}
