//! etcdctl (3.4) against a member: the KV commands with their options, `endpoint status` and
//! `member list`, with exact outputs where etcdctl's simple format is deterministic.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::Value;
use tests::Member;

/// Runs etcdctl and returns its stdout, failing the test if it failed.
async fn ctl(member: &Member, args: &[&str]) -> String {
    let out = member.etcdctl(args).await.expect("run etcdctl");
    out.ok().unwrap_or_else(|err| panic!("etcdctl {args:?}: {err:#}"))
}

/// Runs etcdctl expecting a failure and returns its `Error: ...` line.
async fn ctl_error(member: &Member, args: &[&str]) -> String {
    let out = member.etcdctl(args).await.expect("run etcdctl");
    assert_eq!(out.code, Some(1), "etcdctl {args:?} should fail: {out:?}");
    assert_eq!(out.stdout, "", "etcdctl {args:?}");
    out.error_line().unwrap_or_else(|| panic!("no Error line: {out:?}")).to_owned()
}

async fn ctl_json(member: &Member, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-w", "json"]);
    let out = member.etcdctl(&args).await.expect("run etcdctl");
    assert!(out.success(), "etcdctl {args:?}: {out:?}");
    out.json().expect("JSON output")
}

/// The same store as `client_kv::fixture`, written with etcdctl:
/// k/a=7 (create 3, mod 6, version 2), k/b=5 (5, 5, 1), k/c=4 (2, 8, 3), k/d=0 (4, 4, 1),
/// z=outside (9), j=before (10).
async fn fixture() -> Member {
    let member = Member::start().await.expect("start member");
    for (key, value) in [
        ("k/c", "2"),
        ("k/a", "9"),
        ("k/d", "0"),
        ("k/b", "5"),
        ("k/a", "7"),
        ("k/c", "3"),
        ("k/c", "4"),
        ("z", "outside"),
        ("j", "before"),
    ] {
        assert_eq!(ctl(&member, &["put", key, value]).await, "OK\n");
    }
    member
}

fn b64(text: &str) -> String {
    BASE64.encode(text)
}

#[tokio::test]
async fn put_and_get() {
    let member = Member::start().await.expect("start member");
    assert_eq!(ctl(&member, &["get", "foo"]).await, "");
    assert_eq!(ctl(&member, &["put", "foo", "bar"]).await, "OK\n");
    assert_eq!(ctl(&member, &["get", "foo"]).await, "foo\nbar\n");
    assert_eq!(ctl(&member, &["put", "foo", "baz", "--prev-kv"]).await, "OK\nfoo\nbar\n");
    assert_eq!(ctl(&member, &["get", "foo", "--print-value-only"]).await, "baz\n");
    assert_eq!(ctl(&member, &["get", "foo", "--keys-only"]).await, "foo\n\n");
    // Values may contain spaces and newlines; the simple format prints them raw.
    assert_eq!(ctl(&member, &["put", "multi", "a b\nc"]).await, "OK\n");
    assert_eq!(ctl(&member, &["get", "multi"]).await, "multi\na b\nc\n");
    assert_eq!(ctl(&member, &["put", "foo", "--ignore-value"]).await, "OK\n");
    assert_eq!(ctl(&member, &["get", "foo"]).await, "foo\nbaz\n");
    assert_eq!(ctl_error(&member, &["put", "nope", "--ignore-value"]).await, "Error: etcdserver: key not found");
    assert_eq!(ctl_error(&member, &["get", ""]).await, "Error: etcdserver: key is not provided");
}

