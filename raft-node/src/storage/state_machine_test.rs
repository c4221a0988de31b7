//! Tests of [`super`]: apply, commits, restarts, and snapshots built, moved and installed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kv_api::{Command, CommandResponse};
use openraft::{CommittedLeaderId, Membership};
use proto::etcdserverpb as pb;

use super::*;
use crate::storage::open;
use crate::typ::MemberNode;

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn put(log_id: LogId, key: &str, value: &str) -> Entry {
    Entry {
        log_id,
        payload: EntryPayload::Normal(Arc::new(vec![Command::Put(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            ..Default::default()
        })])),
    }
}

fn membership(index: u64) -> Entry {
    let nodes = BTreeMap::from([(
        1,
        MemberNode {
            name: "m1".into(),
            peer_urls: vec!["http://127.0.0.1:2380".into()],
            client_urls: vec!["http://127.0.0.1:2379".into()],
        },
    )]);
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1])], nodes)),
    }
}

fn all_kvs(store: &SharedStore) -> Vec<(Vec<u8>, Vec<u8>, i64)> {
    let req = pb::RangeRequest { key: vec![0], range_end: vec![0], ..Default::default() };
    let resp = store.read().range(&req).expect("range");
    resp.kvs.into_iter().map(|kv| (kv.key, kv.value, kv.mod_revision)).collect()
}

/// A member with a membership, two puts, a blank entry and a failing request applied.
async fn populated(dir: &Path) -> (StateMachine, SharedStore) {
    let (_log, mut sm, store) = open(dir).expect("open");
    let replies =
        sm.apply([membership(1), put(log_id(1, 2), "a", "1"), put(log_id(1, 3), "b", "2")]).await.expect("apply");
    assert_eq!(replies[0], vec![]);
    assert!(
        matches!(&replies[1][..], [Ok(CommandResponse::Put(r))] if r.header.as_ref().map(|h| h.revision) == Some(2))
    );
    let failing = Entry {
        log_id: log_id(2, 4),
        payload: EntryPayload::Normal(Arc::new(vec![Command::Put(pb::PutRequest {
            key: b"missing".to_vec(),
            ignore_value: true,
            ..Default::default()
        })])),
    };
    let blank = Entry { log_id: log_id(2, 5), payload: EntryPayload::Blank };
    let replies = sm.apply([failing, blank]).await.expect("apply");
    // A request's own error is its answer, not a storage failure.
    assert_eq!(replies, vec![vec![Err(kv_api::Error::KeyNotFound)], vec![]]);
    (sm, store)
}

#[tokio::test]
async fn each_command_of_an_entry_takes_its_own_revision_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut sm, store) = open(dir.path()).expect("open");
    let put = |key: &str, ignore_value: bool| {
        Command::Put(pb::PutRequest { key: key.as_bytes().to_vec(), ignore_value, ..Default::default() })
    };
    // Three clients' writes in one entry; the middle one fails on its own.
    let entry = Entry {
        log_id: log_id(1, 1),
        payload: EntryPayload::Normal(Arc::new(vec![put("a", false), put("x", true), put("b", false)])),
    };
    let replies = sm.apply([entry]).await.expect("apply");
    let revisions: Vec<_> = replies[0]
        .iter()
        .map(|reply| match reply {
            Ok(CommandResponse::Put(r)) => Ok(r.header.as_ref().map_or(0, |h| h.revision)),
            Ok(other) => panic!("not a put response: {other:?}"),
            Err(err) => Err(err.clone()),
        })
        .collect();
    assert_eq!(revisions, vec![Ok(2), Err(kv_api::Error::KeyNotFound), Ok(3)]);
    let kvs: Vec<_> = all_kvs(&store).into_iter().map(|(k, _, rev)| (k, rev)).collect();
    assert_eq!(kvs, vec![(b"a".to_vec(), 2), (b"b".to_vec(), 3)]);
}

#[tokio::test]
async fn restart_resumes_from_the_committed_applied_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (applied, kvs) = {
        let (mut sm, store) = populated(dir.path()).await;
        // The next apply past the commit interval commits everything applied so far.
        tokio::time::sleep(COMMIT_INTERVAL).await;
        sm.apply([Entry { log_id: log_id(2, 6), payload: EntryPayload::Blank }]).await.expect("apply");
        (sm.applied_state().await.expect("applied"), all_kvs(&store))
    };
    assert_eq!(applied.0, Some(log_id(2, 6)));
    assert_eq!(applied.1.log_id(), &Some(log_id(1, 1)));
    assert_eq!(kvs.len(), 2);

    let (_log, mut sm, store) = crate::storage::reopen(dir.path());
    assert_eq!(sm.applied_state().await.expect("applied"), applied);
    assert_eq!(store.read().current_revision(), 3);
    assert_eq!(all_kvs(&store), kvs);
    assert_eq!(applied.1.membership().get_node(&1).map(|n| n.name.as_str()), Some("m1"));
}

