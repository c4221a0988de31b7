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
//! The databases are generations `<dir>/<n>`; the file `<dir>/CURRENT` names the one in use and is
//! replaced atomically (write, fsync, rename, fsync the directory) once the new generation is complete
//! and flushed, so a crash leaves either the old or the new one; leftovers are removed at open.
//!
//! # Durability
//!
//! Writes are sled batches, atomic across a crash; data and the applied log id go in the same batch.
//! sled's flusher makes them durable within half a second, [`Backend::sync`] at once: the state
//! machine syncs before a snapshot lets openraft purge the log, and [`Backend::replace_all`] (snapshot
//! install) syncs before it returns. A crash loses at most the writes since the last flush, which a
//! restart applies again from the log. The store is never behind the log's purge point, and when it is
//! ahead of the durable log (a follower's log append not yet flushed) openraft starts from the applied
//! id.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kv_api::{Backend, BackendError, Bucket, WriteBatch};
use parking_lot::{Mutex, RwLock};
use tracing::{info, warn};

/// The tree of the backend, in its database and, before the split, in the member's one database.
const TREE: &str = "kv";
/// The file naming the generation in use.
const CURRENT: &str = "CURRENT";
/// sled's page cache for the store (see [`crate::storage`] for why it is small).
const CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// Entries per batch when copying a tree.
const COPY_BATCH: usize = 4096;
/// How long a measured size is reused: the quota check asks on every write, and measuring lists files.
const SIZE_TTL: Duration = Duration::from_millis(100);

