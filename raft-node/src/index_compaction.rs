//! Drives the key index's compaction when no writes come to commit.
//!
//! Applying a compaction leaves the key index to be compacted a step at a time (kv-api's
//! `store::index_compaction`); each commit takes one step. This task takes the others, one step per
//! write lock with a pause in between, so that applies and reads go on, and so that a compaction
//! finishes (and a `physical` request answers) without writes to follow it.

use std::time::Duration;

use kv_api::SharedStore;

/// The pause between two steps, for the writers and readers waiting on the store's lock.
const BETWEEN_STEPS: Duration = Duration::from_millis(1);

/// Takes steps while a compaction of the key index is in progress, and sleeps until the next one starts;
/// runs until the member shuts down.
pub async fn run(store: SharedStore) {
    let started = store.read().index_compaction_started();
    loop {
        while store.read().index_compaction_pending() {
            if !store.write().compact_index_step() {
                break;
            }
            tokio::time::sleep(BETWEEN_STEPS).await;
        }
        started.notified().await;
    }
}