#[tokio::test]
async fn entries_applied_after_the_last_commit_apply_again_alike_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = || [membership(1), put(log_id(1, 2), "a", "1"), put(log_id(1, 3), "a", "2")];
    let first = {
        let (_log, mut sm, _store) = open(dir.path()).expect("open");
        sm.apply(entries()).await.expect("apply")
    };
    // Dropped within the commit interval, as by a crash: the backend has none of it, and the
    // log (which openraft replays from the committed applied id) gives the same answers again.
    let (_log, mut sm, store) = crate::storage::reopen(dir.path());
    assert_eq!(sm.applied_state().await.expect("applied").0, None);
    assert_eq!(store.read().current_revision(), 1);
    assert_eq!(sm.apply(entries()).await.expect("apply"), first);
    assert_eq!(all_kvs(&store), vec![(b"a".to_vec(), b"2".to_vec(), 3)]);
}

#[tokio::test]
async fn writes_past_the_byte_bound_are_committed_without_waiting_for_the_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = "v".repeat(64 * 1024);
    {
        let (_log, mut sm, _store) = open(dir.path()).expect("open");
        sm.apply([membership(1)]).await.expect("apply");
        // Well within the commit interval: a few small writes stay staged...
        sm.apply([put(log_id(1, 2), "small", "1")]).await.expect("apply");
        // ... until what is staged reaches the byte bound.
        let puts = (0..COMMIT_BYTES / big.len() + 1).map(|i| put(log_id(1, 3 + i as u64), &format!("k{i}"), &big));
        sm.apply(puts).await.expect("apply");
    }
    let (_log, mut sm, store) = crate::storage::reopen(dir.path());
    let applied = sm.applied_state().await.expect("applied").0.expect("committed");
    assert_eq!(applied.index, 3 + (COMMIT_BYTES / big.len()) as u64);
    assert_eq!(all_kvs(&store).len(), 1 + COMMIT_BYTES / big.len() + 1);
}

#[tokio::test]
async fn snapshot_installs_on_a_fresh_member() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (mut leader, leader_store) = populated(leader_dir.path()).await;
    // Compaction state travels too.
    let compact = Entry {
        log_id: log_id(2, 6),
        payload: EntryPayload::Normal(Arc::new(vec![Command::Compact(pb::CompactionRequest {
            revision: 2,
            ..Default::default()
        })])),
    };
    leader.apply([compact]).await.expect("apply");
    let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.expect("build");
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(2, 6)));
    assert!(snapshot.meta.snapshot_id.starts_with("2-6-"));

    let follower_dir = tempfile::tempdir().expect("tempdir");
    {
        let (_log, mut follower, follower_store) = open(follower_dir.path()).expect("open");
        follower.apply([put(log_id(1, 1), "stale", "x")]).await.expect("apply");
        let received = receive(&mut follower, snapshot.snapshot).await;
        follower.install_snapshot(&snapshot.meta, received).await.expect("install");

        assert_eq!(all_kvs(&follower_store), all_kvs(&leader_store));
        let revisions = {
            let store = follower_store.read();
            (store.current_revision(), store.compacted_revision())
        };
        assert_eq!(revisions, (3, 2));
        assert_eq!(follower.applied_state().await.expect("applied"), leader.applied_state().await.expect("applied"));
    }

    // The installed state and the current snapshot survive a restart.
    let (_log, mut follower, follower_store) = crate::storage::reopen(follower_dir.path());
    assert_eq!(all_kvs(&follower_store), all_kvs(&leader_store));
    assert_eq!(follower.applied_state().await.expect("applied").0, Some(log_id(2, 6)));
    let current = follower.get_current_snapshot().await.expect("current").expect("a snapshot");
    assert_eq!(current.meta, snapshot.meta);
    let leader_current = leader.get_current_snapshot().await.expect("current").expect("a snapshot");
    assert_eq!(read_all(current.snapshot).await, read_all(leader_current.snapshot).await);
    // Only the current snapshot's file is left in the snapshot directory.
    let files: Vec<_> = std::fs::read_dir(follower_dir.path().with_extension("snap"))
        .expect("snap dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("name"))
        .collect();
    assert_eq!(files, vec![format!("{}.snap", snapshot.meta.snapshot_id)]);
}

