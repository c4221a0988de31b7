//! [`collect`]: giving a value log's dead space back in place, the defragmentation of a generation
//! that keeps its values apart.
//!
//! # Why not copy the generation
//!
//! A copy into the next generation writes every live value again and inserts every pointer into a
//! fresh sled tree, at about the speed etcd's defragmentation copies its whole bbolt file (200k values
//! of 1 KB: 1.3 s for both). Yet revisions die in about the order they were written, so a compaction
//! leaves whole segments of the value log dead and others whole: those need only go, and the live
//! ones stay where they are. sled's tree holds keys, small values and 17-byte pointers; it is copied
//! only once its files take over twice what a fresh tree of its entries would ([`Collected::TreeTooLarge`]),
//! as they do after compactions of many small values.
//!
//! # How
//!
//! One pass over the tree (reads only, writes go on) counts each closed segment's live bytes. A
//! segment no pointer names goes. A segment at least an eighth dead has its live records appended to
//! the end of the log, synced, and their pointers replaced under the write mutex, each only if its
//! entry still holds the old one (the compactor may have removed it meanwhile); then it goes too.
//! Before any segment goes, sled is flushed: the tree on disk must not name it after a crash. No
//! pointer into a closed segment is ever added, so what the pass saw gone stays gone; readers hold the
//! log's pin from a lookup to its read, which the removal waits for (see [`crate::storage::value_log`]).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use kv_api::Bucket;
use parking_lot::Mutex;

use crate::storage::generation::{Generation, Ops, COPY_BATCH};
use crate::storage::scan::Forward;
use crate::storage::value_log::{Chunks, Pointer, ValueLog};

/// A segment this much dead or more (as a fraction, 1/n) has its live records moved, and goes.
const MOVE_FROM_DEAD_PART: u64 = 8;
/// What a fresh sled tree takes on disk, per byte its entries hold and per entry (fitted on trees
/// written in batches of 256 and flushed: 200k entries of 42 bytes took 33.5 MB, of 284 bytes 104 MB).
const FRESH_PER_BYTE: (u64, u64) = (3, 2);
const FRESH_PER_ENTRY: u64 = 106;
/// The tree is copied into a new generation instead once sled takes more than twice what a fresh tree
/// of its entries would, plus this much: half of its files would come back.
const TREE_SLACK_BYTES: u64 = 8 << 20;

/// What [`collect`] did.
#[derive(Debug)]
pub(crate) enum Collected {
    Done(Report),
    /// Nothing was done: sled's files are much larger than a fresh tree of its entries would be, and
    /// only a copy shrinks them.
    TreeTooLarge {
        on_disk: u64,
        fresh: u64,
    },
}

#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Segments removed, and the bytes they held.
    pub(crate) segments: usize,
    pub(crate) freed_bytes: u64,
    /// Live records moved out of mostly dead segments first.
    pub(crate) moved: usize,
    pub(crate) moved_bytes: u64,
    /// The pass over the tree, and the moves.
    pub(crate) count_time: Duration,
    pub(crate) move_time: Duration,
}

