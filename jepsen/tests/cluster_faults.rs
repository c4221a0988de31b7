//! End to end: the cluster-level faults against our three-member cluster, each in one short run.
//!
//! - `member-shrink-grow`: a member is removed, wiped and added back through learner → voter; the
//!   run must stay valid and end with every member a voter that agrees on the keyspace;
//! - `blackhole-snapshot`: a follower is cut off while the leader snapshots past it; after heal it
//!   must catch up by installing the snapshot (its log says so), and the run must stay valid.
//!
//! Like `register.rs`, they need root (`unshare --net`), nftables and a built `raft-node` next to
//! the `jepsen` binary; without them they skip with a message. One run at a time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// Runs share two cores with everything else: one cluster at a time.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// Why the runs cannot happen on this machine, if they cannot.
fn cannot_run() -> Option<String> {
    let succeeds = |program: &str, args: &[&str]| {
        Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if !succeeds("unshare", &["--net", "true"]) {
        return Some("`unshare --net` is refused (run as root)".to_string());
    }
    if !succeeds("nft", &["--version"]) {
        return Some("`nft` is missing".to_string());
    }
    let server = server_binary();
    (!server.is_file()).then(|| format!("{} is missing (`cargo build -p raft-node`)", server.display()))
}

fn server_binary() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_jepsen")).with_file_name("raft-node")
}

/// One `jepsen test` against ours with these faults; returns `summary.json` and the report folder.
fn run_with(nemesis: &str, seed: &str) -> (Value, PathBuf) {
    let store = tempfile::tempdir().expect("a temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_jepsen"))
        .args(["test", "--target", "ours", "--workload", "register", "--nemesis", nemesis])
        .args(["--time-limit", "25", "--nemesis-interval", "6", "--seed", seed])
        .arg("--store")
        .arg(store.path())
        .output()
        .expect("jepsen runs");
    let printed = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let folder = std::fs::read_dir(store.path())
        .expect("the store exists")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.join("summary.json").is_file())
        .unwrap_or_else(|| panic!("no report ({}):\n{printed}", output.status));
    let text = std::fs::read_to_string(folder.join("summary.json")).expect("summary.json is readable");
    eprintln!("{printed}");
    let summary: Value = serde_json::from_str(&text).expect("summary.json is JSON");
    if summary["valid"] != "valid" {
        // Keep the report of a failed run for a look (member logs, history).
        let _ = store.keep();
    }
    (summary, folder)
}

/// The nemesis events of one fault, as (`start`|`stop`, detail).
fn events<'a>(summary: &'a Value, fault: &str) -> Vec<(&'a str, &'a str)> {
    let faults = summary["faults"].as_array().expect("a fault list");
    faults
        .iter()
        .filter(|e| e["fault"] == fault)
        .map(|e| (e["f"].as_str().unwrap_or(""), e["detail"].as_str().unwrap_or("")))
        .collect()
}

fn checker<'a>(summary: &'a Value, name: &str) -> &'a Value {
    let results = summary["results"].as_array().expect("results");
    results.iter().find(|r| r["checker"] == name).unwrap_or_else(|| panic!("no {name} checker in {summary:#}"))
}

#[test]
fn removing_and_adding_back_a_member_keeps_the_run_valid() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    let _alone = ONE_CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (summary, folder) = run_with("member-shrink-grow", "3");
    let seen = events(&summary, "member-shrink-grow");
    assert!(seen.iter().any(|(f, d)| *f == "start" && d.starts_with("removed ")), "{seen:?}");
    assert!(seen.iter().any(|(f, d)| *f == "stop" && d.contains("promoted to voter")), "{seen:?}");
    assert!(!seen.iter().any(|(_, d)| d.contains("FAILED")), "{seen:?}");
    assert_eq!(checker(&summary, "nemesis")["valid"], "valid", "{summary:#}");
    assert_eq!(checker(&summary, "convergence")["valid"], "valid", "{summary:#}");
    assert_eq!(summary["valid"], "valid", "report in {}: {summary:#}", folder.display());
    assert!(summary["ops"]["ok"].as_u64().is_some_and(|ok| ok > 100), "{summary:#}");
}

#[test]
fn a_follower_behind_the_leaders_snapshot_catches_up_by_install() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    let _alone = ONE_CLUSTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (summary, folder) = run_with("blackhole-snapshot", "1");
    assert_eq!(summary["options"]["snapshot_count"], Value::Null, "the run picks the count itself");
    let notes = summary["notes"].to_string();
    assert!(notes.contains("--snapshot-count=100"), "{notes}");
    let seen = events(&summary, "blackhole-snapshot");
    assert!(seen.iter().any(|(f, d)| *f == "start" && d.contains("filler entries")), "{seen:?}");
    let heals: Vec<&str> = seen.iter().filter(|(f, _)| *f == "stop").map(|(_, d)| *d).collect();
    assert!(!heals.is_empty(), "{seen:?}");
    assert!(heals.iter().all(|d| d.contains("caught up in") && d.contains("installed a snapshot")), "{heals:?}");
    assert_eq!(checker(&summary, "convergence")["valid"], "valid", "{summary:#}");
    assert_eq!(summary["valid"], "valid", "report in {}: {summary:#}", folder.display());
}
