//! etcdctl (3.4) `lease` commands against a member: grant, timetolive, list, keep-alive, revoke,
//! with the exact texts and exit codes etcd gives, and their `-w json` outputs.
//!
//! Lease IDs are random and the remaining TTL depends on timing, so they are checked and then
//! masked: an ID with [`hex_id`], a remaining TTL with [`mask_remaining`] (within [`REMAINING_SLACK`]
//! seconds below the granted TTL).

use std::collections::BTreeSet;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tests::{CtlOutput, Member};

/// How many seconds a test may take between a grant and a `timetolive`: etcd reports the remaining
/// TTL rounded down, so 59 right after a grant of 60.
const REMAINING_SLACK: i64 = 5;
/// etcd's minimum TTL with the default 1000 ms election timeout: 1.5 × 1 s, rounded up.
const MIN_TTL: i64 = 2;
/// etcd's largest TTL (`MaxLeaseTTL`).
const MAX_TTL: i64 = 9_000_000_000;
const LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";

async fn ctl(member: &Member, args: &[&str]) -> anyhow::Result<String> {
    member.etcdctl(args).await?.ok().with_context(|| format!("etcdctl {args:?}"))
}

/// Runs etcdctl expecting it to fail with `code`, nothing on stdout, and returns its `Error:` line.
async fn ctl_error(member: &Member, args: &[&str], code: i32) -> anyhow::Result<String> {
    let out: CtlOutput = member.etcdctl(args).await?;
    assert_eq!((out.code, out.stdout.as_str()), (Some(code), ""), "etcdctl {args:?}: {out:?}");
    Ok(out.error_line().with_context(|| format!("etcdctl {args:?} printed no Error line: {out:?}"))?.to_owned())
}

async fn ctl_json(member: &Member, args: &[&str]) -> anyhow::Result<Value> {
    let mut args = args.to_vec();
    args.extend(["-w", "json"]);
    let out = member.etcdctl(&args).await?;
    if !out.success() {
        bail!("etcdctl {args:?}: {out:?}");
    }
    out.json()
}

/// etcdctl prints lease IDs as 16 hex digits.
fn hex_id(id: i64) -> String {
    format!("{id:016x}")
}

/// Grants a lease with `etcdctl lease grant <ttl>`, checks the line it prints, and returns the ID.
async fn grant(member: &Member, ttl: &str, granted: i64) -> anyhow::Result<i64> {
    let out = ctl(member, &["lease", "grant", ttl]).await?;
    let hex = out
        .strip_prefix("lease ")
        .and_then(|rest| rest.split_once(' '))
        .map(|(hex, _)| hex)
        .with_context(|| format!("unexpected grant output {out:?}"))?;
    let id = i64::from_str_radix(hex, 16).with_context(|| format!("lease ID in {out:?}"))?;
    assert!(id > 0, "{out:?}");
    assert_eq!(out, format!("lease {} granted with TTL({granted}s)\n", hex_id(id)));
    Ok(id)
}

/// Checks that `text` holds `remaining(<n>s)` with `granted - REMAINING_SLACK <= n <= granted` and
/// replaces `n` with `<n>`.
fn mask_remaining(text: &str, granted: i64) -> String {
    let (before, rest) = text.split_once("remaining(").unwrap_or_else(|| panic!("no remaining(...) in {text:?}"));
    let (seconds, after) = rest.split_once("s)").unwrap_or_else(|| panic!("unterminated remaining(...) in {text:?}"));
    let seconds: i64 = seconds.parse().unwrap_or_else(|_| panic!("remaining is not a number in {text:?}"));
    assert!(
        (granted - REMAINING_SLACK..=granted).contains(&seconds),
        "remaining {seconds}s of a {granted}s lease: {text:?}"
    );
    format!("{before}remaining(<n>s){after}")
}

/// Checks the header fields that etcdctl flattens into the top level of a lease JSON output
/// (member-specific values non-zero, `revision` exact) and replaces them with placeholders.
fn mask_header(json: &mut Value, revision: i64) {
    let object = json.as_object_mut().unwrap_or_else(|| panic!("not an object"));
    for field in ["cluster_id", "member_id", "raft_term"] {
        let value = object.get(field).and_then(Value::as_u64);
        assert!(value.is_some_and(|v| v != 0), "{field} in {object:?}");
        object.insert(field.to_owned(), json!(format!("<{field}>")));
    }
    assert_eq!(object.get("revision"), Some(&json!(revision)), "{object:?}");
}

