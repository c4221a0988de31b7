//! End to end: the watch and mixed workloads against our three-member cluster, with leader faults.
//!
//! - watch, leader partitioned: watchers break and resume on other members; every stream obeys
//!   etcd's watch rules against the ground truth, every watcher catches up after the heal, and
//!   every acknowledged write is in the truth;
//! - mixed, leader killed: every read (linearizable or serializable) matches the keyspace at its
//!   header revision, every write is where its header says.
//!
//! Like the register runs, these need root (`unshare --net`), nftables and `raft-node` built next
//! to the `jepsen` binary; without them they skip, saying why. One cluster runs at a time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// The runs take the whole machine: one at a time.
static ONE_RUN: Mutex<()> = Mutex::new(());

fn server() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_jepsen")).with_file_name("raft-node")
}

/// What is missing for a run here, if anything.
fn cannot_run() -> Option<String> {
    let succeeds = |program: &str, args: &[&str]| {
        Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if !succeeds("unshare", &["--net", "true"]) {
        return Some("this user may not `unshare --net` (root is needed)".to_string());
    }
    if !succeeds("nft", &["--version"]) {
        return Some("`nft` is not installed".to_string());
    }
    if !server().is_file() {
        return Some(format!("no server at {}; build it with `cargo build -p raft-node`", server().display()));
    }
    None
}

/// A finished run: its summary and its report folder.
struct Report {
    summary: Value,
    dir: PathBuf,
    /// Keeps the store alive while the test reads the folder.
    _store: tempfile::TempDir,
}

impl Report {
    fn result(&self, checker: &str) -> &Value {
        let results = self.summary["results"].as_array().expect("results");
        results
            .iter()
            .find(|r| r["checker"] == checker)
            .unwrap_or_else(|| panic!("no {checker} result: {:#}", self.summary))
    }

    fn notes(&self) -> Vec<&str> {
        self.summary["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).collect()
    }

    /// Asserts the run and the named checkers are valid, printing the summary otherwise.
    fn assert_valid(&self, checkers: &[&str]) {
        assert_eq!(self.summary["valid"], "valid", "{:#}", self.summary);
        for checker in checkers {
            assert_eq!(self.result(checker)["valid"], "valid", "{checker}: {:#}", self.summary);
        }
    }
}

/// `jepsen test <args>` against ours, 20 s, into a temporary store.
fn run(args: &[&str]) -> Report {
    let store = tempfile::tempdir().expect("a temporary store");
    let store_path = store.path().to_str().expect("a UTF-8 temporary path").to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_jepsen"))
        .arg("test")
        .args(args)
        .args(["--target", "ours", "--time-limit", "20", "--seed", "1", "--store", &store_path])
        .output()
        .expect("jepsen runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("{stdout}");
    let dir = std::fs::read_dir(store.path())
        .expect("the store")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|dir| dir.join("summary.json").is_file())
        .unwrap_or_else(|| {
            panic!("no report ({}):\n{stdout}\n{}", output.status, String::from_utf8_lossy(&output.stderr))
        });
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    Report { summary: serde_json::from_str(&text).expect("summary.json is JSON"), dir, _store: store }
}

#[test]
fn watchers_resume_across_leader_partitions() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    let _alone = ONE_RUN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = run(&["--workload", "watch", "--nemesis", "partition-leader"]);
    report.assert_valid(&["truth", "watch", "watch-catch-up", "kv-model", "revision"]);
    assert!(report.summary["ops"]["ok"].as_u64().is_some_and(|ok| ok > 150), "{:#}", report.summary);
    let partitioned = report.summary["faults"].as_array().expect("faults");
    assert!(partitioned.iter().any(|f| f["f"] == "start" && f["fault"] == "partition-leader"));

    let text = std::fs::read_to_string(report.dir.join("watches.jsonl")).expect("watches.jsonl");
    let streams: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("a stream")).collect();
    let events: usize = streams
        .iter()
        .flat_map(|s| s["responses"].as_array().expect("responses"))
        .map(|r| r["events"].as_array().map_or(0, Vec::len))
        .sum();
    let resumed = streams.iter().filter(|s| s["id"].as_u64().is_some_and(|id| id % 1000 > 0)).count();
    assert!(events > 300, "only {events} events in {} streams", streams.len());
    assert!(resumed >= 6, "only {resumed} resumed streams of {}", streams.len());
    let truth = std::fs::read_to_string(report.dir.join("truth.jsonl")).expect("truth.jsonl");
    assert!(truth.lines().count() > 100, "a small truth: {} events", truth.lines().count());
}

#[test]
fn mixed_traffic_matches_the_replayed_history_across_leader_kills() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    let _alone = ONE_RUN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = run(&["--workload", "mixed", "--nemesis", "kill-leader"]);
    report.assert_valid(&["truth", "kv-model", "revision"]);
    assert!(report.summary["ops"]["ok"].as_u64().is_some_and(|ok| ok > 150), "{:#}", report.summary);
    let killed = report.summary["faults"].as_array().expect("faults");
    assert!(killed.iter().any(|f| f["f"] == "start" && f["fault"] == "kill-leader"));
    // Every kind of op took part: the note counts the ok ones.
    let mix = report.notes().into_iter().find(|n| n.starts_with("ok ops:")).expect("the op mix note").to_string();
    for kind in ["linearizable range", "serializable range", "txn (success)", "txn (failure)", "put", "delete"] {
        assert!(mix.contains(kind), "no {kind} in {mix}");
    }
}
