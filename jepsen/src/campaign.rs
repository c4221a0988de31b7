//! `jepsen campaign`: many runs over the workload × fault matrix, one after another, and a table
//! of their verdicts.
//!
//! Each run is a child `jepsen test` process (so each gets a fresh network and PID namespace, and a
//! harness failure in one run cannot take the others down). The campaign folder holds one report
//! folder per run, `campaign.txt` (the table), `campaign.json` (every row) and `index.html`
//! (the table with links to each run's page). Runs are seeded `--seed`, `--seed + 1`, ... in
//! matrix order, so a campaign is as reproducible as its runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::checker::Validity;
use crate::error::{Error, Result};
use crate::options::{FaultKind, Target, WorkloadKind};

/// Which servers a campaign runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Targets {
    Ours,
    Etcd,
    /// Every run against ours, then against etcd (the control).
    Both,
}

impl Targets {
    fn list(self) -> Vec<Target> {
        match self {
            Targets::Ours => vec![Target::Ours],
            Targets::Etcd => vec![Target::Etcd],
            Targets::Both => vec![Target::Ours, Target::Etcd],
        }
    }
}

/// `jepsen campaign`.
#[derive(Debug, Clone, Args)]
pub struct CampaignOptions {
    /// the servers to run against
    #[arg(long, value_enum, default_value = "ours")]
    pub target: Targets,

    /// the workloads of the matrix (default: all)
    #[arg(long, value_enum, value_delimiter = ',')]
    pub workloads: Vec<WorkloadKind>,

    /// the fault groups of the matrix, each a `+`-separated list of faults one run mixes
    /// (default: the groups listed by `jepsen campaign --help` under FAULT GROUPS)
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,

    /// seconds of workload per run
    #[arg(long, default_value_t = 60)]
    pub time_limit: u64,

    /// the first run's seed; run i uses seed + i
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// stop after this many runs (default: the whole matrix, once per target)
    #[arg(long)]
    pub runs: Option<usize>,

    /// a short campaign for CI: a few 30 s runs over a spread of workloads and faults
    #[arg(long)]
    pub smoke: bool,

    /// where the campaign folder goes (default: `<temp dir>/jepsen`)
    #[arg(long)]
    pub store: Option<PathBuf>,

    /// extra flags passed to every `jepsen test` (e.g. `--rate 100`), after `--`
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// The default fault groups: every fault kind appears in one group, and each group mixes faults
/// of one family so a run's windows stay interpretable.
pub const FAULT_GROUPS: &[&str] = &[
    "partition-one+partition-leader+bridge+one-way",
    "kill-one+kill-leader+kill-all",
    "pause-one+pause-leader",
    "member-shrink-grow+compact+blackhole-snapshot",
    "delay+loss+client-cut+slow-disk",
];

/// The smoke campaign: (workload, fault group) pairs, 30 s each.
const SMOKE: &[(WorkloadKind, &str)] = &[
    (WorkloadKind::Register, "partition-leader+kill-leader"),
    (WorkloadKind::ListAppend, "pause-leader+one-way+slow-disk"),
    (WorkloadKind::Watch, "kill-all+compact"),
    (WorkloadKind::Mixed, "member-shrink-grow+delay"),
];

/// Seconds of workload per smoke run.
const SMOKE_TIME_LIMIT: u64 = 30;

/// One planned run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub target: Target,
    pub workload: WorkloadKind,
    pub faults: Vec<FaultKind>,
    pub seed: u64,
    pub time_limit: u64,
}

impl Plan {
    fn fault_names(&self) -> String {
        self.faults.iter().map(|f| f.name()).collect::<Vec<_>>().join(",")
    }
}

/// One finished run: a row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub plan: Plan,
    /// The verdict, or `None` when the harness itself failed (see `error`).
    pub valid: Option<Validity>,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    /// The checkers that were not valid, with their verdicts.
    pub failed_checkers: Vec<String>,
    pub error: Option<String>,
    pub seconds: f64,
    /// The run's report folder, relative to the campaign folder.
    pub report: Option<String>,
}

/// What a run's `summary.json` tells the campaign (the rest stays in the run's folder).
#[derive(Debug, Deserialize)]
struct RunSummary {
    valid: Validity,
    ops: RunCounts,
    results: Vec<RunResult>,
}

#[derive(Debug, Deserialize)]
struct RunCounts {
    ok: u64,
    fail: u64,
    info: u64,
}