/// The [`Backend`] of a member: the tree `kv` of the current generation's database.
#[derive(Debug)]
pub struct SledBackend {
    dir: PathBuf,
    current: RwLock<Generation>,
    /// The last measured size, and when it was measured.
    size: AtomicU64,
    measured_at: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct Generation {
    number: u64,
    db: sled::Db,
    tree: sled::Tree,
}

impl Generation {
    fn open(dir: &Path, number: u64) -> Result<Self, sled::Error> {
        let db = sled::Config::new().path(dir.join(number.to_string())).cache_capacity(CACHE_BYTES).open()?;
        let tree = db.open_tree(TREE)?;
        Ok(Self { number, db, tree })
    }
}

impl SledBackend {
    /// Opens the store's database under `dir`. A member created before the split kept the tree in its
    /// one database, `legacy`: it moves here first (copied, made durable, then dropped there).
    pub fn open(dir: &Path, legacy: &sled::Db) -> Result<Self, sled::Error> {
        std::fs::create_dir_all(dir)?;
        let current = match read_current(dir)? {
            Some(number) => Generation::open(dir, number)?,
            None => {
                // No generation yet: start one with whatever the member's database holds. It stays open:
                // sled releases a database's file lock only once its background flusher lets go of a
                // dropped handle, so opening it again at once can fail ("could not acquire lock").
                let _ = std::fs::remove_dir_all(dir.join("0"));
                let first = Generation::open(dir, 0)?;
                let old = legacy.open_tree(TREE)?;
                if !old.is_empty() {
                    info!(entries = old.len(), "moving the store out of the Raft log's database");
                }
                copy(&old, &first.tree)?;
                first.db.flush()?;
                write_current(dir, 0)?;
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
        let number = read_current(dir)?.ok_or_else(|| {
            let what = format!("stat {}: no such file or directory", dir.join(CURRENT).display());
            sled::Error::Io(std::io::Error::new(std::io::ErrorKind::NotFound, what))
        })?;
        Ok(Self::with(dir, Generation::open(dir, number)?))
    }

    fn with(dir: &Path, current: Generation) -> Self {
        remove_other_generations(dir, current.number);
        Self {
            dir: dir.to_path_buf(),
            current: RwLock::new(current),
            size: AtomicU64::new(0),
            measured_at: Mutex::new(None),
        }
    }

    fn add(batch: &mut sled::Batch, ops: WriteBatch) {
        for (bucket, key, value) in ops.ops {
            let key = tagged(bucket, &key);
            match value {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
    }

    fn forget_size(&self) {
        *self.measured_at.lock() = None;
    }
}

/// Copies every entry of `from` into `to`.
fn copy(from: &sled::Tree, to: &sled::Tree) -> Result<(), sled::Error> {
    let mut batch = sled::Batch::default();
    let mut pending = 0;
    for item in from.iter() {
        let (key, value) = item?;
        batch.insert(key, value);
        pending += 1;
        if pending == COPY_BATCH {
            to.apply_batch(std::mem::take(&mut batch))?;
            pending = 0;
        }
    }
    to.apply_batch(batch)
}

fn read_current(dir: &Path) -> Result<Option<u64>, sled::Error> {
    match std::fs::read_to_string(dir.join(CURRENT)) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            let what = format!("{} does not name a generation: {text:?}", dir.join(CURRENT).display());
            sled::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, what))
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Points `CURRENT` at generation `number`, atomically and durably.
fn write_current(dir: &Path, number: u64) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{CURRENT}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(number.to_string().as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(CURRENT))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Removes generations other than `keep` (an unfinished defragmentation, or the one it replaced).
fn remove_other_generations(dir: &Path, keep: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
        if number != keep {
            if let Err(err) = std::fs::remove_dir_all(entry.path()) {
                warn!(%err, path = %entry.path().display(), "cannot remove an old store generation");
            }
        }
    }
}

fn tagged(bucket: Bucket, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(bucket.tag());
    out.extend_from_slice(key);
    out
}

fn backend_error(err: impl std::fmt::Display) -> BackendError {
    BackendError(err.to_string())
}

impl Backend for SledBackend {
    fn get(&self, bucket: Bucket, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let value = self.current.read().tree.get(tagged(bucket, key)).map_err(backend_error)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn scan(&self, bucket: Bucket, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        let tree = self.current.read().tree.clone();
        for item in tree.scan_prefix([bucket.tag()]) {
            let (key, value) = item.map_err(backend_error)?;
            if !visit(&key[1..], &value) {
                break;
            }
        }
        Ok(())
    }

    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let mut sled_batch = sled::Batch::default();
        Self::add(&mut sled_batch, batch);
        self.current.read().tree.apply_batch(sled_batch).map_err(backend_error)
    }

    /// One sled batch removes every existing key and inserts the new content: a crash leaves either the
    /// old store or the new one. (A later insert of the same key overrides its removal in a sled batch.)
    /// Durable before it returns: openraft purges the log the snapshot covers next.
    fn replace_all(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let current = self.current.read();
        let mut sled_batch = sled::Batch::default();
        for key in current.tree.iter().keys() {
            sled_batch.remove(key.map_err(backend_error)?);
        }
        Self::add(&mut sled_batch, batch);
        current.tree.apply_batch(sled_batch).map_err(backend_error)?;
        current.db.flush().map_err(backend_error)?;
        Ok(())
    }

    fn sync(&self) -> Result<(), BackendError> {
        self.current.read().db.flush().map(|_| ()).map_err(backend_error)
    }

    fn size_bytes(&self) -> u64 {
        let mut measured_at = self.measured_at.lock();
        if measured_at.is_none_or(|at| at.elapsed() >= SIZE_TTL) {
            // sled may report 0 before its first flush; never report an empty database (etcdctl divides by
            // the size).
            let size = self.current.read().db.size_on_disk().unwrap_or(0).max(1);
            self.size.store(size, Ordering::Relaxed);
            *measured_at = Some(Instant::now());
        }
        self.size.load(Ordering::Relaxed)
    }

    /// Copies the tree into a fresh database (the next generation), makes it durable, points `CURRENT`
    /// at it and switches to it; the old generation is removed. The caller keeps every other user out
    /// (the store's write lock): a scan still running on the old generation would lose its files.
    fn defragment(&self) -> Result<(), BackendError> {
        let started = Instant::now();
        let mut current = self.current.write();
        current.db.flush().map_err(backend_error)?;
        let number = current.number + 1;
        let _ = std::fs::remove_dir_all(self.dir.join(number.to_string()));
        let next = Generation::open(&self.dir, number).map_err(backend_error)?;
        copy(&current.tree, &next.tree).map_err(backend_error)?;
        next.db.flush().map_err(backend_error)?;
        write_current(&self.dir, number).map_err(backend_error)?;
        let old = std::mem::replace(&mut *current, next);
        drop(current);
        drop(old);
        remove_other_generations(&self.dir, number);
        self.forget_size();
        info!(generation = number, elapsed_ms = started.elapsed().as_millis() as u64, "defragmented the store");
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
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"old".to_vec(), b"1".to_vec());
        batch.put(Bucket::Key, b"both".to_vec(), b"old".to_vec());
        batch.put(Bucket::Meta, b"m".to_vec(), b"old".to_vec());
        backend.write(batch).expect("write");

        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"both".to_vec(), b"new".to_vec());
        batch.put(Bucket::Key, b"new".to_vec(), b"2".to_vec());
        backend.replace_all(batch).expect("replace");

        assert_eq!(all(&backend, Bucket::Key), vec![kv("both", "new"), kv("new", "2")]);
        assert!(all(&backend, Bucket::Meta).is_empty());
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
        assert_eq!(read_current(&kv_dir).expect("read"), Some(1));
        assert!(!kv_dir.join("0").exists(), "the old generation is removed");
        let db = sled::Config::new().path(dir.path().join("db2")).open().expect("open sled");
        let reopened = reopen(&kv_dir, &db);
        assert_eq!(all(&reopened, Bucket::Key), content);
        assert_eq!(all(&reopened, Bucket::Lease), vec![kv("l", "1")]);
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
