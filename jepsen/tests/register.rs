//! End to end: `jepsen test` against our three-member cluster, in a private network namespace.
//!
//! - linearizable reads under leader partitions: the run is valid;
//! - serializable reads from members cut off by partitions: the register checker must catch the
//!   stale reads (this proves the whole pipeline can see a real anomaly, not only hand-built ones).
//!
//! They need root (`unshare --net`), nftables and a built `raft-node` next to the `jepsen` binary
//! (`cargo build -p raft-node`); without them they skip with a message. The runs share two cores
//! with everything else, so they run one at a time and stay short.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// One cluster at a time.
static RUNS: Mutex<()> = Mutex::new(());

/// Why these tests cannot run here, if they cannot.
fn missing_prerequisite() -> Option<String> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if !works("unshare", &["--net", "true"]) {
        return Some("`unshare --net` is not permitted (needs root)".to_string());
    }
    if !works("nft", &["--version"]) {
        return Some("nftables (`nft`) is not installed".to_string());
    }
    let server = raft_node();
    if !server.is_file() {
        return Some(format!("{} is missing; run `cargo build -p raft-node` first", server.display()));
    }
    None
}

fn raft_node() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_jepsen")).with_file_name("raft-node")
}

/// Runs `jepsen test <args>` into a fresh store and returns its summary.json.
fn run(args: &[&str]) -> Value {
    let store = tempfile::tempdir().expect("temp store");
    let store_arg = store.path().to_str().expect("utf-8 temp path").to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_jepsen"))
        .arg("test")
        .args(args)
        .args(["--store", &store_arg, "--check-timeout", "60"])
        .output()
        .expect("run jepsen");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = std::fs::read_dir(store.path())
        .expect("store")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.join("summary.json").is_file())
        .unwrap_or_else(|| panic!("no report (status {}):\n{stdout}\n{stderr}", output.status));
    let text = std::fs::read_to_string(report.join("summary.json")).expect("summary.json");
    eprintln!("{stdout}");
    serde_json::from_str(&text).expect("summary.json parses")
}

fn result<'a>(summary: &'a Value, checker: &str) -> &'a Value {
    summary["results"]
        .as_array()
        .and_then(|results| results.iter().find(|r| r["checker"] == checker))
        .unwrap_or_else(|| panic!("no {checker} result in {summary:#}"))
}

#[test]
fn linearizable_reads_under_leader_partitions_are_valid() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("skipped: {why}");
        return;
    }
    let _one_at_a_time = RUNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let summary = run(&["--nemesis", "partition-leader", "--time-limit", "20", "--seed", "1", "--target", "ours"]);
    assert_eq!(summary["valid"], "valid", "{summary:#}");
    let faults = summary["faults"].as_array().expect("faults");
    assert!(faults.iter().any(|f| f["f"] == "start" && f["fault"] == "partition-leader"), "{summary:#}");
    assert!(summary["ops"]["ok"].as_u64().is_some_and(|ok| ok > 100), "{summary:#}");
}

#[test]
fn serializable_reads_from_a_partitioned_member_are_caught() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("skipped: {why}");
        return;
    }
    let _one_at_a_time = RUNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let summary = run(&[
        "--nemesis",
        "partition-one",
        "--serializable-reads",
        "--time-limit",
        "20",
        "--seed",
        "1",
        "--target",
        "ours",
    ]);
    let register = result(&summary, "register");
    assert_eq!(register["valid"], "invalid", "{summary:#}");
    let anomalies = register["anomalies"].as_array().expect("anomalies");
    assert!(anomalies.iter().any(|a| a["kind"] == "not-linearizable"), "{summary:#}");
    assert_eq!(summary["valid"], "invalid");
}
