//! [`SledBackend`]: the MVCC store's buckets in one sled tree of a database of their own, each key
//! prefixed by its bucket's tag, and etcd's defragmentation for it.
//!
//! # Why a database of its own
//!
//! sled 0.34 never gives space back: after a compaction deleted most of the store, its files keep their
//! size (measured: 30 MB of values written then deleted left 62 MB on disk, through seconds of flushes
//! and a rewrite of the survivors), and it has no call that compacts them. A fresh database holding
//! only the live entries takes what they need (190 KB for the same survivors). So
//! [`SledBackend::defragment`] copies the tree into a new database and switches to it; for that the
//! store must not share its database with the Raft log, which keeps being written meanwhile. (etcd too
//! keeps its WAL apart from the bbolt file it defragments.)
//!
//! The databases are generations `<dir>/<n>` ([`crate::storage::generation`]); the file `<dir>/CURRENT`
//! names the one in use and is replaced atomically (write, fsync, rename, fsync the directory) once the
//! new generation is complete and flushed, so a crash leaves either the old or the new one; leftovers
//! are removed at open.
//!
//! # Defragmenting while the store works
//!
//! Copying 400k revisions takes seconds, and etcd's clients time out after five: the copy runs while
//! reads and writes go on. Every write passes one mutex, in the order it reaches the tree; while a
//! defragmentation runs, the write is also recorded. The copy of the live tree, made without any lock,
//! holds each key as it was at some moment of the copy; replaying the recorded writes in order onto it
//! gives each key its last value. Replays repeat without the lock until few writes are left, and the
//! new generation is flushed; only then are writes held back (the mutex), for the last small replay, a
//! short flush, `CURRENT` and the switch. A scan still running on the old generation keeps it (an
//! `Arc`): its files go when the last one lets go.
//!
//! # Durability
//!
//! Writes are sled batches, atomic across a crash; data and the applied log id go in the same batch.
//! sled's flusher makes them durable within half a second, [`Backend::sync`] at once: the state
//! machine syncs before a snapshot lets openraft purge the log, and [`Backend::replace_all`] (snapshot
//! install, into a new generation) flushes before it switches. A crash loses at most the writes since the last flush, which a
//! restart applies again from the log. The store is never behind the log's purge point, and when it is
//! ahead of the durable log (a follower's log append not yet flushed) openraft starts from the applied
//! id.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv_api::{Backend, BackendError, Bucket, Record, WriteBatch};
use parking_lot::{Mutex, RwLock};
use tracing::{debug, info};

use crate::storage::generation::{self, Generation, Ops, TREE};
use crate::storage::scan::Forward;

/// How long a measured size is reused: the quota check asks on every write, and measuring lists files.
const SIZE_TTL: Duration = Duration::from_millis(100);
/// A defragmentation holds writes back only once replaying what they wrote meanwhile is this small...
const SMALL_REPLAY_OPS: usize = 4096;
/// ... or after this many rounds (writers faster than the replay would otherwise keep it going).
const MAX_REPLAY_ROUNDS: usize = 16;

/// The [`Backend`] of a member: the tree `kv` of the current generation's database.
#[derive(Debug)]
pub struct SledBackend {
    dir: PathBuf,
    current: RwLock<Arc<Generation>>,
    /// Taken by every write, so that writes reach the tree in one order; while a defragmentation
    /// runs, it holds the writes made since it began, in that order.
    writes: Mutex<Option<Vec<Ops>>>,
    /// One defragmentation at a time.
    defragmenting: Mutex<()>,
    /// The last measured size, and when it was measured.
    size: AtomicU64,
    measured_at: Mutex<Option<Instant>>,
}

impl SledBackend {
    /// Opens the store's database under `dir`. A member created before the split kept the tree in its
    /// one database, `legacy`: it moves here first (copied, made durable, then dropped there).
    pub fn open(dir: &Path, legacy: &sled::Db) -> Result<Self, sled::Error> {
        std::fs::create_dir_all(dir)?;
        let current = match generation::read_current(dir)? {
            Some(number) => Generation::open(dir, number)?,
            None => {
                // No generation yet: start one with whatever the member's database holds. It stays open:
                // sled releases a database's file lock only once its background flusher lets go of a
                // dropped handle, so opening it again at once can fail ("could not acquire lock").
                let first = Generation::create(dir, 0)?;
                let old = legacy.open_tree(TREE)?;
                if !old.is_empty() {
                    info!(entries = old.len(), "moving the store out of the Raft log's database");
                }
                generation::copy(&old, &first.tree)?;
                first.db.flush()?;
                generation::write_current(dir, 0)?;
                first
            }
        };
        if legacy.tree_names().iter().any(|name| name == TREE.as_bytes()) {
            legacy.drop_tree(TREE)?;
        }
        Ok(Self::with(dir, current))
    }

