//! CI's smoke campaign: `jepsen campaign --smoke` against our cluster — a few 30 s runs over a spread
//! of workloads and faults, each a child `jepsen test` in its own namespaces. Every run must be
//! valid, and the campaign folder must hold the table, the rows and a report per run.
//!

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{jepsen, start};

/// The one `campaign-*` folder in `store`.
fn campaign_dir(store: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(store)
        .expect("store")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("campaign-")))
        .collect();
    assert_eq!(dirs.len(), 1, "one campaign folder expected: {dirs:?}");
    dirs[0].clone()
}

#[test]
fn the_smoke_campaign_passes_on_our_cluster() {
    let Some(_one_at_a_time) = start() else { return };
    let store = tempfile::tempdir().expect("temp store");
    let output = jepsen()
        .args(["campaign", "--smoke", "--target", "ours", "--store"])
        .arg(store.path())
        .output()
        .expect("run jepsen campaign");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stderr}\n{stdout}");
    let dir = campaign_dir(store.path());
    let rows: Vec<Value> =
        serde_json::from_slice(&std::fs::read(dir.join("campaign.json")).expect("campaign.json")).expect("rows parse");
    assert!(rows.len() >= 2, "{rows:#?}");
    for row in &rows {
        assert_eq!(row["valid"], "valid", "a smoke run is not valid: {row:#}");
        assert!(row["ok"].as_u64().is_some_and(|ok| ok > 100), "too few ok ops: {row:#}");
        let report = dir.join(row["report"].as_str().expect("a report folder"));
        assert!(report.join("summary.json").is_file() && report.join("history.jsonl").is_file(), "{row:#}");
    }
    let workloads: std::collections::HashSet<&str> =
        rows.iter().filter_map(|r| r["plan"]["workload"].as_str()).collect();
    assert!(workloads.len() >= 3, "the smoke campaign should spread over workloads: {workloads:?}");
    assert!(output.status.success(), "exit {}", output.status);
    assert!(stdout.contains(&format!("ours: {0}/{0} runs valid", rows.len())), "{stdout}");
    assert!(dir.join("index.html").is_file() && dir.join("campaign.txt").is_file());
}