#[tokio::test]
async fn grant_attach_timetolive_keep_alive_revoke() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let id = grant(&member, "60", 60).await?;
    let hex = hex_id(id);
    // Below the minimum, the server raises the TTL: 1.5 × the election timeout, rounded up.
    let short = grant(&member, "1", MIN_TTL).await?;
    let zero = grant(&member, "0", MIN_TTL).await?;

    assert_eq!(ctl(&member, &["put", &format!("--lease={hex}"), "k", "v"]).await?, "OK\n");
    assert_eq!(ctl(&member, &["get", "k"]).await?, "k\nv\n");

    let ttl = ctl(&member, &["lease", "timetolive", &hex]).await?;
    assert_eq!(mask_remaining(&ttl, 60), format!("lease {hex} granted with TTL(60s), remaining(<n>s)\n"));
    let ttl = ctl(&member, &["lease", "timetolive", &hex, "--keys"]).await?;
    assert_eq!(
        mask_remaining(&ttl, 60),
        format!("lease {hex} granted with TTL(60s), remaining(<n>s), attached keys([k])\n")
    );

    // `found N leases`, then one ID per line in no particular order.
    let list = ctl(&member, &["lease", "list"]).await?;
    let mut lines = list.lines();
    assert_eq!(lines.next(), Some("found 3 leases"), "{list:?}");
    let listed: BTreeSet<&str> = lines.collect();
    let want: BTreeSet<String> = [id, short, zero].into_iter().map(hex_id).collect();
    assert_eq!(listed, want.iter().map(String::as_str).collect(), "{list:?}");

    assert_eq!(
        ctl(&member, &["lease", "keep-alive", "--once", &hex]).await?,
        format!("lease {hex} keepalived with TTL(60)\n")
    );

    assert_eq!(ctl(&member, &["lease", "revoke", &hex]).await?, format!("lease {hex} revoked\n"));
    assert_eq!(ctl(&member, &["get", "k"]).await?, "", "revoking deletes the attached key");
    let list = ctl(&member, &["lease", "list"]).await?;
    assert!(list.starts_with("found 2 leases\n") && !list.contains(&hex), "{list:?}");
    Ok(())
}

#[tokio::test]
async fn timetolive_lists_every_attached_key() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let id = grant(&member, "60", 60).await?;
    let hex = hex_id(id);
    for key in ["b", "a", "c"] {
        assert_eq!(ctl(&member, &["put", key, "v", &format!("--lease={hex}")]).await?, "OK\n");
    }
    let ttl = mask_remaining(&ctl(&member, &["lease", "timetolive", &hex, "--keys"]).await?, 60);
    let prefix = format!("lease {hex} granted with TTL(60s), remaining(<n>s), attached keys([");
    // Go prints the keys as a slice (`[a b c]`), in the lease's own (unspecified) order.
    let keys = ttl
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix("])\n"))
        .with_context(|| format!("unexpected timetolive output {ttl:?}"))?;
    let keys: BTreeSet<&str> = keys.split(' ').collect();
    assert_eq!(keys, BTreeSet::from(["a", "b", "c"]), "{ttl:?}");
    Ok(())
}

#[tokio::test]
async fn unknown_and_revoked_leases() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let id = grant(&member, "60", 60).await?;
    let hex = hex_id(id);
    assert_eq!(ctl(&member, &["lease", "revoke", &hex]).await?, format!("lease {hex} revoked\n"));

    // Revoke reports a failure with its own prefix and exit code 1 (ExitError).
    let not_found = format!("Error: failed to revoke lease ({LEASE_NOT_FOUND})");
    assert_eq!(ctl_error(&member, &["lease", "revoke", &hex], 1).await?, not_found);
    assert_eq!(ctl_error(&member, &["lease", "revoke", "1234abcd"], 1).await?, not_found);

    // TimeToLive of a lease that does not exist is no error: TTL -1, printed as "already expired".
    assert_eq!(ctl(&member, &["lease", "timetolive", &hex]).await?, format!("lease {hex} already expired\n"));
    assert_eq!(ctl(&member, &["lease", "timetolive", &hex, "--keys"]).await?, format!("lease {hex} already expired\n"));
    assert_eq!(ctl(&member, &["lease", "timetolive", "1234abcd"]).await?, "lease 000000001234abcd already expired\n");

    // The server answers a keep-alive of an unknown lease with TTL 0; etcdctl turns that into
    // ErrLeaseNotFound and exits with 2 (ExitBadConnection).
    let bare = format!("Error: {LEASE_NOT_FOUND}");
    assert_eq!(ctl_error(&member, &["lease", "keep-alive", "--once", &hex], 2).await?, bare);

    // Attaching a key to an unknown lease fails the put.
    assert_eq!(ctl_error(&member, &["put", "--lease=1234", "k", "v"], 1).await?, bare);
    assert_eq!(ctl(&member, &["get", "k"]).await?, "");
    assert_eq!(ctl(&member, &["lease", "list"]).await?, "found 0 leases\n");
    Ok(())
}

