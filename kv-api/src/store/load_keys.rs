//! Reading every revision of the key bucket when a member starts, to rebuild the key index.
//!
//! Reading and decoding the stored revisions is most of a start's time (a lookup per entry in the
//! backend). With many revisions, reader threads read ranges of revisions in turn (a range is taken
//! by the first idle reader), and the caller gets every revision in revision order, as one thread
//! reading them would give them: a range's revisions are handed on only once every earlier range's
//! are. Readers stay at most [`AHEAD`] ranges ahead of the caller, which bounds what waits in memory.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use parking_lot::{Condvar, Mutex};

use super::entry::{decode_entry_head, EntryHead};
use crate::backend::{try_scan_from, Backend, Bucket};
use crate::error::{Error, Result};
use crate::revision::Revision;

/// Below this span of main revisions, one thread reads them all (a main revision may hold many: a
/// txn's puts share one).
pub(crate) const PARALLEL_FROM: i64 = 1024;
/// Ranges the span is cut into: many more than readers, so that a range of old, mostly compacted
/// revisions and one of recent, dense ones even out.
pub(crate) const RANGES: i64 = 64;
/// How many ranges past the one the caller waits for may be read.
const AHEAD: usize = 4;

/// One stored revision, as a reader hands it on.
struct Loaded {
    rev: Revision,
    tombstone: bool,
    key: Vec<u8>,
    create_revision: i64,
    version: i64,
    lease: i64,
}

fn corrupt_key() -> Error {
    Error::Internal("corrupt revision key".into())
}

/// A stored revision read in place: its revision, whether it is a tombstone, and its head.
fn decode<'a>(key: &[u8], value: &'a [u8]) -> Result<(Revision, bool, EntryHead<'a>)> {
    let rev = Revision::from_bytes(key).ok_or_else(corrupt_key)?;
    let (tombstone, head) = decode_entry_head(value)?;
    Ok((rev, tombstone, head))
}