#[derive(Debug, Deserialize)]
struct RunResult {
    checker: String,
    valid: Validity,
}

/// The runs a campaign makes, in order.
pub fn plan(opts: &CampaignOptions) -> Result<Vec<Plan>> {
    let mut cells: Vec<(WorkloadKind, Vec<FaultKind>)> = Vec::new();
    let time_limit = if opts.smoke { SMOKE_TIME_LIMIT } else { opts.time_limit };
    if opts.smoke {
        for (workload, group) in SMOKE {
            cells.push((*workload, parse_group(group)?));
        }
    } else {
        let workloads: Vec<WorkloadKind> =
            if opts.workloads.is_empty() { WorkloadKind::value_variants().to_vec() } else { opts.workloads.clone() };
        let groups: Vec<String> = if opts.faults.is_empty() {
            FAULT_GROUPS.iter().map(|g| g.to_string()).collect()
        } else {
            opts.faults.clone()
        };
        let groups = groups.iter().map(|g| parse_group(g)).collect::<Result<Vec<_>>>()?;
        for workload in workloads {
            for group in &groups {
                cells.push((workload, group.clone()));
            }
        }
    }
    let mut plans = Vec::new();
    for target in opts.target.list() {
        for (i, (workload, faults)) in cells.iter().enumerate() {
            let seed = opts.seed + i as u64;
            plans.push(Plan { target, workload: *workload, faults: faults.clone(), seed, time_limit });
        }
    }
    if let Some(runs) = opts.runs {
        plans.truncate(runs);
    }
    Ok(plans)
}

/// `partition-one+kill-all` → its fault kinds.
fn parse_group(group: &str) -> Result<Vec<FaultKind>> {
    group
        .split('+')
        .map(|name| {
            FaultKind::from_str(name.trim(), false)
                .map_err(|_| Error::Setup(format!("unknown fault {name:?} in fault group {group:?}")))
        })
        .collect()
}

/// Runs the campaign; returns the folder and the rows.
pub fn run(opts: &CampaignOptions) -> Result<(PathBuf, Vec<Row>)> {
    let plans = plan(opts)?;
    let exe = std::env::current_exe().map_err(Error::system("locate the jepsen executable"))?;
    let store = opts.store.clone().unwrap_or_else(|| std::env::temp_dir().join("jepsen"));
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let dir = store.join(format!("campaign-{stamp}"));
    std::fs::create_dir_all(&dir).map_err(Error::system(format!("create {}", dir.display())))?;
    eprintln!("campaign: {} runs into {}", plans.len(), dir.display());
    let mut rows = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        eprint!(
            "[{}/{}] {} {:?} {} seed {} ... ",
            i + 1,
            plans.len(),
            plan.target.name(),
            plan.workload,
            plan.fault_names(),
            plan.seed
        );
        let store = dir.join(format!("{:03}-{}", i + 1, plan.target.name()));
        let row = run_one(&exe, &dir, &store, plan, &opts.extra);
        eprintln!("{}", describe(&row));
        rows.push(row);
        write(&dir, &rows)?;
    }
    Ok((dir, rows))
}

/// Runs one `jepsen test` child into its own store folder and reads its summary.
fn run_one(exe: &Path, dir: &Path, store: &Path, plan: &Plan, extra: &[String]) -> Row {
    let started = Instant::now();
    let workload = plan.workload.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
    let output = Command::new(exe)
        .arg("test")
        .args(["--target", plan.target.name(), "--workload", &workload, "--nemesis", &plan.fault_names()])
        .args(["--time-limit", &plan.time_limit.to_string(), "--seed", &plan.seed.to_string()])
        .arg("--store")
        .arg(store)
        .args(extra)
        .stdin(Stdio::null())
        .output();
    let mut row = Row {
        plan: plan.clone(),
        valid: None,
        ok: 0,
        fail: 0,
        info: 0,
        failed_checkers: Vec::new(),
        error: None,
        seconds: 0.0,
        report: None,
    };
    let report = find_report(store);
    row.report = report.as_ref().and_then(|r| r.strip_prefix(dir).ok()).map(|r| r.display().to_string());
    let summary = report.and_then(|r| std::fs::read(r.join("summary.json")).ok());
    match (summary, output) {
        (Some(bytes), _) => match serde_json::from_slice::<RunSummary>(&bytes) {
            Ok(summary) => {
                row.valid = Some(summary.valid);
                (row.ok, row.fail, row.info) = (summary.ops.ok, summary.ops.fail, summary.ops.info);
                row.failed_checkers = summary
                    .results
                    .iter()
                    .filter(|r| r.valid != Validity::Valid)
                    .map(|r| format!("{} {:?}", r.checker, r.valid).to_lowercase())
                    .collect();
            }
            Err(err) => row.error = Some(format!("summary.json does not parse: {err}")),
        },
        (None, Ok(output)) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            row.error = Some(format!("{}: {}", output.status, last.trim()));
        }
        (None, Err(err)) => row.error = Some(format!("cannot run {}: {err}", exe.display())),
    }
    row.seconds = started.elapsed().as_secs_f64();
    row
}

