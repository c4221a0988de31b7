//! [`SledBackend`]: the MVCC store's buckets in one sled tree of a database of their own, each key
//! prefixed by its bucket's tag, and etcd's defragmentation for it.
//!
//! # Why a database of its own
//!
//! sled 0.34 never gives space back: after a compaction deleted most of the store, its files keep their
//! size (measured: 30 MB of values written then deleted left 62 MB on disk, through seconds of flushes
//! and a rewrite of the survivors), and it has no call that compacts them. A fresh database holding
//! only the live entries takes what they need (190 KB for the same survivors). So
//! [`SledBackend::defragment`] copies the tree into a new database and switches to it; for that the
//! store must not share its database with the Raft log, which keeps being written meanwhile. (etcd too
//! keeps its WAL apart from the bbolt file it defragments.)
//!
//! The databases are generations `<dir>/<n>` ([`crate::storage::generation`]); the file `<dir>/CURRENT`
//! names the one in use and is replaced atomically (write, fsync, rename, fsync the directory) once the
//! new generation is complete and flushed, so a crash leaves either the old or the new one; leftovers
//! are removed at open.
//!
//! # Defragmenting while the store works
//!
//! Copying 400k revisions takes seconds, and etcd's clients time out after five: the copy runs while
//! reads and writes go on. Every write passes one mutex, in the order it reaches the tree; while a
//! defragmentation runs, the write is also recorded. The copy of the live tree, made without any lock,
//! holds each key as it was at some moment of the copy; replaying the recorded writes in order onto it
//! gives each key its last value. Replays repeat without the lock until few writes are left, and the
//! new generation is flushed; only then are writes held back (the mutex), for the last small replay, a
//! short flush, `CURRENT` and the switch. A scan still running on the old generation keeps it (an
//! `Arc`): its files go when the last one lets go.
//!
//! # Values apart
//!
//! With `--experimental-values-apart` the key bucket's large values live in a value log of the
//! generation ([`crate::storage::value_log`]) and the tree holds pointers to them: sled rewrites whole
//! leaves as they split, so a copy of large values wrote several times their size. Reads follow the
//! pointers; a defragmentation copies live records into the next generation's value log, and the
//! reclaimer ([`SledBackend::start_reclaimer`]) runs one on its own once half of the value log is dead.
//! A generation that has a value log keeps reading it whatever the flag says.
//!
//! # Durability
//!
//! Writes are sled batches, atomic across a crash; data and the applied log id go in the same batch
//! (the compactor's deletions of dead revisions alone go a few at a time, see
//! [`Backend::write_in_pieces`]).
//! A batch holding pointers is applied only once the values they name are synced, so the tree on disk
//! never names a value the disk lacks.
//! sled's flusher makes them durable within a tenth of a second, [`Backend::sync`] at once: the state
//! machine syncs before a snapshot lets openraft purge the log, and [`Backend::replace_all`] (snapshot
//! install, into a new generation) flushes before it switches. A crash loses at most the writes since the last flush, which a
//! restart applies again from the log. The store is never behind the log's purge point, and when it is
//! ahead of the durable log (a follower's log append not yet flushed) openraft starts from the applied
//! id.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv_api::{Backend, BackendError, Bucket, Record, WriteBatch};
use parking_lot::{Mutex, RwLock};
use tracing::{debug, info, warn};

use crate::storage::generation::{self, Generation, Ops, TREE};
use crate::storage::scan::Forward;
use crate::storage::value_gc::{self, Collected};

/// How long a measured size is reused: the quota check asks on every write, and measuring lists files.
const SIZE_TTL: Duration = Duration::from_millis(100);
/// A defragmentation holds writes back only once replaying what they wrote meanwhile is this small...
const SMALL_REPLAY_OPS: usize = 4096;
/// ... or after this many rounds (writers faster than the replay would otherwise keep it going).
const MAX_REPLAY_ROUNDS: usize = 16;

