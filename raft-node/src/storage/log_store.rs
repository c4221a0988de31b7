//! [`LogStore`]: openraft's log storage.
//!
//! - the entries: segment files in `wal/` inside the log's sled directory ([`Wal`]), appended and
//!   synced by the appending task itself;
//! - sled tree `raft_state`: the vote, the committed log id and the last purged log id;
//! - sled tree `logs`: where earlier builds kept the entries (see [`log_pieces`]); a member that
//!   finds entries there moves them into the segment files when it opens, then empties it.
//!
//! Appends and votes are durable before they are reported done (design invariant 2).

use std::collections::VecDeque;
use std::fmt::Debug;
use std::fs::File;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, RaftLogReader, StorageIOError};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::early_append::EarlyAppends;
use crate::storage::sync_place::SyncPlace;
use crate::storage::wal::Wal;
use crate::storage::{decode, encode, log_pieces};
use crate::typ::{Commands, Entry, LogId, StorageError, TypeConfig, Vote};

const RAFT_STATE: &str = "raft_state";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";
/// The directory of the segment files, inside the log's sled directory.
pub(crate) const WAL_DIR: &str = "wal";

/// The Raft log, vote and log pointers of a member. Cloning gives another handle on the same log (the
/// log reader of the replication tasks).
#[derive(Clone, Debug)]
pub struct LogStore {
    db: sled::Db,
    state: sled::Tree,
    wal: Arc<Wal>,
    /// The newest entries (a suffix of the log, or nothing), as appended: the leader's replication to
    /// each follower reads an entry right after its append, and decoding it again for every follower
    /// cost the leader more than anything else replication does.
    tail: Arc<Mutex<Tail>>,
    /// Encoded bytes appended by this process (what the snapshot policy weighs against the store's size).
    appended: Arc<AtomicU64>,
    /// `--unsafe-no-fsync`: appends and votes are acknowledged unsynced (the operating system writes
    /// them back in its own time). A crash of the machine can lose acknowledged writes.
    no_fsync: bool,
    /// Where the leader's own appends go to followers before they are flushed (`early_append`).
    early: Option<EarlyAppends>,
    /// Where an append's sync runs (in the appending task or on the blocking pool).
    sync_place: Arc<SyncPlace>,
    /// Whether this handle is a replication stream's reader, which leaves the middle of long reads
    /// outside the tail unread (see [`LogStore::limited_get_log_entries`]).
    replication_reader: bool,
}

/// The commands of an entry a replication reader left unread: its place holder, never sent (the network
/// [`fills`](LogStore::filled) an append before sending it).
static UNREAD: std::sync::LazyLock<Commands> = std::sync::LazyLock::new(Commands::default);

/// Reads of this many entries or more outside the tail leave their middle unread: as many as make the
/// network ask a follower first whether it holds them.
pub(crate) const UNREAD_FROM_ENTRIES: usize = 16;

/// Whether `entry` is a place holder a replication reader left unread.
pub(crate) fn is_unread(entry: &Entry) -> bool {
    matches!(&entry.payload, EntryPayload::Normal(commands) if Arc::ptr_eq(commands, &UNREAD))
}

/// The encoded bytes of entries one append to a follower carries, at most (one entry at least): etcd's
/// `maxSizePerMsg`. openraft 0.9 counts only entries (300 to an append), and an entry carries a whole
/// group of writes: a learner catching up after a load of 8 KiB values was sent 54 MB appends, which
/// took longer than the answer's deadline (`consensus::raft_rpc_window`) and were sent again and
/// again, the new member at 600 MB of RSS; in a debug build it never caught up.
pub(crate) const APPEND_BYTES: u64 = 1 << 20;

/// Entries the tail keeps, at most (each may carry many clients' writes)...
const TAIL_ENTRIES: usize = 256;
/// ... and their encoded bytes, about.
const TAIL_BYTES: usize = 8 << 20;

/// `range` as the half-open `[start, end)` of indexes it covers, `end` clipped to `last + 1`.
fn half_open(range: &impl RangeBounds<u64>, last: u64) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.saturating_add(1),
        Bound::Excluded(e) => *e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end.min(last.saturating_add(1)))
}

