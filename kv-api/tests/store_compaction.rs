//! Compaction in two halves: apply marks the revision compacted at once, the store's compactor deletes
//! the freed revisions in the background; a store loaded halfway through finishes the job.

mod common;

use std::time::Duration;

use common::*;
use kv_api::compactor::{CompactionConfig, META_FINISHED_COMPACT_REV};
use kv_api::hash;
use kv_api::store::META_COMPACT_REV;

/// One revision per batch and a pause no test waits out: deletion stays in progress until a test
/// speeds it up with [`fast`].
fn stalled() -> CompactionConfig {
    CompactionConfig { batch_limit: 1, sleep_interval: Duration::from_secs(3600) }
}

fn fast() -> CompactionConfig {
    CompactionConfig { batch_limit: 2, sleep_interval: Duration::ZERO }
}

/// The fixture's history and then some: overwrites, deletes, a key deleted and put again.
fn history(store: &mut MvccStore) {
    for (key, value) in [("a", "5"), ("d", "6"), ("a", "7")] {
        put(store, put_req(key, value));
    }
    delete(store, del_req("c", ""));
    put(store, put_req("c", "8"));
    delete(store, del_req("d", "e"));
    put(store, put_req("ab", "9"));
    store.commit().expect("commit");
    assert_eq!(store.current_revision(), 17);
}

/// The fixture, committed, in a store with the compactor settings `config`.
fn fixture_with(config: CompactionConfig) -> (Arc<MemBackend>, MvccStore) {
    let (backend, mut store) = fixture();
    store.commit().expect("commit");
    drop(store);
    let store = MvccStore::open_with(backend.clone(), config).expect("open");
    (backend, store)
}

fn stored(backend: &MemBackend) -> Vec<Revision> {
    let mut out = Vec::new();
    kv_api::Backend::scan(backend, Bucket::Key, &mut |key, _| {
        out.push(Revision::from_bytes(key).expect("a revision key"));
        true
    })
    .expect("scan");
    out
}

fn meta_revision(backend: &MemBackend, key: &[u8]) -> Option<i64> {
    let bytes = kv_api::Backend::get(backend, Bucket::Meta, key).expect("get")?;
    Some(i64::from_be_bytes(bytes.try_into().expect("8 bytes")))
}

/// Every read a client could make: all keys at every revision (and past both ends), and each key's
/// history from the compacted revision on.
fn reads(store: &MvccStore) -> Vec<String> {
    let mut out = Vec::new();
    for revision in 0..=store.current_revision() + 1 {
        out.push(format!("{revision}: {:?}", store.range(&range_at(revision))));
    }
    let from = store.compacted_revision();
    out.push(format!("history: {:?}", store.history(kv_api::index::KeyRange::new(b"\0", b"\0"), from, i64::MAX)));
    out
}

/// The fixture and [`history`], compacted at `at` and finished.
fn reference(at: i64) -> (Arc<MemBackend>, MvccStore) {
    let (backend, mut store) = fixture();
    history(&mut store);
    compact(&mut store, at).expect("compact");
    store.commit().expect("commit");
    store.wait_compacted();
    (backend, store)
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    runtime.block_on(async { tokio::time::timeout(Duration::from_secs(20), future).await.expect("in time") })
}

#[test]
fn reads_below_the_compacted_revision_fail_at_once_and_the_data_goes_later() {
    let (backend, mut store) = fixture_with(stalled());
    history(&mut store);
    let before = stored(&backend);
    compact(&mut store, 12).expect("compact");
    // Applied, not even committed: reads below fail, reads at it see what they saw.
    assert_eq!(store.range(&range_at(11)), Err(Error::Compacted));
    let at12 = range(&store, range_at(12));
    store.commit().expect("commit");
    assert_eq!(meta_revision(&backend, META_COMPACT_REV), Some(12));
    // The compactor deleted one revision and pauses: most of the dead ones are still stored.
    let finished = store.compaction_finished();
    assert!(*finished.borrow() < 12);
    assert!(stored(&backend).len() + 1 >= before.len(), "deletion waits for the pause");
    assert_eq!(range(&store, range_at(12)), at12);

    store.compactor().configure(fast());
    block_on(store.compaction_finished().wait_for(|done| *done >= 12)).expect("compactor alive");
    let (reference, _) = reference(12);
    assert_eq!(stored(&backend), stored(&reference));
    assert!(stored(&backend).len() < before.len());
    assert_eq!(meta_revision(&backend, META_FINISHED_COMPACT_REV), Some(12));
    assert_eq!(range(&store, range_at(12)), at12);
}

