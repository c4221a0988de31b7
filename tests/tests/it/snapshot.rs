//! Maintenance.Snapshot and etcdctl's `snapshot save`, then `snapshot status|restore` of the saved
//! file into a new three-member cluster.
//!
//! Against real etcd (`KV_TEST_SERVER=etcd`) the restore and status run through etcdctl, against ours
//! through kvctl (whose restore runs kvutl): the cluster built from the file must serve the same keys at
//! the same revision either way. (The file is etcd's format from both servers; `snapshot_etcd` moves
//! files between real etcd and ours.)

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};
use etcd_client::{Compare, CompareOp, GetOptions, LeaseTimeToLiveOptions, PutOptions, Txn, TxnOp};
use tests::etcdctl::etcdctl_bin;
use tests::kvctl::kvctl_bin;
use tests::server::etcd_available;
use tests::{Bootstrap, Cluster, ClusterConfig, CtlOutput, Member, MemberConfig, ServerKind};

use crate::util::header;

/// etcd's `snapshotSendBufferSize`.
const CHUNK: usize = 32 * 1024;

#[tokio::test]
async fn snapshot_streams_in_etcds_chunks_with_the_digest_last() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    // 160 KiB of values: a stream of several chunks on either server.
    for i in 0..80 {
        client.put(format!("big/{i:02}"), vec![b'v'; 2048], None).await?;
    }
    let mut stream = client.snapshot().await?;
    let mut messages = Vec::new();
    while let Some(message) = stream.message().await? {
        messages.push((message.header().is_some(), message.remaining_bytes(), message.blob().len()));
    }
    let Some((&(_, last_remaining, last_len), body)) = messages.split_last() else { bail!("an empty stream") };
    assert_eq!((last_remaining, last_len), (0, 32), "the sha256 digest comes alone, last");
    assert!(body.len() >= 5, "{} body chunks", body.len());
    let total: usize = body.iter().map(|m| m.2).sum();
    let mut sent = 0;
    for (i, &(has_header, remaining, len)) in body.iter().enumerate() {
        assert!(!has_header, "etcd 3.4 sends snapshot chunks without a header");
        if i + 1 < body.len() {
            assert_eq!(len, CHUNK, "chunk {i}");
        }
        sent += len;
        assert_eq!(remaining as usize, total - sent, "chunk {i} counts the bytes still to come");
    }
    assert_eq!((total + 32) % 512, 32, "what etcdctl snapshot save checks");
    Ok(())
}

/// stdout, the `Error:` line and the exit code of one etcdctl run, the temp dir and the member's
/// endpoint masked.
fn outcome(out: &CtlOutput, dir: &Path, member: &Member) -> (String, Option<String>, Option<i32>) {
    let mask = |text: &str| text.replace(&dir.display().to_string(), "<dir>").replace(&member.endpoint(), "<ep>");
    (mask(&out.stdout), out.error_line().map(mask), out.code)
}

#[tokio::test]
async fn etcdctl_snapshot_save_behaves_alike_on_etcd_and_ours() -> anyhow::Result<()> {
    if !etcd_available() {
        return Ok(());
    }
    let etcd = Member::start_with(MemberConfig { kind: ServerKind::Etcd, ..MemberConfig::default() }).await?;
    let ours = Member::start_with(MemberConfig { kind: ServerKind::Ours, ..MemberConfig::default() }).await?;
    let dir = tempfile::tempdir()?;
    let mut outcomes = Vec::new();
    for member in [&etcd, &ours] {
        member.client().await?.put("k", "v", None).await?;
        let file = dir.path().join(format!("{:?}.db", member.kind()));
        let file = file.to_str().context("utf-8 path")?;
        let two = format!("--endpoints={0},{0}", member.endpoint());
        let saved = member.etcdctl(&["snapshot", "save", file]).await?;
        let size = std::fs::metadata(file)?.len();
        assert!(!Path::new(&format!("{file}.part")).exists(), "{:?}: the .part file is renamed", member.kind());
        let cases = [
            saved,
            member.etcdctl(&[two.as_str(), "snapshot", "save", file]).await?,
            member.etcdctl(&["snapshot", "save", "/nonexistent-dir/x.db"]).await?,
            member.etcdctl(&["snapshot", "save"]).await?,
        ];
        let masked: Vec<_> = cases.iter().map(|out| outcome(out, dir.path(), member)).collect();
        outcomes.push((masked, size % 512));
    }
    let file_name = |kind: &str| format!("Snapshot saved at <dir>/{kind}.db\n");
    assert_eq!(outcomes[0].0[0].0, file_name("Etcd"));
    assert_eq!(outcomes[1].0[0].0, file_name("Ours"));
    outcomes[1].0[0].0 = file_name("Etcd");
    assert_eq!(outcomes[1], outcomes[0], "ours differs from etcd");
    assert_eq!(outcomes[0].1, 32);
    Ok(())
}

/// A key as a client sees it: key, value, create and mod revisions, version, lease.
type Kv = (String, String, i64, i64, i64, i64);

/// Every key, read with a serializable range from `member`'s own store, and the header revision.
async fn everything(member: &tests::ClusterMember) -> anyhow::Result<(Vec<Kv>, i64)> {
    let mut client = member.client().await?;
    let resp = client.get("", Some(GetOptions::new().with_prefix().with_serializable())).await?;
    let kvs = resp
        .kvs()
        .iter()
        .map(|kv| {
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            (text(kv.key()), text(kv.value()), kv.create_revision(), kv.mod_revision(), kv.version(), kv.lease())
        })
        .collect();
    Ok((kvs, header(resp.header()).revision()))
}

