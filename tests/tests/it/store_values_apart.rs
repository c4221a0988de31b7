//! `--experimental-values-apart` (ours only: not an etcd flag): the store keeps its large values in a
//! value log beside its sled tree. Everything a client reads stays the same through a crash, a
//! compaction, a defragmentation and another crash, and the values really are apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use etcd_client::GetOptions;
use tests::Member;

/// The value of the `version`th write of big key `i`: distinct per key and version, 1–2 KB.
fn big(i: usize, version: u8) -> Vec<u8> {
    (0..1_000 + i * 3).map(|n| (n as u8).wrapping_mul(31).wrapping_add(i as u8) ^ version).collect()
}

/// The value log segments of the store's current generation, with their sizes.
fn value_segments(data_dir: &Path) -> anyhow::Result<Vec<(PathBuf, u64)>> {
    let store = data_dir.join("member").join("db.kv");
    let current = std::fs::read_to_string(store.join("CURRENT")).context("CURRENT")?;
    let values = store.join(current.trim()).join("values");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&values).with_context(|| format!("{}", values.display()))? {
        let entry = entry?;
        out.push((entry.path(), entry.metadata()?.len()));
    }
    Ok(out)
}

/// Reads every key under `big/` and `small/`, and `big/000` as it was at `old_rev`, and compares.
async fn check(member: &Member, want: &BTreeMap<String, Vec<u8>>, old_rev: Option<i64>) -> anyhow::Result<()> {
    let mut client = member.client().await?;
    let mut got = BTreeMap::new();
    for prefix in ["big/", "small/"] {
        let resp = client.get(prefix, Some(GetOptions::new().with_prefix())).await?;
        for kv in resp.kvs() {
            got.insert(kv.key_str()?.to_string(), kv.value().to_vec());
        }
    }
    assert_eq!(got.len(), want.len(), "keys read back");
    assert!(got == *want, "a value read back differs from the one written");
    // One key at a time, as kube-apiserver reads them.
    let one = client.get("big/123", None).await?;
    assert_eq!(one.kvs().first().map(|kv| kv.value()), want.get("big/123").map(|v| v.as_slice()));
    if let Some(rev) = old_rev {
        let old = client.get("big/000", Some(GetOptions::new().with_revision(rev))).await?;
        assert_eq!(old.kvs().first().map(|kv| kv.value().to_vec()), Some(big(0, 0)), "the history at {rev}");
    }
    Ok(())
}

#[tokio::test]
async fn values_kept_apart_read_back_through_crashes_compaction_and_defrag() -> anyhow::Result<()> {
    if tests::ServerKind::from_env() == tests::ServerKind::Etcd {
        return Ok(());
    }
    let config = tests::MemberConfig {
        extra_args: vec!["--experimental-values-apart".into()],
        ..tests::MemberConfig::default()
    };
    let mut member = Member::start_with(config).await?;
    let mut client = member.client().await?;
    let mut want = BTreeMap::new();
    for i in 0..300 {
        client.put(format!("big/{i:03}"), big(i, 0), None).await?;
        client.put(format!("small/{i:03}"), format!("s{i}"), None).await?;
        want.insert(format!("big/{i:03}"), big(i, 0));
        want.insert(format!("small/{i:03}"), format!("s{i}").into_bytes());
    }
    let first_versions = client.get("big/299", None).await?.header().context("header")?.revision();
    for i in 0..150 {
        client.put(format!("big/{i:03}"), big(i, 1), None).await?;
        want.insert(format!("big/{i:03}"), big(i, 1));
    }
    check(&member, &want, Some(first_versions)).await?;

    // A crash: what sled had not flushed is applied again from the log, appending those values again.
    member.restart().await?;
    check(&member, &want, Some(first_versions)).await?;

    // Compacting the first versions away (which commits whatever apply staged), then a defragmentation:
    // only live values are copied.
    let mut client = member.client().await?;
    let now = client.get("big/000", None).await?.header().context("header")?.revision();
    member.etcdctl(&["compaction", "--physical", &now.to_string()]).await?.ok()?;
    let apart: u64 = value_segments(&member.data_dir())?.iter().map(|(_, len)| len).sum();
    let written: usize =
        (0..300).map(|i| big(i, 0).len()).sum::<usize>() + (0..150).map(|i| big(i, 1).len()).sum::<usize>();
    assert!(apart >= written as u64, "the value log holds {apart} bytes, less than the {written} written");
    member.etcdctl(&["defrag"]).await?.ok()?;
    check(&member, &want, None).await?;
    let after: u64 = value_segments(&member.data_dir())?.iter().map(|(_, len)| len).sum();
    let live: usize = want.iter().filter(|(k, _)| k.starts_with("big/")).map(|(_, v)| v.len()).sum();
    assert!(
        after >= live as u64 && after < apart,
        "after the defrag the value log holds {after} bytes ({live} live, {apart} before)"
    );
    let old = client.get("big/000", Some(GetOptions::new().with_revision(first_versions))).await;
    assert!(old.is_err(), "the compacted history is gone");

    member.restart().await?;
    check(&member, &want, None).await?;
    Ok(())
}