/// The report folder a `jepsen test` made inside `store`, if any.
fn find_report(store: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(store).ok()?;
    entries.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| p.join("summary.json").is_file())
}

fn verdict(row: &Row) -> &'static str {
    match row.valid {
        Some(Validity::Valid) => "valid",
        Some(Validity::Invalid) => "INVALID",
        Some(Validity::Unknown) => "unknown",
        None => "ERROR",
    }
}

/// One line of progress for a finished run.
fn describe(row: &Row) -> String {
    let mut text =
        format!("{} ({} ok, {} fail, {} info, {:.0} s)", verdict(row), row.ok, row.fail, row.info, row.seconds);
    if !row.failed_checkers.is_empty() {
        let _ = write!(text, " [{}]", row.failed_checkers.join(", "));
    }
    if let Some(error) = &row.error {
        let _ = write!(text, ": {error}");
    }
    text
}

/// The overall verdict: the worst run (a harness error counts as unknown).
pub fn overall(rows: &[Row]) -> Validity {
    rows.iter().map(|r| r.valid.unwrap_or(Validity::Unknown)).max().unwrap_or(Validity::Unknown)
}

/// The table as text: one row per run, then a count per target.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6} {:<11} {:<46} {:>4} {:>8} {:>6} {:>5} {:>5}  seconds",
        "target", "workload", "faults", "seed", "verdict", "ok", "fail", "info"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "{:<6} {:<11} {:<46} {:>4} {:>8} {:>6} {:>5} {:>5}  {:.0}{}",
            row.plan.target.name(),
            format!("{:?}", row.plan.workload).to_lowercase(),
            row.plan.fault_names(),
            row.plan.seed,
            verdict(row),
            row.ok,
            row.fail,
            row.info,
            row.seconds,
            if row.failed_checkers.is_empty() {
                String::new()
            } else {
                format!("  {}", row.failed_checkers.join(", "))
            }
        );
    }
    for target in [Target::Ours, Target::Etcd] {
        let of: Vec<&Row> = rows.iter().filter(|r| r.plan.target == target).collect();
        if of.is_empty() {
            continue;
        }
        let valid = of.iter().filter(|r| r.valid == Some(Validity::Valid)).count();
        let _ = writeln!(out, "{}: {valid}/{} runs valid", target.name(), of.len());
    }
    out
}

/// Writes `campaign.txt`, `campaign.json` and `index.html` (rewritten after every run, so an
/// interrupted campaign still leaves its table).
fn write(dir: &Path, rows: &[Row]) -> Result<()> {
    let put = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(Error::system(format!("write {}", path.display())))
    };
    put("campaign.txt", table(rows).as_bytes())?;
    put("campaign.json", &serde_json::to_vec_pretty(rows).map_err(Error::Encode)?)?;
    put("index.html", page(rows).as_bytes())
}