async fn read_all(mut data: Box<SnapshotFile>) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    data.read_to_end(&mut bytes).await.expect("read snapshot");
    bytes
}

/// Moves a snapshot into `follower` as openraft does: chunks written into a file it begins.
async fn receive(follower: &mut StateMachine, data: Box<SnapshotFile>) -> Box<SnapshotFile> {
    use tokio::io::AsyncWriteExt;
    let bytes = read_all(data).await;
    let mut received = follower.begin_receiving_snapshot().await.expect("begin");
    for chunk in bytes.chunks(7) {
        received.write_all(chunk).await.expect("write chunk");
    }
    received.shutdown().await.expect("shutdown");
    received
}

#[tokio::test]
async fn a_snapshot_that_does_not_read_leaves_the_store_as_it_was() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (mut leader, _) = populated(leader_dir.path()).await;
    let snapshot = leader.get_snapshot_builder().await.build_snapshot().await.expect("build");
    let mut bytes = read_all(snapshot.snapshot).await;
    bytes.truncate(bytes.len() - 3);

    let follower_dir = tempfile::tempdir().expect("tempdir");
    let (_log, mut follower, follower_store) = open(follower_dir.path()).expect("open");
    follower.apply([put(log_id(1, 1), "kept", "x")]).await.expect("apply");
    let before = all_kvs(&follower_store);
    let mut received = follower.begin_receiving_snapshot().await.expect("begin");
    tokio::io::AsyncWriteExt::write_all(&mut received, &bytes).await.expect("write");
    let err = follower.install_snapshot(&snapshot.meta, received).await.expect_err("a cut snapshot");
    assert!(err.to_string().contains("reading the snapshot"), "{err}");
    assert_eq!(all_kvs(&follower_store), before);
    assert_eq!(follower.applied_state().await.expect("applied").0, Some(log_id(1, 1)));
    assert!(follower.get_current_snapshot().await.expect("current").is_none());
}

#[tokio::test]
async fn a_snapshot_kept_in_the_tree_moves_to_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (meta, kvs, bytes) = {
        let (mut sm, store) = populated(dir.path()).await;
        let snapshot = sm.get_snapshot_builder().await.build_snapshot().await.expect("build");
        let meta = snapshot.meta.clone();
        let bytes = read_all(snapshot.snapshot).await;
        // As a member before snapshot files kept it: metadata and content in the tree.
        let db = sm.snapshot.db().clone();
        let tree = db.open_tree("snapshot").expect("tree");
        tree.remove("current_file").expect("remove");
        tree.insert("current", encode(&(&meta, &bytes)).expect("encode")).expect("insert");
        db.flush().expect("flush");
        std::fs::remove_dir_all(dir.path().with_extension("snap")).expect("remove files");
        (meta, all_kvs(&store), bytes)
    };
    // A leftover of an unfinished reception goes at open.
    let snap_dir = dir.path().with_extension("snap");
    std::fs::create_dir_all(&snap_dir).expect("dir");
    std::fs::write(snap_dir.join("receive-0.tmp"), b"partial").expect("leftover");
    let (_log, mut sm, store) = crate::storage::reopen(dir.path());
    assert_eq!(all_kvs(&store), kvs);
    let current = sm.get_current_snapshot().await.expect("current").expect("a snapshot");
    assert_eq!(current.meta, meta);
    assert_eq!(read_all(current.snapshot).await, bytes);
    assert!(!snap_dir.join("receive-0.tmp").exists());
}

#[tokio::test]
async fn an_older_build_never_replaces_a_newer_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut sm, _store) = populated(dir.path()).await;
    let old_builder = sm.get_snapshot_builder().await;
    sm.apply([put(log_id(2, 6), "c", "3")]).await.expect("apply");
    let newer = sm.get_snapshot_builder().await.build_snapshot().await.expect("build");
    // A build that read the store before the last apply finishes after the newer one.
    let older_meta = SnapshotMeta { last_log_id: Some(log_id(2, 5)), ..newer.meta.clone() };
    let (_, older_path) = old_builder.snapshot.temporary("build").expect("temporary");
    old_builder.snapshot.save(&older_meta, &older_path).await.expect("save");
    let current = sm.get_current_snapshot().await.expect("current").expect("a snapshot");
    assert_eq!(current.meta, newer.meta);
    assert!(!older_path.exists(), "the older build's file is removed");
}
