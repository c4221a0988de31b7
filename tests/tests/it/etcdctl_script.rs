//! One scripted etcdctl session run against real etcd and against the server under test; the
//! outputs, once member-specific values are masked, must be identical line by line.
//!
//! The reference is a live etcd when one is installed, else the transcript recorded from etcd
//! 3.4.23 in `golden/etcdctl_script.txt` (`KV_TEST_SERVER=etcd UPDATE_GOLDEN=1` rewrites it). With
//! `KV_TEST_SERVER=etcd` the script runs on two etcds, which checks that the script and the masks
//! are deterministic, and the golden transcript is checked too.

use std::path::PathBuf;

use tests::diff::line_diff;
use tests::normalize::{strip_client_logs, Masks};
use tests::server::etcd_available;
use tests::{Member, MemberConfig, ServerKind};

/// One etcdctl invocation, with its standard input for `txn`.
struct Step {
    args: &'static [&'static str],
    stdin: Option<&'static str>,
}

const fn ctl(args: &'static [&'static str]) -> Step {
    Step { args, stdin: None }
}

const fn txn(args: &'static [&'static str], stdin: &'static str) -> Step {
    Step { args, stdin: Some(stdin) }
}

const SCRIPT: &[Step] = &[
    ctl(&["get", "foo"]),
    ctl(&["get", "foo", "-w", "json"]),
    ctl(&["put", "foo", "bar"]),
    ctl(&["get", "foo"]),
    ctl(&["put", "foo", "baz", "--prev-kv"]),
    ctl(&["put", "k/c", "2"]),
    ctl(&["put", "k/a", "9"]),
    ctl(&["put", "k/d", "0"]),
    ctl(&["put", "k/b", "5"]),
    ctl(&["put", "k/a", "7", "-w", "json"]),
    ctl(&["put", "k/c", "3"]),
    ctl(&["put", "k/c", "4", "--prev-kv", "-w", "json"]),
    ctl(&["put", "z", "outside"]),
    ctl(&["get", "k/", "--prefix"]),
    ctl(&["get", "k/c", "--from-key"]),
    ctl(&["get", "k/b", "k/d"]),
    ctl(&["get", "k/", "--prefix", "--limit", "2", "-w", "json"]),
    ctl(&["get", "k/", "--prefix", "--rev", "5"]),
    ctl(&["get", "k/", "--prefix", "--order", "DESCEND"]),
    ctl(&["get", "k/", "--prefix", "--sort-by", "CREATE"]),
    ctl(&["get", "k/", "--prefix", "--sort-by", "MODIFY", "--order", "DESCEND"]),
    ctl(&["get", "k/", "--prefix", "--sort-by", "VALUE", "--print-value-only"]),
    ctl(&["get", "k/", "--prefix", "--sort-by", "VERSION", "--order", "DESCEND", "--limit", "2", "--keys-only"]),
    ctl(&["get", "k/", "--prefix", "--sort-by", "KEY", "--order", "DESCEND", "-w", "json"]),
    ctl(&["get", "k/", "--prefix", "--keys-only", "--consistency", "s"]),
    ctl(&["get", "", "--from-key", "-w", "json"]),
    ctl(&["get", "foo", "-w", "fields"]),
    ctl(&["get", "foo", "--rev", "100"]),
    ctl(&["get", ""]),
    ctl(&["put", "nope", "--ignore-value"]),
    ctl(&["put", "foo", "--ignore-value", "-w", "json"]),
    txn(&["txn"], "mod(\"k/a\") = \"8\"\nversion(\"k/c\") = \"3\"\nvalue(\"z\") = \"outside\"\ncreate(\"k/d\") > \"3\"\n\nput t1 one\nget k/a\n\nput t2 two\n\n"),
    txn(&["txn", "-w", "json"], "version(\"k/c\") = \"1\"\n\nput t1 one\n\nget k/b\nput t2 two\ndel missing\n\n"),
    txn(&["txn"], "value(\"missing\") != \"x\"\n\n\nget t2 --print-value-only\n\n"),
    txn(&["txn"], "\nput d 1\nput d 2\n\n\n"),
    ctl(&["del", "missing"]),
    ctl(&["del", "k/", "--prefix", "--prev-kv"]),
    ctl(&["del", "z", "--prev-kv", "-w", "json"]),
    ctl(&["compaction", "5"]),
    ctl(&["get", "foo", "--rev", "4"]),
    ctl(&["get", "k/", "--prefix", "--rev", "5", "-w", "json"]),
    ctl(&["compaction", "5"]),
    ctl(&["compaction", "1000"]),
    ctl(&["get", "", "--from-key"]),
    ctl(&["member", "list"]),
    ctl(&["member", "list", "-w", "json"]),
    ctl(&["endpoint", "health"]),
];