    /// Opens the store a member left at `dir`, without the member's Raft log (the offline tools); fails
    /// when there is none.
    pub fn open_existing(dir: &Path) -> Result<Self, sled::Error> {
        let number = generation::read_current(dir)?.ok_or_else(|| generation::no_current(dir))?;
        Ok(Self::with(dir, Generation::open(dir, number)?))
    }

    fn with(dir: &Path, current: Generation) -> Self {
        generation::remove_other_generations(dir, current.number);
        Self {
            dir: dir.to_path_buf(),
            current: RwLock::new(Arc::new(current)),
            writes: Mutex::new(None),
            defragmenting: Mutex::new(()),
            size: AtomicU64::new(0),
            measured_at: Mutex::new(None),
        }
    }

    fn generation(&self) -> Arc<Generation> {
        self.current.read().clone()
    }

    /// Applies `ops` to the current tree, in the one order of writes, recording them while a
    /// defragmentation copies the tree.
    fn apply(&self, ops: Ops) -> Result<(), BackendError> {
        let mut recording = self.writes.lock();
        Self::apply_in_order(&mut recording, &self.generation(), ops)
    }

    /// Applies `ops` to `generation`'s tree; `recording` is the write mutex, held.
    fn apply_in_order(recording: &mut Option<Vec<Ops>>, generation: &Generation, ops: Ops) -> Result<(), BackendError> {
        generation.tree.apply_batch(generation::batch_of(&ops)).map_err(backend_error)?;
        if let Some(recorded) = recording.as_mut() {
            recorded.push(ops);
        }
        Ok(())
    }

    fn forget_size(&self) {
        *self.measured_at.lock() = None;
    }

    /// The defragmentation once recording is on: copy, catch up, switch. Returns how long writes were
    /// held back.
    fn copy_and_switch(&self, old: &Generation, next: Generation) -> Result<Duration, sled::Error> {
        generation::copy(&old.tree, &next.tree)?;
        for round in 1..=MAX_REPLAY_ROUNDS {
            let recorded = self.writes.lock().as_mut().map(std::mem::take).unwrap_or_default();
            let ops = generation::replay(&next.tree, recorded)?;
            debug!(round, ops, "defragmentation caught up with writes");
            if ops <= SMALL_REPLAY_OPS {
                break;
            }
        }
        // Most of the copy reaches the disk now, so that the flush while writes wait is short.
        next.db.flush()?;
        let mut recording = self.writes.lock();
        let held = Instant::now();
        generation::replay(&next.tree, recording.take().unwrap_or_default())?;
        next.db.flush()?;
        generation::write_current(&self.dir, next.number)?;
        let old = std::mem::replace(&mut *self.current.write(), Arc::new(next));
        old.retire();
        drop(recording);
        Ok(held.elapsed())
    }
}

fn tagged(bucket: Bucket, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(bucket.tag());
    out.extend_from_slice(key);
    out
}

fn ops_of(batch: WriteBatch) -> Ops {
    batch.ops.into_iter().map(|(bucket, key, value)| (tagged(bucket, &key), value)).collect()
}

fn backend_error(err: impl std::fmt::Display) -> BackendError {
    BackendError(err.to_string())
}

