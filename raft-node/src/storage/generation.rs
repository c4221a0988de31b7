//! The generations of the store's database: `<dir>/<n>`, one sled database each, the file
//! `<dir>/CURRENT` naming the one in use (see [`crate::storage::sled_backend`] for why there are
//! several), and copying a tree into the next one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use kv_api::Bucket;
use tracing::warn;

use crate::storage::scan::Forward;
use crate::storage::value_log::{Chunks, Pointer, ValueLog, POINTER_MARK};

/// The tree of the backend, in its database and, before the split, in the member's one database.
pub(crate) const TREE: &str = "kv";
/// The file naming the generation in use.
const CURRENT: &str = "CURRENT";
/// Entries per batch when copying a tree or replaying writes onto it, at most...
///
/// Small, because `Tree::apply_batch` holds sled's lock of the whole process
/// (`concurrency_control::write`, shared by every database in it) while it runs: each batch of a copy
/// holds back every other write of the member (the state machine's applies, the small database of the
/// vote) for as long as it takes. Measured in a bare sled program (200k entries of 1 KB copied into a
/// new database while another thread applied a two-entry batch to a third database every
/// millisecond): in batches of 4,096 the copy took 2.5 s and held that writer up to 37 ms (49 of its
/// ~650 batches over 10 ms); in batches of 256, 1.6–1.7 s and 3–6 ms; entry by entry 1.5–2.0 s and
/// 2–4 ms. Not entry by entry: a replay must outpace the writers it catches up with, and a single
/// insert gets the lock as often as a writer's whole batch does.
pub(crate) const COPY_BATCH: usize = 256;
/// ... and bytes: sled keeps much of a larger batch in memory (see the state machine's commit bound;
/// a defrag that replayed the compactor's 70k deletions in one batch grew a member by 310 MB).
const COPY_BATCH_BYTES: usize = 256 << 10;

/// How often sled's flusher writes out what the store changed (sled's default is 500 ms). Each flush
/// writes and waits for all of it at once, and the Raft log's `fdatasync` queues behind that on a
/// shared disk; smaller flushes, more often, keep that wait short. `jepsen bench --scale`, one member,
/// 500 ms against 100 ms, three runs each alternating (`perf trace` of the log's syncs): syncs over
/// 30 ms 3, 7, 1 (the slowest 200, 893, 157 ms) against 0, 3, 4 (0, 218, 94 ms); the slowest put
/// during the compaction 26.8, 12.9, 20.7 ms against 8.5, 15.5, 8.4; the load's rate unchanged.
const FLUSH_EVERY_MS: u64 = 100;

/// With values apart, the key bucket's values of at least this many bytes go to the value log; smaller
/// ones cost sled little more than their pointer would (200k values of 256 B: 3.7 s inline, 3.1 s apart
/// in the experiment of [`crate::storage::value_log`]), and reading one back would cost a `pread`.
const APART_FROM_BYTES: usize = 512;
/// The directory of a generation's value log, inside the generation's own.
const VALUES_DIR: &str = "values";

/// One write to a tree: tagged keys, each with its new value or `None` for a removal, in order.
pub(crate) type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// One generation's database, open.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) number: u64,
    pub(crate) db: sled::Db,
    pub(crate) tree: sled::Tree,
    /// The value log, once values were ever kept apart in this generation (its pointers need it).
    values: Option<ValueLog>,
    /// Whether new large values of the key bucket go to the value log.
    apart: bool,
    path: PathBuf,
    /// Set once a newer generation replaced it: its files go when the last user lets go of it (a scan
    /// that started before the switch reads on to its end).
    retired: AtomicBool,
}

impl Generation {
    /// Opens generation `number`; with `apart`, new large values of the key bucket go to its value log.
    pub(crate) fn open(dir: &Path, number: u64, apart: bool) -> Result<Self, sled::Error> {
        let path = dir.join(number.to_string());
        let db = sled::Config::new()
            .path(&path)
            .cache_capacity(super::CACHE_BYTES)
            .flush_every_ms(Some(FLUSH_EVERY_MS))
            .open()?;
        let tree = db.open_tree(TREE)?;
        let values_dir = path.join(VALUES_DIR);
        let values = if apart || values_dir.exists() { Some(ValueLog::open(&values_dir)?) } else { None };
        Ok(Self { number, db, tree, values, apart, path, retired: AtomicBool::new(false) })
    }

