//! The report folder of one run:
//!
//! ```text
//! <store>/<target>-<workload>-<nemesis>-seed<seed>-<unix time>/
//!   summary.txt      what ran, op counts, every checker's verdict with its anomalies, notes
//!   summary.json     the same, for scripts and tests
//!   history.jsonl    every client op (Jepsen-shaped)
//!   nemesis.jsonl    every fault started and healed
//!   n1.log ...       each member's stdout and stderr over all its runs
//!   latency.png      every op's latency by invocation time, fault windows shaded (see `plot`)
//!   throughput.png   completed ops per second by outcome, fault windows shaded
//!   index.html       a page that shows all of the above (see `html`)
//!   members/n1/data  data dirs (removed after a valid run unless --keep-data)
//! ```

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufReader;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::warn;

use crate::error::{Error, Result};
use crate::history::{self, Op};
use crate::html;
use crate::options::TestOptions;
use crate::plot::{self, Plot, Sample};
use crate::summary::Summary;

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

/// Draws `latency.png` and `throughput.png`, then writes `index.html`; call it after [`write()`].
/// Never fails the run: what could not be drawn becomes a note, added to `summary` (and to the
/// summary files, written again) and shown on the page.
pub fn write_pages(dir: &Path, summary: &mut Summary) {
    // Plotters may panic on input it does not expect; the plots are not worth the run's verdict.
    let notes = panic::catch_unwind(AssertUnwindSafe(|| draw_plots(dir, summary)))
        .unwrap_or_else(|_| vec!["plots: drawing them panicked; they may be missing or incomplete".to_string()]);
    if !notes.is_empty() {
        summary.notes.extend(notes);
        if let Err(err) = write(dir, summary) {
            warn!(%err, "cannot write the summary again with the plots' notes");
        }
    }
    if let Err(err) = html::write(dir, summary) {
        warn!(%err, "cannot write index.html");
    }
}

/// Draws both plots from `<dir>/history.jsonl` and the summary's nemesis events. Returns notes on
/// what went wrong (nothing when all is well).
pub fn draw_plots(dir: &Path, summary: &Summary) -> Vec<String> {
    let samples = match read_samples(&dir.join("history.jsonl")) {
        Ok(samples) => samples,
        Err(err) => return vec![format!("plots: not drawn, the history could not be read back: {err}")],
    };
    let mut notes = Vec::new();
    let text = plot::font().is_some();
    if !text {
        notes.push(format!(
            "plots: no font found (looked for {}), so they have no title, labels or legend; \
             install fonts-dejavu-core",
            plot::font_paths().join(", ")
        ));
    }
    let last_event = summary.faults.iter().map(|e| e.time_ns).max().unwrap_or(0);
    let end_ns = samples.iter().map(|s| s.end_ns).max().unwrap_or(0).max(last_event);
    let windows = plot::fault_windows(&summary.faults, end_ns);
    let plot = Plot { title: &summary.run, samples: &samples, windows: &windows, end_ns, text };
    let drawn = [
        ("latency.png", plot.latency(&dir.join("latency.png"))),
        ("throughput.png", plot.throughput(&dir.join("throughput.png"))),
    ];
    for (name, result) in drawn {
        if let Err(err) = result {
            notes.push(format!("plots: {name} not drawn: {err}"));
        }
    }
    notes
}

/// The plot samples of a history file, whatever its workload: payloads are read as plain JSON,
/// which keeps their `f`.
pub fn read_samples(path: &Path) -> Result<Vec<Sample>> {
    let file = File::open(path).map_err(Error::system(format!("open {}", path.display())))?;
    let ops: Vec<Op<serde_json::Value>> = history::read_jsonl(BufReader::new(file))?;
    Ok(Sample::from_pairs(&history::pair(ops)?))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{CheckResult, Validity};
    use crate::history::{OpType, TestKv as Kv};
    use crate::nemesis::NemesisEvent;
    use crate::options::FaultKind;
    use crate::summary::OpCounts;

    const MS: u64 = 1_000_000;

    fn summary() -> Summary {
        Summary {
            run: "ours-register-partition-leader-seed1".to_string(),
            valid: Validity::Valid,
            options: TestOptions::parse(&[]).expect("defaults parse"),
            ops: OpCounts::default(),
            results: vec![CheckResult::from_anomalies("linear", vec![])],
            notes: vec![],
            faults: vec![
                NemesisEvent { time_ns: 100 * MS, f: "start", fault: FaultKind::PartitionLeader, detail: "n1".into() },
                NemesisEvent { time_ns: 300 * MS, f: "stop", fault: FaultKind::None, detail: "final heal".into() },
            ],
            duration_secs: 1.0,
        }
    }

    fn write_history(dir: &Path) {
        let ops = vec![
            Op::invoke(0, Kv::Write(1), 10 * MS).with_key("k"),
            Op::invoke(1, Kv::Read(None), 20 * MS).with_key("k"),
            Op::new(0, OpType::Ok, Kv::Write(1), 30 * MS).with_key("k").with_revision(2),
            Op::new(1, OpType::Fail, Kv::Read(None), 250 * MS).with_key("k").with_error("no leader"),
        ];
        let file = File::create(dir.join("history.jsonl")).expect("create");
        history::write_jsonl(file, &ops).expect("write");
    }

    #[test]
    fn samples_are_read_back_from_any_workloads_history() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_history(dir.path());
        let samples = read_samples(&dir.path().join("history.jsonl")).expect("read");
        let got: Vec<(&str, OpType, u64)> = samples.iter().map(|s| (s.f.as_str(), s.outcome, s.end_ns)).collect();
        assert_eq!(got, vec![("write", OpType::Ok, 30 * MS), ("read", OpType::Fail, 250 * MS)]);
    }

    #[test]
    fn pages_are_written_next_to_the_summary() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_history(dir.path());
        let mut summary = summary();
        write(dir.path(), &summary).expect("write the summary");
        write_pages(dir.path(), &mut summary);
        for name in ["latency.png", "throughput.png", "index.html"] {
            let len = std::fs::metadata(dir.path().join(name)).map(|m| m.len()).unwrap_or(0);
            assert!(len > 0, "{name} is missing or empty");
        }
        let font_notes = usize::from(plot::font().is_none());
        assert_eq!(summary.notes.len(), font_notes, "only a missing font is worth a note: {:?}", summary.notes);
        let page = std::fs::read_to_string(dir.path().join("index.html")).expect("read the page");
        assert!(page.contains("<img src=\"latency.png\"") && page.contains("<a href=\"history.jsonl\">"));
    }

    #[test]
    fn a_missing_history_becomes_a_note_not_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut summary = summary();
        write(dir.path(), &summary).expect("write the summary");
        write_pages(dir.path(), &mut summary);
        assert!(!dir.path().join("latency.png").exists());
        assert_eq!(summary.notes.len(), 1, "{:?}", summary.notes);
        assert!(summary.notes[0].starts_with("plots: not drawn"), "{}", summary.notes[0]);
        let json = std::fs::read_to_string(dir.path().join("summary.json")).expect("read");
        assert!(json.contains("plots: not drawn"), "the summary is written again with the note");
        let page = std::fs::read_to_string(dir.path().join("index.html")).expect("read the page");
        assert!(page.contains("plots: not drawn"), "the page shows the note");
    }
}
