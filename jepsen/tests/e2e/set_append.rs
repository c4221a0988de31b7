//! The set and list-append workloads under leader partitions against our cluster. Each run must
//! come out valid with plenty of `ok` ops, and its history must hold the final reads (one per
//! member) that make lost writes detectable.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::{jepsen_test, start, Report};

/// Runs `workload` for 20 s under leader partitions against ours and checks the common verdicts;
/// the report and its history.
fn valid_under_leader_partitions(workload: &str, checkers: &[&str]) -> (Report, Vec<Value>) {
    let report = jepsen_test(&[
        "--workload",
        workload,
        "--nemesis",
        "partition-leader",
        "--time-limit",
        "20",
        "--target",
        "ours",
    ]);
    let summary = &report.summary;
    assert_eq!(summary["valid"], "valid", "{summary:#}");
    for checker in checkers {
        assert_eq!(report.result(checker)["valid"], "valid", "{summary:#}");
    }
    assert!(report.fault_started("partition-leader"), "{summary:#}");
    assert!(report.ok_ops() > 150, "{summary:#}");
    let history = report.jsonl("history.jsonl");
    (report, history)
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
    let Some(_one_at_a_time) = start() else { return };
    let (_report, history) = valid_under_leader_partitions("set", &["set-full", "revision", "set-answers"]);
    let ok_adds: Vec<i64> = history
        .iter()
        .filter(|op| op["type"] == "ok" && op["f"] == "add")
        .filter_map(|op| op["value"].as_i64())
        .collect();
    assert!(ok_adds.len() > 100, "{} ok adds", ok_adds.len());
    // Every member's final read holds every acknowledged add.
    let finals: Vec<&Value> = history.iter().rev().filter(|op| op["type"] == "ok").take(3).collect();
    assert_eq!(last_ok_members(&history, 3), ["n1", "n2", "n3"]);
    for read in finals {
        assert_eq!(read["f"], "read", "{read}");
        let set: Vec<i64> = read["value"].as_array().expect("a set").iter().filter_map(Value::as_i64).collect();
        assert!(ok_adds.iter().all(|e| set.contains(e)), "final read {read} lacks an acknowledged add");
    }
}

#[test]
fn list_append_under_leader_partitions_is_valid_with_final_reads() {
    let Some(_one_at_a_time) = start() else { return };
    let (_report, history) =
        valid_under_leader_partitions("list-append", &["list-append", "revision", "list-append-answers"]);
    let oks: Vec<&Value> = history.iter().filter(|op| op["type"] == "ok").collect();
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