    /// Opens generation `number` afresh, removing whatever an unfinished attempt left there.
    pub(crate) fn create(dir: &Path, number: u64, apart: bool) -> Result<Self, sled::Error> {
        let _ = std::fs::remove_dir_all(dir.join(number.to_string()));
        Self::open(dir, number, apart)
    }

    /// What goes into the tree for `value` under the tagged `key`: a pointer to it once appended to the
    /// value log (not written out yet), or the value itself.
    fn stored(&self, key: &[u8], value: sled::IVec) -> Result<sled::IVec, sled::Error> {
        match &self.values {
            Some(values)
                if self.apart && key.first() == Some(&Bucket::Key.tag()) && value.len() >= APART_FROM_BYTES =>
            {
                Ok(values.append(&value)?.encode().into())
            }
            _ => Ok(value),
        }
    }

    /// The value `stored` under the tagged `key` stands for: itself, or the value its pointer names.
    /// Only the key bucket holds pointers (the other buckets' values may start with any byte).
    pub(crate) fn resolve(&self, key: &[u8], stored: sled::IVec) -> Result<sled::IVec, sled::Error> {
        if key.first() != Some(&Bucket::Key.tag()) || stored.first() != Some(&POINTER_MARK) {
            return Ok(stored);
        }
        match (Pointer::decode(&stored), &self.values) {
            (Some(pointer), Some(values)) => Ok(values.read(pointer)?.into()),
            _ => Err(sled::Error::Unsupported(format!(
                "{}: a stored value names the value log, which this generation lacks",
                self.path.display()
            ))),
        }
    }

    /// Applies `ops` as one batch, their large values first made durable in the value log: sled may
    /// persist the batch at any moment after, and its pointers must never name a value the disk lacks.
    pub(crate) fn apply(&self, ops: &Ops) -> Result<(), sled::Error> {
        let mut batch = sled::Batch::default();
        let mut pointers = false;
        // The pointers the removals drop, to count their records dead once the batch is in.
        let mut removed = std::collections::HashMap::new();
        for (key, value) in ops {
            if value.is_none() && self.values.is_some() && key.first() == Some(&Bucket::Key.tag()) {
                let old = self.tree.get(key)?;
                removed.insert(key.as_slice(), old.as_deref().and_then(Pointer::decode));
            }
            match value {
                Some(value) => {
                    let stored = self.stored(key, value.as_slice().into())?;
                    pointers |= stored.first() == Some(&POINTER_MARK);
                    batch.insert(key.as_slice(), stored);
                }
                None => batch.remove(key.as_slice()),
            }
        }
        if let (true, Some(values)) = (pointers, &self.values) {
            values.sync()?;
        }
        self.tree.apply_batch(batch)?;
        if let Some(values) = &self.values {
            removed.into_values().flatten().for_each(|pointer| values.note_dead(pointer));
        }
        Ok(())
    }

    /// The value log, once values were ever kept apart in this generation.
    pub(crate) fn values(&self) -> Option<&ValueLog> {
        self.values.as_ref()
    }

    /// Whether new large values of the key bucket go to the value log (opening with `apart` opens it).
    pub(crate) fn keeps_values_apart(&self) -> bool {
        self.apart
    }

    /// Holds back the removal of value segments from a pointer's lookup to its read (see
    /// [`ValueLog::pin`]).
    pub(crate) fn pin(&self) -> Option<parking_lot::RwLockReadGuard<'_, ()>> {
        self.values.as_ref().map(ValueLog::pin)
    }

    /// The value log's dead bytes and its size (zeros without one).
    pub(crate) fn value_log_bytes(&self) -> (u64, u64) {
        self.values.as_ref().map_or((0, 0), |values| (values.dead_bytes(), values.size_bytes()))
    }

    /// Whether a defragmentation would give back enough of the value log: at least `from_dead_bytes`
    /// dead, and half of it.
    pub(crate) fn wants_reclaim(&self, from_dead_bytes: u64) -> bool {
        self.values.as_ref().is_some_and(|values| {
            let dead = values.dead_bytes();
            dead >= from_dead_bytes && dead.saturating_mul(2) >= values.size_bytes()
        })
    }

    /// Makes everything written to this generation durable: the value log, then the tree.
    pub(crate) fn sync(&self) -> Result<(), sled::Error> {
        if let Some(values) = &self.values {
            values.sync()?;
        }
        self.db.flush().map(|_| ())
    }

    /// The generation's bytes on disk: its database and its value log.
    pub(crate) fn size_on_disk(&self) -> Result<u64, sled::Error> {
        Ok(self.db.size_on_disk()? + self.values.as_ref().map_or(0, ValueLog::size_bytes))
    }

    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if self.retired.load(Ordering::Relaxed) {
            // Files still open in sled's flusher stay readable until it closes them; a restart removes
            // whatever this leaves behind.
            if let Err(err) = std::fs::remove_dir_all(&self.path) {
                warn!(%err, path = %self.path.display(), "cannot remove an old store generation");
            }
        }
    }
}

