//! Drives the key index's compaction when no writes come to commit, and commits the compaction.
//!
//! Applying a compaction leaves the key index to be compacted a step at a time (kv-api's
//! `store::index_compaction`); each commit takes one step. This task takes the others, one step per
//! write lock with a pause in between, so that applies and reads go on, and so that a compaction
//! finishes (and a `physical` request answers) without writes to follow it. Apply does not commit a
//! compaction at once (its answer would wait for the store's batch): once every key is done, this task
//! commits what apply staged, and the freed revisions go to the compactor.

use std::time::Duration;

use kv_api::SharedStore;

/// The pause between two steps, for the writers and readers waiting on the store's lock.
const BETWEEN_STEPS: Duration = Duration::from_millis(1);

/// Takes steps while a compaction of the key index is in progress, and sleeps until the next one starts;
/// runs until the member shuts down.
pub async fn run(store: SharedStore) {
    let started = store.read().index_compaction_started();
    loop {
        // The compaction's answer goes out first: a member on one thread would hold it for the step.
        tokio::time::sleep(BETWEEN_STEPS).await;
        while store.read().index_compaction_pending() {
            if !step(&store) {
                break;
            }
            tokio::time::sleep(BETWEEN_STEPS).await;
        }
        started.notified().await;
    }
}

/// One step, or the commit that ends the compaction; whether steps are left.
fn step(store: &SharedStore) -> bool {
    let mut store = store.write();
    if !store.index_compaction_awaits_commit() {
        return store.compact_index_step();
    }
    let started = std::time::Instant::now();
    match store.commit() {
        Ok(()) => {
            crate::metrics::metrics().backend_commit.observe(started.elapsed());
            store.index_compaction_pending()
        }
        Err(err) => {
            // Apply's next commit writes it (or stops the member on the same error).
            tracing::error!(%err, "could not commit the compaction; the next apply commits it");
            false
        }
    }
}
