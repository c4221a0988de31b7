//! When a member builds a snapshot (openraft's own count-only policy is off).
//!
//! etcd snapshots every `--snapshot-count` applied entries, which costs it little: its snapshot is the
//! bbolt file it already has. Ours copies the whole store into a file (see [`crate::storage::snapshot`]),
//! so the count alone would copy a 10 GiB store after every 10,000 small writes. A member builds once
//! both hold:
//!
//! - at least `--snapshot-count` entries were applied since the last snapshot (etcd's rule), and
//! - the store is small (a copy of at most [`SMALL_STORE_BYTES`] is cheap: such stores snapshot as
//!   often as etcd's do), or the log grew since then by at least the store's size on disk: copying the
//!   store then costs at most a byte per byte written, and the log kept beside the store stays about
//!   as large as the store at most (plus the entries kept for slow followers).
//!
//! A restart does not make the log replay longer: the store is durable on its own and a restart applies
//! only the entries after its last commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kv_api::SharedStore;
use tracing::debug;

use crate::typ::Raft;

/// How often the rule is checked.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// A store up to this size on disk is copied whenever the count says.
pub(crate) const SMALL_STORE_BYTES: u64 = 64 << 20;

/// Whether a snapshot is due, `entries` applied and `bytes` appended to the log since the last one.
pub(crate) fn due(entries: u64, bytes: u64, store_bytes: u64, snapshot_count: u64) -> bool {
    entries >= snapshot_count && (store_bytes <= SMALL_STORE_BYTES || bytes >= store_bytes)
}

/// Checks the rule until the member shuts down, asking openraft for a snapshot when it holds (a request
/// while one is being built is ignored by openraft). `appended` counts the log's appended bytes.
pub async fn run(raft: Raft, store: SharedStore, appended: Arc<AtomicU64>, snapshot_count: u64) {
    let metrics = raft.metrics();
    let mut snapshot = metrics.borrow().snapshot;
    let mut appended_at_snapshot = appended.load(Ordering::Relaxed);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if metrics.has_changed().is_err() {
            return; // Raft shut down.
        }
        let (applied, latest) = {
            let m = metrics.borrow();
            (m.last_applied.map_or(0, |id| id.index), m.snapshot)
        };
        if latest != snapshot {
            (snapshot, appended_at_snapshot) = (latest, appended.load(Ordering::Relaxed));
        }
        let entries = applied.saturating_sub(snapshot.map_or(0, |id| id.index));
        let bytes = appended.load(Ordering::Relaxed).saturating_sub(appended_at_snapshot);
        if entries < snapshot_count {
            continue;
        }
        let store_bytes = store.read().backend().size_bytes();
        if due(entries, bytes, store_bytes, snapshot_count) {
            debug!(entries, log_bytes = bytes, store_bytes, "building a snapshot");
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_needs_the_count_and_as_many_log_bytes_as_the_store() {
        // A small store: etcd's count decides, however little the log grew.
        assert!(!due(9_999, 1 << 30, 1 << 20, 10_000));
        assert!(due(10_000, 1 << 10, 1 << 20, 10_000));
        assert!(due(10_000, 0, SMALL_STORE_BYTES, 10_000));
        // A large store: 10,000 small writes are not worth copying 10 GiB for.
        assert!(!due(10_000, 2 << 20, 10 << 30, 10_000));
        assert!(!due(10_000, (1 << 30) - 1, 1 << 30, 10_000));
        assert!(due(2_000_000, 10 << 30, 10 << 30, 10_000));
    }
}
