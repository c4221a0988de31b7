//! Compaction and defragmentation of a store with a sizeable history, while a client keeps writing:
//! etcd answers a compaction at once and deletes in the background, and defragments while writes
//! go on; etcdctl gives up after five seconds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tests::Member;
use tokio::task::JoinSet;

const KEYS: usize = 5_000;
const REVISIONS: usize = 50_000;
const WRITERS: usize = 32;

/// Puts `REVISIONS` values of 256 bytes over `KEYS` keys, from many clients at once.
async fn load(member: &Member) -> anyhow::Result<()> {
    let mut writers = JoinSet::new();
    for writer in 0..WRITERS {
        let mut client = member.client().await?;
        writers.spawn(async move {
            for n in (writer..REVISIONS).step_by(WRITERS) {
                client.put(format!("load/{:05}", n % KEYS), vec![b'v'; 256], None).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = writers.join_next().await {
        done??;
    }
    Ok(())
}

/// When each of a client's puts finished and how long it took.
type Puts = Vec<(Instant, Duration)>;

/// A client putting one key over and over until `stop`.
async fn keep_writing(
    member: &Member,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Puts>>> {
    let mut client = member.client().await?;
    Ok(tokio::spawn(async move {
        let mut puts = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            client.put("writer", puts.len().to_string(), None).await.context("a put while compacting")?;
            puts.push((Instant::now(), started.elapsed()));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(puts)
    }))
}

/// The puts that finished while `[from, to]` ran, and the slowest of them.
fn during(puts: &Puts, from: Instant, to: Instant) -> (usize, Duration) {
    let inside = puts.iter().filter(|(at, _)| *at >= from && *at <= to);
    inside.fold((0, Duration::ZERO), |(n, max), (_, took)| (n + 1, max.max(*took)))
}

/// `snapshot save` then `snapshot status`: the entries the member's database holds.
async fn entries(member: &Member) -> anyhow::Result<u64> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("s.db");
    let file = file.to_str().context("utf-8 path")?;
    member.etcdctl(&["snapshot", "save", file]).await?.ok()?;
    let status = tests::etcdctl::run(&member.endpoint(), &["-w", "json", "snapshot", "status", file], None).await?;
    status.json()?["totalKey"].as_u64().context("totalKey")
}

async fn db_size(member: &Member) -> anyhow::Result<i64> {
    Ok(member.client().await?.status().await?.db_size())
}

#[tokio::test]
async fn compaction_and_defrag_of_a_long_history_let_writes_go_on() -> anyhow::Result<()> {
    let member = Member::start().await?;
    load(&member).await?;
    let mut client = member.client().await?;
    let middle = client.get("load/00000", None).await?.header().context("header")?.revision() - (REVISIONS / 2) as i64;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = keep_writing(&member, stop.clone()).await?;

    // A plain compaction answers once applied: etcdctl does not time out, and reads below fail at once.
    let started = Instant::now();
    member.etcdctl(&["compaction", &middle.to_string()]).await?.ok()?;
    let compacted = (started, Instant::now());
    let old = client.get("load/00000", Some(etcd_client::GetOptions::new().with_revision(middle - 1))).await;
    let (_, message) = tests::grpc_error(&old.expect_err("compacted")).context("a server error")?;
    assert_eq!(message, "etcdserver: mvcc: required revision has been compacted");

    // A physical one answers once the history below it is deleted: one revision per key is left.
    let end = client.get("load/00000", None).await?.header().context("header")?.revision();
    member.etcdctl(&["compaction", "--physical", &end.to_string()]).await?.ok()?;
    let physical = (compacted.1, Instant::now());
    let left = entries(&member).await?;
    assert!(left < (KEYS + 1_000) as u64, "{left} entries left after a physical compaction of {REVISIONS} revisions");

    let before = db_size(&member).await?;
    let started = Instant::now();
    member.etcdctl(&["defrag"]).await?.ok()?;
    let defragmented = (started, Instant::now());
    let after = db_size(&member).await?;
    assert!(after < before, "defragmentation gave nothing back: {before} -> {after} bytes");

    stop.store(true, Ordering::Relaxed);
    let puts = writer.await??;
    for (what, (from, to)) in [("compaction", compacted), ("physical compaction", physical), ("defrag", defragmented)] {
        let (count, slowest) = during(&puts, from, to);
        eprintln!("{what}: {:?}, {count} puts finished meanwhile, the slowest in {slowest:?}", to - from);
        // Generous bounds for a busy machine: writes went on, none waited for the whole operation.
        if to - from > Duration::from_secs(2) {
            assert!(count > 0, "no put finished during the {what} ({:?})", to - from);
        }
        assert!(slowest < Duration::from_secs(3), "a put waited {slowest:?} during the {what}");
    }
    // Every put of the writer is there.
    let last = client.get("writer", None).await?;
    assert_eq!(last.kvs().first().map(|kv| kv.value()), Some((puts.len() - 1).to_string().as_bytes()));
    Ok(())
}

/// `kill -9` while the compactor deletes (slowed down by etcd 3.6's flags): the restarted member
/// still refuses reads below the compacted revision, answers the same above it, and finishes the
/// deletion it resumed. Ours only: etcd 3.4 has no `--compaction-sleep-interval`.
#[tokio::test]
async fn a_compaction_interrupted_by_kill9_resumes_after_the_restart() -> anyhow::Result<()> {
    if tests::ServerKind::from_env() == tests::ServerKind::Etcd {
        return Ok(());
    }
    const KEYS: usize = 50;
    let config = tests::MemberConfig {
        extra_args: vec!["--compaction-batch-limit=10".into(), "--compaction-sleep-interval=50ms".into()],
        ..tests::MemberConfig::default()
    };
    let mut member = Member::start_with(config).await?;
    let mut client = member.client().await?;
    let mut revision = 0;
    for n in 0..1_000 {
        revision =
            client.put(format!("k/{:02}", n % KEYS), n.to_string(), None).await?.header().context("header")?.revision();
    }
    let all = etcd_client::GetOptions::new().with_prefix();
    let want = client.get("k/", Some(all.clone())).await?;
    // About 95 batches 50 ms apart: the kill lands in the middle.
    client.compact(revision, None).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    member.kill9()?;
    member.restart().await?;
    assert!(member.log().contains("resuming an unfinished compaction"), "the restart found nothing to resume");

    let mut client = member.client().await?;
    let old = client.get("k/00", Some(etcd_client::GetOptions::new().with_revision(revision - 1))).await;
    let (_, message) = tests::grpc_error(&old.expect_err("compacted")).context("a server error")?;
    assert_eq!(message, "etcdserver: mvcc: required revision has been compacted");
    let got = client.get("k/", Some(all)).await?;
    let seen = |kvs: &[etcd_client::KeyValue]| -> Vec<_> {
        kvs.iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec(), kv.mod_revision(), kv.version())).collect()
    };
    assert_eq!(seen(got.kvs()), seen(want.kvs()), "the keys read as before the kill");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = entries(&member).await?;
        if left < (KEYS + 20) as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "{left} entries still stored a minute after the restart");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// A physical compaction of more keys than one step of ours compacts in the key index (10,000), with
/// no write after it: the member's own steps finish the index and the deletion, so the answer comes
/// (etcdctl would time out after five seconds otherwise), and one revision per key is left.
#[tokio::test]
async fn a_physical_compaction_of_many_keys_answers_with_no_write_after_it() -> anyhow::Result<()> {
    const KEYS: usize = 25_000;
    const PER_TXN: usize = 100;
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let mut revision = 0;
    for round in 0..2 {
        for first in (0..KEYS).step_by(PER_TXN) {
            let puts = (first..first + PER_TXN)
                .map(|n| etcd_client::TxnOp::put(format!("many/{n:05}"), format!("{round}"), None))
                .collect::<Vec<_>>();
            let answer = client.txn(etcd_client::Txn::new().and_then(puts)).await?;
            revision = answer.header().context("header")?.revision();
        }
    }
    member.etcdctl(&["compaction", "--physical", &revision.to_string()]).await?.ok()?;
    let left = entries(&member).await?;
    assert!(left <= (KEYS + 10) as u64, "{left} entries left after a physical compaction of {KEYS} keys");
    let got = client.get("many/", Some(etcd_client::GetOptions::new().with_prefix().with_count_only())).await?;
    assert_eq!(got.count(), KEYS as i64);
    Ok(())
}
