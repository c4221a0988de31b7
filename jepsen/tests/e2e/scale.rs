//! A tiny `jepsen bench --scale --target both` (a few hundred watchers, a couple of thousand puts)
//! against one member of ours and one of etcd 3.5.1. The table must have every probe's row with a
//! number for each target and no error, and the report folder its JSON, plot and page. This checks
//! that the probes work, not how fast anything is (benchmarks are not tests). And a short
//! `jepsen bench --soak` the same way: paced puts, compactions and samples of both.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{jepsen, start, tools_required};

/// The start of every probe's row, in order.
const ROWS: [&str; 11] = [
    "200 watchers (4 streams x 50), member RSS MB",
    "puts/s while those watchers are open",
    "events delivered/s to them",
    "load 2000 puts of 64 B (500 keys), puts/s",
    "RSS MB right after that load",
    "RSS MB after compaction (before defrag)",
    "RSS MB after compaction and defrag of it",
    "Compaction RPC (all but the last revision), ms to answer",
    "Defragment RPC, s to answer",
    "slowest put of a concurrent writer during compaction, ms",
    "slowest put of a concurrent writer during defrag, ms",
];

/// etcd 3.5.1 where `scripts/test` downloads it (as the fuzz test finds it).
fn etcd35() -> PathBuf {
    std::env::var_os("KV_ETCD35_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/etcd-3.5.1"), PathBuf::from)
        .join("etcd")
}

/// etcd 3.5.1, or `None` when it is missing and the run may skip (`test` names the test in the message).
fn etcd35_or_skip(test: &str) -> Option<PathBuf> {
    let etcd = etcd35();
    if etcd.is_file() {
        return Some(etcd);
    }
    let why = format!("{} is missing: run scripts/test, which downloads etcd 3.5.1 there", etcd.display());
    assert!(!tools_required(), "this run requires the {test} test: {why}");
    eprintln!("skipped: {why}");
    None
}

/// The report folder under `store` holding `file`, and that file parsed.
fn report_json(store: &Path, file: &str) -> (PathBuf, Value) {
    let report = store
        .read_dir()
        .expect("store")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.join(file).is_file())
        .unwrap_or_else(|| panic!("no {file} under {}", store.display()));
    let json = serde_json::from_str(&std::fs::read_to_string(report.join(file)).expect("read")).expect("parses");
    (report, json)
}

#[test]
fn a_tiny_scale_bench_fills_every_row_for_etcd_and_ours() {
    let Some(etcd) = etcd35_or_skip("scale") else { return };
    let Some(_one_at_a_time) = start() else { return };
    let store = tempfile::tempdir().expect("temp store");
    let sizes = ["--watchers", "200", "--watch-streams", "4", "--watch-puts", "100"];
    let output = jepsen()
        .args(["bench", "--scale", "--target", "both", "--puts", "2000", "--keys", "500", "--value-size", "64"])
        .args(sizes)
        .arg("--etcd-bin")
        .arg(&etcd)
        .arg("--store")
        .arg(store.path())
        .output()
        .expect("run jepsen bench --scale");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "status {}:\n{stdout}\n{stderr}", output.status);
    eprintln!("{stdout}");

    let header = stdout.lines().next().unwrap_or_default();
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["probe", "etcd", "ours", "ours/etcd"], "{stdout}");
    for row in ROWS {
        let line = stdout.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("no row {row:?} in\n{stdout}"));
        let cells: Vec<&str> = line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells.len(), 4, "{line}");
        for figure in &cells[1..3] {
            let value: f64 = figure.parse().unwrap_or_else(|_| panic!("{figure:?} is not a number in {line}"));
            assert!(value.is_finite() && value >= 0.0, "{line}");
        }
    }
    assert!(!stdout.contains("ERROR"), "a probe failed:\n{stdout}\n{stderr}");

    let (report, json) = report_json(store.path(), "scale.json");
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.iter().map(|r| r["target"].as_str()).collect::<Vec<_>>(), [Some("etcd"), Some("ours")]);
    for result in results {
        let watch = &result["watch"];
        assert_eq!(watch["events"], watch["expected_events"], "every event arrives: {watch:#}");
        let writer = result["maintenance"]["writer_puts"].as_array().expect("writer puts");
        assert!(writer.len() > 10, "the writer wrote throughout: {} puts", writer.len());
    }
    for file in ["scale.txt", "scale.png", "scale.html", "etcd.log", "ours.log"] {
        assert!(report.join(file).is_file(), "{file} is missing in {}", report.display());
    }
}

/// The rows of `--soak`'s table, in order.
const SOAK_ROWS: [&str; 10] = [
    "puts/s (paced), to the same keys",
    "put errors",
    "slowest put, ms",
    "compactions",
    "RSS MB at a tenth of the time",
    "RSS MB halfway",
    "RSS MB at the end",
    "RSS MB growth over the second half",
    "peak RSS MB",
    "database MB at the end (dbSize)",
];

#[test]
fn a_short_soak_paces_its_puts_compacts_and_samples_etcd_and_ours() {
    let Some(etcd) = etcd35_or_skip("soak") else { return };
    let Some(_one_at_a_time) = start() else { return };
    let store = tempfile::tempdir().expect("temp store");
    let output = jepsen()
        .args(["bench", "--soak", "--target", "both", "--soak-secs", "12", "--soak-compact-secs", "4"])
        .args(["--soak-rate", "200", "--soak-keys", "50", "--soak-value", "100", "--etcd-bin"])
        .arg(&etcd)
        .arg("--store")
        .arg(store.path())
        .output()
        .expect("run jepsen bench --soak");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "status {}:\n{stdout}\n{stderr}", output.status);
    eprintln!("{stdout}");
    assert!(!stdout.contains("ERROR"), "a client failed:\n{stdout}\n{stderr}");
    let header = stdout.lines().next().unwrap_or_default();
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["probe", "etcd", "ours", "ours/etcd"], "{stdout}");
    let figures = |row: &str| -> Vec<f64> {
        let line = stdout.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("no row {row:?} in\n{stdout}"));
        let cells: Vec<&str> = line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells.len(), 4, "{line}");
        cells[1..3].iter().map(|c| c.parse().unwrap_or_else(|_| panic!("{c:?} is not a number in {line}"))).collect()
    };
    for row in SOAK_ROWS {
        figures(row);
    }
    // Paced at 200/s: neither burst past the rate nor (on loopback) fell far behind it.
    for rate in figures("puts/s (paced)") {
        assert!((100.0..=210.0).contains(&rate), "puts/s {rate}:\n{stdout}");
    }
    // Compactions every 4 s of 12 (the first only records a revision).
    for compactions in figures("compactions") {
        assert!(compactions >= 1.0, "{stdout}");
    }
    for rss in figures("peak RSS MB").into_iter().chain(figures("database MB at the end")) {
        assert!(rss > 0.0, "{stdout}");
    }

    let (report, json) = report_json(store.path(), "soak.json");
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.iter().map(|r| r["target"].as_str()).collect::<Vec<_>>(), [Some("etcd"), Some("ours")]);
    for result in results {
        let samples = result["samples"].as_array().expect("samples");
        assert!(samples.len() >= 2, "a sample every 5 s: {samples:?}");
        let revisions: Vec<i64> = samples.iter().map(|s| s["revision"].as_i64().expect("revision")).collect();
        assert!(revisions.windows(2).all(|w| w[0] < w[1]), "the puts go on between samples: {revisions:?}");
    }
    for file in ["soak.txt", "etcd.log", "ours.log"] {
        assert!(report.join(file).is_file(), "{file} is missing in {}", report.display());
    }
}
