//! The cluster-level faults against our cluster, each in one short run.
//!
//! - `member-shrink-grow`: a member is removed, wiped and added back through learner → voter; the
//!   run must stay valid and end with every member a voter that agrees on the keyspace;
//! - `blackhole-snapshot`: a follower is cut off while the leader snapshots past it; after heal it
//!   must catch up by installing the snapshot (its log says so), and the run must stay valid.

use serde_json::Value;

use crate::common::{jepsen_test, start, Report};

/// One register run against ours with these faults.
fn run_with(nemesis: &str, seed: &str) -> Report {
    jepsen_test(&[
        "--target",
        "ours",
        "--workload",
        "register",
        "--nemesis",
        nemesis,
        "--time-limit",
        "25",
        "--nemesis-interval",
        "6",
        "--seed",
        seed,
    ])
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

#[test]
fn removing_and_adding_back_a_member_keeps_the_run_valid() {
    let Some(_one_at_a_time) = start() else { return };
    let report = run_with("member-shrink-grow", "3");
    let (summary, folder) = (&report.summary, &report.dir);
    let seen = events(summary, "member-shrink-grow");
    assert!(seen.iter().any(|(f, d)| *f == "start" && d.starts_with("removed ")), "{seen:?}");
    assert!(seen.iter().any(|(f, d)| *f == "stop" && d.contains("promoted to voter")), "{seen:?}");
    assert!(!seen.iter().any(|(_, d)| d.contains("FAILED")), "{seen:?}");
    assert_eq!(report.result("nemesis")["valid"], "valid", "{summary:#}");
    assert_eq!(report.result("convergence")["valid"], "valid", "{summary:#}");
    assert_eq!(summary["valid"], "valid", "report in {}: {summary:#}", folder.display());
    assert!(summary["ops"]["ok"].as_u64().is_some_and(|ok| ok > 100), "{summary:#}");
}

#[test]
fn a_follower_behind_the_leaders_snapshot_catches_up_by_install() {
    let Some(_one_at_a_time) = start() else { return };
    let report = run_with("blackhole-snapshot", "1");
    let (summary, folder) = (&report.summary, &report.dir);
    assert_eq!(summary["options"]["snapshot_count"], Value::Null, "the run picks the count itself");
    let notes = summary["notes"].to_string();
    assert!(notes.contains("--snapshot-count=100"), "{notes}");
    let seen = events(summary, "blackhole-snapshot");
    assert!(
        seen.iter().any(|(f, d)| *f == "start" && d.contains("filler puts") && d.contains("log entries")),
        "{seen:?}"
    );
    let heals: Vec<&str> = seen.iter().filter(|(f, _)| *f == "stop").map(|(_, d)| *d).collect();
    assert!(!heals.is_empty(), "{seen:?}");
    assert!(heals.iter().all(|d| d.contains("caught up in") && d.contains("installed a snapshot")), "{heals:?}");
    assert_eq!(report.result("convergence")["valid"], "valid", "{summary:#}");
    assert_eq!(summary["valid"], "valid", "report in {}: {summary:#}", folder.display());
}
