//! [`LogStore`]: openraft's log storage on sled.
//!
//! - tree `logs`: index (big-endian u64, so sled's order is the log's order) → bincode [`Entry`]; an
//!   entry of more than [`CHUNK_BYTES`] is stored in pieces instead, under the index followed by the
//!   piece's number (big-endian u32), the first piece carrying the count (see [`Chunks`]): sled 0.34
//!   keeps tree nodes that hold large values in memory whatever its cache size (measured: 400 MB of
//!   100 KiB values kept 415 MB resident with a 64 MiB cache, in 16 KiB values 125–130 MB, also for
//!   800 MB; 400 MB of log in 8 KiB values 62 MB with a 16 MiB cache, in 2 KiB values 26 MB), and an
//!   entry carrying a group of clients' writes is easily 100 KiB;
//! - tree `raft_state`: the vote, the committed log id and the last purged log id.
//!
//! Appends and votes are flushed before they are reported done (design invariant 2). A flush of this
//! database also makes the state machine's earlier writes durable (see [`crate::storage`]).

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, RaftLogReader, StorageIOError};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::early_append::EarlyAppends;
use crate::storage::log_pieces::{corrupt_log, index_of, Chunks};
use crate::storage::scan::Forward;
use crate::storage::{decode, encode};
use crate::typ::{Commands, Entry, LogId, StorageError, TypeConfig, Vote};

const LOGS: &str = "logs";
const RAFT_STATE: &str = "raft_state";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// The Raft log, vote and log pointers of a member. Cloning gives another handle on the same trees (the
/// log reader of the replication tasks).
#[derive(Clone, Debug)]
pub struct LogStore {
    db: sled::Db,
    logs: sled::Tree,
    state: sled::Tree,
    /// The newest entries (a suffix of the log, or nothing), as appended: the leader's replication to
    /// each follower reads an entry right after its append, and decoding it again from sled for every
    /// follower cost the leader more than anything else replication does.
    tail: Arc<Mutex<Tail>>,
    /// Encoded bytes appended by this process (what the snapshot policy weighs against the store's size).
    appended: Arc<AtomicU64>,
    /// `--unsafe-no-fsync`: appends and votes are acknowledged unflushed (sled's flusher still writes them
    /// within half a second). A crash can lose acknowledged writes.
    no_fsync: bool,
    /// Where the leader's own appends go to followers before they are flushed (`early_append`).
    early: Option<EarlyAppends>,
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

/// Entries the tail keeps, at most (each may carry many clients' writes)...
const TAIL_ENTRIES: usize = 256;
/// ... and their encoded bytes, about.
const TAIL_BYTES: usize = 8 << 20;
/// An encoded entry longer than this is stored in pieces of this size.
pub(crate) const CHUNK_BYTES: usize = 2 << 10;

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

/// Which end of the log a removal starts from.
#[derive(Clone, Copy)]
enum End {
    Head,
    Tail,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
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
    pub fn open(db: &sled::Db) -> Result<Self, StorageError> {
        let open = |name: &str| db.open_tree(name).map_err(|e| StorageIOError::read_logs(&e));
        let log = Self {
            db: db.clone(),
            logs: open(LOGS)?,
            state: open(RAFT_STATE)?,
            tail: Arc::default(),
            appended: Arc::default(),
            no_fsync: false,
            early: None,
            replication_reader: false,
        };
        log.remove_unfinished_entry()?;
        Ok(log)
    }

    /// Removes the pieces of a last entry whose append a crash cut short (sled keeps a prefix of its
    /// writes, so only the last entry can be unfinished; it was never reported persisted).
    fn remove_unfinished_entry(&self) -> Result<(), StorageError> {
        let Some((key, _)) = self.logs.last().map_err(|e| StorageIOError::read_logs(&e))? else {
            return Ok(());
        };
        if key.len() != 12 {
            return Ok(());
        }
        let index = index_of(&key)?;
        if self.read_range(index, index + 1)?.is_empty() {
            tracing::warn!(index, "removing a Raft log entry whose append was cut short");
            self.remove_range(index_key(index)..index_key(index + 1), End::Tail)?;
        }
        Ok(())
    }

    /// The whole entries with indexes in `[start, end)`, in order; an unfinished last one is left out.
    fn read_range(&self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let mut entries = Vec::new();
        let mut chunks: Option<Chunks> = None;
        let read_err = |e: sled::Error| StorageError::from(StorageIOError::read_logs(&e));
        for item in Forward::from(&self.logs, &index_key(start)) {
            let (key, value) = item.map_err(read_err)?;
            if key.as_ref() >= &index_key(end)[..] {
                break;
            }
            // A whole entry, or the first piece of one, ends the entry read before it.
            if key.len() == 8 || key.get(8..12) == Some(&[0, 0, 0, 0][..]) {
                if let Some(done) = chunks.take() {
                    entries.push(self.finished(done)?);
                }
            }
            if key.len() == 8 {
                entries.push(Self::decode_entry(&key, &value)?);
            } else {
                chunks.get_or_insert_with(Chunks::default).push(&key, &value)?;
            }
        }
        match chunks.map(|done| (done.index, done.finish())) {
            Some((_, Some((index, bytes)))) => entries.push(Self::decode_entry(&index_key(index), &bytes)?),
            // Only the log's very last entry may be unfinished (and `open` removes it).
            Some((last, None)) if self.logs.range(index_key(last + 1)..).next().is_some() => {
                return Err(corrupt_log(&format!("an unfinished entry {last} before later ones")));
            }
            _ => {}
        }
        Ok(entries)
    }