/// The newest entries with their encoded sizes.
#[derive(Debug, Default)]
struct Tail {
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl Tail {
    fn front(&self) -> Option<&Entry> {
        self.entries.front().map(|(entry, _)| entry)
    }

    fn back(&self) -> Option<&Entry> {
        self.entries.back().map(|(entry, _)| entry)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        self.entries.retain(|(entry, _)| keep(entry));
        self.bytes = self.entries.iter().map(|(_, size)| size).sum();
    }
}

/// A view of a log store's tail for `/metrics`: its entries and their encoded bytes.
#[derive(Clone, Debug)]
pub struct TailSize(Arc<Mutex<Tail>>);

impl TailSize {
    pub fn read(&self) -> (usize, usize) {
        let tail = self.0.lock();
        (tail.entries.len(), tail.bytes)
    }
}

impl LogStore {
    /// Opens the log of the sled database `db`, whose directory is `dir`.
    pub fn open(db: &sled::Db, dir: &Path) -> Result<Self, StorageError> {
        let opening = std::time::Instant::now();
        let wal = Wal::open(&dir.join(WAL_DIR)).map_err(|e| StorageIOError::read_logs(&e))?;
        let entries = wal.bounds().map(|(first, last)| format!("{first}..={last}"));
        tracing::info!(took = ?opening.elapsed(), entries = entries.as_deref().unwrap_or("none"), "opened the Raft log");
        let log = Self {
            db: db.clone(),
            state: db.open_tree(RAFT_STATE).map_err(|e| StorageIOError::read_logs(&e))?,
            wal: Arc::new(wal),
            tail: Arc::default(),
            appended: Arc::default(),
            no_fsync: false,
            early: None,
            sync_place: Arc::default(),
            replication_reader: false,
        };
        log.move_legacy_entries()?;
        // Segments a purge had not removed yet when the member stopped.
        if let Some(purged) = log.read_state::<LogId>(KEY_LAST_PURGED)? {
            log.wal.purge(purged.index).map_err(|e| StorageIOError::write_logs(&e))?;
        }
        Ok(log)
    }