/// The [`Backend`] of a member: the tree `kv` of the current generation's database.
#[derive(Debug)]
pub struct SledBackend {
    dir: PathBuf,
    current: RwLock<Arc<Generation>>,
    /// Taken by every write, so that writes reach the tree in one order; while a defragmentation
    /// runs, it holds the writes made since it began, in that order.
    writes: Mutex<Option<Vec<Ops>>>,
    /// One defragmentation at a time.
    defragmenting: Mutex<()>,
    /// Defragmentations done (a collection in place leaves the generation's number as it was).
    defragmented: AtomicU64,
    /// The last measured size, and when it was measured.
    size: AtomicU64,
    measured_at: Mutex<Option<Instant>>,
    /// Large values of the key bucket go to a value log beside the tree (see
    /// [`crate::storage::value_log`]); generations made from now on keep them so too.
    apart: bool,
    /// Wakes the reclaimer ([`SledBackend::start_reclaimer`]), and the dead bytes it waits for.
    reclaim: Mutex<Option<(std::sync::mpsc::SyncSender<()>, u64)>>,
}

/// The reclaimer defragments once the value log has this many dead bytes (and they are half of it)...
pub const RECLAIM_FROM_DEAD_BYTES: u64 = 64 << 20;
/// ... and they have not grown for this long (or for this many rounds of it).
const RECLAIM_QUIET: Duration = Duration::from_millis(500);
const RECLAIM_QUIET_ROUNDS: usize = 20;

impl SledBackend {
    /// Opens the store's database under `dir`. A member created before the split kept the tree in its
    /// one database, `legacy`: it moves here first (copied, made durable, then dropped there).
    pub fn open(dir: &Path, legacy: &sled::Db) -> Result<Self, sled::Error> {
        Self::open_with(dir, legacy, false)
    }

    /// [`SledBackend::open`]; with `apart`, large values of the key bucket are written to a value log
    /// beside the tree from now on (`--experimental-values-apart`). Either way, values a generation
    /// keeps apart are read back from its value log.
    pub fn open_with(dir: &Path, legacy: &sled::Db, apart: bool) -> Result<Self, sled::Error> {
        std::fs::create_dir_all(dir)?;
        let current = match generation::read_current(dir)? {
            Some(number) => Generation::open(dir, number, apart)?,
            None => {
                // No generation yet: start one with whatever the member's database holds. It stays open:
                // sled releases a database's file lock only once its background flusher lets go of a
                // dropped handle, so opening it again at once can fail ("could not acquire lock").
                let first = Generation::create(dir, 0, apart)?;
                let old = legacy.open_tree(TREE)?;
                if !old.is_empty() {
                    info!(entries = old.len(), "moving the store out of the Raft log's database");
                }
                generation::copy(&old, |_, stored| Ok(stored), &first)?;
                first.sync()?;
                generation::write_current(dir, 0)?;
                first
            }
        };
        if legacy.tree_names().iter().any(|name| name == TREE.as_bytes()) {
            legacy.drop_tree(TREE)?;
        }
        Ok(Self::with(dir, current, apart))
    }

    /// Opens the store a member left at `dir`, without the member's Raft log (the offline tools); fails
    /// when there is none.
    pub fn open_existing(dir: &Path) -> Result<Self, sled::Error> {
        let number = generation::read_current(dir)?.ok_or_else(|| generation::no_current(dir))?;
        Ok(Self::with(dir, Generation::open(dir, number, false)?, false))
    }

    fn with(dir: &Path, current: Generation, apart: bool) -> Self {
        generation::remove_other_generations(dir, current.number);
        Self {
            dir: dir.to_path_buf(),
            current: RwLock::new(Arc::new(current)),
            writes: Mutex::new(None),
            defragmenting: Mutex::new(()),
            defragmented: AtomicU64::new(0),
            size: AtomicU64::new(0),
            measured_at: Mutex::new(None),
            apart,
            reclaim: Mutex::new(None),
        }
    }

