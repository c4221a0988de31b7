//! A short `jepsen fuzz` (one seed, 300 requests, auth off then on) against one member of ours and one of
//! etcd 3.5.1. It checks that the fuzzer works end to end: it finishes, ours never crashed, `fuzz.json` is
//! written and parses, and both servers actually answered. Differences are allowed for now (they are the
//! fuzzer's findings, being fixed one by one); the exit code says whether there were any.

use std::path::PathBuf;

use serde_json::Value;

use crate::common::{jepsen, one_at_a_time, raft_node, tools_required};

/// etcd 3.5.1 where `scripts/test` downloads it: `$KV_ETCD35_DIR/etcd`, else the workspace's
/// `target/tools/etcd-3.5.1/etcd`.
fn etcd35() -> PathBuf {
    std::env::var_os("KV_ETCD35_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/etcd-3.5.1"), PathBuf::from)
        .join("etcd")
}

/// Why the test cannot run here, if it cannot.
fn missing() -> Option<String> {
    let etcd = etcd35();
    if !etcd.is_file() {
        return Some(format!("{} is missing: run scripts/test, which downloads etcd 3.5.1 there", etcd.display()));
    }
    let server = raft_node();
    if !server.is_file() {
        return Some(format!("{} is missing; run `cargo build -p raft-node` first", server.display()));
    }
    None
}

#[test]
fn a_short_fuzz_run_compares_both_servers_and_ours_never_crashes() {
    if let Some(why) = missing() {
        assert!(!tools_required(), "this run requires the fuzz test (CI / KV_TEST_REQUIRE_TOOLS): {why}");
        eprintln!("skipping: {why}");
        return;
    }
    let _one_at_a_time = one_at_a_time();
    let out = tempfile::tempdir().expect("temp dir");
    let output = jepsen()
        .args(["fuzz", "--target", "both", "--seeds", "1", "--requests", "300", "--auth", "both", "--etcd-bin"])
        .arg(etcd35())
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("run jepsen fuzz");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}");
    // 0: no differences; 1: differences (or a crash of ours, checked below); 3 would be a harness failure.
    assert!(matches!(output.status.code(), Some(0 | 1)), "status {}:\n{stdout}\n{stderr}", output.status);

    let path = out.path().join("fuzz.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}\n{stderr}", path.display()));
    let report: Value = serde_json::from_str(&text).expect("fuzz.json parses");
    assert_eq!(report["ours_crashed"], false, "ours crashed: {:#}", report["crashes"]);
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "one session with auth off, one with auth on: {runs:#?}");
    for run in runs {
        let count = |field: &str| run[field].as_u64().unwrap_or(0);
        assert!(count("requests") >= 300, "{run:#}");
        assert_eq!(run["ours_crashed"], false, "{run:#}");
        for side in ["etcd", "ours"] {
            assert!(count(&format!("{side}_answered")) > 0 && count(&format!("{side}_ok")) > 0, "{side}: {run:#}");
        }
    }
    let auth_on = runs.iter().find(|run| run["auth"] == true).expect("the auth-on session");
    assert_eq!(auth_on["etcd_tokens"], 4, "every user logs in to etcd after the setup: {auth_on:#}");

    let differences = report["differences"].as_u64().expect("differences");
    let classes = report["classes"].as_array().expect("classes");
    let counted: u64 = classes.iter().filter_map(|c| c["count"].as_u64()).sum();
    let unclassified = report["unclassified_differences"].as_u64().unwrap_or(0);
    assert_eq!(counted + unclassified, differences, "every difference is in a class");
    assert!(classes.iter().all(|c| c["example"]["request"].is_object()), "each class has an example");
    assert_eq!(output.status.code(), Some(if differences > 0 { 1 } else { 0 }), "{stdout}");
}