/// Applies writes recorded on another generation, in their order, in batches of bounded size (the new
/// generation is not in use yet, so they need not be one, nor durable before [`Generation::sync`]);
/// returns how many ops they held.
pub(crate) fn replay(to: &Generation, writes: Vec<Ops>) -> Result<usize, sled::Error> {
    let mut batches = Batches::new(to);
    for (key, value) in writes.into_iter().flatten() {
        batches.push(key, value)?;
    }
    batches.finish()
}

/// Copies every entry of `from` into `to`, each value as `resolve` gives it (a pointer of `from`'s value
/// log followed). `from` may change meanwhile: the copy then holds each key as it was at some point of
/// the copy, which replaying the writes made since the start fixes.
pub(crate) fn copy(
    from: &sled::Tree,
    resolve: impl Fn(&[u8], sled::IVec) -> Result<sled::IVec, sled::Error>,
    to: &Generation,
) -> Result<(), sled::Error> {
    let mut batches = Batches::new(to);
    for item in Forward::from(from, &[]) {
        let (key, value) = item?;
        let value = resolve(&key, value)?;
        batches.push(key, Some(value))?;
    }
    batches.finish().map(|_| ())
}

/// Copies every entry of `from` into `to`, as [`copy`] does, on two threads: one reads `from` and
/// appends the values `to` keeps apart to its value log (a value `from` kept apart is copied as its
/// record, read a large piece at a time, see [`Chunks`]), the other applies the batches of pointers
/// and small values to `to`'s tree. With values apart sled's inserts are half of a copy, and the other
/// half overlaps them (200k values of 1.1 KB: 0.90-1.50 s against 1.09-1.70 s on one thread).
pub(crate) fn copy_generation(from: &Generation, to: &Generation) -> Result<(), sled::Error> {
    if !to.apart {
        // Large values go into the tree: sled's writes are all of the copy, and a second thread gained
        // nothing (200k values of 1.1 KB: 1.04-1.59 s on one thread, 1.26-1.45 s on two).
        return copy(&from.tree, |key, stored| from.resolve(key, stored), to);
    }
    let (batches, applied) = std::sync::mpsc::sync_channel::<Result<sled::Batch, sled::Error>>(4);
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let mut chunks = from.values.as_ref().map(Chunks::new);
            let (mut batch, mut entries, mut bytes) = (sled::Batch::default(), 0, 0);
            for item in Forward::from(&from.tree, &[]) {
                let stored = item.and_then(|(key, stored)| {
                    let pointer = (key.first() == Some(&Bucket::Key.tag())).then(|| Pointer::decode(&stored)).flatten();
                    let value = match (pointer, chunks.as_mut(), &to.values) {
                        (Some(pointer), Some(chunks), Some(values)) => {
                            values.append_record(chunks.record(pointer)?)?.encode().into()
                        }
                        (Some(_), _, _) => to.stored(&key, from.resolve(&key, stored)?)?,
                        (None, _, _) => to.stored(&key, stored)?,
                    };
                    bytes += key.len() + value.len();
                    Ok((key, value))
                });
                match stored {
                    Ok((key, value)) => batch.insert(key, value),
                    Err(err) => {
                        let _ = batches.send(Err(err));
                        return;
                    }
                }
                entries += 1;
                if entries == COPY_BATCH || bytes >= COPY_BATCH_BYTES {
                    if batches.send(write_out(to).map(|()| std::mem::take(&mut batch))).is_err() {
                        return;
                    }
                    (entries, bytes) = (0, 0);
                }
            }
            if entries > 0 {
                let _ = batches.send(write_out(to).map(|()| batch));
            }
        });
        let mut outcome = Ok(());
        for batch in applied.iter() {
            let written = batch.and_then(|batch| to.tree.apply_batch(batch));
            if let Err(err) = written {
                outcome = Err(err);
                break;
            }
        }
        // Dropping the receiver stops a reader still going after an error.
        drop(applied);
        reader.join().expect("the copy's reader does not panic");
        outcome
    })
}