    /// Starts the thread that gives back the value log's dead space on its own: once compactions left
    /// `from_dead_bytes` of it dead, and half of it, it defragments (the copy takes only live values,
    /// while reads and writes go on). etcd gives space back only when asked (`etcdctl defrag`); bbolt
    /// reuses its free pages meanwhile, which an append-only value log cannot. The thread ends with the
    /// backend.
    pub fn start_reclaimer(self: &Arc<Self>, from_dead_bytes: u64) -> std::io::Result<()> {
        let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
        let backend = Arc::downgrade(self);
        std::thread::Builder::new().name("store-reclaim".into()).spawn(move || {
            while woken.recv().is_ok() {
                // Let the compaction that woke it finish its deletions first (until the dead bytes stop
                // growing, for a while at most): what the copy takes and the compactor deletes next is
                // copied for nothing.
                let mut dead = None;
                for _ in 0..RECLAIM_QUIET_ROUNDS {
                    let Some(backend) = backend.upgrade() else { return };
                    let now = backend.generation().value_log_bytes().0;
                    if dead == Some(now) {
                        break;
                    }
                    dead = Some(now);
                    drop(backend);
                    std::thread::sleep(RECLAIM_QUIET);
                }
                let Some(backend) = backend.upgrade() else { return };
                let generation = backend.generation();
                if !generation.wants_reclaim(from_dead_bytes) {
                    continue;
                }
                let (dead, size) = generation.value_log_bytes();
                drop(generation);
                info!(dead_bytes = dead, value_log_bytes = size, "giving back the value log's dead space");
                if let Err(err) = backend.defragment() {
                    warn!(%err, "could not give back the value log's dead space");
                }
            }
        })?;
        *self.reclaim.lock() = Some((wake, from_dead_bytes));
        Ok(())
    }

    /// Wakes the reclaimer if the current generation's value log is worth a defragmentation.
    fn maybe_reclaim(&self, generation: &Generation) {
        if !self.apart {
            return;
        }
        if let Some((wake, from)) = &*self.reclaim.lock() {
            if generation.wants_reclaim(*from) {
                let _ = wake.try_send(());
            }
        }
    }

    fn generation(&self) -> Arc<Generation> {
        self.current.read().clone()
    }

    /// Applies `ops` to the current tree, in the one order of writes, recording them while a
    /// defragmentation copies the tree.
    fn apply(&self, ops: Ops) -> Result<(), BackendError> {
        let mut recording = self.writes.lock();
        // Taken under the write mutex: a defragmentation switches generations holding it.
        let generation = self.generation();
        Self::apply_in_order(&mut recording, &generation, ops)?;
        drop(recording);
        self.maybe_reclaim(&generation);
        Ok(())
    }

    /// Applies `ops` to `generation`'s tree; `recording` is the write mutex, held.
    fn apply_in_order(recording: &mut Option<Vec<Ops>>, generation: &Generation, ops: Ops) -> Result<(), BackendError> {
        generation.apply(&ops).map_err(backend_error)?;
        if let Some(recorded) = recording.as_mut() {
            recorded.push(ops);
        }
        Ok(())
    }

    fn forget_size(&self) {
        *self.measured_at.lock() = None;
    }

    /// The defragmentation once recording is on: copy, catch up, switch. Returns how long each phase
    /// took.
    fn copy_and_switch(&self, old: &Generation, next: Generation) -> Result<Phases, sled::Error> {
        let started = Instant::now();
        generation::copy_generation(old, &next)?;
        let copied = started.elapsed();
        for round in 1..=MAX_REPLAY_ROUNDS {
            let recorded = self.writes.lock().as_mut().map(std::mem::take).unwrap_or_default();
            let ops = generation::replay(&next, recorded)?;
            debug!(round, ops, "defragmentation caught up with writes");
            if ops <= SMALL_REPLAY_OPS {
                break;
            }
        }
        // Most of the copy reaches the disk now, so that the flush while writes wait is short.
        let flushing = Instant::now();
        next.sync()?;
        let flushed = flushing.elapsed();
        let mut recording = self.writes.lock();
        let held = Instant::now();
        generation::replay(&next, recording.take().unwrap_or_default())?;
        next.sync()?;
        generation::write_current(&self.dir, next.number)?;
        let old = std::mem::replace(&mut *self.current.write(), Arc::new(next));
        old.retire();
        drop(recording);
        Ok(Phases { copied, flushed, held: held.elapsed() })
    }
}

/// How long a defragmentation's phases took: the copy, the flush of the copy, and the switch (the
/// last replay, flush and `CURRENT`) during which writes were held back.
struct Phases {
    copied: Duration,
    flushed: Duration,
    held: Duration,
}

fn tagged(bucket: Bucket, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(bucket.tag());
    out.extend_from_slice(key);
    out
}