/// Runs the script on a fresh member and returns the masked transcript.
async fn transcript(kind: ServerKind) -> anyhow::Result<String> {
    let member = Member::start_with(MemberConfig { kind, ..MemberConfig::default() }).await?;
    let mut client = member.client().await?;
    let fresh = client.get("foo", None).await?;
    let header = fresh.header().expect("header");
    let peer = member.peer_url().trim_start_matches("http://").to_owned();
    let masks = Masks::new(header.cluster_id(), header.member_id(), &member.endpoint(), &peer);

    let mut out = String::new();
    for step in SCRIPT {
        let result = match step.stdin {
            Some(stdin) => member.etcdctl_stdin(step.args, stdin).await?,
            None => member.etcdctl(step.args).await?,
        };
        out.push_str("$ etcdctl");
        for arg in step.args {
            let plain = !arg.is_empty() && !arg.contains(|c: char| c.is_whitespace() || c == '"');
            out.push_str(&if plain { format!(" {arg}") } else { format!(" {arg:?}") });
        }
        if let Some(stdin) = step.stdin {
            out.push_str(&format!(" <<< {stdin:?}"));
        }
        out.push('\n');
        out.push_str(&masks.apply(&result.stdout));
        if !result.stdout.is_empty() && !result.stdout.ends_with('\n') {
            out.push_str("\n[no newline at end of stdout]\n");
        }
        for line in strip_client_logs(&result.stderr).lines() {
            out.push_str(&format!("stderr: {}\n", masks.apply(line)));
        }
        if !result.success() {
            out.push_str(&format!("exit: {:?}\n", result.code));
        }
    }
    Ok(out)
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/golden/etcdctl_script.txt")
}

#[track_caller]
fn assert_same(reference_name: &str, reference: &str, actual_name: &str, actual: &str) {
    if let Some(diff) = line_diff(reference, actual) {
        panic!("etcdctl transcripts differ (-{reference_name} +{actual_name}):\n{diff}");
    }
}

#[tokio::test]
async fn etcdctl_output_matches_etcd() -> anyhow::Result<()> {
    let golden = std::fs::read_to_string(golden_path())?;
    match ServerKind::from_env() {
        ServerKind::Etcd => {
            let (first, second) = tokio::try_join!(transcript(ServerKind::Etcd), transcript(ServerKind::Etcd))?;
            assert_same("etcd", &first, "second etcd", &second);
            if std::env::var_os("UPDATE_GOLDEN").is_some() {
                std::fs::write(golden_path(), &first)?;
            } else {
                assert_same("golden (rewrite with UPDATE_GOLDEN=1)", &golden, "etcd", &first);
            }
        }
        ServerKind::Ours if etcd_available() => {
            let (etcd, ours) = tokio::try_join!(transcript(ServerKind::Etcd), transcript(ServerKind::Ours))?;
            assert_same("etcd", &etcd, "ours", &ours);
        }
        ServerKind::Ours => {
            eprintln!("NOTICE: real etcd is not installed; comparing with the recorded etcd 3.4.23 transcript");
            assert_same("golden etcd", &golden, "ours", &transcript(ServerKind::Ours).await?);
        }
    }
    Ok(())
}
