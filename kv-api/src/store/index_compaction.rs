//! The key index's half of a compaction, a step at a time.
//!
//! Applying a compaction only marks the revision compacted (reads below it fail from then on). The
//! key index is compacted afterwards in steps of [`STEP_KEYS`] keys, each under the store's write lock
//! for about a millisecond: one step after every commit, and more from whoever drives
//! [`MvccStore::compact_index_step`] while [`MvccStore::index_compaction_pending`] (raft-node's
//! `index_compaction` task, which also commits once [`MvccStore::index_compaction_awaits_commit`]).
//! Compacting every key at once held apply, and so every write, for ~30 ms per 200k keys.
//!
//! Reads need no step done: a read at or after the compacted revision sees the same through a key's
//! compacted revisions as through its whole history. The hashes ask the index what a finished
//! compaction keeps ([`crate::index::TreeIndex::revisions_kept_at`]), so members at different steps
//! agree. The freed revisions go to the compactor once the last step is done, and only once the
//! compaction is committed: a freed revision may have been staged in the same batch.

use super::MvccStore;
use crate::revision::Revision;

/// Keys compacted per step (about a millisecond).
pub(crate) const STEP_KEYS: usize = 10_000;

/// A compaction of the key index in progress.
#[derive(Debug)]
pub(crate) struct IndexCompaction {
    /// The revision compacted at.
    at: i64,
    /// The key the next step starts at; `None` once every key is done.
    from: Option<Vec<u8>>,
    /// What the steps so far freed.
    freed: Vec<Revision>,
}

impl MvccStore {
    /// Starts compacting the key index at `at`. One still in progress starts over at `at` (with what it
    /// freed: a revision freed at an older revision is freed at a newer one too).
    pub(super) fn start_index_compaction(&mut self, at: i64) {
        let freed = self.index_compaction.take().map(|job| job.freed).unwrap_or_default();
        self.index_compaction = Some(IndexCompaction { at, from: Some(Vec::new()), freed });
        self.index_compaction_started.notify_one();
    }

    /// Signalled whenever a compaction of the key index starts (a start while nobody waits is kept for
    /// the next wait).
    pub fn index_compaction_started(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.index_compaction_started.clone()
    }

    /// Whether the key index's compaction has steps left.
    pub fn index_compaction_pending(&self) -> bool {
        self.index_compaction.is_some()
    }

    /// Whether every key of the key index's compaction is done and only a commit of the compaction is
    /// missing for the freed revisions to go to the compactor: applying a compaction does not commit.
    pub fn index_compaction_awaits_commit(&self) -> bool {
        self.compaction_staged && self.index_compaction.as_ref().is_some_and(|job| job.from.is_none())
    }

    /// Compacts the next [`STEP_KEYS`] keys of the index; once every key is done and the compaction is
    /// committed, hands what the steps freed to the compactor. Returns whether steps are left.
    pub fn compact_index_step(&mut self) -> bool {
        let staged = self.compaction_staged;
        let Some(job) = &mut self.index_compaction else { return false };
        if let Some(from) = job.from.take() {
            job.from = self.index.compact_some(job.at, &from, STEP_KEYS, &mut job.freed);
            if job.from.is_some() {
                return true;
            }
        }
        if staged {
            // Every key is done; the commit that writes the compaction hands the rest over.
            return true;
        }
        let Some(job) = self.index_compaction.take() else { return false };
        tracing::info!(
            revision = job.at,
            freed = job.freed.len(),
            "compacted the key index; the compactor deletes the freed revisions"
        );
        self.compactor.schedule(job.at, job.freed);
        false
    }

    /// Takes the key index's compaction as far as it can go at once: to its end, or, while the
    /// compaction is not committed yet, through every key (offline tools, tests).
    pub fn finish_index_compaction(&mut self) {
        while self.compact_index_step() {
            if self.index_compaction.as_ref().is_some_and(|job| job.from.is_none()) {
                return;
            }
        }
    }
}