#[test]
fn compactions_queue_in_order_and_end_as_the_last_alone() {
    let (backend, mut store) = fixture_with(stalled());
    history(&mut store);
    let mut finished = store.compaction_finished();
    for at in [5, 9, 14] {
        compact(&mut store, at).expect("compact");
        store.commit().expect("commit");
    }
    assert_eq!(store.compacted_revision(), 14);
    store.compactor().configure(fast());
    let mut seen = vec![*finished.borrow()];
    while *seen.last().expect("one") < 14 {
        block_on(finished.changed()).expect("compactor alive");
        seen.push(*finished.borrow());
    }
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "finished goes forward: {seen:?}");
    store.wait_compacted();
    let (reference, reference_store) = reference(14);
    assert_eq!(stored(&backend), stored(&reference));
    assert_eq!(reads(&store), reads(&reference_store));
    assert_eq!(meta_revision(&backend, META_FINISHED_COMPACT_REV), Some(14));
}

/// Every state a crash can leave (the freed revisions are deleted oldest first, so a prefix of them is
/// gone), loaded: it answers as the finished compaction does, hashes alike while the compactor is at
/// work, and ends with the same content.
#[test]
fn a_store_loaded_halfway_through_a_compaction_finishes_it() {
    const AT: i64 = 13;
    let (uncompacted, mut full) = fixture();
    history(&mut full);
    let (reference, reference_store) = reference(AT);
    let kept = stored(&reference);
    let freed: Vec<Revision> = stored(&uncompacted).into_iter().filter(|rev| !kept.contains(rev)).collect();
    assert!(freed.len() >= 6, "the history frees enough to matter: {freed:?}");
    let want_hash = hash::hash(&reference_store).expect("hash");
    let want_hash_kv = hash::hash_kv(&reference_store, 0).expect("hash kv");
    let want_reads = reads(&reference_store);

    for deleted in 0..=freed.len() {
        let backend = Arc::new(MemBackend::default());
        let mut batch = kv_api::WriteBatch::default();
        for (bucket, key, value) in full.export().expect("export") {
            batch.put(bucket, key, value);
        }
        batch.put(Bucket::Meta, META_COMPACT_REV, AT.to_be_bytes());
        for rev in &freed[..deleted] {
            batch.delete(Bucket::Key, rev.to_bytes());
        }
        kv_api::Backend::write(&*backend, batch).expect("write");

        let store = MvccStore::open_with(backend.clone(), stalled()).expect("open");
        let what = format!("{deleted} of {} freed revisions deleted", freed.len());
        assert_eq!(store.compacted_revision(), AT, "{what}");
        assert_eq!(reads(&store), want_reads, "{what}: reads");
        assert_eq!(hash::hash(&store).expect("hash"), want_hash, "{what}: hash while deleting");
        assert_eq!(hash::hash_kv(&store, 0).expect("hash kv"), want_hash_kv, "{what}: hash kv while deleting");

        store.compactor().configure(fast());
        store.wait_compacted();
        assert_eq!(stored(&backend), kept, "{what}: left");
        assert_eq!(meta_revision(&backend, META_FINISHED_COMPACT_REV), Some(AT), "{what}");
        assert_eq!(*store.compaction_finished().borrow(), AT, "{what}");
        assert_eq!(hash::hash(&store).expect("hash"), want_hash, "{what}: hash once done");
        assert_eq!(hash::hash_kv(&store, 0).expect("hash kv"), want_hash_kv, "{what}: hash kv once done");
    }
}

#[test]
fn a_snapshot_taken_while_deleting_installs_to_the_same_store() {
    let (_, mut store) = fixture_with(stalled());
    history(&mut store);
    compact(&mut store, 15).expect("compact");
    store.commit().expect("commit");
    let exported = {
        let _paused = store.compactor().pause();
        store.export().expect("export")
    };
    let (_, reference_store) = reference(15);
    let copy_backend = Arc::new(MemBackend::default());
    let mut copy = MvccStore::open_with(copy_backend.clone(), fast()).expect("open");
    copy.install(exported).expect("install");
    assert_eq!(reads(&copy), reads(&reference_store));
    assert_eq!(hash::hash(&copy).expect("hash"), hash::hash(&reference_store).expect("hash"));
    copy.wait_compacted();
    let (reference, _) = reference(15);
    assert_eq!(stored(&copy_backend), stored(&reference));
}

#[test]
fn a_store_from_before_background_compaction_records_its_compaction_finished() {
    let (backend, store) = reference(9);
    drop(store);
    let mut batch = kv_api::WriteBatch::default();
    batch.delete(Bucket::Meta, META_FINISHED_COMPACT_REV);
    kv_api::Backend::write(&*backend, batch).expect("write");
    let before = stored(&backend);
    let store = MvccStore::open(backend.clone()).expect("open");
    store.wait_compacted();
    assert_eq!(stored(&backend), before, "nothing was left to delete");
    assert_eq!(meta_revision(&backend, META_FINISHED_COMPACT_REV), Some(9));
    assert_eq!(*store.compaction_finished().borrow(), 9);
}

