//! The background half of compaction: deleting the revisions a compaction freed from the backend.
//!
//! Apply does what every member must do alike and at once (it checks the revision, marks it compacted,
//! records it in meta as *scheduled* and compacts the key index, so that reads below it fail from then
//! on); the freed revisions are then only dead weight in the key bucket. Deleting hundreds of thousands
//! of them inside apply stalled every write behind it for seconds, so, as etcd, a thread of the store
//! deletes them after the commit, `batch_limit` revisions per backend write with `sleep_interval`
//! between writes, and records the compaction as *finished* in meta with the last batch.
//!
//! Nothing reads a freed revision (reads go through the key index), so the deletions may land at any
//! pace. Every place that looks at the raw key bucket must ignore freed revisions still there: the
//! hashes skip them, and loading a store deletes whatever a crash left behind (see
//! [`crate::store::MvccStore`]'s load). Freed revisions are deleted in revision order, so that a crash
//! leaves of each key's history an intact newer part, which loading rebuilds the same way.
//!
//! The queue holds at most one waiting job: a compaction scheduled while another waits is merged into
//! it (its revision is the newer one), which keeps compactions ordered and the queue bounded.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{ArcRwLockReadGuard, ArcRwLockWriteGuard, Condvar, Mutex, RawRwLock, RwLock};
use tokio::sync::watch;
use tracing::{debug, error, info};

use crate::backend::{Backend, Bucket, WriteBatch};
use crate::revision::Revision;

/// Meta key of the newest compaction whose freed revisions are all deleted (etcd's `finishedCompactRev`);
/// `compact_rev` is the newest scheduled one.
pub const META_FINISHED_COMPACT_REV: &[u8] = b"finished_compact_rev";

/// etcd's `--compaction-batch-limit` and `--compaction-sleep-interval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionConfig {
    /// Revisions deleted per backend write.
    pub batch_limit: usize,
    /// Pause between two writes, so that the store's own commits get the disk.
    pub sleep_interval: Duration,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self { batch_limit: 1000, sleep_interval: Duration::from_millis(10) }
    }
}

/// Revisions a compaction freed, to be deleted.
#[derive(Debug)]
struct Job {
    revision: i64,
    /// Sorted.
    freed: Vec<Revision>,
    /// The store's content it belongs to (see [`Compactor::pause`]).
    epoch: u64,
}

#[derive(Debug, Default)]
struct Queue {
    jobs: VecDeque<Job>,
    running: bool,
    shutdown: bool,
}

struct Shared {
    backend: Arc<dyn Backend>,
    queue: Mutex<Queue>,
    /// Signals a new job or the shutdown to the thread.
    wake: Condvar,
    /// Signals [`Compactor::wait_idle`] that the queue emptied.
    idle: Condvar,
    /// Held exclusively by the thread across each backend write (and while the backend's content is
    /// replaced), shared by whoever must see the key bucket still (see [`Compactor::pause`]).
    gate: Arc<RwLock<()>>,
    /// Which content of the backend jobs belong to; raised by [`Compactor::reset`].
    epoch: AtomicU64,
    batch_limit: AtomicUsize,
    sleep_micros: AtomicU64,
    /// The newest finished compaction, for `physical` compaction requests.
    finished: watch::Sender<i64>,
}

/// The store's compaction thread and its queue; dropping it stops the thread after the batch in
/// progress (whatever is left is resumed when the store is next loaded).
pub struct Compactor {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Held while the key bucket must not change underneath (see [`Compactor::pause`]): the compactor
/// waits for it to drop before its next write. It needs no borrow of the store, so a reader may hold it
/// after letting go of the store's lock.
pub struct Paused {
    _gate: ArcRwLockReadGuard<RawRwLock, ()>,
}

/// Held while the backend's content is replaced: no deletion, no reader (see [`Compactor::stop`]).
pub struct Stopped {
    _gate: ArcRwLockWriteGuard<RawRwLock, ()>,
}

impl Compactor {
    /// Starts the thread that deletes from `backend`.
    pub fn start(backend: Arc<dyn Backend>, config: CompactionConfig) -> Self {
        let shared = Arc::new(Shared {
            backend,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            idle: Condvar::new(),
            gate: Arc::new(RwLock::new(())),
            epoch: AtomicU64::new(0),
            batch_limit: AtomicUsize::new(0),
            sleep_micros: AtomicU64::new(0),
            finished: watch::Sender::new(-1),
        });
        shared.configure(config);
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("compactor".into())
                .spawn(move || run(&shared))
                .expect("the compaction thread starts")
        };
        Self { shared, thread: Some(thread) }
    }

    /// Changes the batch size and the pause between batches, from the next batch on.
    pub fn configure(&self, config: CompactionConfig) {
        self.shared.configure(config);
    }

