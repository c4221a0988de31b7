//! [`LogStore`]: openraft's log storage on sled.
//!
//! - tree `logs`: index (big-endian u64, so sled's order is the log's order) → bincode [`Entry`];
//! - tree `raft_state`: the vote, the committed log id and the last purged log id.
//!
//! Appends and votes are flushed before they are reported done (design invariant 2). A flush of this
//! database also makes the state machine's earlier writes durable (see [`crate::storage`]).

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::storage::{decode, encode};
use crate::typ::{Entry, LogId, StorageError, TypeConfig, Vote};

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
    tail: Arc<Mutex<VecDeque<Entry>>>,
    /// `--unsafe-no-fsync`: appends and votes are acknowledged unflushed (sled's flusher still writes them
    /// within half a second). A crash can lose acknowledged writes.
    no_fsync: bool,
}

/// Entries the tail keeps, at most (each may carry many clients' writes).
const TAIL_ENTRIES: usize = 256;

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

impl LogStore {
    pub fn open(db: &sled::Db) -> Result<Self, StorageError> {
        let open = |name: &str| db.open_tree(name).map_err(|e| StorageIOError::read_logs(&e));
        Ok(Self { db: db.clone(), logs: open(LOGS)?, state: open(RAFT_STATE)?, tail: Arc::default(), no_fsync: false })
    }

