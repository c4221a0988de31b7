//! The `raft-node` binary's command line: etcd's flags are accepted, bad ones are refused before anything
//! starts. (Building this test also builds the binary the workspace's integration tests run.)

use std::process::Command;

fn raft_node(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_raft-node")).args(args).output().expect("the raft-node binary runs")
}

#[test]
fn help_lists_etcd_flags() {
    let out = raft_node(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--name",
        "--data-dir",
        "--listen-client-urls",
        "--advertise-client-urls",
        "--listen-peer-urls",
        "--initial-advertise-peer-urls",
        "--initial-cluster ",
        "--initial-cluster-state",
        "--initial-cluster-token",
        "--max-txn-ops",
        "--max-request-bytes",
        "--snapshot-count",
        "--heartbeat-interval",
        "--election-timeout",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
}

#[test]
fn bad_flags_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("d");
    let data_dir = data_dir.to_str().expect("utf-8 path");
    let cases: [(&[&str], &str); 3] = [
        (&["--initial-cluster-state", "bogus"], "invalid value 'bogus'"),
        (&["--data-dir", data_dir, "--name", "n2"], "couldn't find local name \"n2\""),
        (&["--data-dir", data_dir, "--listen-client-urls", "ftp://x:1"], "invalid URL"),
    ];
    for (args, want) in cases {
        let out = raft_node(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: want {want:?} in stderr:\n{stderr}");
    }
}

#[test]
fn etcd_env_vars_are_read() {
    let out = Command::new(env!("CARGO_BIN_EXE_raft-node"))
        .env("ETCD_INITIAL_CLUSTER_STATE", "bogus")
        .output()
        .expect("the raft-node binary runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'bogus'"));
}
