//! End to end: the set and list-append workloads under leader partitions against our three-member
//! cluster, in a private network namespace. Each run must come out valid with plenty of `ok` ops,
//! and its history must hold the final reads (one per member) that make lost writes detectable.
//!
//! They need root (`unshare --net`), nftables and a built `raft-node` next to the `jepsen` binary
//! (`cargo build -p raft-node`); without them they skip with a message. The runs share two cores
//! with everything else, so they run one at a time and stay short.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// One cluster at a time.
static RUNS: Mutex<()> = Mutex::new(());

/// Why these tests cannot run here, if they cannot.
fn missing_prerequisite() -> Option<String> {
    let succeeds = |program: &str, args: &[&str]| {
        Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if !succeeds("unshare", &["--net", "true"]) {
        return Some("`unshare --net` is not permitted (needs root)".to_string());
    }
    if !succeeds("nft", &["--version"]) {
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

/// What one run left behind.
struct Report {
    summary: Value,
    /// history.jsonl, one parsed op per line.
    history: Vec<Value>,
}

/// Runs `jepsen test <args>` into a fresh store and reads its summary and history.
fn run(args: &[&str]) -> Report {
    let store = tempfile::tempdir().expect("temp store");
    let store_arg = store.path().to_str().expect("utf-8 temp path").to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_jepsen"))
        .arg("test")
        .args(args)
        .args(["--store", &store_arg])
        .output()
        .expect("run jepsen");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let dir = std::fs::read_dir(store.path())
        .expect("store")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.join("summary.json").is_file())
        .unwrap_or_else(|| panic!("no report (status {}):\n{stdout}\n{stderr}", output.status));
    eprintln!("{stdout}");
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    let summary = serde_json::from_str(&text).expect("summary.json parses");
    let history = std::fs::read_to_string(dir.join("history.jsonl"))
        .expect("history.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a history line parses"))
        .collect();
    Report { summary, history }
}

/// Runs `workload` for 20 s under leader partitions against ours and checks the common verdicts.
fn valid_under_leader_partitions(workload: &str, checkers: &[&str]) -> Report {
    let report =
        run(&["--workload", workload, "--nemesis", "partition-leader", "--time-limit", "20", "--target", "ours"]);
    let summary = &report.summary;
    assert_eq!(summary["valid"], "valid", "{summary:#}");
    for checker in checkers {
        let result = summary["results"]
            .as_array()
            .and_then(|results| results.iter().find(|r| r["checker"] == *checker))
            .unwrap_or_else(|| panic!("no {checker} result in {summary:#}"));
        assert_eq!(result["valid"], "valid", "{summary:#}");
    }
    let faults = summary["faults"].as_array().expect("faults");
    assert!(faults.iter().any(|f| f["f"] == "start" && f["fault"] == "partition-leader"), "{summary:#}");
    assert!(summary["ops"]["ok"].as_u64().is_some_and(|ok| ok > 150), "{summary:#}");
    report
}

/// The members the last `n` `ok` ops of the history went through (the final reads come last).
fn last_ok_members(history: &[Value], n: usize) -> Vec<String> {
    let mut members: Vec<String> = history
        .iter()
        .rev()
        .filter(|op| op["type"] == "ok")
        .take(n)
        .map(|op| op["member"].as_str().unwrap_or("?").to_string())
        .collect();
    members.sort();
    members
}

#[test]
fn set_under_leader_partitions_is_valid_with_final_reads() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("skipped: {why}");
        return;
    }
    let _one_at_a_time = RUNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = valid_under_leader_partitions("set", &["set-full", "revision", "set-answers"]);
    let ok_adds: Vec<i64> = report
        .history
        .iter()
        .filter(|op| op["type"] == "ok" && op["f"] == "add")
        .filter_map(|op| op["value"].as_i64())
        .collect();
    assert!(ok_adds.len() > 100, "{} ok adds", ok_adds.len());
    // Every member's final read holds every acknowledged add.
    let finals: Vec<&Value> = report.history.iter().rev().filter(|op| op["type"] == "ok").take(3).collect();
    assert_eq!(last_ok_members(&report.history, 3), ["n1", "n2", "n3"]);
    for read in finals {
        assert_eq!(read["f"], "read", "{read}");
        let set: Vec<i64> = read["value"].as_array().expect("a set").iter().filter_map(Value::as_i64).collect();
        assert!(ok_adds.iter().all(|e| set.contains(e)), "final read {read} lacks an acknowledged add");
    }
}

#[test]
fn list_append_under_leader_partitions_is_valid_with_final_reads() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("skipped: {why}");
        return;
    }
    let _one_at_a_time = RUNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = valid_under_leader_partitions("list-append", &["list-append", "revision", "list-append-answers"]);
    let oks: Vec<&Value> = report.history.iter().filter(|op| op["type"] == "ok").collect();
    let mops = |op: &Value| op["value"].as_array().cloned().unwrap_or_default();
    let mut acknowledged: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    // The latest list each member returned for each key: after the final reads, that is theirs.
    let mut latest: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for op in &oks {
        let member = op["member"].as_str().unwrap_or("?").to_string();
        for mop in mops(op) {
            let key = mop["key"].as_str().expect("a key").to_string();
            match mop["f"].as_str() {
                Some("append") => acknowledged.entry(key).or_default().push(mop["value"].as_i64().expect("a value")),
                _ => {
                    let list = mop["value"].as_array().expect("a list").iter().filter_map(Value::as_i64).collect();
                    latest.insert((member.clone(), key), list);
                }
            }
        }
    }
    let committed_appends: usize = acknowledged.values().map(Vec::len).sum();
    assert!(committed_appends > 100, "{committed_appends} committed appends");
    let last = oks.last().expect("an ok op");
    assert!(mops(last).iter().all(|m| m["f"] == "r"), "the history ends with final reads: {last}");
    for member in ["n1", "n2", "n3"] {
        for (key, values) in &acknowledged {
            let list = latest.get(&(member.to_string(), key.clone())).map_or(&[][..], Vec::as_slice);
            assert!(
                values.iter().all(|v| list.contains(v)),
                "{member}'s final read of {key} {list:?} lacks one of {values:?}"
            );
        }
    }
}