/// Calls `apply` on every revision of the key bucket in revision order: its revision, whether it is a
/// tombstone, and its head. With `readers` threads when the bucket spans at least `parallel_from`
/// main revisions, cut into `ranges` ranges.
pub(crate) fn each_revision(
    backend: &dyn Backend,
    readers: usize,
    parallel_from: i64,
    ranges: i64,
    mut apply: impl FnMut(Revision, bool, EntryHead<'_>) -> Result<()>,
) -> Result<()> {
    let mut first = None;
    try_scan_from(backend, Bucket::Key, &[], |key, _| {
        first = Some(Revision::from_bytes(key).ok_or_else(corrupt_key)?);
        Ok(false)
    })?;
    let last =
        backend.last_key(Bucket::Key)?.map(|key| Revision::from_bytes(&key).ok_or_else(corrupt_key)).transpose()?;
    let (Some(first), Some(last)) = (first, last) else { return Ok(()) };
    let span = last.main - first.main + 1;
    if readers < 2 || span < parallel_from {
        return try_scan_from(backend, Bucket::Key, &[], |key, value| {
            let (rev, tombstone, head) = decode(key, value)?;
            apply(rev, tombstone, head).map(|()| true)
        });
    }
    // Range n holds the main revisions [starts[n], starts[n + 1]).
    let width = ((span + ranges - 1) / ranges.max(1)).max(1);
    let starts: Vec<i64> = (0..ranges).map(|n| first.main + n * width).take_while(|main| *main <= last.main).collect();
    let end_of = |n: usize| starts.get(n + 1).copied().unwrap_or(i64::MAX);

    let next_range = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    // How many ranges the caller has applied, for readers to wait on.
    let applied = (Mutex::new(0usize), Condvar::new());
    let (sender, receiver) = mpsc::channel::<(usize, Result<Vec<Loaded>>)>();
    std::thread::scope(|scope| {
        for _ in 0..readers {
            let sender = sender.clone();
            let (next_range, stop, applied, starts) = (&next_range, &stop, &applied, &starts);
            scope.spawn(move || loop {
                let n = next_range.fetch_add(1, Ordering::Relaxed);
                if n >= starts.len() || stop.load(Ordering::Relaxed) {
                    return;
                }
                {
                    let mut done = applied.0.lock();
                    while n > *done + AHEAD && !stop.load(Ordering::Relaxed) {
                        applied.1.wait(&mut done);
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let read = read_range(backend, starts[n], end_of(n));
                if sender.send((n, read)).is_err() {
                    return;
                }
            });
        }
        drop(sender);
        let outcome = apply_in_order(&receiver, starts.len(), &applied, &mut apply);
        // Whatever happened, readers stop waiting and taking ranges (set under the lock they wait
        // with, so that none misses it).
        {
            let _waiting = applied.0.lock();
            stop.store(true, Ordering::Relaxed);
        }
        applied.1.notify_all();
        outcome
    })
}

/// Takes the readers' ranges as they come and applies them in order.
fn apply_in_order(
    receiver: &mpsc::Receiver<(usize, Result<Vec<Loaded>>)>,
    count: usize,
    applied: &(Mutex<usize>, Condvar),
    apply: &mut impl FnMut(Revision, bool, EntryHead<'_>) -> Result<()>,
) -> Result<()> {
    let mut waiting = BTreeMap::new();
    for n in 0..count {
        let range = loop {
            if let Some(range) = waiting.remove(&n) {
                break range;
            }
            let (got, range) = receiver.recv().map_err(|_| Error::Internal("a key bucket reader stopped".into()))?;
            waiting.insert(got, range?);
        };
        for item in range {
            let head = EntryHead {
                key: &item.key,
                create_revision: item.create_revision,
                version: item.version,
                lease: item.lease,
            };
            apply(item.rev, item.tombstone, head)?;
        }
        *applied.0.lock() = n + 1;
        applied.1.notify_all();
    }
    Ok(())
}

/// The revisions with main revision in `[from, to)`, decoded.
fn read_range(backend: &dyn Backend, from: i64, to: i64) -> Result<Vec<Loaded>> {
    let mut out = Vec::new();
    try_scan_from(backend, Bucket::Key, &Revision::new(from, 0).to_bytes(), |key, value| {
        let (rev, tombstone, head) = decode(key, value)?;
        if rev.main >= to {
            return Ok(false);
        }
        out.push(Loaded {
            rev,
            tombstone,
            key: head.key.to_vec(),
            create_revision: head.create_revision,
            version: head.version,
            lease: head.lease,
        });
        Ok(true)
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proto::etcdserverpb as pb;

    use super::*;
    use crate::index::KeyRange;
    use crate::{Command, MemBackend, MvccStore};

    /// A store with a history worth rebuilding: keys overwritten, deleted and put again, multi-put
    /// txns (sub-revisions), keys on leases, and a compaction.
    fn history() -> (Arc<MemBackend>, MvccStore) {
        let backend = Arc::new(MemBackend::default());
        let mut store = MvccStore::open(backend.clone()).expect("open");
        let apply = |store: &mut MvccStore, cmd: Command| {
            store.apply(&cmd).expect("applies");
        };
        apply(&mut store, Command::LeaseGrant(pb::LeaseGrantRequest { ttl: 60, id: 7 }));
        for round in 0..12 {
            for k in 0..150 {
                let key = format!("k{:03}", (k * 7 + round) % 150).into_bytes();
                let lease = if k % 10 == 0 { 7 } else { 0 };
                let value = format!("{round}").into_bytes();
                apply(&mut store, Command::Put(pb::PutRequest { key, value, lease, ..Default::default() }));
            }
            let doomed = format!("k{:03}", round * 11 % 150).into_bytes();
            apply(&mut store, Command::DeleteRange(pb::DeleteRangeRequest { key: doomed, ..Default::default() }));
            let puts = (0..3).map(|n| pb::RequestOp {
                request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
                    key: format!("t{round}-{n}").into_bytes(),
                    ..Default::default()
                })),
            });
            apply(&mut store, Command::Txn(pb::TxnRequest { success: puts.collect(), ..Default::default() }));
            if round == 5 {
                let revision = store.current_revision() - 40;
                apply(&mut store, Command::Compact(pb::CompactionRequest { revision, physical: false }));
            }
        }
        store.commit().expect("commit");
        store.wait_compacted();
        (backend, store)
    }

    /// What a client could see of `store`.
    fn seen(store: &MvccStore) -> Vec<String> {
        let mut out = vec![format!(
            "{} {} {} {:?}",
            store.current_revision(),
            store.compacted_revision(),
            store.live_keys(),
            store.index_size()
        )];
        for revision in store.compacted_revision()..=store.current_revision() {
            let all = pb::RangeRequest { key: vec![0], range_end: vec![0], revision, ..Default::default() };
            out.push(format!("{revision}: {:?}", store.range(&all)));
        }
        let everything = KeyRange::new(b"\0", b"\0");
        out.push(format!("{:?}", store.history(everything, store.compacted_revision(), i64::MAX)));
        out.push(format!("{:?}", store.lease(7).map(|lease| lease.keys.clone())));
        out
    }

    #[test]
    fn several_readers_rebuild_the_store_one_reader_rebuilds() {
        let (backend, written) = history();
        let one = MvccStore::open(backend.clone()).expect("open");
        assert_eq!(seen(&one), seen(&written));
        for ranges in [1, 7, 64, 10_000] {
            let mut many = MvccStore::open(backend.clone()).expect("open");
            many.load_planned(1, ranges).expect("load");
            assert_eq!(seen(&many), seen(&written), "{ranges} ranges");
        }
    }

    fn saved_bytes(backend: &MemBackend) -> Option<Vec<u8>> {
        backend.get(Bucket::Meta, super::super::saved_index::META_SAVED_INDEX).expect("get")
    }

    #[test]
    fn a_clean_stop_saves_the_index_and_the_next_open_reads_it_once() {
        let (backend, written) = history();
        assert!(written.save_index().expect("save"), "nothing pending: saved");
        assert!(saved_bytes(&backend).is_some());
        let reopened = MvccStore::open(backend.clone()).expect("open");
        assert_eq!(seen(&reopened), seen(&written), "the saved index serves as the rebuilt one");
        assert_eq!(saved_bytes(&backend), None, "used once: taken out of the store");
        let again = MvccStore::open(backend.clone()).expect("open");
        assert_eq!(seen(&again), seen(&written), "rebuilt from the revisions");
    }

    #[test]
    fn a_saved_index_is_trusted_only_while_the_store_is_what_it_was_built_from() {
        use super::super::saved_index::{decode, encode, store};
        let (backend, mut written) = history();
        written.save_index().expect("save");
        let bytes = saved_bytes(&backend).expect("saved");
        // A write after the save (a member that applied more before stopping) moves the key bucket's
        // last key on: rebuilt, and the write is seen.
        let put = pb::PutRequest { key: b"late".to_vec(), value: b"v".to_vec(), ..Default::default() };
        written.apply(&Command::Put(put)).expect("put");
        written.commit().expect("commit");
        let reopened = MvccStore::open(backend.clone()).expect("open");
        assert_eq!(seen(&reopened), seen(&written));
        assert_eq!(saved_bytes(&backend), None, "a stale one is removed too");
        // Torn: rebuilt.
        written.save_index().expect("save");
        let whole = saved_bytes(&backend).expect("saved");
        store(&*backend, whole[..whole.len() - 3].to_vec()).expect("store torn");
        assert_eq!(seen(&MvccStore::open(backend.clone()).expect("open")), seen(&written));
        // A whole one naming this store is used as it is: one holding no key makes a store with none.
        let basis = decode(&whole).expect("decodes").basis;
        assert_ne!(decode(&bytes).expect("decodes").basis, basis, "the late put changed the basis");
        store(&*backend, encode(&basis, &crate::index::TreeIndex::default(), std::iter::empty())).expect("store");
        let emptied = MvccStore::open(backend.clone()).expect("open");
        assert_eq!((emptied.live_keys(), emptied.current_revision()), (0, written.current_revision()));
    }

    #[test]
    fn a_store_with_a_compaction_pending_saves_nothing() {
        let (backend, mut written) = history();
        let revision = written.current_revision() - 10;
        written.apply(&Command::Compact(pb::CompactionRequest { revision, physical: false })).expect("compact");
        assert!(!written.save_index().expect("save"), "the compaction is staged, not done");
        assert_eq!(saved_bytes(&backend), None);
    }

    #[test]
    fn revisions_come_in_order_whatever_the_readers() {
        let (backend, _) = history();
        let mut want = Vec::new();
        each_revision(&*backend, 1, 1, 1, |rev, tombstone, head| {
            want.push((rev, tombstone, head.key.to_vec(), head.lease));
            Ok(())
        })
        .expect("one reader");
        assert!(want.len() > 1000 && want.windows(2).all(|w| w[0].0 < w[1].0), "{} revisions", want.len());
        for (readers, ranges) in [(2, 3), (3, 13), (4, 500)] {
            let mut got = Vec::new();
            each_revision(&*backend, readers, 1, ranges, |rev, tombstone, head| {
                got.push((rev, tombstone, head.key.to_vec(), head.lease));
                Ok(())
            })
            .expect("several readers");
            assert_eq!(got, want, "{readers} readers, {ranges} ranges");
        }
    }

    #[test]
    fn an_error_stops_the_readers() {
        let (backend, _) = history();
        let mut seen = 0;
        let outcome = each_revision(&*backend, 2, 1, 50, |_, _, _| {
            seen += 1;
            if seen == 100 {
                return Err(Error::Internal("stop here".into()));
            }
            Ok(())
        });
        assert!(matches!(outcome, Err(Error::Internal(text)) if text == "stop here"));
        assert_eq!(seen, 100);
    }
}