    /// `--unsafe-no-fsync`: acknowledge appends and votes without flushing them.
    pub fn without_fsync(self, no_fsync: bool) -> Self {
        Self { no_fsync, ..self }
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

    fn last_log_id(&self) -> Result<Option<LogId>, StorageError> {
        match self.logs.last().map_err(|e| StorageIOError::read_logs(&e))? {
            Some((index, bytes)) => Ok(Some(Self::decode_entry(&index, &bytes)?.log_id)),
            None => Ok(None),
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
        Some(tail.range(from..to).cloned().collect())
    }

    /// Keeps `entry` as the newest of the tail.
    fn remember(&self, entry: Entry) {
        let mut tail = self.tail.lock();
        if tail.back().is_some_and(|last| last.log_id.index + 1 != entry.log_id.index) {
            tail.clear();
        }
        tail.push_back(entry);
        if tail.len() > TAIL_ENTRIES {
            tail.pop_front();
        }
    }

    /// Flushes the whole database (every tree) to disk, on a blocking thread. (sled's own
    /// `flush_async` hands the flush to sled's thread pool, whose every hand-off wakes all its idle
    /// threads: on two cores that costs more than the flush.)
    async fn flush(&self) -> Result<(), sled::Error> {
        if self.no_fsync {
            return Ok(());
        }
        let db = self.db.clone();
        let flushed = tokio::task::spawn_blocking(move || {
            let start = std::time::Instant::now();
            let flushed = db.flush();
            crate::metrics::metrics().wal_fsync.observe(start.elapsed());
            flushed
        });
        match flushed.await {
            Ok(flushed) => flushed.map(|_| ()),
            Err(err) => Err(sled::Error::Io(io::Error::other(err))),
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
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = range.start_bound().map(|i| index_key(*i));
        let end = range.end_bound().map(|i| index_key(*i));
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
        self.logs
            .range((start, end))
            .map(|item| {
                let (index, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                Self::decode_entry(&index, &bytes)
            })
            .collect()
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
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = encode(vote).map_err(|e| StorageIOError::write_vote(&e))?;
        self.state.insert(KEY_VOTE, bytes).map_err(|e| StorageIOError::write_vote(&e))?;
        self.flush().await.map_err(|e| StorageIOError::write_vote(&e))?;
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
        // One insert per entry, in log order, and no sled batch: sled recovers a prefix of its writes,
        // so a crash leaves a prefix of these entries (never a hole), and a sled batch would cost two
        // extra log buffer writes on every append.
        for entry in entries {
            let bytes = encode(&entry).map_err(|e| StorageIOError::write_log_entry(entry.log_id, &e))?;
            self.logs.insert(index_key(entry.log_id.index), bytes).map_err(|e| StorageIOError::write_logs(&e))?;
            self.remember(entry);
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
        self.remove_range(..=index_key(log_id.index), End::Head)
    }
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::storage::open;

    fn blank(term: u64, index: u64) -> Entry {
        Entry { log_id: LogId::new(CommittedLeaderId::new(term, 1), index), payload: EntryPayload::Blank }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn log_vote_and_pointers_survive_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, _sm, _store) = open(dir.path()).expect("open");
            log.blocking_append((1..=10).map(|i| blank(1, i))).await.expect("append");
            log.save_vote(&Vote::new(3, 2)).await.expect("vote");
            log.save_committed(Some(blank(1, 8).log_id)).await.expect("committed");
            log.purge(blank(1, 3).log_id).await.expect("purge");
            log.truncate(blank(1, 9).log_id).await.expect("truncate");
        }
        {
            let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
            let state = log.get_log_state().await.expect("state");
            assert_eq!(state.last_purged_log_id, Some(blank(1, 3).log_id));
            assert_eq!(state.last_log_id, Some(blank(1, 8).log_id));
            assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(3, 2)));
            assert_eq!(log.read_committed().await.expect("committed"), Some(blank(1, 8).log_id));
            let all = log.try_get_log_entries(..).await.expect("read");
            assert_eq!(indexes(&all), (4..=8).collect::<Vec<_>>());
            log.save_vote(&Vote::new_committed(4, 2)).await.expect("vote");
        }
        // A granted vote comes back as not yet granted, so that the member restarts as a follower.
        let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(4, 2)));
    }

    #[tokio::test]
    async fn the_tail_answers_as_sled_does_after_truncate_and_purge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _sm, _store) = open(dir.path()).expect("open");
        log.blocking_append((1..=10).map(|i| blank(1, i))).await.expect("append");
        log.truncate(blank(1, 7).log_id).await.expect("truncate");
        log.blocking_append((7..=12).map(|i| blank(2, i))).await.expect("append");
        log.purge(blank(1, 3).log_id).await.expect("purge");
        assert_eq!(log.tail.lock().front().map(|e| e.log_id.index), Some(4), "the tail serves these reads");
        let mut sled_only = LogStore { tail: Arc::default(), ..log.clone() };
        let ranges: Vec<(Bound<u64>, Bound<u64>)> = vec![
            (Bound::Unbounded, Bound::Unbounded),
            (Bound::Included(4), Bound::Unbounded),
            (Bound::Included(6), Bound::Included(8)),
            (Bound::Excluded(9), Bound::Excluded(12)),
            (Bound::Included(11), Bound::Excluded(20)),
            (Bound::Included(13), Bound::Unbounded),
            (Bound::Included(8), Bound::Excluded(8)),
        ];
        for range in ranges {
            let tail = log.try_get_log_entries(range).await.expect("read");
            let sled = sled_only.try_get_log_entries(range).await.expect("read");
            let ids = |entries: &[Entry]| entries.iter().map(|e| e.log_id).collect::<Vec<_>>();
            assert_eq!(ids(&tail), ids(&sled), "{range:?}");
        }
        let all = log.try_get_log_entries(..).await.expect("read");
        assert_eq!(indexes(&all), (4..=12).collect::<Vec<_>>());
        assert_eq!(all[5].log_id, blank(2, 9).log_id, "the truncated entries are gone");
    }

    #[tokio::test]
    async fn reads_take_any_range_form() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _sm, _store) = open(dir.path()).expect("open");
        log.blocking_append((0..=5).map(|i| blank(1, i))).await.expect("append");
        let cases: Vec<(Vec<Entry>, Vec<u64>)> = vec![
            (log.try_get_log_entries(2..4).await.expect("read"), vec![2, 3]),
            (log.try_get_log_entries(2..=4).await.expect("read"), vec![2, 3, 4]),
            (log.try_get_log_entries(4..).await.expect("read"), vec![4, 5]),
            (log.try_get_log_entries(..2).await.expect("read"), vec![0, 1]),
            (log.try_get_log_entries(3..3).await.expect("read"), vec![]),
            #[allow(clippy::reversed_empty_ranges)]
            (log.try_get_log_entries(4..2).await.expect("read"), vec![]),
            (log.try_get_log_entries(9..).await.expect("read"), vec![]),
        ];
        for (got, want) in cases {
            assert_eq!(indexes(&got), want);
        }
    }
}