/// Runs the restore tool of `kind` (etcdctl for etcd's members, kvctl for ours) for one new member.
fn restore(kind: ServerKind, file: &Path, member: &Bootstrap) -> anyhow::Result<()> {
    let tool = match kind {
        ServerKind::Etcd => etcdctl_bin(),
        ServerKind::Ours => kvctl_bin()?,
    };
    let out = Command::new(&tool)
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "restore"])
        .arg(file)
        .arg(format!("--name={}", member.name))
        .arg(format!("--data-dir={}", member.data_dir.display()))
        .arg(format!("--initial-cluster={}", member.initial_cluster))
        .arg(format!("--initial-cluster-token={}", member.token))
        .arg(format!("--initial-advertise-peer-urls={}", member.peer_url))
        .output()
        .with_context(|| format!("run {}", tool.display()))?;
    if !out.status.success() {
        bail!("{} snapshot restore failed: {}", tool.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// `snapshot status -w json` of `file` through the tool of `kind`: (revision, total keys).
fn status(kind: ServerKind, file: &Path) -> anyhow::Result<(i64, u64)> {
    let tool = match kind {
        ServerKind::Etcd => etcdctl_bin(),
        ServerKind::Ours => kvctl_bin()?,
    };
    let out =
        Command::new(&tool).env("ETCDCTL_API", "3").args(["-w", "json", "snapshot", "status"]).arg(file).output()?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("snapshot status printed {:?}", String::from_utf8_lossy(&out.stderr)))?;
    Ok((json["revision"].as_i64().context("revision")?, json["totalKey"].as_u64().context("totalKey")?))
}

#[tokio::test]
async fn a_cluster_restored_from_etcdctls_snapshot_serves_the_same_keys_and_revision() -> anyhow::Result<()> {
    let source = Cluster::start(3).await?;
    let kind = source.kind();
    let leader = source.leader().await?;
    let mut client = source.member(leader).client().await?;
    for i in 0..10 {
        client.put(format!("key/{i}"), format!("first-{i}"), None).await?;
    }
    client.put("key/3", "second-3", None).await?;
    client.delete("key/4", None).await?;
    let lease = client.lease_grant(600, None).await?.id();
    client.put("leased", "with a lease", Some(PutOptions::new().with_lease(lease))).await?;
    let compacted = header(client.put("key/5", "second-5", None).await?.header()).revision();
    client.compact(compacted, None).await?;
    let txn = Txn::new()
        .when([Compare::version("key/6", CompareOp::Equal, 1)])
        .and_then([TxnOp::put("key/6", "txn-6", None), TxnOp::put("key/new", "txn-new", None)]);
    client.txn(txn).await?;
    let revision = header(client.put("key/7", "after-compaction", None).await?.header()).revision();
    source.wait_converged(&[0, 1, 2]).await?;
    // A follower's copy: etcd sends the member's own backend, whichever member it is.
    let follower = (leader + 1) % 3;
    let (want, want_revision) = everything(source.member(follower)).await?;
    assert_eq!(want_revision, revision);
    assert_eq!(want.len(), 11, "{want:?}");

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("backup.db");
    source.member(follower).etcdctl(&["snapshot", "save", file.to_str().context("utf-8 path")?]).await?.ok()?;
    let (status_revision, total_keys) = status(kind, &file)?;
    assert_eq!(status_revision, revision);
    // Every revision kept since the compaction, plus bookkeeping and the lease.
    assert!(total_keys >= 11, "total keys {total_keys}");

    let mut restored = Cluster::start_prepared(ClusterConfig::new(3), |member| restore(kind, &file, member)).await?;
    restored.wait_converged(&[0, 1, 2]).await?;
    let mut new_ids = Vec::new();
    for i in 0..3 {
        let member = restored.member(i);
        assert_eq!(everything(member).await?, (want.clone(), revision), "member {}", member.name());
        let status = member.status().await?;
        new_ids.push(status.member_id);
        // A linearizable read agrees, and the compaction carried over.
        let mut client = member.client().await?;
        let got = client.get("key/3", None).await?;
        assert_eq!((got.kvs()[0].value(), header(got.header()).revision()), (&b"second-3"[..], revision));
        let err =
            client.get("key/3", Some(GetOptions::new().with_revision(compacted - 1))).await.expect_err("compacted");
        assert!(err.to_string().contains("required revision has been compacted"), "{err}");
    }
    let mut old_ids = Vec::new();
    for i in 0..3 {
        old_ids.push(source.member(i).status().await?.member_id);
    }
    assert!(new_ids.iter().all(|id| !old_ids.contains(id)), "a new cluster has new member ids");

    let leader = restored.leader().await?;
    let mut client = restored.member(leader).client().await?;
    let ttl = client.lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys())).await?;
    assert!(ttl.ttl() > 0, "the lease survives the restore: {ttl:?}");
    assert_eq!(ttl.keys(), [b"leased".to_vec()]);
    let next = header(client.put("key/8", "restored", None).await?.header()).revision();
    assert_eq!(next, revision + 1, "the restored cluster continues the revisions");
    let (want, _) = everything(restored.member(leader)).await?;

    // A restarted member recovers from its restored data dir; a member added later has no log to
    // replay from the start and gets the store from the others.
    let other = (leader + 1) % 3;
    restored.member_mut(other).restart().await?;
    let added = restored.add_member(false).await?;
    restored.wait_converged(&[0, 1, 2, added]).await?;
    for i in [other, added] {
        assert_eq!(everything(restored.member(i)).await?, (want.clone(), next), "member {}", restored.member(i).name());
    }
    Ok(())
}
