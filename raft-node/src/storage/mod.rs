//! Durable state of a member: the Raft log (`member/db`: its sled database and, in `wal/`, the entries
//! themselves), the MVCC store's
//! (`member/db.kv`) and the snapshot files (`member/db.snap`).
//!
//! # Layout
//!
//! - [`sled_backend`]: [`SledBackend`], the [`kv_api::Backend`] under the MVCC store, in a database of
//!   its own so that it can be defragmented (rebuilt into a fresh database) while the log keeps going.
//! - [`generation`]: the store database's generations, `CURRENT`, and copying a tree into the next one.
//! - [`scan`]: reading a tree in key order without sled's iterators (which keep what they read).
//! - [`value_log`]: the store's large values in segment files beside its tree
//!   (`--experimental-values-apart`).
//! - [`wal`]: the Raft log's entries in segment files, appended and synced by the appending task.
//! - [`sync_place`]: whether an append's sync runs in the appending task or on the blocking pool.
//! - [`log_pieces`]: the Raft log as earlier builds kept it in sled, read once to move it into [`wal`].
//! - [`log_store`]: [`LogStore`], the Raft log ([`wal`]), vote, committed and purged ids (`raft_state`).
//! - [`state_machine`]: [`StateMachine`], applying committed entries to the MVCC store, and snapshots.
//! - [`snapshot`]: the snapshot format, read and written an entry at a time (one place for its encoding).
//! - [`current_snapshot`]: the current snapshot, a file in `member/db.snap` named in the tree `snapshot`.
//! - [`snapshot_file`]: the snapshot file of `Maintenance.Snapshot` and `snapshot save|status|restore`.
//!
//! # Why nothing acknowledged is lost
//!
//! Invariant 3 of the design rests on these rules:
//!
//! - the state machine commits applied data and the applied log id (plus membership) in **one atomic
//!   batch** ([`kv_api::MvccStore::commit`]), so they never disagree on disk. Like etcd's backend it
//!   commits every 100 ms or 10,000 writes rather than per apply (until then reads see the staged
//!   writes), and always before it builds a snapshot;
//! - every log append is **flushed before it is acknowledged** to openraft;
//! - the store is made durable ([`kv_api::Backend::sync`]) before anything lets openraft purge the log:
//!   after a snapshot build commits it, and when a snapshot is installed.
//!
//! The state machine itself does not flush on every commit: sled's flusher persists its writes within
//! a tenth of a second. A restarting member finds a consistent store whose applied id may be behind
//! the log: openraft replays the log from the applied id onwards, and the log still holds those entries (it is
//! purged only up to a snapshot, which was synced first). It may also be ahead of the durable log (a
//! follower applies what the cluster committed, possibly before its own append was flushed): openraft
//! then starts from the applied id, which is committed history.

// openraft's `StorageError` is large, and its traits return it: boxing ours would only add conversions.
#![allow(clippy::result_large_err)]

use std::path::Path;
use std::sync::Arc;

use kv_api::{MvccStore, SharedStore};
use openraft::StorageIOError;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::typ::StorageError;

pub mod current_snapshot;
pub mod force_new_cluster;
pub(crate) mod generation;
pub(crate) mod log_pieces;
pub mod log_store;
pub(crate) mod scan;
pub mod sled_backend;
pub mod snapshot;
pub mod snapshot_file;
pub mod state_machine;
pub(crate) mod sync_place;
pub(crate) mod value_gc;
pub(crate) mod value_log;
pub(crate) mod wal;

#[cfg(test)]
mod suite_test;

pub use log_store::{LogStore, TailSize};
pub use sled_backend::SledBackend;
pub use state_machine::StateMachine;

/// sled's page cache of each database (its default is 1 GiB, which a member fills with pages it rarely
/// reads again: the key index lives in memory, and cold values come from the operating system's file
/// cache). sled holds several times this much (measured: a member after 400k puts of 1 KiB kept 449 MB
/// resident with 64 MiB, 305 MB with 16 MiB, at the same load rate).
pub(crate) const CACHE_BYTES: u64 = 16 * 1024 * 1024;
/// The log's database has the same.
pub(crate) const LOG_CACHE_BYTES: u64 = CACHE_BYTES;