fn ops_of(batch: WriteBatch) -> Ops {
    batch.ops.into_iter().map(|(bucket, key, value)| (tagged(bucket, &key), value)).collect()
}

fn backend_error(err: impl std::fmt::Display) -> BackendError {
    BackendError(err.to_string())
}

impl Backend for SledBackend {
    fn get(&self, bucket: Bucket, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let generation = self.current.read();
        let _pin = generation.pin();
        let key = tagged(bucket, key);
        let value = generation.tree.get(&key).map_err(backend_error)?;
        value.map(|v| generation.resolve(&key, v).map(|v| v.to_vec())).transpose().map_err(backend_error)
    }

    fn read(&self, bucket: Bucket, key: &[u8], read: &mut dyn FnMut(&[u8])) -> Result<bool, BackendError> {
        let generation = self.current.read();
        let _pin = generation.pin();
        let key = tagged(bucket, key);
        let value = generation.tree.get(&key).map_err(backend_error)?;
        if let Some(value) = value {
            read(&generation.resolve(&key, value).map_err(backend_error)?);
            return Ok(true);
        }
        Ok(false)
    }

    /// Scans the generation current when it starts, to the end even if a defragmentation switches
    /// meanwhile (it keeps that generation's files until then).
    fn scan(&self, bucket: Bucket, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        self.scan_from(bucket, &[], visit)
    }

    fn scan_from(
        &self,
        bucket: Bucket,
        start: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), BackendError> {
        let generation = self.generation();
        let mut entries = Forward::from(&generation.tree, &tagged(bucket, start));
        loop {
            // From each lookup to its read only: `visit` may take long.
            let pin = generation.pin();
            let Some(item) = entries.next() else { break };
            let (key, value) = item.map_err(backend_error)?;
            if key.first() != Some(&bucket.tag()) {
                break;
            }
            let value = generation.resolve(&key, value).map_err(backend_error)?;
            drop(pin);
            if !visit(&key[1..], &value) {
                break;
            }
        }
        Ok(())
    }