#[tokio::test]
async fn ttl_limits() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let too_large = (MAX_TTL + 1).to_string();
    assert_eq!(
        ctl_error(&member, &["lease", "grant", &too_large], 1).await?,
        "Error: failed to grant lease (etcdserver: too large lease TTL)"
    );
    grant(&member, &MAX_TTL.to_string(), MAX_TTL).await?;
    assert_eq!(ctl(&member, &["lease", "list"]).await?.lines().next(), Some("found 1 leases"));
    Ok(())
}

#[tokio::test]
async fn json_outputs() -> anyhow::Result<()> {
    let member = Member::start().await?;

    // Grant prints the response with its header flattened, and an empty `Error`.
    let mut granted = ctl_json(&member, &["lease", "grant", "60"]).await?;
    let id = granted["ID"].as_i64().context("ID")?;
    assert!(id > 0, "{granted}");
    mask_header(&mut granted, 1);
    assert_eq!(
        granted,
        json!({"cluster_id": "<cluster_id>", "member_id": "<member_id>", "revision": 1,
               "raft_term": "<raft_term>", "ID": id, "TTL": 60, "Error": ""})
    );
    let hex = hex_id(id);
    assert_eq!(ctl(&member, &["put", &format!("--lease={hex}"), "k", "v"]).await?, "OK\n");

    for (args, keys) in [
        (vec!["lease", "timetolive", &hex], Value::Null),
        (vec!["lease", "timetolive", &hex, "--keys"], json!(["aw=="])),
    ] {
        let mut ttl = ctl_json(&member, &args).await?;
        mask_header(&mut ttl, 2);
        let remaining = ttl["ttl"].as_i64().context("ttl")?;
        assert!((60 - REMAINING_SLACK..=60).contains(&remaining), "{ttl}");
        ttl["ttl"] = json!("<n>");
        assert_eq!(
            ttl,
            json!({"cluster_id": "<cluster_id>", "member_id": "<member_id>", "revision": 2,
                   "raft_term": "<raft_term>", "id": id, "ttl": "<n>", "granted-ttl": 60, "keys": keys}),
            "etcdctl {args:?}"
        );
    }

    let second = ctl_json(&member, &["lease", "grant", "30"]).await?["ID"].as_i64().context("ID")?;
    let mut list = ctl_json(&member, &["lease", "list"]).await?;
    mask_header(&mut list, 2);
    let mut leases = list["leases"].as_array().context("leases")?.clone();
    leases.sort_by_key(|lease| lease["id"].as_i64());
    let mut want = vec![json!({"id": id}), json!({"id": second})];
    want.sort_by_key(|lease| lease["id"].as_i64());
    assert_eq!(leases, want, "{list}");

    let mut kept = ctl_json(&member, &["lease", "keep-alive", "--once", &hex]).await?;
    mask_header(&mut kept, 2);
    assert_eq!(
        kept,
        json!({"cluster_id": "<cluster_id>", "member_id": "<member_id>", "revision": 2,
               "raft_term": "<raft_term>", "ID": id, "TTL": 60})
    );

    // Revoke prints the response with a nested header; deleting the key took one revision.
    let mut revoked = ctl_json(&member, &["lease", "revoke", &hex]).await?;
    mask_header(&mut revoked["header"], 3);
    assert_eq!(
        revoked,
        json!({"header": {"cluster_id": "<cluster_id>", "member_id": "<member_id>", "revision": 3,
                          "raft_term": "<raft_term>"}})
    );

    let mut expired = ctl_json(&member, &["lease", "timetolive", &hex, "--keys"]).await?;
    mask_header(&mut expired, 3);
    assert_eq!(
        expired,
        json!({"cluster_id": "<cluster_id>", "member_id": "<member_id>", "revision": 3,
               "raft_term": "<raft_term>", "id": id, "ttl": -1, "granted-ttl": 0, "keys": null})
    );
    Ok(())
}