#[tokio::test]
async fn get_options() {
    let member = fixture().await;
    let cases: &[(&[&str], &str)] = &[
        (&["get", "k/", "--prefix"], "k/a\n7\nk/b\n5\nk/c\n4\nk/d\n0\n"),
        (&["get", "k/c", "--from-key"], "k/c\n4\nk/d\n0\nz\noutside\n"),
        (&["get", "k/b", "k/d"], "k/b\n5\nk/c\n4\n"),
        (&["get", "k/", "--prefix", "--limit", "2"], "k/a\n7\nk/b\n5\n"),
        (&["get", "k/", "--prefix", "--rev", "5"], "k/a\n9\nk/b\n5\nk/c\n2\nk/d\n0\n"),
        (&["get", "k/", "--prefix", "--rev", "4", "--keys-only"], "k/a\n\nk/c\n\nk/d\n\n"),
        (&["get", "k/", "--prefix", "--order", "DESCEND"], "k/d\n0\nk/c\n4\nk/b\n5\nk/a\n7\n"),
        (&["get", "k/", "--prefix", "--order", "ASCEND"], "k/a\n7\nk/b\n5\nk/c\n4\nk/d\n0\n"),
        (&["get", "k/", "--prefix", "--sort-by", "CREATE", "--keys-only"], "k/c\n\nk/a\n\nk/d\n\nk/b\n\n"),
        (&["get", "k/", "--prefix", "--sort-by", "CREATE", "--order", "DESCEND", "--print-value-only"], "5\n0\n7\n4\n"),
        (&["get", "k/", "--prefix", "--sort-by", "MODIFY", "--print-value-only"], "0\n5\n7\n4\n"),
        (
            &["get", "k/", "--prefix", "--sort-by", "VALUE", "--order", "DESCEND", "--limit", "3"],
            "k/a\n7\nk/b\n5\nk/c\n4\n",
        ),
        (&["get", "k/", "--prefix", "--sort-by", "VERSION", "--order", "DESCEND", "--limit", "2"], "k/c\n4\nk/a\n7\n"),
        (
            &["get", "k/", "--prefix", "--sort-by", "KEY", "--order", "DESCEND", "--keys-only"],
            "k/d\n\nk/c\n\nk/b\n\nk/a\n\n",
        ),
        (&["get", "k/", "--prefix", "--consistency", "s", "--print-value-only"], "7\n5\n4\n0\n"),
        (&["get", "k/x", "--prefix"], ""),
    ];
    for (args, want) in cases {
        assert_eq!(ctl(&member, args).await, *want, "etcdctl {args:?}");
    }
}

#[tokio::test]
async fn get_json() {
    let member = fixture().await;
    let json = ctl_json(&member, &["get", "k/", "--prefix", "--limit", "2"]).await;
    assert_eq!(json["header"]["revision"], 10);
    assert!(json["header"]["cluster_id"].as_u64().is_some_and(|id| id != 0), "{json}");
    assert!(json["header"]["member_id"].as_u64().is_some_and(|id| id != 0), "{json}");
    assert!(json["header"]["raft_term"].as_u64().is_some_and(|term| term >= 1), "{json}");
    assert_eq!(json["count"], 4);
    assert_eq!(json["more"], true);
    let kvs = json["kvs"].as_array().expect("kvs");
    assert_eq!(kvs.len(), 2);
    assert_eq!(kvs[0]["key"], b64("k/a"));
    assert_eq!(kvs[0]["value"], b64("7"));
    assert_eq!(
        (&kvs[0]["create_revision"], &kvs[0]["mod_revision"], &kvs[0]["version"]),
        (&3.into(), &6.into(), &2.into())
    );
    assert_eq!(kvs[1]["key"], b64("k/b"));

    // Default values are left out: no `more` when false, no `kvs` when empty, no `lease` when 0.
    let all = ctl_json(&member, &["get", "k/", "--prefix"]).await;
    assert_eq!(all["count"], 4);
    assert!(all.get("more").is_none(), "{all}");
    assert!(all["kvs"][0].get("lease").is_none(), "{all}");
    let none = ctl_json(&member, &["get", "nothing"]).await;
    assert!(none.get("kvs").is_none() && none.get("count").is_none(), "{none}");
    assert_eq!(none["header"]["revision"], 10);

    // The header has the current revision even for a read in the past.
    let past = ctl_json(&member, &["get", "k/a", "--rev", "3"]).await;
    assert_eq!(past["header"]["revision"], 10);
    assert_eq!(past["kvs"][0]["value"], b64("9"));
}