/// Writes out what `to`'s value log buffered, before a batch naming it is applied.
fn write_out(to: &Generation) -> Result<(), sled::Error> {
    to.values.as_ref().map_or(Ok(()), |values| values.write_out().map_err(sled::Error::from))
}

/// Writes to a generation in sled batches of at most [`COPY_BATCH`] entries and about
/// [`COPY_BATCH_BYTES`], in order (a later op on a key overrides an earlier one); large values go to its
/// value log, written out (not synced) before each batch.
pub(crate) struct Batches<'a> {
    to: &'a Generation,
    batch: sled::Batch,
    entries: usize,
    bytes: usize,
    total: usize,
}

impl<'a> Batches<'a> {
    pub(crate) fn new(to: &'a Generation) -> Self {
        Self { to, batch: sled::Batch::default(), entries: 0, bytes: 0, total: 0 }
    }

    pub(crate) fn push(
        &mut self,
        key: impl Into<sled::IVec>,
        value: Option<impl Into<sled::IVec>>,
    ) -> Result<(), sled::Error> {
        let key = key.into();
        self.bytes += key.len();
        match value {
            Some(value) => {
                let value = value.into();
                self.bytes += value.len();
                let stored = self.to.stored(&key, value)?;
                self.batch.insert(key, stored);
            }
            None => self.batch.remove(key),
        }
        self.entries += 1;
        if self.entries == COPY_BATCH || self.bytes >= COPY_BATCH_BYTES {
            self.write()?;
        }
        Ok(())
    }

    fn write(&mut self) -> Result<(), sled::Error> {
        if self.entries > 0 {
            write_out(self.to)?;
            self.to.tree.apply_batch(std::mem::take(&mut self.batch))?;
            self.total += self.entries;
            (self.entries, self.bytes) = (0, 0);
        }
        Ok(())
    }

    /// Writes what is left; returns how many ops were written in all.
    pub(crate) fn finish(mut self) -> Result<usize, sled::Error> {
        self.write()?;
        Ok(self.total)
    }
}

pub(crate) fn read_current(dir: &Path) -> Result<Option<u64>, sled::Error> {
    match std::fs::read_to_string(dir.join(CURRENT)) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            let what = format!("{} does not name a generation: {text:?}", dir.join(CURRENT).display());
            sled::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, what))
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// The error of a data dir without a store.
pub(crate) fn no_current(dir: &Path) -> sled::Error {
    let what = format!("stat {}: no such file or directory", dir.join(CURRENT).display());
    sled::Error::Io(std::io::Error::new(std::io::ErrorKind::NotFound, what))
}

