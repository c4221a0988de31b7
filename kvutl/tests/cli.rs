//! The `kvutl` binary as a user runs it: exit codes, `Error:` lines, and that a bad file never leaves
//! a data dir behind. (Restores of real etcd's files into running members are in the `tests` crate.)

use std::path::Path;
use std::process::{Command, Output};

fn kvutl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvutl")).args(args).output().expect("run kvutl")
}

fn failure(out: &Output) -> (Option<i32>, String) {
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn version_and_argument_errors_are_etcdutls() {
    let out = kvutl(&["version"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "etcdutl version: 3.6.14\nAPI version: 3.6\n");
    assert_eq!(
        failure(&kvutl(&["snapshot", "status"])),
        (Some(128), "Error: snapshot status requires exactly one argument\n".to_string())
    );
    assert_eq!(
        failure(&kvutl(&["snapshot", "restore", "s.db", "--bump-revision=10"])),
        (Some(128), "Error: --mark-compacted required if --revision-bump > 0\n".to_string())
    );
    assert_eq!(
        failure(&kvutl(&["-w", "protobuf", "snapshot", "status", "s.db"])),
        (Some(4), "Error: protobuf not supported as output format\n".to_string())
    );
}

#[test]
fn bad_files_get_one_clear_line_and_leave_no_data_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).display().to_string();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "foreign.db",
            b"a text file, no database\n".repeat(40).to_vec(),
            "Error: snapshot missing hash but --skip-hash-check=false",
        ),
        ("short.db", b"tiny".to_vec(), "Error: seek "),
        ("zeros.db", vec![0; 4096 * 3], "Error: snapshot missing hash but --skip-hash-check=false"),
        ("digest.db", vec![0; 4096 * 3 + 32], "Error: expected sha256 ["),
    ];
    for (name, bytes, want) in cases {
        std::fs::write(path(name), bytes).expect("write");
        let data_dir = path(&format!("{name}.restored"));
        let out = kvutl(&["snapshot", "restore", &path(name), "--data-dir", &data_dir]);
        let (code, stderr) = failure(&out);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert!(stderr.starts_with(want), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: one line: {stderr}");
        assert!(!Path::new(&data_dir).exists(), "{name}: no data dir is left behind");
    }
    // With the digest check skipped, the zeros are looked at as a database: bbolt's text.
    let out = kvutl(&["snapshot", "restore", &path("zeros.db"), "--skip-hash-check", "--data-dir", &path("z")]);
    assert_eq!(failure(&out), (Some(1), "Error: invalid database\n".to_string()));
    let out = kvutl(&["snapshot", "status", &path("zeros.db")]);
    assert_eq!(failure(&out), (Some(1), "Error: invalid database\n".to_string()));
    let out = kvutl(&["hashkv", "--data-dir", &path("nothing")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such file or directory"));
}
