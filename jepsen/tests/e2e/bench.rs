//! A tiny `jepsen bench --target ours` (a few requests per workload, one round) against a real
//! three-member cluster of ours. Every workload must appear in the table with a nonzero rate, and
//! `bench.json` must hold the round with each member's memory. This checks that the benchmark works,
//! not how fast anything is (benchmarks are not tests).

use serde_json::Value;

use crate::common::{jepsen, start};

/// Every row the default workloads produce (watch-latency gives two).
const ROWS: [&str; 13] = [
    "put-1-leader",
    "put-100-leader",
    "put-100-all",
    "put-1000-leader",
    "put-1000-all",
    "range-lin-1",
    "range-ser-1",
    "range-lin-100",
    "range-ser-100",
    "txn-put",
    "watch-latency",
    "watch-after-put",
    "lease-keepalive",
];

#[test]
fn a_tiny_bench_of_ours_fills_every_row() {
    let Some(_one_at_a_time) = start() else { return };
    let store = tempfile::tempdir().expect("temp store");
    let output = jepsen()
        .args(["bench", "--target", "ours", "--rounds", "1", "--total", "30", "--store"])
        .arg(store.path())
        .output()
        .expect("run jepsen bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "status {}:\n{stdout}\n{stderr}", output.status);
    eprintln!("{stdout}");

    for workload in ROWS {
        let line = stdout
            .lines()
            .find(|line| line.split_whitespace().next() == Some(workload))
            .unwrap_or_else(|| panic!("no {workload} row in\n{stdout}"));
        let qps: f64 = line.split_whitespace().nth(1).and_then(|q| q.parse().ok()).expect("a QPS column");
        assert!(qps > 0.0, "{workload} has no throughput:\n{stdout}\n{stderr}");
    }
    let rss = stdout.lines().find(|l| l.starts_with("RSS MB")).unwrap_or_else(|| panic!("no RSS line in\n{stdout}"));
    assert!(!rss.contains(": 0/") && !rss.ends_with("/0"), "a member's RSS could not be read: {rss}");

    let report = store
        .path()
        .read_dir()
        .expect("store")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.join("bench.json").is_file())
        .unwrap_or_else(|| panic!("no bench.json under {}", store.path().display()));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("bench.json")).expect("read")).expect("parses");
    let rounds = json["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 1, "{json:#}");
    let members = rounds[0]["members"].as_array().expect("members");
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| m["rss_bytes"].as_u64().is_some_and(|b| b > 0)), "{members:#?}");
    assert!(members.iter().all(|m| m["cpu_secs"].as_f64().is_some_and(|s| s > 0.0)), "{members:#?}");
    let rows = rounds[0]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), ROWS.len(), "{rows:#?}");
    assert!(rows.iter().all(|r| r["stats"]["errors"] == 0), "errors in {rows:#?}");
}