    fn last_key(&self, bucket: Bucket) -> Result<Option<Vec<u8>>, BackendError> {
        // Tags are letters: the next byte up starts no other bucket's range before this one's end.
        let after = [bucket.tag() + 1];
        let last = self.generation().tree.get_lt(after).map_err(backend_error)?;
        Ok(last.filter(|(key, _)| key.first() == Some(&bucket.tag())).map(|(key, _)| key[1..].to_vec()))
    }

    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        self.apply(ops_of(batch))
    }

    /// A sled batch of at most [`generation::COPY_BATCH`] ops at a time, each under the write mutex: a
    /// compaction batch of a thousand deletions holds the state machine's applies back about a
    /// millisecond at a time.
    fn write_in_pieces(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let mut ops = ops_of(batch).into_iter().peekable();
        while ops.peek().is_some() {
            let piece: Ops = ops.by_ref().take(generation::COPY_BATCH).collect();
            self.apply(piece)?;
        }
        Ok(())
    }

    /// Writes `content` into a fresh database (the next generation) in bounded batches and switches to
    /// it once it is complete and flushed, as a defragmentation does: a crash leaves the old store or the
    /// new one, and a snapshot larger than memory installs. Durable before it returns (openraft purges
    /// the log the snapshot covers next). The store's lock is held meanwhile, so nobody else writes.
    fn replace_all(&self, content: &mut dyn Iterator<Item = Result<Record, BackendError>>) -> Result<(), BackendError> {
        let _one = self.defragmenting.lock();
        let number = self.generation().number + 1;
        let next = Generation::create(&self.dir, number, self.apart).map_err(backend_error)?;
        let fill = || -> Result<(), BackendError> {
            let mut batches = generation::Batches::new(&next);
            for item in content {
                let (bucket, key, value) = item?;
                batches.push(tagged(bucket, &key), Some(value)).map_err(backend_error)?;
            }
            batches.finish().map_err(backend_error)?;
            next.sync().map_err(backend_error)?;
            Ok(())
        };
        if let Err(err) = fill() {
            // The old generation stays in use; the unfinished one goes.
            next.retire();
            return Err(err);
        }
        let writes = self.writes.lock();
        generation::write_current(&self.dir, number).map_err(backend_error)?;
        let old = std::mem::replace(&mut *self.current.write(), Arc::new(next));
        old.retire();
        drop(writes);
        self.forget_size();
        Ok(())
    }

    fn sync(&self) -> Result<(), BackendError> {
        self.generation().sync().map_err(backend_error)
    }

    fn size_bytes(&self) -> u64 {
        let mut measured_at = self.measured_at.lock();
        if measured_at.is_none_or(|at| at.elapsed() >= SIZE_TTL) {
            // sled may report 0 before its first flush; never report an empty database (etcdctl divides by
            // the size).
            let size = self.generation().size_on_disk().unwrap_or(0).max(1);
            self.size.store(size, Ordering::Relaxed);
            *measured_at = Some(Instant::now());
        }
        self.size.load(Ordering::Relaxed)
    }

    /// The size less what the value log holds dead (sled's own free space is not known).
    fn size_in_use_bytes(&self) -> u64 {
        self.size_bytes().saturating_sub(self.generation().value_log_bytes().0)
    }

    /// Gives back the space compactions freed while reads and writes go on: with values apart, in place
    /// ([`crate::storage::value_gc`]); otherwise (or once sled's files grew much larger than the tree)
    /// by copying the tree into a fresh database, the next generation, and switching to it (see the
    /// module doc); the old generation is removed once unused.
    fn defragment(&self) -> Result<(), BackendError> {
        let asked_of = (self.generation().number, self.defragmented.load(Ordering::Acquire));
        let _one = self.defragmenting.lock();
        let started = Instant::now();
        let old = self.generation();
        if (old.number, self.defragmented.load(Ordering::Acquire)) != asked_of {
            // Another one (the reclaimer's, a client's, or a snapshot install) was done while this one
            // waited for it: doing it again now would give back next to nothing.
            info!(generation = old.number, "the store was defragmented while this defragmentation waited");
            return Ok(());
        }
        if old.keeps_values_apart() {
            match value_gc::collect(&old, &self.writes).map_err(backend_error)? {
                Collected::Done(report) => {
                    self.defragmented.fetch_add(1, Ordering::AcqRel);
                    self.forget_size();
                    info!(
                        generation = old.number,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        count_ms = report.count_time.as_millis() as u64,
                        move_ms = report.move_time.as_millis() as u64,
                        segments_removed = report.segments,
                        freed_bytes = report.freed_bytes,
                        records_moved = report.moved,
                        moved_bytes = report.moved_bytes,
                        "gave back the value log's dead space"
                    );
                    return Ok(());
                }
                Collected::TreeTooLarge { on_disk, fresh } => {
                    info!(on_disk, fresh, "the store's tree takes over twice what a fresh one would: copying it");
                }
            }
        }
        let number = old.number + 1;
        let next = Generation::create(&self.dir, number, self.apart).map_err(backend_error)?;
        *self.writes.lock() = Some(Vec::new());
        let outcome = self.copy_and_switch(&old, next);
        // Recording stops whatever happened (the switch already took it on success).
        *self.writes.lock() = None;
        let phases = match outcome {
            Ok(phases) => phases,
            // The next generation stays on disk: `CURRENT` may already name it. The next open keeps the
            // one it names and removes the other.
            Err(err) => return Err(backend_error(err)),
        };
        // The old generation goes on a thread of its own: closing its unlinked files makes the
        // filesystem free their blocks (about 170 ms for 650 MB here, a seventh of a defragmentation),
        // which the answer need not wait for. A restart removes what a crash meanwhile leaves.
        let retiring = std::thread::Builder::new().name("store-retire".into()).spawn(move || drop(old));
        if let Err(err) = retiring {
            debug!(%err, "the old store generation is dropped in place");
        }
        self.defragmented.fetch_add(1, Ordering::AcqRel);
        self.forget_size();
        info!(
            generation = number,
            elapsed_ms = started.elapsed().as_millis() as u64,
            copy_ms = phases.copied.as_millis() as u64,
            flush_ms = phases.flushed.as_millis() as u64,
            writes_held_ms = phases.held.as_millis() as u64,
            "defragmented the store"
        );
        Ok(())
    }
}

#[cfg(test)]
#[path = "sled_backend_test.rs"]
mod tests;
