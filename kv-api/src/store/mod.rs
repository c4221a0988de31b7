//! The MVCC store: every revision of every key, on a [`Backend`], with the key index in memory.
//!
//! - this file: the store, its loading, reads at any revision, history, and the commit;
//! - `write`: apply of every command and the writes it stages;
//! - `txn`: compares, the checks before a txn runs, and its runs.
//!
//! Writes happen only through [`MvccStore::apply`], called by the state machine in log order. Changes are
//! staged in a batch (readable at once through an overlay) and reach the backend in one atomic
//! [`MvccStore::commit`], together with whatever bookkeeping the caller staged with
//! [`MvccStore::stage_meta`] — the applied log id, so that data and applied id never disagree.
//!
//! Compaction is split in two (see [`crate::compactor`]): apply marks the revision compacted and
//! compacts the key index; once that is committed, the store's compactor thread deletes the freed
//! revisions from the backend in batches. Loading a store resumes a compaction a crash interrupted.

use std::collections::HashMap;
use std::sync::Arc;

use proto::etcdserverpb as pb;
use proto::mvccpb::event::EventType;
use proto::mvccpb::{Event, KeyValue};

use crate::alarm::{self, AlarmTable};
use crate::auth::AuthStore;
use crate::backend::{try_scan, try_scan_while, Backend, BackendError, Bucket, Record, WriteBatch};
use crate::compactor::{CompactionConfig, Compactor, Paused, META_FINISHED_COMPACT_REV};
use crate::error::{Error, Result};
use crate::index::{KeyRange, TreeIndex};
use crate::lease::{Lease, LeaseId, LeaseTable};
use crate::range;
use crate::revision::Revision;
use crate::stats;

mod encoded_range;
mod entry;
mod index_compaction;
mod load_keys;
pub mod saved_index;
mod txn;
mod write;

pub(crate) use entry::{decode_entry, encode_entry};

pub use encoded_range::{EncodedRange, RangeFetch, RangeRead};

pub const META_COMPACT_REV: &[u8] = b"compact_rev";
/// The enabled downgrade's target version (`3.5.0`), empty when none is.
pub(crate) const META_DOWNGRADE: &[u8] = b"downgrade";
const NEVER_COMPACTED: i64 = -1;

impl From<BackendError> for Error {
    fn from(err: BackendError) -> Self {
        Error::Internal(err.to_string())
    }
}

/// The write in progress inside one `apply`.
#[derive(Clone, Copy, Debug, Default)]
struct WriteTxn {
    /// Store revision when the request began; its changes take `begin + 1`.
    begin: i64,
    /// Changes made so far; the next one takes sub-revision `changes`.
    changes: i64,
}

impl WriteTxn {
    /// The revision reads inside the request see: its own changes once it made some.
    fn read_rev(&self) -> i64 {
        if self.changes > 0 {
            self.begin + 1
        } else {
            self.begin
        }
    }
}

/// The store as the services and the state machine share it.
pub type SharedStore = Arc<parking_lot::RwLock<MvccStore>>;

/// The MVCC key-value store of one member.
pub struct MvccStore {
    backend: Arc<dyn Backend>,
    index: TreeIndex,
    /// Revision of the newest change (1 on an empty store).
    current: i64,
    /// Revisions below this are gone; reads at it still work. -1 until the first compaction, as in etcd
    /// (so `Compact(0)` succeeds once and a txn range at revision -1 is not "compacted").
    compacted: i64,
    batch: WriteBatch,
    /// Values staged in `batch`, readable before the commit.
    staged: HashMap<Revision, KeyValue>,
    /// Leases and the keys attached to them.
    leases: LeaseTable,
    /// Changes made since the watchers were last told, in revision order (see [`MvccStore::take_events`]).
    events: Vec<Event>,
    /// Active alarms (NOSPACE refuses what takes space; CORRUPT refuses everything).
    alarms: AlarmTable,
    /// Users, roles and the auth flags (tokens too, member-local).
    auth: AuthStore,
    /// Keys alive at the current revision (etcd's `keys_total`), kept as writes apply.
    live_keys: i64,
    /// The downgrade target while one is enabled ([`crate::downgrade`]).
    downgrade: Option<crate::downgrade::MinorVersion>,
    /// Whether a compaction was applied since the last commit (its freed revisions may be deleted only
    /// once it is committed).
    compaction_staged: bool,
    /// The key index's compaction in progress, a step at a time ([`index_compaction`]).
    index_compaction: Option<index_compaction::IndexCompaction>,
    /// Signalled when a compaction of the key index starts, for whoever drives its steps.
    index_compaction_started: Arc<tokio::sync::Notify>,
    /// Deletes freed revisions in the background.
    compactor: Compactor,
}

