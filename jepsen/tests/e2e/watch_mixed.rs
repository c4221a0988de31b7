//! The watch and mixed workloads against our cluster, with leader faults.
//!
//! - watch, leader partitioned: watchers break and resume on other members; every stream obeys
//!   etcd's watch rules against the ground truth, every watcher catches up after the heal, and
//!   every acknowledged write is in the truth;
//! - mixed, leader killed: every read (linearizable or serializable) matches the keyspace at its
//!   header revision, every write is where its header says.
//!

use crate::common::{jepsen_test, start, Report};

/// `jepsen test <args>` against ours, 20 s, seed 1.
fn run(args: &[&str]) -> Report {
    let mut all = args.to_vec();
    all.extend(["--target", "ours", "--time-limit", "20", "--seed", "1"]);
    jepsen_test(&all)
}

#[test]
fn watchers_resume_across_leader_partitions() {
    let Some(_one_at_a_time) = start() else { return };
    let report = run(&["--workload", "watch", "--nemesis", "partition-leader"]);
    report.assert_valid(&["truth", "watch", "watch-catch-up", "kv-model", "revision"]);
    assert!(report.ok_ops() > 150, "{:#}", report.summary);
    assert!(report.fault_started("partition-leader"));

    let streams = report.jsonl("watches.jsonl");
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
    let Some(_one_at_a_time) = start() else { return };
    let report = run(&["--workload", "mixed", "--nemesis", "kill-leader"]);
    report.assert_valid(&["truth", "kv-model", "revision"]);
    assert!(report.ok_ops() > 150, "{:#}", report.summary);
    assert!(report.fault_started("kill-leader"));
    // Every kind of op took part: the note counts the ok ones.
    let mix = report.notes().into_iter().find(|n| n.starts_with("ok ops:")).expect("the op mix note").to_string();
    for kind in ["linearizable range", "serializable range", "txn (success)", "txn (failure)", "put", "delete"] {
        assert!(mix.contains(kind), "no {kind} in {mix}");
    }
}