impl Backend for SledBackend {
    fn get(&self, bucket: Bucket, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let value = self.current.read().tree.get(tagged(bucket, key)).map_err(backend_error)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn read(&self, bucket: Bucket, key: &[u8], read: &mut dyn FnMut(&[u8])) -> Result<bool, BackendError> {
        let value = self.current.read().tree.get(tagged(bucket, key)).map_err(backend_error)?;
        if let Some(value) = &value {
            read(value);
        }
        Ok(value.is_some())
    }

    /// Scans the generation current when it starts, to the end even if a defragmentation switches
    /// meanwhile (it keeps that generation's files until then).
    fn scan(&self, bucket: Bucket, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        self.scan_from(bucket, &[], visit)
    }

    fn scan_from(
        &self,
        bucket: Bucket,
        start: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), BackendError> {
        let generation = self.generation();
        for item in Forward::from(&generation.tree, &tagged(bucket, start)) {
            let (key, value) = item.map_err(backend_error)?;
            if key.first() != Some(&bucket.tag()) || !visit(&key[1..], &value) {
                break;
            }
        }
        Ok(())
    }

    fn last_key(&self, bucket: Bucket) -> Result<Option<Vec<u8>>, BackendError> {
        // Tags are letters: the next byte up starts no other bucket's range before this one's end.
        let after = [bucket.tag() + 1];
        let last = self.generation().tree.get_lt(after).map_err(backend_error)?;
        Ok(last.filter(|(key, _)| key.first() == Some(&bucket.tag())).map(|(key, _)| key[1..].to_vec()))
    }

    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        self.apply(ops_of(batch))
    }

    /// Writes `content` into a fresh database (the next generation) in bounded batches and switches to
    /// it once it is complete and flushed, as a defragmentation does: a crash leaves the old store or the
    /// new one, and a snapshot larger than memory installs. Durable before it returns (openraft purges
    /// the log the snapshot covers next). The store's lock is held meanwhile, so nobody else writes.
    fn replace_all(&self, content: &mut dyn Iterator<Item = Result<Record, BackendError>>) -> Result<(), BackendError> {
        let _one = self.defragmenting.lock();
        let number = self.generation().number + 1;
        let next = Generation::create(&self.dir, number).map_err(backend_error)?;
        let fill = || -> Result<(), BackendError> {
            let mut batches = generation::Batches::new(&next.tree);
            for item in content {
                let (bucket, key, value) = item?;
                batches.push(tagged(bucket, &key), Some(value)).map_err(backend_error)?;
            }
            batches.finish().map_err(backend_error)?;
            next.db.flush().map_err(backend_error)?;
            Ok(())
        };
        if let Err(err) = fill() {
            // The old generation stays in use; the unfinished one goes.
            next.retire();
            return Err(err);
        }
        let writes = self.writes.lock();
        generation::write_current(&self.dir, number).map_err(backend_error)?;
        let old = std::mem::replace(&mut *self.current.write(), Arc::new(next));
        old.retire();
        drop(writes);
        self.forget_size();
        Ok(())
    }

    fn sync(&self) -> Result<(), BackendError> {
        self.generation().db.flush().map(|_| ()).map_err(backend_error)
    }

    fn size_bytes(&self) -> u64 {
        let mut measured_at = self.measured_at.lock();
        if measured_at.is_none_or(|at| at.elapsed() >= SIZE_TTL) {
            // sled may report 0 before its first flush; never report an empty database (etcdctl divides by
            // the size).
            let size = self.generation().db.size_on_disk().unwrap_or(0).max(1);
            self.size.store(size, Ordering::Relaxed);
            *measured_at = Some(Instant::now());
        }
        self.size.load(Ordering::Relaxed)
    }

    /// Copies the tree into a fresh database (the next generation) while reads and writes go on, and
    /// switches to it (see the module doc); the old generation is removed once unused.
    fn defragment(&self) -> Result<(), BackendError> {
        let _one = self.defragmenting.lock();
        let started = Instant::now();
        let old = self.generation();
        let number = old.number + 1;
        let next = Generation::create(&self.dir, number).map_err(backend_error)?;
        *self.writes.lock() = Some(Vec::new());
        let outcome = self.copy_and_switch(&old, next);
        // Recording stops whatever happened (the switch already took it on success).
        *self.writes.lock() = None;
        let held = match outcome {
            Ok(held) => held,
            // The next generation stays on disk: `CURRENT` may already name it. The next open keeps the
            // one it names and removes the other.
            Err(err) => return Err(backend_error(err)),
        };
        drop(old);
        self.forget_size();
        info!(
            generation = number,
            elapsed_ms = started.elapsed().as_millis() as u64,
            writes_held_ms = held.as_millis() as u64,
            "defragmented the store"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> (tempfile::TempDir, SledBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::Config::new().path(dir.path().join("db")).open().expect("open sled");
        let backend = SledBackend::open(&dir.path().join("kv"), &db).expect("open tree");
        (dir, backend)
    }

    fn all(backend: &SledBackend, bucket: Bucket) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        backend
            .scan(bucket, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                true
            })
            .expect("scan");
        out
    }

    fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn buckets_are_separate_keyspaces() {
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"a".to_vec(), b"1".to_vec());
        batch.put(Bucket::Meta, b"a".to_vec(), b"meta".to_vec());
        batch.put(Bucket::Key, b"b".to_vec(), b"2".to_vec());
        backend.write(batch).expect("write");

        assert_eq!(backend.get(Bucket::Key, b"a").expect("get"), Some(b"1".to_vec()));
        assert_eq!(backend.get(Bucket::Meta, b"a").expect("get"), Some(b"meta".to_vec()));
        assert_eq!(backend.get(Bucket::Meta, b"b").expect("get"), None);
        assert_eq!(all(&backend, Bucket::Key), vec![kv("a", "1"), kv("b", "2")]);
        assert_eq!(all(&backend, Bucket::Meta), vec![kv("a", "meta")]);

        let mut batch = WriteBatch::default();
        batch.delete(Bucket::Key, b"a".to_vec());
        backend.write(batch).expect("write");
        assert_eq!(all(&backend, Bucket::Key), vec![kv("b", "2")]);
        assert!(backend.size_bytes() > 0);
    }

    /// `scan_from` and `last_key` stay inside their bucket, as the in-memory backend's do.
    #[test]
    fn scans_from_a_key_and_last_keys_stay_in_their_bucket() {
        let (_dir, backend) = backend();
        let memory = kv_api::MemBackend::default();
        let mut batch = WriteBatch::default();
        for (bucket, key) in [(Bucket::Alarm, "z"), (Bucket::Key, "a"), (Bucket::Key, "c"), (Bucket::Key, "e")] {
            batch.put(bucket, key.as_bytes().to_vec(), b"v".to_vec());
        }
        batch.put(Bucket::Lease, b"b".to_vec(), b"v".to_vec());
        backend.write(batch.clone()).expect("write");
        memory.write(batch).expect("write");
        let from = |backend: &dyn Backend, bucket: Bucket, start: &str| {
            let mut out = Vec::new();
            backend
                .scan_from(bucket, start.as_bytes(), &mut |k, _| {
                    out.push(String::from_utf8_lossy(k).into_owned());
                    true
                })
                .expect("scan");
            out
        };
        for (bucket, start) in [(Bucket::Key, "b"), (Bucket::Key, "c"), (Bucket::Key, "f"), (Bucket::Alarm, "")] {
            assert_eq!(from(&backend, bucket, start), from(&memory, bucket, start), "{bucket:?} from {start}");
        }
        assert_eq!(from(&backend, Bucket::Key, "b"), vec!["c", "e"]);
        for bucket in [Bucket::Key, Bucket::Lease, Bucket::Alarm, Bucket::Meta, Bucket::Auth] {
            assert_eq!(backend.last_key(bucket).expect("last"), memory.last_key(bucket).expect("last"), "{bucket:?}");
        }
        assert_eq!(backend.last_key(Bucket::Key).expect("last"), Some(b"e".to_vec()));
        assert_eq!(backend.last_key(Bucket::Meta).expect("last"), None);
    }

    #[test]
    fn scan_stops_when_asked() {
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        for k in ["a", "b", "c"] {
            batch.put(Bucket::Key, k.as_bytes().to_vec(), b"v".to_vec());
        }
        backend.write(batch).expect("write");
        let mut seen = 0;
        backend
            .scan(Bucket::Key, &mut |_, _| {
                seen += 1;
                seen < 2
            })
            .expect("scan");
        assert_eq!(seen, 2);
    }

    #[test]
    fn replace_all_keeps_only_the_new_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::Config::new().path(dir.path().join("db")).open().expect("open sled");
        let backend = SledBackend::open(&dir.path().join("kv"), &db).expect("open tree");
        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"old".to_vec(), b"1".to_vec());
        batch.put(Bucket::Key, b"both".to_vec(), b"old".to_vec());
        batch.put(Bucket::Meta, b"m".to_vec(), b"old".to_vec());
        backend.write(batch).expect("write");

        // More entries than one sled batch takes, so the install spans several.
        let value = vec![b'v'; 300];
        let mut content: Vec<Record> =
            (0..10_000u32).map(|i| (Bucket::Key, i.to_be_bytes().to_vec(), value.clone())).collect();
        content.push((Bucket::Meta, b"m".to_vec(), b"new".to_vec()));
        backend.replace_all(&mut content.clone().into_iter().map(Ok)).expect("replace");

        let keys = all(&backend, Bucket::Key);
        assert_eq!(keys.len(), 10_000);
        assert!(keys.iter().all(|(k, v)| k.len() == 4 && *v == value), "only the new content");
        assert_eq!(all(&backend, Bucket::Meta), vec![kv("m", "new")]);
        // The new content is what a reopen finds.
        drop(backend);
        let reopened = reopen(&dir.path().join("kv"), &db);
        assert_eq!(all(&reopened, Bucket::Meta), vec![kv("m", "new")]);
        assert_eq!(all(&reopened, Bucket::Key).len(), 10_000);
    }

    #[test]
    fn a_replacement_that_fails_midway_keeps_the_old_content() {
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"old".to_vec(), b"1".to_vec());
        backend.write(batch).expect("write");
        let mut content = (0..5_000u32)
            .map(|i| Ok((Bucket::Key, i.to_be_bytes().to_vec(), vec![1u8; 100])))
            .chain([Err(BackendError("truncated snapshot".into()))]);
        let err = backend.replace_all(&mut content).expect_err("the content failed");
        assert!(err.to_string().contains("truncated snapshot"), "{err}");
        assert_eq!(all(&backend, Bucket::Key), vec![kv("old", "1")]);
        backend.write(WriteBatch::default()).expect("still writable");
    }

    #[test]
    fn defragment_gives_back_what_deletes_freed_and_keeps_the_content() {
        let (dir, backend) = backend();
        let value = vec![7u8; 10_000];
        let mut batch = WriteBatch::default();
        for i in 0..1000u32 {
            batch.put(Bucket::Key, i.to_be_bytes().to_vec(), value.clone());
        }
        backend.write(batch).expect("write");
        let mut batch = WriteBatch::default();
        for i in 10..1000u32 {
            batch.delete(Bucket::Key, i.to_be_bytes().to_vec());
        }
        batch.put(Bucket::Meta, b"m".to_vec(), b"kept".to_vec());
        backend.write(batch).expect("write");
        backend.sync().expect("sync");
        backend.forget_size();
        let before = backend.size_bytes();
        let content = all(&backend, Bucket::Key);

        backend.defragment().expect("defragment");
        let after = backend.size_bytes();
        assert!(after * 4 < before, "defragmentation shrank {before} bytes only to {after}");
        assert_eq!(all(&backend, Bucket::Key), content);
        assert_eq!(all(&backend, Bucket::Meta), vec![kv("m", "kept")]);
        // Writes go to the new generation, and a reopen finds it (and only it).
        let mut batch = WriteBatch::default();
        batch.put(Bucket::Lease, b"l".to_vec(), b"1".to_vec());
        backend.write(batch).expect("write");
        backend.sync().expect("sync");
        drop(backend);
        let kv_dir = dir.path().join("kv");
        assert_eq!(generation::read_current(&kv_dir).expect("read"), Some(1));
        assert!(!kv_dir.join("0").exists(), "the old generation is removed");
        let db = sled::Config::new().path(dir.path().join("db2")).open().expect("open sled");
        let reopened = reopen(&kv_dir, &db);
        assert_eq!(all(&reopened, Bucket::Key), content);
        assert_eq!(all(&reopened, Bucket::Lease), vec![kv("l", "1")]);
    }

    /// Writers running through a defragmentation: every write lands in the new generation, none waits
    /// for the copy, and the space the deletes freed comes back.
    #[test]
    fn defragment_lets_writers_go_on_and_loses_nothing() {
        use std::collections::BTreeMap;
        use std::sync::atomic::AtomicBool;

        let (_dir, backend) = backend();
        let value = vec![7u8; 1000];
        for chunk in (0..20_000u32).collect::<Vec<_>>().chunks(1000) {
            let mut batch = WriteBatch::default();
            for i in chunk {
                batch.put(Bucket::Key, i.to_be_bytes().to_vec(), value.clone());
            }
            backend.write(batch).expect("write");
        }
        let mut batch = WriteBatch::default();
        for i in 2_000..20_000u32 {
            batch.delete(Bucket::Key, i.to_be_bytes().to_vec());
        }
        backend.write(batch).expect("write");
        backend.sync().expect("sync");
        backend.forget_size();
        let before = backend.size_bytes();
        let mut want: BTreeMap<Vec<u8>, Vec<u8>> = all(&backend, Bucket::Key).into_iter().collect();

        let stop = AtomicBool::new(false);
        let (written, slowest) = std::thread::scope(|scope| {
            let writers: Vec<_> = (0..2u8)
                .map(|id| {
                    let (backend, stop) = (&backend, &stop);
                    scope.spawn(move || {
                        let (mut kept, mut slowest, mut n) = (BTreeMap::new(), Duration::ZERO, 0u32);
                        while !stop.load(Ordering::Relaxed) || n < 50 {
                            let key = [&[b'w', id][..], &n.to_be_bytes()].concat();
                            let mut batch = WriteBatch::default();
                            batch.put(Bucket::Key, key.clone(), n.to_be_bytes().to_vec());
                            kept.insert(key, n.to_be_bytes().to_vec());
                            // Every third write also deletes an earlier one.
                            if n % 3 == 0 && n > 0 {
                                let old = [&[b'w', id][..], &(n / 2).to_be_bytes()].concat();
                                batch.delete(Bucket::Key, old.clone());
                                kept.remove(&old);
                            }
                            let started = Instant::now();
                            backend.write(batch).expect("write during defragmentation");
                            slowest = slowest.max(started.elapsed());
                            n += 1;
                        }
                        (kept, slowest)
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(20));
            backend.defragment().expect("defragment");
            stop.store(true, Ordering::Relaxed);
            let mut written = BTreeMap::new();
            let mut slowest = Duration::ZERO;
            for writer in writers {
                let (kept, took) = writer.join().expect("writer");
                written.extend(kept);
                slowest = slowest.max(took);
            }
            (written, slowest)
        });
        want.extend(written);
        assert_eq!(all(&backend, Bucket::Key).into_iter().collect::<BTreeMap<_, _>>(), want);
        // Generous for a busy machine; the switch itself holds writes back for milliseconds.
        assert!(slowest < Duration::from_secs(1), "a write waited {slowest:?}");
        backend.sync().expect("sync");
        let after = backend.size_bytes();
        assert!(after * 2 < before, "defragmentation shrank {before} bytes only to {after}");
    }

    /// A scan that began on the old generation reads on to its end after the switch.
    #[test]
    fn a_scan_across_the_switch_reads_to_its_end() {
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        for i in 0..2000u32 {
            batch.put(Bucket::Key, i.to_be_bytes().to_vec(), vec![1u8; 100]);
        }
        backend.write(batch).expect("write");
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let seen = std::thread::scope(|scope| {
            let (backend, started_tx) = (&backend, started_tx);
            let scan = scope.spawn(move || {
                let mut seen = 0;
                backend
                    .scan(Bucket::Key, &mut |_, _| {
                        if seen == 0 {
                            started_tx.send(()).expect("send");
                            go_rx.recv().expect("go");
                        }
                        seen += 1;
                        true
                    })
                    .expect("scan");
                seen
            });
            started_rx.recv().expect("scan started");
            backend.defragment().expect("defragment");
            go_tx.send(()).expect("send");
            scan.join().expect("scan")
        });
        assert_eq!(seen, 2000);
    }

    #[test]
    fn a_store_kept_in_the_log_database_moves_to_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::Config::new().path(dir.path().join("db")).open().expect("open sled");
        let legacy = db.open_tree(TREE).expect("tree");
        legacy.insert(tagged(Bucket::Key, b"a"), b"1".to_vec()).expect("insert");
        drop(legacy);
        let backend = SledBackend::open(&dir.path().join("kv"), &db).expect("open");
        assert_eq!(all(&backend, Bucket::Key), vec![kv("a", "1")]);
        assert!(!db.tree_names().iter().any(|name| name == TREE.as_bytes()), "the old tree is dropped");
    }

    /// Reopens a generation dropped a moment ago: sled lets go of its file lock only once its flusher
    /// thread has.
    fn reopen(dir: &Path, legacy: &sled::Db) -> SledBackend {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match SledBackend::open(dir, legacy) {
                Ok(backend) => return backend,
                Err(err) if Instant::now() < deadline => {
                    tracing::debug!(%err, "store still locked; retrying");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(err) => panic!("reopening {}: {err}", dir.display()),
            }
        }
    }
}