    /// Queues the deletion of `freed` (in any order) for the compaction at `revision`, behind the ones
    /// queued.
    /// Call only once the compaction is committed: a freed revision may have been staged in the same
    /// batch, and must be on the backend before it can be deleted for good.
    pub fn schedule(&self, revision: i64, freed: Vec<Revision>) {
        let epoch = self.shared.epoch.load(Ordering::SeqCst);
        let mut queue = self.shared.queue.lock();
        match queue.jobs.back_mut() {
            Some(waiting) if waiting.epoch == epoch => {
                waiting.revision = revision;
                waiting.freed.extend(freed);
            }
            _ => queue.jobs.push_back(Job { revision, freed, epoch }),
        }
        self.shared.wake.notify_all();
    }

    /// Records `revision` as the newest finished compaction without deleting anything (a store loaded
    /// with nothing left to delete).
    pub fn set_finished(&self, revision: i64) {
        self.shared.finished.send_replace(revision);
    }

    /// Follows the newest finished compaction.
    pub fn finished(&self) -> watch::Receiver<i64> {
        self.shared.finished.subscribe()
    }

    /// Stops deletions until the guard drops: a snapshot reads the key bucket as one consistent state
    /// (some batches deleted, the rest not, and the finished revision saying which). Several readers
    /// may hold one at once.
    pub fn pause(&self) -> Paused {
        Paused { _gate: self.shared.gate.read_arc() }
    }

    /// [`Compactor::pause`] if that needs no wait (no batch being deleted, none waiting to be).
    pub fn try_pause(&self) -> Option<Paused> {
        self.shared.gate.try_read_arc().map(|gate| Paused { _gate: gate })
    }

    /// Waits for every [`Paused`] to drop and stops deletions until the guard drops: the backend's
    /// content is about to be replaced.
    pub fn stop(&self) -> Stopped {
        Stopped { _gate: self.shared.gate.write_arc() }
    }

    /// Drops every queued and running job: the backend's content was replaced (a snapshot installed)
    /// while `stopped` was held, and the store's load schedules what the new content needs.
    pub fn reset(&self, _stopped: &mut Stopped) {
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        self.shared.queue.lock().jobs.clear();
        self.shared.idle.notify_all();
    }

    /// Blocks until every job queued so far is done (offline tools and tests).
    pub fn wait_idle(&self) {
        let mut queue = self.shared.queue.lock();
        while queue.running || !queue.jobs.is_empty() {
            self.shared.idle.wait(&mut queue);
        }
    }
}

impl std::fmt::Debug for Compactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = self.shared.queue.lock();
        f.debug_struct("Compactor").field("queued", &queue.jobs.len()).field("running", &queue.running).finish()
    }
}

impl Shared {
    fn configure(&self, config: CompactionConfig) {
        self.batch_limit.store(config.batch_limit.max(1), Ordering::Relaxed);
        let micros = u64::try_from(config.sleep_interval.as_micros()).unwrap_or(u64::MAX);
        self.sleep_micros.store(micros, Ordering::Relaxed);
        // A pause in progress ends, so that the new settings take effect at once.
        let _queue = self.queue.lock();
        self.wake.notify_all();
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.shared.queue.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            // The thread holds the backend: joining releases it (a reopen may want its files).
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.queue.lock();
            queue.running = false;
            loop {
                if queue.shutdown {
                    shared.idle.notify_all();
                    return;
                }
                if let Some(job) = queue.jobs.pop_front() {
                    queue.running = true;
                    break job;
                }
                shared.idle.notify_all();
                shared.wake.wait(&mut queue);
            }
        };
        delete(shared, job);
    }
}