impl std::fmt::Debug for MvccStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MvccStore").field("current", &self.current).field("compacted", &self.compacted).finish()
    }
}

impl MvccStore {
    /// Opens the store on `backend`, rebuilding the key index from the revisions it holds, with etcd's
    /// default compaction batches.
    pub fn open(backend: Arc<dyn Backend>) -> Result<Self> {
        Self::open_with(backend, CompactionConfig::default())
    }

    /// [`MvccStore::open`] with the compactor's batch size and pause.
    pub fn open_with(backend: Arc<dyn Backend>, compaction: CompactionConfig) -> Result<Self> {
        let mut store = Self {
            compactor: Compactor::start(backend.clone(), compaction),
            compaction_staged: false,
            index_compaction: None,
            index_compaction_started: Arc::default(),
            backend,
            index: TreeIndex::default(),
            current: 1,
            compacted: NEVER_COMPACTED,
            batch: WriteBatch::default(),
            staged: HashMap::new(),
            events: Vec::new(),
            leases: LeaseTable::default(),
            alarms: AlarmTable::default(),
            auth: AuthStore::default(),
            live_keys: 0,
            downgrade: None,
        };
        store.load()?;
        Ok(store)
    }

    fn load(&mut self) -> Result<()> {
        self.load_planned(load_keys::PARALLEL_FROM, load_keys::RANGES)
    }

    /// [`MvccStore::load`], reading the key bucket with several threads from a span of `parallel_from`
    /// main revisions on, in `ranges` ranges.
    fn load_planned(&mut self, parallel_from: i64, ranges: i64) -> Result<()> {
        self.index.clear();
        self.staged.clear();
        self.events.clear();
        self.batch = WriteBatch::default();
        self.compaction_staged = false;
        self.index_compaction = None;
        self.compacted = match self.backend.get(Bucket::Meta, META_COMPACT_REV)? {
            Some(bytes) => decode_i64(&bytes)?,
            None => NEVER_COMPACTED,
        };
        let finished =
            self.backend.get(Bucket::Meta, META_FINISHED_COMPACT_REV)?.map(|b| decode_i64(&b)).transpose()?;
        let key_leases = match self.saved_index(finished)? {
            Some(saved) => {
                tracing::info!(keys = saved.index.len(), "loaded the key index saved at the last clean stop");
                self.index = saved.index;
                self.current = saved.basis.current;
                self.resume_compaction(finished, Vec::new());
                saved.key_leases.into_iter().collect()
            }
            None => self.rebuild_index(finished, parallel_from, ranges)?,
        };
        self.live_keys = self.index.range(KeyRange::new(&[0], &[0]), self.current).count() as i64;

        self.leases.clear();
        let leases = &mut self.leases;
        try_scan(&*self.backend, Bucket::Lease, |id, ttl| {
            leases.grant(decode_i64(id)?, decode_i64(ttl)?);
            Ok(())
        })?;
        for (key, lease) in key_leases {
            self.leases.attach(&key, lease);
        }

        self.alarms.clear();
        let alarms = &mut self.alarms;
        try_scan(&*self.backend, Bucket::Alarm, |key, _| {
            let (member_id, alarm) = alarm::from_key(key).ok_or_else(|| Error::Internal("corrupt alarm key".into()))?;
            alarms.activate(member_id, alarm);
            Ok(())
        })?;
        self.downgrade =
            self.backend.get(Bucket::Meta, META_DOWNGRADE)?.and_then(|bytes| crate::downgrade::decode(&bytes));
        self.auth.load(&*self.backend)
    }