/// Gives back the dead space of `generation`'s value log (see the module doc); `writes` is the store's
/// write mutex. The caller holds the store's defragmentation lock.
pub(crate) fn collect(generation: &Generation, writes: &Mutex<Option<Vec<Ops>>>) -> Result<Collected, sled::Error> {
    let Some(values) = generation.values() else {
        return Ok(Collected::Done(Report::default()));
    };
    let started = Instant::now();
    let noted_before = values.dead_bytes();
    // Taken while no write is between appending a value and applying its pointer (both happen under
    // the write mutex): every record of a closed segment has its pointer in the tree already, or never
    // will. Later appends go to the open segment or newer ones.
    let (closed, (open, open_size)) = {
        let _writes = writes.lock();
        (values.closed_segments()?, values.appending())
    };
    let (live, entries, bytes) = count_live(generation)?;
    let on_disk = generation.db.size_on_disk()?;
    let fresh = bytes * FRESH_PER_BYTE.0 / FRESH_PER_BYTE.1 + entries * FRESH_PER_ENTRY;
    if on_disk > 2 * fresh + TREE_SLACK_BYTES {
        return Ok(Collected::TreeTooLarge { on_disk, fresh });
    }
    let mut report = Report { count_time: started.elapsed(), ..Report::default() };
    let (mut doomed, mut to_move, mut kept_dead) = (Vec::new(), BTreeSet::new(), 0);
    for (segment, size) in closed {
        let live = live.get(&segment).copied().unwrap_or(0);
        let dead = size.saturating_sub(live);
        if live == 0 {
            doomed.push(segment);
        } else if dead * MOVE_FROM_DEAD_PART >= size {
            to_move.insert(segment);
            doomed.push(segment);
        } else {
            kept_dead += dead;
        }
    }
    // The open segment too, once closed, when enough of it is dead (a small store's whole value log
    // is that one segment). Its live records are moved whatever the count said: pointers into it may
    // have been added since.
    let open_live = live.get(&open).copied().unwrap_or(0);
    if open_size.saturating_sub(open_live) * MOVE_FROM_DEAD_PART >= open_size.max(1) {
        let _writes = writes.lock();
        if let Some(sealed) = values.seal()? {
            to_move.insert(sealed);
            doomed.push(sealed);
        }
    }
    let moving = Instant::now();
    let mut moves = Moves { generation, values, writes, batch: Vec::new(), dead: 0 };
    if !to_move.is_empty() {
        let mut chunks = Chunks::new(values);
        let tag = Bucket::Key.tag();
        for item in Forward::from(&generation.tree, &[tag]) {
            let (key, stored) = item?;
            if key.first() != Some(&tag) {
                break;
            }
            let Some(pointer) = Pointer::decode(&stored) else { continue };
            if !to_move.contains(&pointer.segment()) {
                continue;
            }
            let moved = values.append_record(chunks.record(pointer)?)?;
            report.moved += 1;
            report.moved_bytes += moved.record_bytes();
            moves.push(key, stored, moved)?;
        }
        moves.write()?;
    }
    report.move_time = moving.elapsed();
    // The tree on disk must name none of the doomed segments before they go.
    generation.db.flush()?;
    report.segments = doomed.len();
    report.freed_bytes = values.remove_segments(&doomed)?;
    // What is dead now: in the segments kept, as counted; whatever died since the count began (some of
    // it in segments gone now, an overestimate that the next collection corrects); the moved records
    // whose entries went before their pointer was replaced.
    let noted_since = values.dead_bytes().saturating_sub(noted_before);
    values.set_dead_bytes(kept_dead + noted_since + moves.dead);
    Ok(Collected::Done(report))
}

/// Each closed segment's live bytes (the records the key bucket's pointers name), and the tree's
/// entries and the bytes they hold.
fn count_live(generation: &Generation) -> Result<(HashMap<u32, u64>, u64, u64), sled::Error> {
    let mut live = HashMap::new();
    let (mut entries, mut bytes) = (0u64, 0u64);
    let tag = Bucket::Key.tag();
    for item in Forward::from(&generation.tree, &[]) {
        let (key, stored) = item?;
        entries += 1;
        bytes += (key.len() + stored.len()) as u64;
        if key.first() == Some(&tag) {
            if let Some(pointer) = Pointer::decode(&stored) {
                *live.entry(pointer.segment()).or_insert(0) += pointer.record_bytes();
            }
        }
    }
    Ok((live, entries, bytes))
}

/// Pointers to replace, in batches.
struct Moves<'a> {
    generation: &'a Generation,
    values: &'a ValueLog,
    writes: &'a Mutex<Option<Vec<Ops>>>,
    /// Tagged key, the pointer it held, the moved record's.
    batch: Vec<(sled::IVec, sled::IVec, Pointer)>,
    /// Bytes of moved records whose entry went meanwhile.
    dead: u64,
}

impl Moves<'_> {
    fn push(&mut self, key: sled::IVec, old: sled::IVec, moved: Pointer) -> Result<(), sled::Error> {
        self.batch.push((key, old, moved));
        if self.batch.len() >= COPY_BATCH {
            self.write()?;
        }
        Ok(())
    }

    /// The moved records made durable, then their pointers in place of the old ones still there.
    fn write(&mut self) -> Result<(), sled::Error> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.values.sync()?;
        let mut batch = sled::Batch::default();
        let _writes = self.writes.lock();
        for (key, old, moved) in self.batch.drain(..) {
            if self.generation.tree.get(&key)?.as_ref() == Some(&old) {
                batch.insert(key, moved.encode());
            } else {
                self.dead += moved.record_bytes();
            }
        }
        self.generation.tree.apply_batch(batch)
    }
}