/// Opens (or creates) the member's database at `dir`: the log store, the state machine and the MVCC
/// store the services read, all on one sled database (see the module doc for why).
pub fn open(dir: &Path) -> Result<(LogStore, StateMachine, SharedStore), StorageError> {
    open_split(dir, dir)
}

/// [`open`] with the log's database at `log_dir` (`--wal-dir`, on a disk of its own) and the MVCC store's
/// beside `dir`.
pub fn open_split(log_dir: &Path, dir: &Path) -> Result<(LogStore, StateMachine, SharedStore), StorageError> {
    open_split_with(log_dir, dir, false)
}

/// [`open_split`]; with `values_apart`, the store keeps its large values in a value log
/// (`--experimental-values-apart`, see [`value_log`]).
pub fn open_split_with(
    log_dir: &Path,
    dir: &Path,
    values_apart: bool,
) -> Result<(LogStore, StateMachine, SharedStore), StorageError> {
    let db = open_db(log_dir).map_err(|e| StorageIOError::read(&e))?;
    let backend = SledBackend::open_with(&dir.with_extension("kv"), &db, values_apart)
        .map_err(|e| StorageIOError::read_state_machine(&e))?;
    let backend = Arc::new(backend);
    if values_apart {
        backend
            .start_reclaimer(sled_backend::RECLAIM_FROM_DEAD_BYTES)
            .map_err(|e| StorageIOError::read_state_machine(&e))?;
    }
    let store = MvccStore::open(backend).map_err(|e| StorageIOError::read_state_machine(&e))?;
    let store: SharedStore = Arc::new(RwLock::new(store));
    let log_store = LogStore::open(&db, log_dir)?;
    let state_machine = StateMachine::open(&db, store.clone(), &dir.with_extension("snap"))?;
    Ok((log_store, state_machine, store))
}

/// The sled database at `dir`, created if missing.
pub(crate) fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    sled::Config::new().path(dir).cache_capacity(LOG_CACHE_BYTES).open()
}

/// Reopens a database dropped a moment ago in this process: sled releases its file lock only once its
/// background flusher lets go of the old handle, so the first attempts may find it still locked.
#[cfg(test)]
pub(crate) fn reopen(dir: &Path) -> (LogStore, StateMachine, SharedStore) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open(dir) {
            Ok(opened) => return opened,
            Err(err) if std::time::Instant::now() < deadline => {
                tracing::debug!(%err, "database still locked; retrying");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(err) => panic!("reopening {}: {err}", dir.display()),
        }
    }
}

/// The one binary encoding of everything this module stores: bincode 2, standard configuration.
pub(crate) fn bincode_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode_config())
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, bincode_config())?;
    if read != bytes.len() {
        return Err(bincode::error::DecodeError::OtherString(format!(
            "{} trailing bytes after the value",
            bytes.len() - read
        )));
    }
    Ok(value)
}

/// Saves the key index into the store once nothing is applied any more, so that the next start need
/// not read every revision (`kv_api::store::saved_index`; a start after a crash still does).
pub async fn save_key_index(store: kv_api::SharedStore) {
    let started = std::time::Instant::now();
    // What the last applies staged goes in first, with the applied log id, as the periodic commit does.
    let save = move || {
        let mut store = store.write();
        store.commit()?;
        store.save_index()
    };
    match tokio::task::spawn_blocking(save).await {
        Ok(Ok(true)) => tracing::info!(took = ?started.elapsed(), "saved the key index for the next start"),
        Ok(Ok(false)) => {}
        Ok(Err(err)) => tracing::warn!(%err, "could not save the key index; the next start rebuilds it"),
        Err(err) => tracing::warn!(%err, "could not save the key index; the next start rebuilds it"),
    }
}