    /// Rebuilds the key index from every stored revision; the leases of the keys' newest values.
    fn rebuild_index(
        &mut self,
        finished: Option<i64>,
        parallel_from: i64,
        ranges: i64,
    ) -> Result<HashMap<Vec<u8>, LeaseId>> {
        let compacted = self.compacted;
        // Tombstones below the compacted revision whose puts a compaction already deleted (it was
        // interrupted before the tombstone's batch): dead, to delete again.
        let mut strays = Vec::new();
        let mut newest = 1;
        // The lease of each leased key's newest value, to attach keys to their leases once all are
        // known (only keys with a lease: most have none, and a member starts with millions of keys).
        let mut key_leases: HashMap<Vec<u8>, LeaseId> = HashMap::new();
        let index = &mut self.index;
        let readers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
        load_keys::each_revision(&*self.backend, readers, parallel_from, ranges, |rev, tombstone, head| {
            if tombstone {
                if !index.restore_tombstone(head.key, rev) && rev.main <= compacted {
                    strays.push(rev);
                }
            } else {
                index.restore(head.key, Revision::new(head.create_revision, 0), rev, head.version);
            }
            if !tombstone && head.lease != 0 {
                key_leases.insert(head.key.to_vec(), head.lease);
            } else if !key_leases.is_empty() {
                key_leases.remove(head.key);
            }
            newest = rev.main;
            Ok(())
        })?;
        // Compaction may have removed the newest tombstones; the revision never goes back below it.
        self.current = newest.max(self.compacted).max(1);
        self.resume_compaction(finished, strays);
        Ok(key_leases)
    }

    /// Compacts the rebuilt index at the compacted revision (it holds every revision the key bucket
    /// still has) and hands what a compaction interrupted by a crash left behind to the compactor.
    /// `finished` is the meta's finished compaction; a store written before compaction went to the
    /// background has none, and gets it from an empty job.
    fn resume_compaction(&mut self, finished: Option<i64>, strays: Vec<Revision>) {
        if self.compacted < 1 {
            self.compactor.set_finished(self.compacted);
            return;
        }
        let mut freed = self.index.compact(self.compacted);
        freed.extend(strays);
        freed.sort_unstable();
        let finished = finished.unwrap_or(NEVER_COMPACTED);
        if freed.is_empty() && finished >= self.compacted {
            self.compactor.set_finished(self.compacted);
            return;
        }
        tracing::info!(scheduled = self.compacted, finished, left = freed.len(), "resuming an unfinished compaction");
        self.compactor.set_finished(finished);
        self.compactor.schedule(self.compacted, freed);
    }

    /// The store's compactor: its settings, and pausing it while a snapshot reads the backend.
    pub fn compactor(&self) -> &Compactor {
        &self.compactor
    }

    /// Follows the newest compaction whose freed revisions are all deleted (a `physical` compaction
    /// request waits for its own).
    pub fn compaction_finished(&self) -> tokio::sync::watch::Receiver<i64> {
        self.compactor.finished()
    }

    /// Blocks until every committed compaction's revisions are deleted (offline tools and tests; the
    /// key index's compaction must be done: see [`MvccStore::finish_index_compaction`]).
    pub fn wait_compacted(&self) {
        self.compactor.wait_idle();
    }

    /// The downgrade target while a downgrade is enabled.
    pub fn downgrade_target(&self) -> Option<crate::downgrade::MinorVersion> {
        self.downgrade
    }

    /// The active alarms.
    pub fn alarms(&self) -> &AlarmTable {
        &self.alarms
    }

    /// Users, roles, the auth flags and this member's tokens.
    pub fn auth(&self) -> &AuthStore {
        &self.auth
    }

    pub fn auth_mut(&mut self) -> &mut AuthStore {
        &mut self.auth
    }

    /// A lease and its keys.
    pub fn lease(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(id)
    }

    /// Every lease id with its granted TTL.
    pub fn leases(&self) -> Vec<(LeaseId, i64)> {
        self.leases.list()
    }

    pub fn current_revision(&self) -> i64 {
        self.current
    }

    /// How many keys are alive at the current revision.
    pub fn live_keys(&self) -> i64 {
        self.live_keys
    }

    /// What the key index holds (dead keys and old revisions included, until compacted).
    pub fn index_size(&self) -> crate::index::IndexSize {
        self.index.size()
    }