/// The campaign's HTML page: the table, each row linking to its run's page.
fn page(rows: &[Row]) -> String {
    let mut out = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>jepsen campaign</title>\n<style>\
         body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}\
         .valid{color:#070}.invalid{color:#b00;font-weight:bold}.unknown{color:#a60}</style></head><body>\n\
         <h1>jepsen campaign</h1>\n<table>\n<tr><th>target</th><th>workload</th><th>faults</th><th>seed</th>\
         <th>verdict</th><th>ok</th><th>fail</th><th>info</th><th>seconds</th><th>not valid</th></tr>\n",
    );
    for row in rows {
        let class = match row.valid {
            Some(Validity::Valid) => "valid",
            Some(Validity::Invalid) => "invalid",
            _ => "unknown",
        };
        let link = match &row.report {
            Some(report) => format!("<a href=\"{}/index.html\">{}</a>", escape(report), verdict(row)),
            None => verdict(row).to_string(),
        };
        let mut problems = row.failed_checkers.join(", ");
        if let Some(error) = &row.error {
            problems.push_str(error);
        }
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{link}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{:.0}</td><td>{}</td></tr>",
            row.plan.target.name(),
            format!("{:?}", row.plan.workload).to_lowercase(),
            escape(&row.plan.fault_names()),
            row.plan.seed,
            row.ok,
            row.fail,
            row.info,
            row.seconds,
            escape(&problems)
        );
    }
    let _ = writeln!(out, "</table>\n<pre>{}</pre>\n</body></html>", escape(&table(rows)));
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        campaign: CampaignOptions,
    }

    fn parse(args: &[&str]) -> CampaignOptions {
        Cli::try_parse_from(std::iter::once("jepsen").chain(args.iter().copied())).expect("valid flags").campaign
    }

    #[test]
    fn the_default_matrix_is_every_workload_times_every_group() {
        let plans = plan(&parse(&["--target", "both"])).expect("plan");
        let cells = WorkloadKind::value_variants().len() * FAULT_GROUPS.len();
        assert_eq!(plans.len(), 2 * cells);
        assert!(plans[..cells].iter().all(|p| p.target == Target::Ours && p.time_limit == 60));
        assert!(plans[cells..].iter().all(|p| p.target == Target::Etcd));
        // Each target runs the same cells with the same seeds, so the control is comparable.
        for (ours, etcd) in plans[..cells].iter().zip(&plans[cells..]) {
            assert_eq!((ours.workload, &ours.faults, ours.seed), (etcd.workload, &etcd.faults, etcd.seed));
        }
        let mut seeds: Vec<u64> = plans[..cells].iter().map(|p| p.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), cells, "seeds differ per cell");
        // Every fault kind is in some default group, so the full campaign covers them all.
        let planned: Vec<FaultKind> = plans.iter().flat_map(|p| p.faults.clone()).collect();
        for kind in FaultKind::value_variants().iter().filter(|k| **k != FaultKind::None) {
            assert!(planned.contains(kind), "{} is in no default fault group", kind.name());
        }
    }

    #[test]
    fn groups_parse_and_unknown_faults_are_refused() {
        let plans = plan(&parse(&["--workloads", "register", "--faults", "kill-all,bridge+pause-one", "--runs", "1"]))
            .expect("plan");
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].faults, vec![FaultKind::KillAll]);
        let two = plan(&parse(&["--workloads", "register", "--faults", "bridge+pause-one"])).expect("plan");
        assert_eq!(two[0].faults, vec![FaultKind::Bridge, FaultKind::PauseOne]);
        assert!(plan(&parse(&["--faults", "flood"])).is_err());
        let smoke = plan(&parse(&["--smoke"])).expect("plan");
        assert!(smoke.len() >= 2 && smoke.iter().all(|p| p.time_limit == SMOKE_TIME_LIMIT && p.target == Target::Ours));
    }

    #[test]
    fn the_table_counts_valid_runs_and_names_failed_checkers() {
        let plan = Plan {
            target: Target::Ours,
            workload: WorkloadKind::Register,
            faults: vec![FaultKind::KillAll],
            seed: 3,
            time_limit: 60,
        };
        let row = |valid, failed: &[&str], error: Option<&str>| Row {
            plan: plan.clone(),
            valid,
            ok: 10,
            fail: 1,
            info: 2,
            failed_checkers: failed.iter().map(|s| s.to_string()).collect(),
            error: error.map(str::to_string),
            seconds: 70.0,
            report: Some("003/x".to_string()),
        };
        let rows = vec![
            row(Some(Validity::Valid), &[], None),
            row(Some(Validity::Invalid), &["register invalid"], None),
            row(None, &[], Some("exit status: 3: <boom>")),
        ];
        let text = table(&rows);
        assert!(text.contains("ours: 1/3 runs valid"), "{text}");
        assert!(text.contains("INVALID") && text.contains("register invalid"), "{text}");
        assert_eq!(overall(&rows), Validity::Invalid);
        assert_eq!(overall(&rows[..1]), Validity::Valid);
        assert_eq!(overall(&rows[2..]), Validity::Unknown);
        let html = page(&rows);
        assert!(html.contains("&lt;boom&gt;") && !html.contains("<boom>"), "{html}");
        assert!(html.contains("href=\"003/x/index.html\""), "{html}");
    }
}