#[test]
fn a_split_export_is_the_store_at_the_split_whatever_is_written_and_compacted_after() {
    let (_, mut store) = fixture_with(fast());
    history(&mut store);
    let mut at_split = store.export().expect("export");
    let mut exported = Vec::new();
    let keys = store
        .export_split(|bucket, key, value| {
            exported.push((bucket, key.to_vec(), value.to_vec()));
            Ok(())
        })
        .expect("split");
    assert_eq!(keys.revision(), 17);
    assert!(exported.iter().all(|(bucket, _, _)| *bucket != Bucket::Key), "the key bucket comes later");
    // After the split, without the store's lock: writes, and a compaction whose deletions would
    // remove revisions the export has still to read.
    put(&mut store, put_req("a", "after"));
    delete(&mut store, del_req("ab", ""));
    compact(&mut store, 16).expect("compact");
    store.commit().expect("commit");
    keys.run(|bucket, key, value| {
        exported.push((bucket, key.to_vec(), value.to_vec()));
        Ok(())
    })
    .expect("run");
    exported.sort();
    at_split.sort();
    assert_eq!(exported, at_split);
    // Once the export is done the compaction goes ahead.
    store.wait_compacted();
    assert!(store.export().expect("export").len() < at_split.len());
}

/// A compaction of more keys than one step of the key index takes: applying it does no index work,
/// the steps after the commit do, and reads, hashes and what the compactor deletes are at every step
/// what a compaction done at once gives.
#[test]
fn the_key_index_compacts_in_steps_after_the_commit() {
    let keys: usize = 25_000;
    let build = || {
        let backend = Arc::new(MemBackend::default());
        let mut store = MvccStore::open_with(backend.clone(), fast()).expect("open");
        for round in 0..2 {
            for k in 0..keys {
                put(&mut store, put_req(&format!("k{k:05}"), &format!("{round}")));
            }
        }
        delete(&mut store, del_req("k00010", "k00020"));
        store.commit().expect("commit");
        (backend, store)
    };
    let (backend, mut store) = build();
    let at = store.current_revision() - 100;
    compact(&mut store, at).expect("compact");
    assert!(store.index_compaction_pending() && store.compaction_staged());
    store.commit().expect("commit");
    assert!(store.index_compaction_pending(), "one step does not cover {keys} keys");
    let probes = [range_at(at), range_at(0), range_req("k00005", "k00030"), all_keys()];
    let reads = |store: &MvccStore| probes.iter().map(|req| format!("{:?}", store.range(req))).collect::<Vec<_>>();
    let before = reads(&store);
    let (kv_hash, full_hash) = (hash::hash_kv(&store, 0).expect("hash"), hash::hash(&store).expect("hash"));
    // The commit took the first step; the one that does the last key hands the work over.
    let mut steps = 1;
    loop {
        let more = store.compact_index_step();
        steps += 1;
        assert_eq!(reads(&store), before, "reads changed at step {steps}");
        assert_eq!(hash::hash_kv(&store, 0).expect("hash"), kv_hash);
        assert_eq!(hash::hash(&store).expect("hash"), full_hash);
        if !more {
            break;
        }
    }
    assert_eq!(steps, keys.div_ceil(10_000));
    store.wait_compacted();
    // Each key keeps its newest revision at or before `at`, and everything after it: 99 puts and the
    // 10 tombstones of the delete.
    let (reference_backend, mut reference) = build();
    compact(&mut reference, at).expect("compact");
    reference.commit().expect("commit");
    reference.finish_index_compaction();
    reference.wait_compacted();
    assert!(!reference.index_compaction_pending());
    assert_eq!(stored(&backend), stored(&reference_backend));
    assert_eq!(stored(&backend).len(), keys + 99 + 10);
    assert_eq!(reads(&store), before);
}

#[test]
fn a_compaction_start_wakes_whoever_drives_the_steps_even_if_it_waits_later() {
    let (_backend, mut store) = fixture_with(fast());
    history(&mut store);
    let started = store.index_compaction_started();
    let waited = |started: &Arc<tokio::sync::Notify>| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        runtime.block_on(async { tokio::time::timeout(Duration::from_millis(50), started.notified()).await.is_ok() })
    };
    assert!(!waited(&started), "no compaction started yet");
    let at = store.current_revision() - 1;
    compact(&mut store, at).expect("compact");
    assert!(store.index_compaction_pending());
    // The start came before the wait: it is kept for it.
    assert!(waited(&started), "the start was lost");
    assert!(!waited(&started), "one start wakes once");
}