    pub fn compacted_revision(&self) -> i64 {
        self.compacted
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    pub(crate) fn index(&self) -> &TreeIndex {
        &self.index
    }

    /// Serves a Range at the current revision.
    pub fn range(&self, req: &pb::RangeRequest) -> Result<pb::RangeResponse> {
        self.range_at(req, self.current)
    }

    /// Range seen from a store whose newest revision is `current`.
    fn range_at(&self, req: &pb::RangeRequest, current: i64) -> Result<pb::RangeResponse> {
        stats::count(&stats::RANGES);
        let at = self.read_revision(req, current)?;
        let keys = self.index.range(KeyRange::new(&req.key, &req.range_end), at);
        let plan = range::Plan::of(req);
        let mut count = 0i64;
        let mut kvs = Vec::new();
        for (_, found) in keys {
            count += 1;
            if !req.count_only && plan.fetch.is_none_or(|n| kvs.len() < n) {
                kvs.push(self.kv_at(found.modified)?);
            }
        }
        let mut resp = range::finish(req, kvs);
        resp.count = count;
        resp.header = Some(revision_header(current));
        Ok(resp)
    }

    /// The revision a Range reads at, from a store whose newest revision is `current`.
    fn read_revision(&self, req: &pb::RangeRequest, current: i64) -> Result<i64> {
        let at = match req.revision {
            rev if rev > current => return Err(Error::FutureRevision),
            rev if rev <= 0 => current,
            rev => rev,
        };
        if at < self.compacted {
            return Err(Error::Compacted);
        }
        Ok(at)
    }

    /// The value stored at `rev`.
    fn kv_at(&self, rev: Revision) -> Result<KeyValue> {
        if let Some(kv) = self.staged.get(&rev) {
            return Ok(kv.clone());
        }
        let bytes = self
            .backend
            .get(Bucket::Key, &rev.to_bytes())?
            .ok_or_else(|| Error::Internal(format!("revision {rev:?} is indexed but not stored")))?;
        Ok(decode_entry(&bytes)?.1)
    }

    /// The key as a read at `at` sees it, with its value.
    pub(crate) fn get_at(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>> {
        match self.index.get(key, at) {
            Some(found) => self.kv_at(found.modified).map(Some),
            None => Ok(None),
        }
    }

    /// Every key of `range` alive at `at`, with values.
    pub(crate) fn kvs_at(&self, range: KeyRange<'_>, at: i64) -> Result<Vec<KeyValue>> {
        self.index.range(range, at).map(|(_, found)| self.kv_at(found.modified)).collect()
    }

    /// The changes applied since the last call, in revision order, for the watchers; call after
    /// [`MvccStore::commit`]. Events carry no `prev_kv` (watchers that want it read revision - 1).
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Every change to keys of `range` with a main revision in `(after, upto]`, in revision order: the
    /// history a watcher catches up from. Fails with [`Error::Compacted`] when part of it is gone.
    pub fn history(&self, range: KeyRange<'_>, after: i64, upto: i64) -> Result<Vec<Event>> {
        if after + 1 < self.compacted {
            return Err(Error::Compacted);
        }
        let mut revs: Vec<(Revision, bool)> = Vec::new();
        for (_, ki) in self.index.range_indexes(range) {
            revs.extend(ki.revisions_after(after).into_iter().filter(|(rev, _)| rev.main <= upto));
        }
        revs.sort_unstable();
        revs.into_iter().map(|(rev, tombstone)| Ok(event(tombstone, self.kv_at(rev)?))).collect()
    }

    /// The value of `key` as a read at `at` sees it (for watchers' `prev_kv`).
    pub fn value_at(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>> {
        if at < self.compacted {
            return Err(Error::Compacted);
        }
        self.get_at(key, at)
    }

    /// Stages a bookkeeping value to be written atomically with the next commit.
    pub fn stage_meta(&mut self, key: &[u8], value: Vec<u8>) {
        self.batch.put(Bucket::Meta, key, value);
    }

    /// A bookkeeping value as last committed.
    pub fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.backend.get(Bucket::Meta, key)?)
    }

    /// Whether a compaction applied since the last commit waits for it: the compactor starts deleting
    /// only once it is committed.
    pub fn compaction_staged(&self) -> bool {
        self.compaction_staged
    }

    /// How many writes are staged and not yet committed.
    pub fn staged_writes(&self) -> usize {
        self.batch.ops.len()
    }

    /// The keys' and values' bytes staged and not yet committed.
    pub fn staged_bytes(&self) -> usize {
        self.batch.bytes()
    }

    /// Writes everything staged since the last commit, atomically; then takes the key index's
    /// compaction a step further, if one is in progress.
    pub fn commit(&mut self) -> Result<()> {
        if !self.batch.is_empty() {
            let batch = std::mem::take(&mut self.batch);
            self.backend.write(batch)?;
            self.staged.clear();
            self.compaction_staged = false;
        }
        self.compact_index_step();
        Ok(())
    }

    /// Every committed entry of every bucket: the content of a snapshot. Freed revisions the compactor
    /// has not deleted yet are part of it (loading it deletes them); pause the compactor meanwhile for
    /// one consistent state.
    pub fn export(&self) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        self.export_each(|bucket, key, value| {
            out.push((bucket, key.to_vec(), value.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    /// [`MvccStore::export`], an entry at a time: nothing of it is held in memory here.
    pub fn export_each(&self, mut visit: impl FnMut(Bucket, &[u8], &[u8]) -> Result<()>) -> Result<()> {
        for bucket in Bucket::ALL {
            try_scan(&*self.backend, bucket, |key, value| visit(bucket, key, value))?;
        }
        Ok(())
    }

    /// A consistent copy of the committed store in two halves, so that writers wait for the first only:
    /// every bucket but the key bucket now, through `visit` (they change in place: hold the store's lock,
    /// with nothing staged), and a [`KeyExport`] that reads the key bucket afterwards, without the lock.
    /// An entry of the key bucket never changes once written: later writes add later revisions, and
    /// only the compactor deletes, which stays paused until the [`KeyExport`] is dropped. So the key
    /// bucket up to the current revision reads later as it is now.
    pub fn export_split(&self, mut visit: impl FnMut(Bucket, &[u8], &[u8]) -> Result<()>) -> Result<KeyExport> {
        let paused = self.compactor.pause();
        for bucket in Bucket::ALL.into_iter().filter(|bucket| *bucket != Bucket::Key) {
            try_scan(&*self.backend, bucket, |key, value| visit(bucket, key, value))?;
        }
        Ok(KeyExport { backend: self.backend.clone(), revision: self.current_revision(), _paused: paused })
    }

    /// Replaces the whole store with a snapshot's content (from [`MvccStore::export`]).
    pub fn install(&mut self, entries: Vec<Record>) -> Result<()> {
        self.install_from(&mut entries.into_iter().map(Ok))
    }

    /// [`MvccStore::install`] from entries read as they are installed (a snapshot larger than memory).
    pub fn install_from(
        &mut self,
        content: &mut dyn Iterator<Item = std::result::Result<Record, BackendError>>,
    ) -> Result<()> {
        {
            let mut stopped = self.compactor.stop();
            self.backend.replace_all(content)?;
            self.compactor.reset(&mut stopped);
        }
        self.load()
    }
}

/// The key bucket's half of [`MvccStore::export_split`]: its entries up to the revision of the split.
pub struct KeyExport {
    backend: Arc<dyn Backend>,
    revision: i64,
    _paused: Paused,
}

impl KeyExport {
    /// The revision the export stops at.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Visits the key bucket's entries up to the split's revision, in revision order.
    pub fn run(self, mut visit: impl FnMut(Bucket, &[u8], &[u8]) -> Result<()>) -> Result<()> {
        try_scan_while(&*self.backend, Bucket::Key, |key, value| {
            if Revision::from_bytes(key).is_some_and(|rev| rev.main > self.revision) {
                return Ok(false);
            }
            visit(Bucket::Key, key, value).map(|()| true)
        })
    }
}

fn decode_i64(bytes: &[u8]) -> Result<i64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| Error::Internal("corrupt meta revision".into()))?;
    Ok(i64::from_be_bytes(arr))
}

fn event(tombstone: bool, kv: KeyValue) -> Event {
    let kind = if tombstone { EventType::Delete } else { EventType::Put };
    Event { r#type: kind as i32, kv: Some(kv), prev_kv: None }
}

/// A header carrying only a revision, as apply produces (the service fills in the rest).
pub(crate) fn revision_header(revision: i64) -> pb::ResponseHeader {
    pb::ResponseHeader { revision, ..Default::default() }
}