    /// Moves the entries an earlier build kept in the sled tree `logs` into the segment files, synced,
    /// then empties the tree. A crash part way leaves the tree whole: the next start moves what the
    /// segment files do not hold yet.
    fn move_legacy_entries(&self) -> Result<(), StorageError> {
        let tree = self.db.open_tree(log_pieces::LOGS).map_err(|e| StorageIOError::read_logs(&e))?;
        if tree.is_empty() {
            return Ok(());
        }
        let mut next = self.wal.bounds().map_or(0, |(_, last)| last + 1);
        let mut moved = 0usize;
        loop {
            let batch = log_pieces::read(&tree, next, 1024)?;
            let Some((last, _)) = batch.last() else { break };
            next = last.log_id.index + 1;
            moved += batch.len();
            let records: Vec<(u64, Vec<u8>)> =
                batch.into_iter().map(|(entry, bytes)| (entry.log_id.index, bytes)).collect();
            for file in self.wal.append(&records, true).map_err(|e| StorageIOError::write_logs(&e))? {
                file.sync_data().map_err(|e| StorageIOError::write_logs(&e))?;
            }
        }
        tracing::info!(entries = moved, "moved the Raft log out of sled into segment files");
        tree.clear().map_err(|e| StorageIOError::write_logs(&e))?;
        self.db.flush().map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    /// The entries with indexes in `[start, end)` that the log holds, in order.
    fn read_range(&self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let records = self.wal.read(start, end).map_err(|e| StorageIOError::read_logs(&e))?;
        records.into_iter().map(|(index, bytes)| Self::decode_entry(index, &bytes)).collect()
    }

    /// `--unsafe-no-fsync`: acknowledge appends and votes without flushing them.
    /// The count of encoded bytes this process appended, shared.
    pub fn appended_bytes(&self) -> Arc<AtomicU64> {
        self.appended.clone()
    }

    /// What the tail holds, shared.
    pub fn tail_size(&self) -> TailSize {
        TailSize(self.tail.clone())
    }

    pub fn without_fsync(self, no_fsync: bool) -> Self {
        Self { no_fsync, ..self }
    }

    /// Offers the leader's own appends to `early` before flushing them.
    pub fn with_early_appends(self, early: EarlyAppends) -> Self {
        Self { early: Some(early), ..self }
    }

    fn read_state<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageError> {
        let Some(bytes) = self.state.get(key).map_err(|e| StorageIOError::read(&e))? else {
            return Ok(None);
        };
        let value = decode(&bytes).map_err(|e| StorageIOError::read(&e))?;
        Ok(Some(value))
    }

    fn write_state<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageError> {
        let bytes = encode(value).map_err(|e| StorageIOError::write(&e))?;
        self.state.insert(key, bytes).map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry, StorageError> {
        let entry: Entry = decode(bytes).map_err(|e| StorageIOError::read_logs(&e))?;
        if index != entry.log_id.index {
            let err = io::Error::new(
                io::ErrorKind::InvalidData,
                format!("log entry {} stored under another index", entry.log_id),
            );
            return Err(StorageIOError::read_logs(&err).into());
        }
        Ok(entry)
    }

    /// The id of the last entry.
    fn last_log_id(&self) -> Result<Option<LogId>, StorageError> {
        if let Some(last) = self.tail.lock().back() {
            return Ok(Some(last.log_id));
        }
        let Some((_, last)) = self.wal.bounds() else { return Ok(None) };
        Ok(self.read_range(last, last + 1)?.pop().map(|entry| entry.log_id))
    }

    /// The entries of `range` if the tail holds all of them.
    fn from_tail(&self, range: &impl RangeBounds<u64>) -> Option<Vec<Entry>> {
        let tail = self.tail.lock();
        let first = tail.front()?.log_id.index;
        let last = tail.back()?.log_id.index;
        let (start, end) = half_open(range, last);
        if start < first || start > end {
            return None;
        }
        let (from, to) = ((start - first) as usize, (end - first) as usize);
        Some(tail.entries.range(from..to).map(|(entry, _)| entry.clone()).collect())
    }

    /// The entries `[start, end)`, all read (from the tail, or from the segment files).
    fn read(&self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        match self.from_tail(&(start..end)) {
            Some(entries) => Ok(entries),
            None if start >= end => Ok(Vec::new()),
            None => self.read_range(start, end),
        }
    }

    /// `entries` (an append a replication reader read) with the entries it left unread read now, or
    /// `None` when it left none. Fails if the log no longer holds the same entries at both ends.
    pub(crate) fn filled(&self, entries: &[Entry]) -> Result<Option<Vec<Entry>>, StorageError> {
        if !entries.iter().any(is_unread) {
            return Ok(None);
        }
        let (first, last) = (&entries[0].log_id, &entries[entries.len() - 1].log_id);
        let read = self.read(first.index, last.index + 1)?;
        let same = read.len() == entries.len()
            && read.first().map(|entry| &entry.log_id) == Some(first)
            && read.last().map(|entry| &entry.log_id) == Some(last);
        if !same {
            let err = io::Error::other(format!("log entries {first} to {last} were replaced while being replicated"));
            return Err(StorageIOError::read_logs(&err).into());
        }
        Ok(Some(read))
    }

    /// The end of the longest run of entries from `start` (up to `end`) of `budget` encoded bytes at
    /// most, one entry at least (see [`APPEND_BYTES`]): from the tail's sizes where it holds `start`,
    /// else from the segment files' record offsets. Reads no entry.
    fn end_within(&self, start: u64, end: u64, budget: u64) -> u64 {
        if start >= end {
            return end;
        }
        {
            let tail = self.tail.lock();
            if let (Some(first), Some(last)) = (tail.front(), tail.back()) {
                let (first, last) = (first.log_id.index, last.log_id.index);
                if (first..=last).contains(&start) {
                    let mut left = budget;
                    let mut at = start;
                    for (_, size) in tail.entries.range((start - first) as usize..) {
                        if at >= end || (*size as u64 > left && at > start) {
                            break;
                        }
                        left = left.saturating_sub(*size as u64);
                        at += 1;
                    }
                    return at.max(start + 1);
                }
            }
        }
        self.wal.end_within(start, end, budget)
    }

    /// Keeps `entry` (of `size` encoded bytes) as the newest of the tail.
    fn remember(&self, entry: Entry, size: usize) {
        let mut tail = self.tail.lock();
        if tail.back().is_some_and(|last| last.log_id.index + 1 != entry.log_id.index) {
            tail.clear();
        }
        tail.entries.push_back((entry, size));
        tail.bytes += size;
        while tail.entries.len() > TAIL_ENTRIES || (tail.bytes > TAIL_BYTES && tail.entries.len() > 1) {
            if let Some((_, size)) = tail.entries.pop_front() {
                tail.bytes -= size;
            }
        }
    }

    /// Flushes the sled database (the vote and the log pointers), off the runtime's other tasks (see [`Self::sync`]).
    async fn flush_state(&self) -> Result<(), sled::Error> {
        if self.no_fsync {
            return Ok(());
        }
        let db = self.db.clone();
        crate::runtime::blocking(move || db.flush().map(|_| ())).await.map_err(sled::Error::Io)?
    }

    /// Syncs `files` (appended segments): off the runtime's other tasks (see
    /// [`crate::runtime::blocking`]) for the leader's `own` entries, so that on a single-threaded
    /// runtime its early sends go out meanwhile, and a follower's in place while its syncs are quick
    /// ([`SyncPlace`]).
    async fn sync(&self, files: Vec<Arc<File>>, own: bool) -> io::Result<()> {
        if self.no_fsync || files.is_empty() {
            return Ok(());
        }
        let one_thread = Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread;
        if one_thread && self.sync_place.here(own) {
            return self.sync_place.timed(|| sync_files(&files));
        }
        let place = self.sync_place.clone();
        crate::runtime::blocking(move || place.timed(|| sync_files(&files))).await?
    }

    /// Keeps written `entries` (`records`, their encodings) in the tail and counts their bytes.
    fn keep(&self, entries: Vec<Entry>, records: &[(u64, Vec<u8>)]) {
        for (entry, (_, bytes)) in entries.into_iter().zip(records) {
            self.remember(entry, bytes.len());
            self.appended.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
    }

    /// Tells openraft how an append ended.
    fn report(synced: io::Result<()>, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError> {
        match synced {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = StorageIOError::write_logs(&e);
                callback.log_io_completed(Err(e));
                Err(err.into())
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    /// For a replication stream, a read of [`UNREAD_FROM_ENTRIES`] or more outside the tail reads only
    /// its first and last entries and leaves place holders between them. A new leader starts its
    /// replication to each follower halfway through its log, 300 entries at a time, and the network
    /// first asks the follower whether it already holds the last of them (it nearly always does after a
    /// hand-over): reading them all first cost a new leader ~54 MB after a million-key load, 70-215 ms
    /// while writes waited. The network reads the rest only when it must send them.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let end = self.end_within(start, end, APPEND_BYTES);
        let long = end.saturating_sub(start) >= UNREAD_FROM_ENTRIES as u64;
        if !self.replication_reader || !long {
            return self.try_get_log_entries(start..end).await;
        }
        if let Some(entries) = self.from_tail(&(start..end)) {
            return Ok(entries);
        }
        let Some(last) = self.last_log_id()? else { return Ok(Vec::new()) };
        let end = end.min(last.index + 1);
        if end.saturating_sub(start) < UNREAD_FROM_ENTRIES as u64 {
            return self.try_get_log_entries(start..end).await;
        }
        let (Some(first), Some(last)) = (self.read(start, start + 1)?.pop(), self.read(end - 1, end)?.pop()) else {
            return self.try_get_log_entries(start..end).await;
        };
        let leader = last.log_id.leader_id;
        let unread = (start + 1..end - 1)
            .map(|index| Entry { log_id: LogId::new(leader, index), payload: EntryPayload::Normal(UNREAD.clone()) });
        Ok(std::iter::once(first).chain(unread).chain(std::iter::once(last)).collect())
    }

    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        if let Some(entries) = self.from_tail(&range) {
            return Ok(entries);
        }
        // An empty or inverted range would make sled panic.
        let empty = match (range.start_bound(), range.end_bound()) {
            (Bound::Included(s), Bound::Excluded(e)) | (Bound::Excluded(s), Bound::Included(e)) => s >= e,
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Excluded(s), Bound::Excluded(e)) => s.saturating_add(1) >= *e,
            _ => false,
        };
        if empty {
            return Ok(Vec::new());
        }
        let (start, end) = half_open(&range, u64::MAX - 1);
        self.read_range(start, end)
    }
}

/// Syncs appended segment files, timing it for `etcd_disk_wal_fsync_duration_seconds`. Blocking.
fn sync_files(files: &[Arc<File>]) -> io::Result<()> {
    let start = std::time::Instant::now();
    crate::failpoint::before_save();
    let synced = files.iter().try_for_each(|file| file.sync_data());
    crate::metrics::metrics().wal_fsync.observe(start.elapsed());
    synced
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.read_state(KEY_LAST_PURGED)?;
        let last_log_id = self.last_log_id()?.or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        Self { replication_reader: true, ..self.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = encode(vote).map_err(|e| StorageIOError::write_vote(&e))?;
        self.state.insert(KEY_VOTE, bytes).map_err(|e| StorageIOError::write_vote(&e))?;
        self.flush_state().await.map_err(|e| StorageIOError::write_vote(&e))?;
        if let Some(early) = &self.early {
            early.saved_vote(*vote);
        }
        Ok(())
    }

    /// The vote as saved, but never as granted: openraft reads it only at startup, and a member that
    /// finds its own granted vote there resumes as leader at once, trusting the commit index it last
    /// *saved* (not flushed, see `save_committed`), which can be behind writes it had acknowledged; its
    /// first linearizable reads would then miss them (a jepsen kill-all run saw exactly that). Started
    /// with the vote not yet granted, every member restarts as a follower, as etcd's do; the next leader
    /// is elected and commits an entry of its own term before it serves a read.
    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        let vote: Option<Vote> = self.read_state(KEY_VOTE)?;
        Ok(vote.map(|vote| Vote { committed: false, ..vote }))
    }

    /// Not flushed: losing it only means re-learning the commit index from the leader.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let index = committed.map_or(0, |id| id.index);
        crate::metrics::metrics().proposals_committed.store(index, std::sync::atomic::Ordering::Relaxed);
        if let Some(early) = &self.early {
            early.saved_committed(committed);
        }
        self.write_state(KEY_COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.read_state::<Option<LogId>>(KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        // Whether they are the leader's own entries, which go to its followers now, while it writes and
        // flushes them.
        let mut own = false;
        if let Some(early) = &self.early {
            let prev = self.tail.lock().back().map(|entry| entry.log_id);
            own = early.offer(prev, &entries);
        }
        let mut records = Vec::with_capacity(entries.len());
        for entry in &entries {
            let bytes = encode(entry).map_err(|e| StorageIOError::write_log_entry(entry.log_id, &e))?;
            records.push((entry.log_id.index, bytes));
        }
        // An append that moves to a new segment allocates its file (43 ms measured under a load's
        // write-back): on a single-threaded runtime it would hold up every other task, so it is written
        // and synced on the blocking pool, and kept in the tail after. Otherwise entries are written
        // here, readable at once, and reported persisted only once on disk.
        let synced = if !self.no_fsync && !self.wal.fits(&records) {
            let wal = self.wal.clone();
            let written = crate::runtime::blocking(move || -> io::Result<Vec<(u64, Vec<u8>)>> {
                sync_files(&wal.append(&records, true)?)?;
                Ok(records)
            });
            written.await.and_then(|written| written).map(|records| self.keep(entries, &records))
        } else {
            match self.wal.append(&records, !self.no_fsync) {
                Ok(files) => {
                    self.keep(entries, &records);
                    self.sync(files, own).await
                }
                Err(e) => Err(e),
            }
        };
        Self::report(synced, callback)
    }

    /// Removes `log_id` and every later entry.
    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.tail.lock().retain(|entry| entry.log_id.index < log_id.index);
        let wal = self.wal.clone();
        crate::runtime::blocking(move || wal.truncate(log_id.index))
            .await
            .and_then(|truncated| truncated)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    /// Removes every entry up to `log_id`. The purged id is made durable first, so a crash in between
    /// leaves extra entries at the head, never a log without its purged id.
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.write_state(KEY_LAST_PURGED, &log_id)?;
        self.flush_state().await.map_err(|e| StorageIOError::write_logs(&e))?;
        self.tail.lock().retain(|entry| entry.log_id.index > log_id.index);
        let wal = self.wal.clone();
        crate::runtime::blocking(move || wal.purge(log_id.index))
            .await
            .and_then(|purged| purged)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "log_store_test.rs"]
mod tests;