#[tokio::test]
async fn delete() {
    let member = fixture().await;
    assert_eq!(ctl(&member, &["del", "missing"]).await, "0\n");
    assert_eq!(ctl(&member, &["del", "j"]).await, "1\n");
    assert_eq!(ctl(&member, &["del", "k/", "--prefix", "--prev-kv"]).await, "4\nk/a\n7\nk/b\n5\nk/c\n4\nk/d\n0\n");
    assert_eq!(ctl(&member, &["get", "k/", "--prefix"]).await, "");
    let json = ctl_json(&member, &["del", "z", "--prev-kv"]).await;
    assert_eq!(json["deleted"], 1);
    assert_eq!(json["header"]["revision"], 13);
    assert_eq!(json["prev_kvs"][0]["key"], b64("z"));
    assert_eq!(json["prev_kvs"][0]["value"], b64("outside"));
    assert_eq!(ctl(&member, &["get", "", "--from-key"]).await, "");
}

#[tokio::test]
async fn txn_from_stdin() {
    let member = fixture().await;
    let txn = |stdin: &'static str| {
        let member = &member;
        async move {
            let out = member.etcdctl_stdin(&["txn"], stdin).await.expect("run etcdctl");
            out.ok().unwrap_or_else(|err| panic!("txn {stdin:?}: {err:#}"))
        }
    };
    // Compares on mod, version, value and create revision; all hold.
    let success = "mod(\"k/a\") = \"6\"\nversion(\"k/c\") = \"3\"\nvalue(\"k/b\") = \"5\"\ncreate(\"k/d\") = \"4\"\n\n\
                   put t1 one\nget k/a\n\nput t2 two\n\n";
    assert_eq!(txn(success).await, "SUCCESS\n\nOK\n\nk/a\n7\n");
    // One fails, so the failure branch runs.
    let failure = "mod(\"k/a\") > \"6\"\nversion(\"k/c\") = \"3\"\n\nput t1 again\n\nput t2 two\ndel t1\n\n";
    assert_eq!(txn(failure).await, "FAILURE\n\nOK\n\n1\n");
    assert_eq!(ctl(&member, &["get", "t", "--prefix"]).await, "t2\ntwo\n");
    // Missing keys compare as zero.
    assert_eq!(txn("create(\"missing\") = \"0\"\n\nput missing here\n\n\n").await, "SUCCESS\n\nOK\n");
    assert_eq!(txn("value(\"nothere\") != \"x\"\n\n\nput v x\n\n").await, "FAILURE\n\nOK\n");

    let out =
        member.etcdctl_stdin(&["txn", "-w", "json"], "version(\"t2\") < \"1\"\n\n\nget t2\n\n").await.expect("etcdctl");
    let json = out.json().expect("JSON");
    assert!(json.get("succeeded").is_none(), "false is left out: {json}");
    let range = &json["responses"][0]["Response"]["ResponseRange"];
    assert_eq!(range["kvs"][0]["value"], b64("two"));
    assert_eq!(range["header"]["revision"], json["header"]["revision"]);

    let dup = member.etcdctl_stdin(&["txn"], "\nput d 1\nput d 2\n\n\n").await.expect("etcdctl");
    assert_eq!(dup.error_line(), Some("Error: etcdserver: duplicate key given in txn request"), "{dup:?}");
}