/// Deletes one job's revisions, batch by batch; the last batch records the compaction as finished.
fn delete(shared: &Shared, mut job: Job) {
    let started = std::time::Instant::now();
    // In revision order, so that each batch deletes neighbouring entries.
    job.freed.sort_unstable();
    let limit = shared.batch_limit.load(Ordering::Relaxed);
    let batches = job.freed.len().div_ceil(limit).max(1);
    let mut chunks = job.freed.chunks(limit);
    for n in 1..=batches {
        if shared.queue.lock().shutdown {
            return;
        }
        let mut batch = WriteBatch::default();
        for rev in chunks.next().unwrap_or_default() {
            batch.delete(Bucket::Key, rev.to_bytes());
        }
        if n == batches {
            batch.put(Bucket::Meta, META_FINISHED_COMPACT_REV, job.revision.to_be_bytes());
        }
        {
            let _gate = shared.gate.write();
            if shared.epoch.load(Ordering::SeqCst) != job.epoch {
                debug!(revision = job.revision, "compaction dropped: the store was replaced");
                return;
            }
            if let Err(err) = shared.backend.write_in_pieces(batch) {
                // Left for the next load to resume; the store keeps serving (the revisions are dead).
                error!(revision = job.revision, %err, "compaction stopped: cannot delete freed revisions");
                return;
            }
            if n == batches {
                // Still under the gate: a snapshot installed next sets its own finished revision after.
                shared.finished.send_replace(job.revision);
            }
        }
        if n < batches {
            // A shutdown, a new job or new settings end the pause early.
            let pause = Duration::from_micros(shared.sleep_micros.load(Ordering::Relaxed));
            let mut queue = shared.queue.lock();
            if !queue.shutdown && !pause.is_zero() {
                shared.wake.wait_for(&mut queue, pause);
            }
        }
    }
    crate::stats::COMPACTION_DURATIONS.observe(started.elapsed());
    crate::stats::COMPACTED_KEYS.fetch_add(job.freed.len() as u64, Ordering::Relaxed);
    info!(
        revision = job.revision,
        deleted = job.freed.len(),
        batches,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "finished scheduled compaction"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    fn backend_with(revs: &[i64]) -> Arc<MemBackend> {
        let backend = Arc::new(MemBackend::default());
        let mut batch = WriteBatch::default();
        for &main in revs {
            batch.put(Bucket::Key, Revision::new(main, 0).to_bytes(), b"v".to_vec());
        }
        backend.write(batch).expect("write");
        backend
    }

    fn stored(backend: &MemBackend) -> Vec<i64> {
        let mut out = Vec::new();
        backend
            .scan(Bucket::Key, &mut |k, _| {
                out.push(Revision::from_bytes(k).expect("revision").main);
                true
            })
            .expect("scan");
        out
    }

    fn finished_meta(backend: &MemBackend) -> Option<i64> {
        let bytes = backend.get(Bucket::Meta, META_FINISHED_COMPACT_REV).expect("get")?;
        Some(i64::from_be_bytes(bytes.try_into().expect("8 bytes")))
    }

    fn revs(mains: impl IntoIterator<Item = i64>) -> Vec<Revision> {
        mains.into_iter().map(|main| Revision::new(main, 0)).collect()
    }

    #[test]
    fn deletes_in_batches_then_records_the_finished_revision() {
        let backend = backend_with(&(2..=20).collect::<Vec<_>>());
        let config = CompactionConfig { batch_limit: 3, sleep_interval: Duration::from_millis(1) };
        let compactor = Compactor::start(backend.clone(), config);
        let finished = compactor.finished();
        compactor.schedule(12, revs(2..=11));
        compactor.wait_idle();
        assert_eq!(stored(&backend), (12..=20).collect::<Vec<_>>());
        assert_eq!(finished_meta(&backend), Some(12));
        assert_eq!(*finished.borrow(), 12);
    }

    #[test]
    fn queued_compactions_run_in_order_and_merge() {
        let backend = backend_with(&(2..=40).collect::<Vec<_>>());
        // Slow batches, so that the later jobs wait behind the first.
        let config = CompactionConfig { batch_limit: 1, sleep_interval: Duration::from_millis(5) };
        let compactor = Compactor::start(backend.clone(), config);
        let mut finished = compactor.finished();
        compactor.schedule(10, revs(2..10));
        compactor.schedule(20, revs(10..20));
        compactor.schedule(30, revs(20..30));
        let mut seen = Vec::new();
        while *finished.borrow() < 30 {
            next_change(&mut finished);
            seen.push(*finished.borrow());
        }
        compactor.wait_idle();
        assert_eq!(stored(&backend), (30..=40).collect::<Vec<_>>());
        assert_eq!(finished_meta(&backend), Some(30));
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "finished revisions go forward: {seen:?}");
        assert!(seen.len() <= 2, "the two waiting jobs were merged: {seen:?}");
    }

    /// Waits for the next change of `rx` without a runtime.
    fn next_change(rx: &mut watch::Receiver<i64>) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), rx.changed())
                .await
                .expect("a compaction finishes")
                .expect("the compactor is alive");
        });
    }

    #[test]
    fn a_reset_drops_the_jobs_of_the_old_content() {
        let backend = backend_with(&(2..=200).collect::<Vec<_>>());
        let config = CompactionConfig { batch_limit: 1, sleep_interval: Duration::from_millis(20) };
        let compactor = Compactor::start(backend.clone(), config);
        compactor.schedule(100, revs(2..100));
        {
            let mut stopped = compactor.stop();
            compactor.reset(&mut stopped);
        }
        compactor.wait_idle();
        let left = stored(&backend);
        assert!(left.len() > 150, "deletion stopped at the reset: {} left", left.len());
        assert_eq!(finished_meta(&backend), None);
    }
}
