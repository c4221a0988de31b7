//! The current snapshot of a member (the last one built or installed): a file `<id>.snap` in the
//! member's snapshot directory (`member/db.snap`), named with its metadata in the log database's tree
//! `snapshot`, so that `get_current_snapshot` survives a restart.
//!
//! A file becomes current by a rename, then the tree names it and is flushed; the file it replaces is
//! removed (a leader still sending it to a follower keeps reading it through its open handle). Files
//! being built or received are `*.tmp`; a restart removes them and any snapshot the tree does not name.
//! A member that kept its snapshot inside the tree (before snapshot files) moves it to a file at open.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::StorageIOError;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::storage::snapshot::SnapshotFile;
use crate::storage::{decode, encode};
use crate::typ::{Snapshot, SnapshotMeta, StorageError};

const TREE: &str = "snapshot";
/// The current snapshot's metadata and file name.
const KEY_CURRENT_FILE: &[u8] = b"current_file";
/// Before snapshot files: the current snapshot's metadata and content, whole.
const KEY_LEGACY: &[u8] = b"current";

/// The tree's record of the current snapshot.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Named {
    meta: SnapshotMeta,
    file: String,
}

/// Before snapshot files: what the tree held.
#[derive(Serialize, Deserialize)]
struct Legacy {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

/// The current snapshot. Clones share it: the state machine and its snapshot builders both save to it.
#[derive(Clone, Debug)]
pub struct CurrentSnapshot {
    db: sled::Db,
    tree: sled::Tree,
    dir: PathBuf,
    current: Arc<Mutex<Option<Named>>>,
    /// Numbers the `*.tmp` files of this process.
    temporaries: Arc<AtomicU64>,
}

fn read_err(err: &(impl std::error::Error + 'static)) -> StorageError {
    StorageIOError::read_snapshot(None, err).into()
}

fn write_err(meta: Option<&SnapshotMeta>, err: &(impl std::error::Error + 'static)) -> StorageError {
    StorageIOError::write_snapshot(meta.map(|m| m.signature()), err).into()
}

impl CurrentSnapshot {
    /// Opens the current snapshot kept in `db`, its file in `dir` (created if missing).
    pub fn open(db: &sled::Db, dir: &Path) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| read_err(&e))?;
        let tree = db.open_tree(TREE).map_err(|e| read_err(&e))?;
        let mut current = match tree.get(KEY_CURRENT_FILE).map_err(|e| read_err(&e))? {
            Some(bytes) => Some(decode::<Named>(&bytes).map_err(|e| read_err(&e))?),
            None => None,
        };
        if let Some(bytes) = tree.get(KEY_LEGACY).map_err(|e| read_err(&e))? {
            let legacy: Legacy = decode(&bytes).map_err(|e| read_err(&e))?;
            let named = Named { file: file_name(&legacy.meta), meta: legacy.meta };
            write_durably(&dir.join(&named.file), &legacy.data).map_err(|e| write_err(Some(&named.meta), &e))?;
            let record = encode(&named).map_err(|e| write_err(Some(&named.meta), &e))?;
            let mut batch = sled::Batch::default();
            batch.insert(KEY_CURRENT_FILE, record);
            batch.remove(KEY_LEGACY);
            tree.apply_batch(batch).map_err(|e| write_err(Some(&named.meta), &e))?;
            db.flush().map_err(|e| write_err(Some(&named.meta), &e))?;
            current = Some(named);
        }
        remove_all_but(dir, current.as_ref().map(|c| c.file.as_str()));
        Ok(Self {
            db: db.clone(),
            tree,
            dir: dir.to_path_buf(),
            current: Arc::new(Mutex::new(current)),
            temporaries: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The current snapshot, its file open at the start.
    pub fn get(&self) -> Result<Option<Snapshot>, StorageError> {
        let Some(named) = self.current.lock().clone() else { return Ok(None) };
        let path = self.dir.join(&named.file);
        let file = File::open(&path).map_err(|e| read_err(&e))?;
        Ok(Some(Snapshot { meta: named.meta, snapshot: Box::new(SnapshotFile::new(file, path)) }))
    }

    /// The current snapshot's metadata.
    pub fn meta(&self) -> Option<SnapshotMeta> {
        self.current.lock().as_ref().map(|named| named.meta.clone())
    }

    /// A new empty file to build or receive a snapshot in, and its path.
    pub fn temporary(&self, what: &str) -> Result<(File, PathBuf), StorageError> {
        let n = self.temporaries.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{what}-{n}.tmp"));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| write_err(None, &e))?;
        Ok((file, path))
    }

    #[cfg(test)]
    pub(crate) fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Forgets the current snapshot (`--force-new-cluster`: it names the old membership).
    pub fn forget(&self) -> Result<(), StorageError> {
        let mut current = self.current.lock();
        self.tree.remove(KEY_CURRENT_FILE).map_err(|e| write_err(None, &e))?;
        if let Some(named) = current.take() {
            let _ = std::fs::remove_file(self.dir.join(named.file));
        }
        Ok(())
    }

    /// Makes the complete, durable snapshot file at `path` with `meta` the current snapshot, unless a
    /// snapshot of a later log id already is (a build racing with an install must not bring an older
    /// snapshot back; the file is then removed).
    pub async fn save(&self, meta: &SnapshotMeta, path: &Path) -> Result<(), StorageError> {
        let named = Named { meta: meta.clone(), file: file_name(meta) };
        let record = encode(&named).map_err(|e| write_err(Some(meta), &e))?;
        let replaced = {
            let mut current = self.current.lock();
            if current.as_ref().is_some_and(|c| c.meta.last_log_id > meta.last_log_id) {
                drop(current);
                let _ = std::fs::remove_file(path);
                return Ok(());
            }
            // Renamed and recorded under the lock, so the directory, the tree and memory agree on which
            // snapshot won.
            let target = self.dir.join(&named.file);
            std::fs::rename(path, &target).map_err(|e| write_err(Some(meta), &e))?;
            File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| write_err(Some(meta), &e))?;
            self.tree.insert(KEY_CURRENT_FILE, record).map_err(|e| write_err(Some(meta), &e))?;
            current.replace(named.clone())
        };
        // Openraft purges the log up to the snapshot next; the snapshot must be on disk before that.
        self.db.flush_async().await.map_err(|e| write_err(Some(meta), &e))?;
        if let Some(old) = replaced.filter(|old| old.file != named.file) {
            if let Err(err) = std::fs::remove_file(self.dir.join(&old.file)) {
                warn!(%err, file = old.file, "cannot remove a replaced snapshot");
            }
        }
        Ok(())
    }
}

/// The file name of the snapshot with `meta`: its id (term, index and build number), anything but
/// letters, digits, `-` and `_` replaced (the id of a received snapshot comes from a peer).
fn file_name(meta: &SnapshotMeta) -> String {
    let id: String = meta
        .snapshot_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    format!("{id}.snap")
}

fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Removes every file of `dir` but `keep`: unfinished builds and receptions, replaced snapshots.
fn remove_all_but(dir: &Path, keep: Option<&str>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if keep.is_some_and(|keep| entry.file_name() == keep) {
            continue;
        }
        if let Err(err) = std::fs::remove_file(entry.path()) {
            warn!(%err, path = %entry.path().display(), "cannot remove a leftover snapshot file");
        }
    }
}
