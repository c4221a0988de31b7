//! The snapshot format, and the current snapshot of a member.
//!
//! A snapshot is the whole MVCC store ([`kv_api::MvccStore::export`], every bucket including `Meta`) with
//! the applied log id and membership it reflects, bincode-encoded in a versioned envelope. Encoding and
//! decoding live here only, so the format can be streamed in chunks without touching the state machine.
//!
//! The current snapshot (the last one built or installed) is kept in memory and in the tree `snapshot`,
//! so that `get_current_snapshot` survives a restart.

use std::io::Cursor;
use std::sync::Arc;

use kv_api::Bucket;
use openraft::StorageIOError;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::storage::{decode, encode};
use crate::typ::{LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership};

const TREE: &str = "snapshot";
const KEY_CURRENT: &[u8] = b"current";
const FORMAT_VERSION: u32 = 1;

/// What a snapshot holds, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotContent {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    /// Every entry of every bucket of the store.
    pub entries: Vec<(Bucket, Vec<u8>, Vec<u8>)>,
}

/// The envelope on the wire and on disk: a version first, so a later format can be told apart.
#[derive(Serialize, Deserialize)]
struct Envelope {
    version: u32,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    /// `(bucket tag, key, value)`.
    entries: Vec<(u8, Vec<u8>, Vec<u8>)>,
}

impl SnapshotContent {
    pub fn encode(&self) -> Result<Vec<u8>, StorageError> {
        let envelope = Envelope {
            version: FORMAT_VERSION,
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            entries: self.entries.iter().map(|(bucket, k, v)| (bucket.tag(), k.clone(), v.clone())).collect(),
        };
        Ok(encode(&envelope).map_err(|e| StorageIOError::write_snapshot(None, &e))?)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StorageError> {
        let envelope: Envelope = decode(bytes).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        if envelope.version != FORMAT_VERSION {
            return Err(corrupt(format!("unknown snapshot format version {}", envelope.version)));
        }
        let entries = envelope
            .entries
            .into_iter()
            .map(|(tag, k, v)| match Bucket::ALL.into_iter().find(|b| b.tag() == tag) {
                Some(bucket) => Ok((bucket, k, v)),
                None => Err(corrupt(format!("unknown bucket tag {tag} in snapshot"))),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { last_applied: envelope.last_applied, membership: envelope.membership, entries })
    }
}

fn write_err<E: std::error::Error + 'static>(meta: &SnapshotMeta, err: &E) -> StorageIOError<u64> {
    StorageIOError::write_snapshot(Some(meta.signature()), err)
}

fn corrupt(msg: String) -> StorageError {
    let err = std::io::Error::new(std::io::ErrorKind::InvalidData, msg);
    StorageIOError::read_snapshot(None, &err).into()
}

/// A built or installed snapshot: its metadata and its encoded content.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

/// The current snapshot, in memory and in the tree `snapshot`. Clones share it: the state machine and its
/// snapshot builders both save to it.
#[derive(Clone, Debug)]
pub struct CurrentSnapshot {
    db: sled::Db,
    tree: sled::Tree,
    current: Arc<Mutex<Option<Arc<StoredSnapshot>>>>,
}

impl CurrentSnapshot {
    pub fn open(db: &sled::Db) -> Result<Self, StorageError> {
        let tree = db.open_tree(TREE).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        let current = match tree.get(KEY_CURRENT).map_err(|e| StorageIOError::read_snapshot(None, &e))? {
            Some(bytes) => {
                let stored: StoredSnapshot = decode(&bytes).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
                Some(Arc::new(stored))
            }
            None => None,
        };
        Ok(Self { db: db.clone(), tree, current: Arc::new(Mutex::new(current)) })
    }

    /// The current snapshot, ready to be read from the start.
    pub fn get(&self) -> Option<Snapshot> {
        let stored = self.current.lock().clone()?;
        Some(Snapshot { meta: stored.meta.clone(), snapshot: Box::new(Cursor::new(stored.data.clone())) })
    }

    /// Forgets the current snapshot (`--force-new-cluster`: it names the old membership).
    pub fn forget(&self) -> Result<(), StorageError> {
        let mut current = self.current.lock();
        self.tree.remove(KEY_CURRENT).map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        *current = None;
        Ok(())
    }

    /// Makes `meta`/`data` the current snapshot, durably, unless a snapshot of a later log id already is
    /// (a build racing with an install must not bring an older snapshot back).
    pub async fn save(&self, meta: &SnapshotMeta, data: Vec<u8>) -> Result<(), StorageError> {
        let stored = StoredSnapshot { meta: meta.clone(), data };
        let bytes = encode(&stored).map_err(|e| write_err(meta, &e))?;
        {
            let mut current = self.current.lock();
            if current.as_ref().is_some_and(|c| c.meta.last_log_id > meta.last_log_id) {
                return Ok(());
            }
            // Inserted under the lock, so the tree and memory agree on which snapshot won.
            self.tree.insert(KEY_CURRENT, bytes).map_err(|e| write_err(meta, &e))?;
            *current = Some(Arc::new(stored));
        }
        // Openraft purges the log up to the snapshot next; the snapshot must be on disk before that.
        self.db.flush_async().await.map_err(|e| write_err(meta, &e))?;
        Ok(())
    }
}