#[tokio::test]
async fn compaction() {
    let member = fixture().await;
    assert_eq!(ctl(&member, &["compaction", "6"]).await, "compacted revision 6\n");
    let compacted = "Error: etcdserver: mvcc: required revision has been compacted";
    assert_eq!(ctl_error(&member, &["get", "k/a", "--rev", "5"]).await, compacted);
    assert_eq!(ctl(&member, &["get", "k/a", "--rev", "6"]).await, "k/a\n7\n");
    assert_eq!(ctl_error(&member, &["compaction", "6"]).await, compacted);
    assert_eq!(ctl_error(&member, &["compaction", "3"]).await, compacted);
    let future = "Error: etcdserver: mvcc: required revision is a future revision";
    assert_eq!(ctl_error(&member, &["compaction", "11"]).await, future);
    assert_eq!(ctl_error(&member, &["get", "k/a", "--rev", "11"]).await, future);
    assert_eq!(ctl(&member, &["compaction", "10", "--physical"]).await, "compacted revision 10\n");
    assert_eq!(ctl(&member, &["get", "j", "--rev", "10"]).await, "j\nbefore\n");
}

#[tokio::test]
async fn endpoint_status() {
    let member = fixture().await;
    let json = ctl_json(&member, &["endpoint", "status"]).await;
    let entry = &json[0];
    assert_eq!(entry["Endpoint"], member.endpoint());
    let status = &entry["Status"];
    let member_id = status["header"]["member_id"].as_u64().expect("member_id");
    assert_ne!(member_id, 0);
    assert_eq!(status["leader"].as_u64(), Some(member_id), "{status}");
    assert_eq!(status["header"]["revision"], 10);
    assert!(status["version"].as_str().is_some_and(|v| v.split('.').count() == 3), "{status}");
    assert!(status["dbSize"].as_i64().is_some_and(|size| size > 0), "{status}");
    let (index, term) = (status["raftIndex"].as_u64(), status["raftTerm"].as_u64());
    assert!(index.is_some_and(|index| index >= 10), "nine puts are nine entries: {status}");
    assert!(term.is_some_and(|term| term >= 1), "{status}");
    assert_eq!(status["raftTerm"], status["header"]["raft_term"]);

    // Simple format: endpoint, hex ID, version, db size, is leader, is learner, term, index, applied, errors.
    let simple = ctl(&member, &["endpoint", "status"]).await;
    let fields: Vec<&str> = simple.trim_end().split(", ").collect();
    assert_eq!(fields.len(), 9, "{simple:?}");
    assert_eq!(fields[0], member.endpoint());
    assert_eq!(fields[1], format!("{member_id:x}"));
    assert_eq!(fields[2], status["version"]);
    assert_eq!((fields[4], fields[5]), ("true", "false"));
    assert_eq!(fields[6], term.expect("term").to_string());
    assert!(simple.ends_with(", \n"), "no errors: {simple:?}");

    let health = member.etcdctl(&["endpoint", "health"]).await.expect("etcdctl");
    assert!(health.success(), "{health:?}");
    // etcdctl 3.4 prints the health line on stderr.
    let line = format!("{} is healthy: successfully committed proposal: took = ", member.endpoint());
    assert!(health.stdout.is_empty() && health.stderr.starts_with(&line), "{health:?}");
    let json = ctl_json(&member, &["endpoint", "health"]).await;
    assert_eq!((&json[0]["endpoint"], &json[0]["health"]), (&member.endpoint().into(), &true.into()), "{json}");
}

#[tokio::test]
async fn member_list() {
    let member = Member::start().await.expect("start member");
    let json = ctl_json(&member, &["member", "list"]).await;
    let member_id = json["header"]["member_id"].as_u64().expect("member_id");
    let members = json["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{json}");
    assert_eq!(members[0]["ID"].as_u64(), Some(member_id));
    assert_eq!(members[0]["name"], member.name());
    assert_eq!(members[0]["peerURLs"], serde_json::json!([member.peer_url()]));
    assert_eq!(members[0]["clientURLs"], serde_json::json!([member.client_url()]));

    let simple = ctl(&member, &["member", "list"]).await;
    let want =
        format!("{member_id:x}, started, {}, {}, {}, false\n", member.name(), member.peer_url(), member.client_url());
    assert_eq!(simple, want);
}
