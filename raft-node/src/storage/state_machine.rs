//! [`StateMachine`]: applies committed log entries to the MVCC store, and builds and installs snapshots.
//!
//! The applied log id and the last membership are kept in memory and written in the store's `Meta`
//! bucket, staged with [`MvccStore::stage_meta`] so that they reach the disk in the same atomic batch as
//! the data they describe (design invariant 3). Apply takes the store's write lock once per batch and
//! never across an `.await`; snapshot export and install run on blocking threads.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv_api::watch::WatchHub;
use kv_api::{Bucket, MvccStore, Record, SharedStore};
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};

use crate::storage::current_snapshot::CurrentSnapshot;
use crate::storage::snapshot::{SnapshotFile, SnapshotReader, SnapshotWriter};
use crate::storage::{decode, encode};
use crate::typ::{Applied, Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig};

/// Applied writes reach the backend at least this often (etcd's backend batch interval)...
const COMMIT_INTERVAL: Duration = Duration::from_millis(100);
/// ... or once this many are staged (etcd's backend batch limit)...
const COMMIT_WRITES: usize = 10_000;
/// ... or once they hold this many bytes: sled keeps much of a batch of more than about 4 MiB in
/// memory long after writing it (measured with sled 0.34.7 and a 64 MiB cache: 400k values of 1 KiB in
/// batches of 3,500 left 97 MB resident, in batches of 3,900 or more 280–390 MB).
const COMMIT_BYTES: usize = 2 << 20;

const META_APPLIED: &[u8] = b"raft_applied";
const META_MEMBERSHIP: &[u8] = b"raft_membership";

/// The state machine of a member: the shared MVCC store plus Raft's bookkeeping about it.
#[derive(Debug)]
pub struct StateMachine {
    store: SharedStore,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: CurrentSnapshot,
    /// Snapshots built by this process, to make snapshot ids unique.
    builds: Arc<AtomicU64>,
    /// Told about every committed batch's changes (and about installed snapshots).
    watch_hub: Arc<WatchHub>,
    /// When applied writes were last committed to the backend.
    committed_at: Instant,
}

/// Builds a snapshot of the store as it is when the build runs.
#[derive(Debug)]
pub struct SnapshotBuilder {
    store: SharedStore,
    snapshot: CurrentSnapshot,
    builds: Arc<AtomicU64>,
}

impl StateMachine {
    /// Opens the state machine on `store`, resuming from the applied id and membership it recorded; its
    /// snapshot files are in `snapshot_dir`.
    pub fn open(db: &sled::Db, store: SharedStore, snapshot_dir: &Path) -> Result<Self, StorageError> {
        let (last_applied, membership) = read_applied(&store.read())?;
        let snapshot = CurrentSnapshot::open(db, snapshot_dir)?;
        // Continue the counter of the current snapshot's id so a rebuilt one gets a new id.
        let builds =
            snapshot.meta().and_then(|m| m.snapshot_id.rsplit('-').next()?.parse::<u64>().ok()).map_or(0, |n| n + 1);
        let watch_hub = Arc::new(WatchHub::new(store.read().current_revision()));
        Ok(Self {
            store,
            last_applied,
            membership,
            snapshot,
            builds: Arc::new(AtomicU64::new(builds)),
            watch_hub,
            committed_at: Instant::now(),
        })
    }

    /// The watchers of this member, fed by apply.
    pub fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.watch_hub
    }

    /// The MVCC store this state machine applies to.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// Applies a batch under one write lock, committing data and applied id in one backend batch.
    fn apply_batch(&mut self, entries: impl IntoIterator<Item = Entry>) -> Result<Vec<Applied>, StorageError> {
        let mut replies = Vec::new();
        let mut last_applied = self.last_applied;
        let mut membership = None;
        let mut store = self.store.write();
        for entry in entries {
            let reply = match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(commands) => {
                    let mut answers = Vec::with_capacity(commands.len());
                    for command in commands.iter() {
                        match store.apply(command) {
                            // A disk or invariant failure is no answer to give a client: it stops this member.
                            Err(kv_api::Error::Internal(msg)) => {
                                return Err(StorageIOError::apply(entry.log_id, &io::Error::other(msg)).into())
                            }
                            answer => answers.push(answer),
                        }
                    }
                    answers
                }
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(entry.log_id), m));
                    Vec::new()
                }
            };
            last_applied = Some(entry.log_id);
            replies.push(reply);
        }
        if replies.is_empty() {
            return Ok(replies);
        }
        let write_err =
            |e: &dyn std::fmt::Display| StorageIOError::write_state_machine(&io::Error::other(e.to_string()));
        store.stage_meta(META_APPLIED, encode(&last_applied).map_err(|e| write_err(&e))?);
        if let Some(m) = &membership {
            store.stage_meta(META_MEMBERSHIP, encode(m).map_err(|e| write_err(&e))?);
        }
        // Like etcd's backend, commit every so often rather than per apply: the log holds every
        // applied entry until a snapshot (which commits first) lets it go, and a restart applies
        // again whatever came after the committed applied id. A compaction is no exception: its
        // answer waits for no commit; the key index's compaction commits it once its steps are done
        // (`crate::index_compaction`), when its deletions can start.
        let now = Instant::now();
        if store.staged_writes() >= COMMIT_WRITES
            || store.staged_bytes() >= COMMIT_BYTES
            || now.duration_since(self.committed_at) >= COMMIT_INTERVAL
        {
            store.commit().map_err(|e| write_err(&e))?;
            crate::metrics::metrics().backend_commit.observe(now.elapsed());
            self.committed_at = now;
        }
        let (events, revision) = (store.take_events(), store.current_revision());
        drop(store);
        self.watch_hub.notify(revision, events);
        self.last_applied = last_applied;
        if let Some(m) = membership {
            self.membership = m;
        }
        Ok(replies)
    }
}

