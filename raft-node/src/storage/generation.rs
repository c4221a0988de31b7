//! The generations of the store's database: `<dir>/<n>`, one sled database each, the file
//! `<dir>/CURRENT` naming the one in use (see [`crate::storage::sled_backend`] for why there are
//! several), and copying a tree into the next one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::warn;

use crate::storage::scan::Forward;

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

/// One write to a tree: tagged keys, each with its new value or `None` for a removal, in order.
pub(crate) type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// One generation's database, open.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) number: u64,
    pub(crate) db: sled::Db,
    pub(crate) tree: sled::Tree,
    path: PathBuf,
    /// Set once a newer generation replaced it: its files go when the last user lets go of it (a scan
    /// that started before the switch reads on to its end).
    retired: AtomicBool,
}

impl Generation {
    pub(crate) fn open(dir: &Path, number: u64) -> Result<Self, sled::Error> {
        let path = dir.join(number.to_string());
        let db = sled::Config::new()
            .path(&path)
            .cache_capacity(super::CACHE_BYTES)
            .flush_every_ms(Some(FLUSH_EVERY_MS))
            .open()?;
        let tree = db.open_tree(TREE)?;
        Ok(Self { number, db, tree, path, retired: AtomicBool::new(false) })
    }

    /// Opens generation `number` afresh, removing whatever an unfinished attempt left there.
    pub(crate) fn create(dir: &Path, number: u64) -> Result<Self, sled::Error> {
        let _ = std::fs::remove_dir_all(dir.join(number.to_string()));
        Self::open(dir, number)
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

/// A sled batch doing `ops` (cloned: the caller may keep them to replay elsewhere).
pub(crate) fn batch_of(ops: &Ops) -> sled::Batch {
    let mut batch = sled::Batch::default();
    for (key, value) in ops {
        match value {
            Some(value) => batch.insert(key.as_slice(), value.as_slice()),
            None => batch.remove(key.as_slice()),
        }
    }
    batch
}

/// Applies writes recorded on another tree, in their order, in batches of bounded size (the new
/// generation is not in use yet, so they need not be one); returns how many ops they held.
pub(crate) fn replay(to: &sled::Tree, writes: Vec<Ops>) -> Result<usize, sled::Error> {
    let mut batches = Batches::new(to);
    for (key, value) in writes.into_iter().flatten() {
        batches.push(key, value)?;
    }
    batches.finish()
}

/// Copies every entry of `from` into `to`. `from` may change meanwhile: the copy then holds each key
/// as it was at some point of the copy, which replaying the writes made since the start fixes.
pub(crate) fn copy(from: &sled::Tree, to: &sled::Tree) -> Result<(), sled::Error> {
    let mut batches = Batches::new(to);
    for item in Forward::from(from, &[]) {
        let (key, value) = item?;
        batches.push(key, Some(value))?;
    }
    batches.finish().map(|_| ())
}

/// Writes to a tree in sled batches of at most [`COPY_BATCH`] entries and about [`COPY_BATCH_BYTES`],
/// in order (a later op on a key overrides an earlier one).
pub(crate) struct Batches<'a> {
    to: &'a sled::Tree,
    batch: sled::Batch,
    entries: usize,
    bytes: usize,
    total: usize,
}

impl<'a> Batches<'a> {
    pub(crate) fn new(to: &'a sled::Tree) -> Self {
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
                self.batch.insert(key, value);
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
            self.to.apply_batch(std::mem::take(&mut self.batch))?;
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

    #[test]
    fn a_copy_plus_the_replayed_writes_equals_the_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) =
            (Generation::open(dir.path(), 0).expect("open"), Generation::open(dir.path(), 1).expect("open"));
        from.tree.apply_batch(batch_of(&ops(&[("a", Some("1")), ("b", Some("1"))]))).expect("write");
        copy(&from.tree, &to.tree).expect("copy");
        // Writes made after the copy began, in order: the later ones win.
        let writes = vec![ops(&[("a", Some("2")), ("c", Some("1"))]), ops(&[("b", None), ("a", Some("3"))])];
        for w in &writes {
            from.tree.apply_batch(batch_of(w)).expect("write");
        }
        assert_eq!(replay(&to.tree, writes).expect("replay"), 4);
        let all = |t: &sled::Tree| t.iter().map(|i| i.expect("item")).collect::<Vec<_>>();
        assert_eq!(all(&to.tree), all(&from.tree));
        assert_eq!(replay(&to.tree, Vec::new()).expect("replay"), 0);
    }

    #[test]
    fn a_copy_of_many_batches_equals_the_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) =
            (Generation::open(dir.path(), 0).expect("open"), Generation::open(dir.path(), 1).expect("open"));
        // Many batches, cut by count (small values) and by size (values of 3 KB every tenth key).
        let writes: Ops = (0..5_000u32)
            .map(|i| (format!("k{i:05}").into_bytes(), Some(vec![b'v'; if i % 10 == 0 { 3_000 } else { 20 }])))
            .collect();
        replay(&from.tree, vec![writes]).expect("write");
        copy(&from.tree, &to.tree).expect("copy");
        let all = |t: &sled::Tree| t.iter().map(|i| i.expect("item")).collect::<Vec<_>>();
        assert_eq!(all(&to.tree).len(), 5_000);
        assert_eq!(all(&to.tree), all(&from.tree));
    }

    #[test]
    fn writes_replayed_over_many_batches_keep_their_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let to = Generation::open(dir.path(), 0).expect("open");
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
        assert_eq!(replay(&to.tree, writes).expect("replay"), 9001);
        assert_eq!(to.tree.len(), 2999);
        assert_eq!(to.tree.get("k00000").expect("read"), None, "the last op wins");
        let last = to.tree.get("k00002").expect("read").expect("written again after its removal");
        assert_eq!(last.last(), Some(&2));
    }

    #[test]
    fn a_retired_generation_takes_its_files_along() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept = Generation::open(dir.path(), 0).expect("open");
        let retired = Generation::open(dir.path(), 1).expect("open");
        retired.retire();
        drop(retired);
        drop(kept);
        assert!(dir.path().join("0").exists());
        assert!(!dir.path().join("1").exists());
    }
}
