//! The snapshot a member streams for `Maintenance.Snapshot`: etcd's `snapshot.db`, a bbolt database in
//! etcd's layout followed by its SHA-256 ([`kv_api::snapshot`] has the format).
//!
//! etcd streams its bbolt file, which is a consistent copy by itself. Our sled files are not (sled
//! writes pages in the background, and the Raft log shares them), so a member writes the store out in
//! etcd's format instead: [`write`] commits what apply staged and walks the store under its read lock
//! (as a snapshot for openraft is built) into an unnamed temporary file next to the database. One
//! revision, nothing held in memory but each page's first key, apply paused while the database part
//! is written; the digest is computed after the lock is released, and the file is streamed without any.
//!
//! Beside the store, the file carries what etcd's does about the cluster: the Raft index and term the
//! copy reflects (etcd's consistent index and term) and the members. A restore discards the members,
//! as etcd's does, for the new cluster's.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::Path;

use kv_api::snapshot::{self, MemberRecord, Origin};
use kv_api::SharedStore;
use openraft::StorageIOError;

use crate::storage::state_machine::read_committed;
use crate::typ::{StorageError, StoredMembership};

/// Writes a consistent copy of `store` into an unnamed temporary file in `dir` (see the module doc).
/// Returns the file, positioned at its start, and its size. Blocking: run it off the async runtime.
pub fn write(store: &SharedStore, dir: &Path) -> Result<(File, u64), StorageError> {
    let write_err = |e: &io::Error| StorageError::from(StorageIOError::write_snapshot(None, e));
    let file = tempfile::tempfile_in(dir).map_err(|e| write_err(&e))?;
    let (file, size) = read_committed(store, |store, applied, membership| {
        let origin = Origin {
            applied_index: applied.map_or(0, |id| id.index),
            applied_term: applied.map_or(0, |id| id.leader_id.term),
            members: members(&membership),
        };
        snapshot::write_database(&**store.backend(), &origin, file).map_err(|e| write_err(&e))
    })?;
    // The copy is complete: the lock is released, the digest needs no store.
    snapshot::seal(file, size).map_err(|e| write_err(&e))
}

/// The members as etcd's `members` bucket lists them.
fn members(membership: &StoredMembership) -> Vec<MemberRecord> {
    let membership = membership.membership();
    let voters: BTreeSet<_> = membership.voter_ids().collect();
    membership
        .nodes()
        .map(|(id, node)| MemberRecord {
            id: *id,
            name: node.name.clone(),
            peer_urls: node.peer_urls.clone(),
            client_urls: node.client_urls.clone(),
            is_learner: !voters.contains(id),
        })
        .collect()
}