impl StateMachine {
    /// `--force-new-cluster`: makes `membership` this state machine's membership at its applied id,
    /// committed to the backend at once, and forgets the current snapshot (it names the old one).
    pub fn force_membership(
        &mut self,
        membership: openraft::Membership<crate::typ::NodeId, crate::typ::MemberNode>,
    ) -> Result<(), StorageError> {
        let stored = StoredMembership::new(self.last_applied, membership);
        let write_err =
            |e: &dyn std::fmt::Display| StorageIOError::write_state_machine(&io::Error::other(e.to_string()));
        {
            let mut store = self.store.write();
            store.stage_meta(META_APPLIED, encode(&self.last_applied).map_err(|e| write_err(&e))?);
            store.stage_meta(META_MEMBERSHIP, encode(&stored).map_err(|e| write_err(&e))?);
            store.commit().map_err(|e| write_err(&e))?;
            store.backend().sync().map_err(|e| write_err(&e))?;
        }
        self.membership = stored;
        self.snapshot.forget()
    }
}

/// The applied id and membership as last committed in the store's `Meta` bucket.
fn read_applied(store: &MvccStore) -> Result<(Option<LogId>, StoredMembership), StorageError> {
    let read = |key: &[u8]| -> Result<Option<Vec<u8>>, StorageError> {
        Ok(store.meta(key).map_err(|e| StorageIOError::read_state_machine(&e))?)
    };
    let last_applied = match read(META_APPLIED)? {
        Some(bytes) => decode(&bytes).map_err(|e| StorageIOError::read_state_machine(&e))?,
        None => None,
    };
    let membership = match read(META_MEMBERSHIP)? {
        Some(bytes) => decode(&bytes).map_err(|e| StorageIOError::read_state_machine(&e))?,
        None => StoredMembership::default(),
    };
    Ok((last_applied, membership))
}

/// Commits what apply staged and syncs it to disk, then runs `read` on the store under its read lock,
/// with the applied id and membership of that committed state: a point-in-time view where data and
/// applied id agree (apply waits meanwhile). `Maintenance.Snapshot` reads the store this way. Blocking.
pub(crate) fn read_committed<T>(
    store: &SharedStore,
    read: impl FnOnce(&MvccStore, Option<LogId>, StoredMembership) -> Result<T, StorageError>,
) -> Result<T, StorageError> {
    let store = committed(store)?;
    // The compactor deletes freed revisions without the store's lock: paused, it leaves the key bucket
    // and the finished compaction as they are, so the copy is one state (which a restore finishes).
    let _paused = store.compactor().pause();
    let (last_applied, membership) = read_applied(&store)?;
    read(&store, last_applied, membership)
}

/// The store's read lock once everything apply staged is committed and on disk (so the log entries a
/// snapshot of it lets openraft purge are never needed again). Blocking.
fn committed(store: &SharedStore) -> Result<parking_lot::RwLockReadGuard<'_, MvccStore>, StorageError> {
    let write_err = |e: &dyn std::fmt::Display| StorageIOError::write_state_machine(&io::Error::other(e.to_string()));
    let mut store = store.write();
    store.commit().map_err(|e| write_err(&e))?;
    store.backend().sync().map_err(|e| write_err(&e))?;
    Ok(parking_lot::RwLockWriteGuard::downgrade(store))
}

/// Writes a snapshot of the committed store into `file`; apply waits only while the buckets other than
/// the key bucket are written (see [`MvccStore::export_split`]), not for the key bucket. Returns the
/// applied id and membership it reflects. Blocking.
fn write_snapshot(store: &SharedStore, file: std::fs::File) -> Result<(Option<LogId>, StoredMembership), StorageError> {
    let write_err = |e: &dyn std::fmt::Display| StorageIOError::write_snapshot(None, &io::Error::other(e.to_string()));
    let push_err = |e: io::Error| kv_api::Error::Internal(e.to_string());
    let (mut writer, keys, last_applied, membership) = {
        let store = committed(store)?;
        let (last_applied, membership) = read_applied(&store)?;
        let mut writer = SnapshotWriter::new(file, last_applied, membership.clone()).map_err(|e| write_err(&e))?;
        let keys = store
            .export_split(|bucket, key, value| writer.push(bucket, key, value).map_err(push_err))
            .map_err(|e| write_err(&e))?;
        (writer, keys, last_applied, membership)
    };
    keys.run(|bucket, key, value| writer.push(bucket, key, value).map_err(push_err)).map_err(|e| write_err(&e))?;
    writer.finish().map_err(|e| write_err(&e))?;
    Ok((last_applied, membership))
}

