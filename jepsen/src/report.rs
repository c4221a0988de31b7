//! The report folder of one run:
//!
//! ```text
//! <store>/<target>-<workload>-<nemesis>-seed<seed>-<unix time>/
//!   summary.txt      what ran, op counts, every checker's verdict with its anomalies, notes
//!   summary.json     the same, for scripts and tests
//!   history.jsonl    every client op (Jepsen-shaped)
//!   nemesis.jsonl    every fault started and healed
//!   n1.log ...       each member's stdout and stderr over all its runs
//!   members/n1/data  data dirs (removed after a valid run unless --keep-data)
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::checker::{CheckResult, Validity};
use crate::error::{Error, Result};
use crate::history::{Op, OpType};
use crate::nemesis::NemesisEvent;
use crate::options::TestOptions;

/// How many ops ended which way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    pub invoked: usize,
    pub ok: usize,
    pub fail: usize,
    pub info: usize,
}

impl OpCounts {
    pub fn of<P>(ops: &[Op<P>]) -> OpCounts {
        let mut counts = OpCounts::default();
        for op in ops {
            match op.kind {
                OpType::Invoke => counts.invoked += 1,
                OpType::Ok => counts.ok += 1,
                OpType::Fail => counts.fail += 1,
                OpType::Info => counts.info += 1,
            }
        }
        counts
    }
}

/// Everything `summary.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub run: String,
    pub valid: Validity,
    pub options: TestOptions,
    pub ops: OpCounts,
    pub results: Vec<CheckResult>,
    /// What a reader must know to judge the verdict (checks that were skipped and why).
    pub notes: Vec<String>,
    pub faults: Vec<NemesisEvent>,
    pub duration_secs: f64,
}

/// Creates `<store>/<run name>-<unix time>` (world-readable, so members under other user ids can
/// reach their directories inside it).
pub fn create_dir(opts: &TestOptions) -> Result<PathBuf> {
    let store = opts.store.clone().unwrap_or_else(|| std::env::temp_dir().join("jepsen"));
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let dir = store.join(format!("{}-{stamp}", opts.run_name()));
    std::fs::create_dir_all(&dir).map_err(Error::system(format!("create {}", dir.display())))?;
    Ok(dir)
}

/// Writes `summary.txt` and `summary.json`.
pub fn write(dir: &Path, summary: &Summary) -> Result<()> {
    let json = serde_json::to_string_pretty(summary).map_err(Error::Encode)?;
    let json_path = dir.join("summary.json");
    std::fs::write(&json_path, json).map_err(Error::system(format!("write {}", json_path.display())))?;
    let text_path = dir.join("summary.txt");
    std::fs::write(&text_path, render(summary)).map_err(Error::system(format!("write {}", text_path.display())))
}

/// The human-readable summary.
pub fn render(summary: &Summary) -> String {
    let mut out = String::new();
    let o = &summary.options;
    let nemesis: Vec<&str> = o.nemesis.iter().map(|f| f.name()).collect();
    let _ = writeln!(
        out,
        "jepsen test: target={} workload={:?} nemesis={} time-limit={}s seed={} rate={}{}",
        o.target.name(),
        o.workload,
        nemesis.join(","),
        o.time_limit,
        o.seed,
        o.rate,
        if o.serializable_reads { " serializable-reads" } else { "" }
    );
    let c = summary.ops;
    let _ = writeln!(out, "ops: {} invoked, {} ok, {} fail, {} info", c.invoked, c.ok, c.fail, c.info);
    let _ = writeln!(out, "faults:");
    for event in &summary.faults {
        let _ = writeln!(
            out,
            "  {:>8.3}s {} {}: {}",
            event.time_ns as f64 / 1e9,
            event.f,
            event.fault.name(),
            event.detail
        );
    }
    for result in &summary.results {
        let _ = writeln!(out, "{:<12} {:?}", result.checker, result.valid);
        for anomaly in result.anomalies.iter().take(10) {
            let _ = writeln!(out, "  - {anomaly}");
        }
        if result.anomalies.len() > 10 {
            let _ = writeln!(out, "  ... {} more in summary.json", result.anomalies.len() - 10);
        }
    }
    for note in &summary.notes {
        let _ = writeln!(out, "note: {note}");
    }
    let _ = writeln!(out, "overall: {:?} ({:.1} s)", summary.valid, summary.duration_secs);
    out
}
