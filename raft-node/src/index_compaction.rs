//! Drives the key index's compaction when no writes come to commit.
//!
//! Applying a compaction leaves the key index to be compacted a step at a time (kv-api's
//! `store::index_compaction`); each commit takes one step. This task takes the others, one step per
//! write lock with a pause in between, so that applies and reads go on, and so that a compaction
//! finishes (and a `physical` request answers) without writes to follow it.

use std::time::Duration;

use kv_api::SharedStore;

/// How often the task looks for a compaction in progress.
const CHECK_EVERY: Duration = Duration::from_millis(10);
/// The pause between two steps, for the writers and readers waiting on the store's lock.
const BETWEEN_STEPS: Duration = Duration::from_millis(1);

/// Takes steps while a compaction of the key index is in progress, until the member shuts down.
pub async fn run(store: SharedStore) {
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        check.tick().await;
        while store.read().index_compaction_pending() {
            if !store.write().compact_index_step() {
                break;
            }
            tokio::time::sleep(BETWEEN_STEPS).await;
        }
    }
}