/// Points `CURRENT` at generation `number`, atomically and durably.
pub(crate) fn write_current(dir: &Path, number: u64) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{CURRENT}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(number.to_string().as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(CURRENT))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Removes generations other than `keep` (an unfinished defragmentation, or the one it replaced).
pub(crate) fn remove_other_generations(dir: &Path, keep: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
        if number != keep {
            if let Err(err) = std::fs::remove_dir_all(entry.path()) {
                warn!(%err, path = %entry.path().display(), "cannot remove an old store generation");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(items: &[(&str, Option<&str>)]) -> Ops {
        items.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))).collect()
    }

    /// Every entry of a generation, its values resolved.
    fn all(generation: &Generation) -> Vec<(sled::IVec, sled::IVec)> {
        let entries = generation.tree.iter().map(|i| i.expect("item"));
        entries.map(|(k, v)| (k.clone(), generation.resolve(&k, v).expect("resolve"))).collect()
    }

    #[test]
    fn a_copy_plus_the_replayed_writes_equals_the_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (
            Generation::open(dir.path(), 0, false).expect("open"),
            Generation::open(dir.path(), 1, false).expect("open"),
        );
        from.apply(&ops(&[("a", Some("1")), ("b", Some("1"))])).expect("write");
        copy(&from.tree, |_, stored| Ok(stored), &to).expect("copy");
        // Writes made after the copy began, in order: the later ones win.
        let writes = vec![ops(&[("a", Some("2")), ("c", Some("1"))]), ops(&[("b", None), ("a", Some("3"))])];
        for w in &writes {
            from.apply(w).expect("write");
        }
        assert_eq!(replay(&to, writes).expect("replay"), 4);
        assert_eq!(all(&to), all(&from));
        assert_eq!(replay(&to, Vec::new()).expect("replay"), 0);
    }

    #[test]
    fn a_copy_of_many_batches_equals_the_source_with_values_inline_or_apart() {
        // Inline to inline, inline to apart, apart to apart, apart to inline.
        for (from_apart, to_apart) in [(false, false), (false, true), (true, true), (true, false)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let from = Generation::open(dir.path(), 0, from_apart).expect("open");
            let to = Generation::open(dir.path(), 1, to_apart).expect("open");
            // Many batches, cut by count (small values) and by size (values of 3 KB every tenth key);
            // in the key bucket (tag `k`) and in another (`m`), whose values always stay inline.
            let writes: Ops = (0..5_000u32)
                .map(|i| {
                    let tag = if i % 7 == 0 { 'm' } else { 'k' };
                    (format!("{tag}{i:05}").into_bytes(), Some(vec![b'v'; if i % 10 == 0 { 3_000 } else { 20 }]))
                })
                .collect();
            replay(&from, vec![writes]).expect("write");
            copy_generation(&from, &to).expect("copy");
            to.sync().expect("sync");
            assert_eq!(all(&to).len(), 5_000);
            assert_eq!(all(&to), all(&from), "from apart {from_apart}, to apart {to_apart}");
            let pointers = |g: &Generation| {
                g.tree.iter().filter(|i| i.as_ref().expect("item").1.first() == Some(&POINTER_MARK)).count()
            };
            // Every tenth value is large, minus those of the `m` bucket (every seventh key).
            let large_in_key_bucket = (0..5_000u32).filter(|i| i % 10 == 0 && i % 7 != 0).count();
            assert_eq!(pointers(&to), if to_apart { large_in_key_bucket } else { 0 });
            assert_eq!(pointers(&from), if from_apart { large_in_key_bucket } else { 0 });
        }
    }

    #[test]
    fn values_kept_apart_are_read_back_after_a_reopen_without_the_option() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = |i: u8| vec![i; 4_000];
        {
            let generation = Generation::open(dir.path(), 0, true).expect("open");
            let writes: Vec<Ops> = (0..3u8).map(|i| vec![(vec![b'k', i], Some(big(i)))]).collect();
            for w in &writes {
                generation.apply(w).expect("write");
            }
            generation.apply(&vec![(vec![b'k', 1], None)]).expect("remove");
            assert!(generation.size_on_disk().expect("size") >= 3 * 4_000, "the value log counts");
        }
        // Reopened with values inline: the pointers already there still resolve; new values stay inline.
        let generation = reopen(dir.path(), 0);
        assert_eq!(
            all(&generation),
            vec![(vec![b'k', 0].into(), big(0).into()), (vec![b'k', 2].into(), big(2).into())]
        );
        generation.apply(&vec![(vec![b'k', 3], Some(big(3)))]).expect("write");
        assert_eq!(generation.tree.get([b'k', 3]).expect("get"), Some(big(3).into()));
    }

    /// Opens a generation dropped a moment ago (sled's flusher may still hold its lock).
    fn reopen(dir: &Path, number: u64) -> Generation {
        for _ in 0..500 {
            if let Ok(generation) = Generation::open(dir, number, false) {
                return generation;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("generation {number} stays locked");
    }

    #[test]
    fn writes_replayed_over_many_batches_keep_their_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let to = Generation::open(dir.path(), 0, false).expect("open");
        // Many batches' worth of ops, cut by count (small values first) and by size (large values
        // last): each key is written, removed and written again far apart, across batch boundaries.
        let mut writes = Vec::new();
        for round in 0..3u8 {
            let value = vec![b'v'; if round == 0 { 10 } else { 1_500 }];
            let op = |i: u32| -> (Vec<u8>, Option<Vec<u8>>) {
                let key = format!("k{i:05}").into_bytes();
                match round {
                    1 if i.is_multiple_of(2) => (key, None),
                    _ => (key, Some([value.as_slice(), &[round]].concat())),
                }
            };
            writes.push((0..3000).map(op).collect::<Ops>());
        }
        writes.push(ops(&[("k00000", None)]));
        assert_eq!(replay(&to, writes).expect("replay"), 9001);
        assert_eq!(to.tree.len(), 2999);
        assert_eq!(to.tree.get("k00000").expect("read"), None, "the last op wins");
        let last = to.tree.get("k00002").expect("read").expect("written again after its removal");
        assert_eq!(last.last(), Some(&2));
    }

    #[test]
    fn a_retired_generation_takes_its_files_along() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = Generation::open(dir.path(), 0, false).expect("open");
        let retired = Generation::open(dir.path(), 1, true).expect("open");
        retired.retire();
        drop(retired);
        drop(kept);
        assert!(dir.path().join("0").exists());
        assert!(!dir.path().join("1").exists());
    }
}