/// Whether `key` of `bucket` is Raft's bookkeeping (applied id, membership) rather than the store's data.
pub(crate) fn is_bookkeeping(bucket: Bucket, key: &[u8]) -> bool {
    bucket == Bucket::Meta && (key == META_APPLIED || key == META_MEMBERSHIP)
}

/// Raft's bookkeeping entries for the meta bucket, saying that the store reflects the log up to `applied`
/// with `membership`.
pub(crate) fn bookkeeping(
    applied: &Option<LogId>,
    membership: &StoredMembership,
) -> Result<[Record; 2], bincode::error::EncodeError> {
    Ok([
        (Bucket::Meta, META_APPLIED.to_vec(), encode(applied)?),
        (Bucket::Meta, META_MEMBERSHIP.to_vec(), encode(membership)?),
    ])
}

/// Runs `f` on a blocking thread (big scans and writes must not block the runtime).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| StorageIOError::read_state_machine(&e))?
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let (store, (file, path)) = (self.store.clone(), self.snapshot.temporary("build")?);
        // Written entry by entry to the file, apply waiting only for the small buckets.
        let built = blocking(move || write_snapshot(&store, file)).await;
        let (last_applied, membership) = match built {
            Ok(built) => built,
            Err(err) => {
                let _ = std::fs::remove_file(&path);
                return Err(err);
            }
        };
        let build = self.builds.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match last_applied {
            Some(id) => format!("{}-{}-{build}", id.leader_id.term, id.index),
            None => format!("none-{build}"),
        };
        let meta = SnapshotMeta { last_log_id: last_applied, last_membership: membership, snapshot_id };
        self.snapshot.save(&meta, &path).await?;
        // Saved as current (or dropped for a later one): either way a fresh handle to what is current.
        match self.snapshot.get()? {
            Some(snapshot) if snapshot.meta.last_log_id >= meta.last_log_id => Ok(snapshot),
            _ => {
                Err(StorageIOError::read_snapshot(Some(meta.signature()), &io::Error::other("snapshot vanished"))
                    .into())
            }
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        self.apply_batch(entries)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { store: self.store.clone(), snapshot: self.snapshot.clone(), builds: self.builds.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFile>, StorageError> {
        let (file, path) = self.snapshot.temporary("receive")?;
        Ok(Box::new(SnapshotFile::new(file, path)))
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Box<SnapshotFile>) -> Result<(), StorageError> {
        let path = snapshot.path().to_path_buf();
        drop(snapshot);
        let store = self.store.clone();
        let (snapshot_meta, read_path) = (meta.clone(), path.clone());
        let installed = blocking(move || {
            let signature = Some(snapshot_meta.signature());
            let read_err = |e: &io::Error| StorageError::from(StorageIOError::read_snapshot(signature.clone(), e));
            let write_err = |e: &dyn std::fmt::Display| {
                StorageIOError::write_snapshot(Some(snapshot_meta.signature()), &io::Error::other(e.to_string()))
            };
            // Durable before it becomes the current snapshot.
            std::fs::File::open(&read_path).and_then(|f| f.sync_all()).map_err(|e| read_err(&e))?;
            let reader = SnapshotReader::open(&read_path).map_err(|e| read_err(&e))?;
            if reader.last_applied != snapshot_meta.last_log_id || reader.membership != snapshot_meta.last_membership {
                let err = io::Error::new(io::ErrorKind::InvalidData, "snapshot content disagrees with its meta");
                return Err(read_err(&err));
            }
            // Write the bookkeeping from the meta itself: data, applied id and membership together.
            let ours =
                bookkeeping(&snapshot_meta.last_log_id, &snapshot_meta.last_membership).map_err(|e| write_err(&e))?;
            let mut content = reader
                .map(|item| item.map_err(|e| kv_api::BackendError(format!("reading the snapshot: {e}"))))
                .filter(|item| !matches!(item, Ok((bucket, key, _)) if is_bookkeeping(*bucket, key)))
                .chain(ours.into_iter().map(Ok));
            store.write().install_from(&mut content).map_err(|e| write_err(&e))?;
            Ok(())
        })
        .await;
        if let Err(err) = installed {
            let _ = std::fs::remove_file(&path);
            return Err(err);
        }
        // The store jumped: watchers catch up from it (or learn that their start was compacted).
        let revision = self.store.read().current_revision();
        self.watch_hub.resync(revision);
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.snapshot.save(meta, &path).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        self.snapshot.get()
    }
}

#[cfg(test)]
#[path = "state_machine_test.rs"]
mod tests;
