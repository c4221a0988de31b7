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
        // again whatever came after the committed applied id. A compaction commits at once: its
        // deletions start only then, as soon as etcd's would (a defrag that follows gets the space).
        let now = Instant::now();
        if store.staged_writes() >= COMMIT_WRITES
            || store.staged_bytes() >= COMMIT_BYTES
            || now.duration_since(self.committed_at) >= COMMIT_INTERVAL
            || store.compaction_staged()
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
        let build_path = path.clone();
        let built = blocking(move || write_snapshot(&store, file)).await;
        let (last_applied, membership) = match built {
            Ok(built) => built,
            Err(err) => {
                let _ = std::fs::remove_file(&build_path);
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
mod tests {
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
            assert_eq!(
                follower.applied_state().await.expect("applied"),
                leader.applied_state().await.expect("applied")
            );
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
}