    /// The entry whose pieces `done` holds, which later keys follow (so it must be whole).
    fn finished(&self, done: Chunks) -> Result<Entry, StorageError> {
        let index = done.index;
        let (_, bytes) =
            done.finish().ok_or_else(|| corrupt_log(&format!("an unfinished entry {index} before later ones")))?;
        Self::decode_entry(&index_key(index), &bytes)
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

    fn decode_entry(index: &[u8], bytes: &[u8]) -> Result<Entry, StorageError> {
        let entry: Entry = decode(bytes).map_err(|e| StorageIOError::read_logs(&e))?;
        if index != index_key(entry.log_id.index) {
            let err = io::Error::new(
                io::ErrorKind::InvalidData,
                format!("log entry {} stored under another index", entry.log_id),
            );
            return Err(StorageIOError::read_logs(&err).into());
        }
        Ok(entry)
    }

    /// The id of the last whole entry (an unfinished one after it is not part of the log).
    fn last_log_id(&self) -> Result<Option<LogId>, StorageError> {
        let mut below: Option<u64> = None;
        loop {
            let last = match below {
                Some(index) => self.logs.range(..index_key(index)).next_back().transpose(),
                None => self.logs.last(),
            };
            match last.map_err(|e| StorageIOError::read_logs(&e))? {
                Some((key, bytes)) if key.len() == 8 => return Ok(Some(Self::decode_entry(&key, &bytes)?.log_id)),
                Some((key, _)) => {
                    let index = index_of(&key)?;
                    match self.read_range(index, index + 1)?.pop() {
                        Some(entry) => return Ok(Some(entry.log_id)),
                        None if below.is_none() => below = Some(index),
                        None => return Err(corrupt_log(&format!("an unfinished entry {index} before later ones"))),
                    }
                }
                None => return Ok(None),
            }
        }
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

    /// The entries `[start, end)`, all read (from the tail, or from sled).
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

    /// Flushes the whole database (every tree) to disk, in this task: openraft 0.9's core waits for the
    /// flush anyway, and handing it to a blocking thread cost two thread wake-ups per append (a put from
    /// one client went 986 → 1,119/s without them). `block_in_place` lets the runtime move this
    /// worker's other tasks elsewhere meanwhile. (sled's own `flush_async` is worse: its pool wakes all
    /// its idle threads at every hand-off.)
    async fn flush(&self) -> Result<(), sled::Error> {
        if self.no_fsync {
            return Ok(());
        }
        let flush = || {
            let start = std::time::Instant::now();
            let flushed = self.db.flush();
            crate::metrics::metrics().wal_fsync.observe(start.elapsed());
            flushed.map(|_| ())
        };
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(flush),
            // A single-threaded runtime (unit tests) has no other worker to move tasks to.
            _ => flush(),
        }
    }

    /// Removes the entries in `range`, one by one from the end given: a crash part way leaves the log
    /// without a hole (sled recovers a prefix of its writes).
    fn remove_range(&self, range: impl RangeBounds<[u8; 8]>, from: End) -> Result<(), StorageError> {
        let keys: Vec<sled::IVec> =
            self.logs.range(range).keys().collect::<Result<_, _>>().map_err(|e| StorageIOError::write_logs(&e))?;
        let ordered: Box<dyn Iterator<Item = sled::IVec>> = match from {
            End::Head => Box::new(keys.into_iter()),
            End::Tail => Box::new(keys.into_iter().rev()),
        };
        for key in ordered {
            self.logs.remove(key).map_err(|e| StorageIOError::write_logs(&e))?;
        }
        Ok(())
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
        self.flush().await.map_err(|e| StorageIOError::write_vote(&e))?;
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
        if let Some(early) = &self.early {
            // The leader's own entries go to its followers now, while it writes and flushes them.
            let prev = self.tail.lock().back().map(|entry| entry.log_id);
            early.offer(prev, &entries);
        }
        // One insert per entry, in log order, and no sled batch: sled recovers a prefix of its writes,
        // so a crash leaves a prefix of these entries (never a hole), and a sled batch would cost two
        // extra log buffer writes on every append.
        for entry in entries {
            let bytes = encode(&entry).map_err(|e| StorageIOError::write_log_entry(entry.log_id, &e))?;
            let size = bytes.len();
            let index = entry.log_id.index;
            if size <= CHUNK_BYTES {
                self.logs.insert(index_key(index), bytes).map_err(|e| StorageIOError::write_logs(&e))?;
            } else {
                for (key, piece) in Chunks::split(index, &bytes) {
                    self.logs.insert(key, piece).map_err(|e| StorageIOError::write_logs(&e))?;
                }
            }
            self.remember(entry, size);
            self.appended.fetch_add(size as u64, Ordering::Relaxed);
        }
        // Entries are readable now; they are reported persisted only once on disk.
        match self.flush().await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = StorageIOError::write_logs(&e);
                callback.log_io_completed(Err(io::Error::other(e)));
                Err(err.into())
            }
        }
    }

    /// Removes `log_id` and every later entry: the tail goes, so no hole is left.
    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.tail.lock().retain(|entry| entry.log_id.index < log_id.index);
        self.remove_range(index_key(log_id.index).., End::Tail)?;
        self.flush().await.map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    /// Removes every entry up to `log_id`. The purged id is written first, so a crash in between leaves
    /// extra entries at the head, never a log without its purged id.
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.write_state(KEY_LAST_PURGED, &log_id)?;
        self.tail.lock().retain(|entry| entry.log_id.index > log_id.index);
        // Up to the next index's key: the pieces of the entry at `log_id` sort after its index's own key.
        self.remove_range(..index_key(log_id.index + 1), End::Head)
    }
}

#[cfg(test)]
#[path = "log_store_test.rs"]
mod tests;
