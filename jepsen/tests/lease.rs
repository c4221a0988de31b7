//! End to end: the lease workload against our three-member cluster while the leader is killed and
//! restarted. The run must be valid, and its history must hold every kind of lease op — grants,
//! puts, revokes, keep-alives, reads that found keys and reads that found them expired — so that a
//! valid verdict means the checker had something to judge.
//!
//! Needs root (`unshare --net`), nftables and a built `raft-node` next to the `jepsen` binary
//! (`cargo build -p raft-node`); without them it skips with a message.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// Why this test cannot run here, if it cannot.
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

/// Counts of `ok` completions by `f`, plus `read-present` / `read-absent` for reads.
fn ok_counts(history: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for line in history.lines().filter(|l| !l.trim().is_empty()) {
        let op: Value = serde_json::from_str(line).expect("history line parses");
        if op["type"] != "ok" {
            continue;
        }
        let f = op["f"].as_str().expect("f").to_string();
        if f == "read" {
            let present = op["value"]["found"].as_array().is_some_and(|found| !found.is_empty());
            *counts.entry(if present { "read-present" } else { "read-absent" }.to_string()).or_insert(0) += 1;
        }
        *counts.entry(f).or_insert(0) += 1;
    }
    counts
}

/// Runs `jepsen test --workload lease --nemesis <nemesis>` on ours; its summary and history.
fn run_lease(nemesis: &str, seed: &str) -> (Value, String) {
    let store = tempfile::tempdir().expect("temp store");
    let store_arg = store.path().to_str().expect("utf-8 temp path").to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_jepsen"))
        .args(["test", "--workload", "lease", "--nemesis", nemesis, "--time-limit", "20"])
        .args(["--seed", seed, "--target", "ours", "--store", &store_arg])
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
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("summary.json")).expect("summary.json"))
            .expect("summary.json parses");
    eprintln!("{stdout}");
    let history = std::fs::read_to_string(report.join("history.jsonl")).expect("history.jsonl");
    (summary, history)
}

fn lease_result(summary: &Value) -> &Value {
    summary["results"]
        .as_array()
        .and_then(|results| results.iter().find(|r| r["checker"] == "lease"))
        .unwrap_or_else(|| panic!("no lease result in {summary:#}"))
}

#[test]
fn leases_under_leader_kills_are_valid() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("skipped: {why}");
        return;
    }
    let (summary, history) = run_lease("kill-leader", "1");
    assert_eq!(summary["valid"], "valid", "{summary:#}");
    assert_eq!(lease_result(&summary)["valid"], "valid", "{summary:#}");
    let faults = summary["faults"].as_array().expect("faults");
    assert!(faults.iter().any(|f| f["f"] == "start" && f["fault"] == "kill-leader"), "{summary:#}");

    let counts = ok_counts(&history);
    for f in ["grant", "put", "revoke", "keep-alive", "read-present", "read-absent", "final-read"] {
        assert!(counts.get(f).is_some_and(|&n| n > 0), "no ok {f} in the history: {counts:?}");
    }
    assert!(counts.get("put").is_some_and(|&n| n > 50), "too few puts to judge: {counts:?}");
}

/// Regression (etcd #15247 in our server): a paused leader, once resumed, renewed leases and revoked
/// them by its stale deadlines through the new leader, so leases ended up to 2.4 s before their last
/// keep-alive's TTL ran out (seeds 1 to 3 all showed it). Keep-alives are trusted here, on ours.
#[test]
fn a_resumed_leader_cuts_no_lease_short() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("skipped: {why}");
        return;
    }
    let (summary, history) = run_lease("pause-leader", "1");
    let lease = lease_result(&summary);
    assert_eq!(lease["valid"], "valid", "{summary:#}");
    let notes = summary["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("ok keep-alives restart"))), "{summary:#}");
    let faults = summary["faults"].as_array().expect("faults");
    assert!(faults.iter().any(|f| f["f"] == "start" && f["fault"] == "pause-leader"), "{summary:#}");
    let counts = ok_counts(&history);
    assert!(counts.get("keep-alive").is_some_and(|&n| n > 20), "too few keep-alives to judge: {counts:?}");
    assert_eq!(summary["valid"], "valid", "{summary:#}");
}
