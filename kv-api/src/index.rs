//! The in-memory index of every key: key bytes → [`KeyIndex`], ordered by key for range scans.

use std::collections::HashSet;
use std::ops::Bound;

use crate::key_index::{KeyAt, KeyIndex};
use crate::key_map::KeyMap;
use crate::revision::Revision;

/// A key range as etcd requests give it: `end` empty means the single key `start`, `end == [0]` means every
/// key `>= start`, otherwise the half-open interval `[start, end)`.
#[derive(Clone, Copy, Debug)]
pub struct KeyRange<'a> {
    pub start: &'a [u8],
    pub end: &'a [u8],
}

impl<'a> KeyRange<'a> {
    pub fn new(start: &'a [u8], end: &'a [u8]) -> Self {
        Self { start, end }
    }

    pub fn is_single(&self) -> bool {
        self.end.is_empty()
    }

    fn lower(&self) -> Bound<&'a [u8]> {
        Bound::Included(self.start)
    }

    fn upper(&self) -> Bound<&'a [u8]> {
        match self.end {
            [] => Bound::Included(self.start),
            [0] => Bound::Unbounded,
            end => Bound::Excluded(end),
        }
    }

    /// Whether `key` falls in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match self.end {
            [] => key == self.start,
            [0] => key >= self.start,
            end => key >= self.start && key < end,
        }
    }

    /// An empty interval (`end <= start`, not a special form) holds no key.
    fn is_void(&self) -> bool {
        !matches!(self.end, [] | [0]) && self.end <= self.start
    }
}

/// Every key's history, in key order.
#[derive(Debug, Default)]
pub struct TreeIndex {
    keys: KeyMap<KeyIndex>,
    /// What the index holds, kept as it changes (see [`TreeIndex::size`]).
    size: IndexSize,
}

/// How much the key index holds: its keys' bytes and their revisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexSize {
    pub keys: u64,
    pub key_bytes: u64,
    pub revisions: u64,
}

impl IndexSize {
    /// About what this takes in memory: each key's bytes, its entry in the map (56 bytes holding the key's
    /// header and a one-revision history, and the chunk's spare room), 16 bytes per revision. Keys with
    /// more than one revision also hold a vector of generations (48 bytes each), not counted.
    pub fn estimated_bytes(&self) -> u64 {
        const PER_KEY: u64 = 48;
        const PER_REVISION: u64 = std::mem::size_of::<Revision>() as u64;
        self.keys * PER_KEY + self.key_bytes + self.revisions * PER_REVISION
    }
}

impl TreeIndex {
    /// Counts `key` in when `new`.
    fn count_new(&mut self, key: &[u8], new: bool) {
        if new {
            self.size.keys += 1;
            self.size.key_bytes += key.len() as u64;
        }
    }

    pub fn put(&mut self, key: &[u8], rev: Revision) {
        let new = self.keys.upsert(key, |present| match present {
            Some(ki) => {
                ki.put(rev);
                None
            }
            None => Some(KeyIndex::one(rev, rev, 1)),
        });
        self.count_new(key, new);
        self.size.revisions += 1;
    }

    pub fn restore(&mut self, key: &[u8], created: Revision, rev: Revision, version: i64) {
        // A member's start restores every stored revision (most keys have one once compacted).
        let new = self.keys.upsert(key, |present| match present {
            Some(ki) => {
                ki.restore(created, rev, version);
                None
            }
            None => Some(KeyIndex::one(created, rev, version)),
        });
        self.count_new(key, new);
        self.size.revisions += 1;
    }

    /// Restores a tombstone found in the backend; false when no life of the key was there to end.
    pub fn restore_tombstone(&mut self, key: &[u8], rev: Revision) -> bool {
        let done = self.keys.get_mut(key).is_some_and(|ki| ki.restore_tombstone(rev));
        self.size.revisions += u64::from(done);
        done
    }

    /// Ends the life of `key` at `rev`; false when it was not alive.
    pub fn tombstone(&mut self, key: &[u8], rev: Revision) -> bool {
        let done = self.keys.get_mut(key).is_some_and(|ki| ki.tombstone(rev));
        self.size.revisions += u64::from(done);
        done
    }

    /// What the index holds now.
    pub fn size(&self) -> IndexSize {
        self.size
    }

    /// Counts out a key that left the index, and `freed` revisions.
    fn forget(&mut self, removed_keys: u64, removed_key_bytes: u64, freed: usize) {
        self.size.keys -= removed_keys;
        self.size.key_bytes -= removed_key_bytes;
        self.size.revisions -= freed as u64;
    }

    pub fn get(&self, key: &[u8], at: i64) -> Option<KeyAt> {
        self.keys.get(key).and_then(|ki| ki.get(at))
    }

    /// Keys of `range` alive at `at`, in key order, each with where it stood then.
    pub fn range(&self, range: KeyRange<'_>, at: i64) -> impl Iterator<Item = (&[u8], KeyAt)> + '_ {
        let iter = if range.is_void() { None } else { Some(self.keys.range(range.lower(), range.upper())) };
        iter.into_iter().flatten().filter_map(move |(key, ki)| ki.get(at).map(|found| (key, found)))
    }

    /// Keys of `range` with their whole index, dead or alive; for watchers replaying history.
    pub fn range_indexes(&self, range: KeyRange<'_>) -> impl Iterator<Item = (&[u8], &KeyIndex)> + '_ {
        let iter = if range.is_void() { None } else { Some(self.keys.range(range.lower(), range.upper())) };
        iter.into_iter().flatten()
    }

    /// Compacts every key at `at`; returns the revisions no longer needed, in key order (the compactor
    /// sorts them).
    pub fn compact(&mut self, at: i64) -> Vec<Revision> {
        let mut freed = Vec::new();
        let (mut removed, mut removed_bytes) = (0, 0);
        self.keys.retain(|key, ki| {
            let gone = ki.compact(at, &mut freed);
            if gone {
                removed += 1;
                removed_bytes += key.len() as u64;
            }
            !gone
        });
        self.forget(removed, removed_bytes, freed.len());
        freed
    }

    /// Compacts at `at` at most `budget` keys from `from` on (itself included), appending what they
    /// free to `freed`; returns the key to go on from, `None` once the last key is done. Keys written
    /// between two steps need nothing more: compacting leaves what came after `at` alone.
    pub fn compact_some(&mut self, at: i64, from: &[u8], budget: usize, freed: &mut Vec<Revision>) -> Option<Vec<u8>> {
        let mut emptied = Vec::new();
        let mut next = None;
        let freed_before = freed.len();
        for (n, (key, ki)) in self.keys.iter_mut_from(from).enumerate() {
            if n == budget {
                next = Some(key.to_vec());
                break;
            }
            if ki.compact(at, freed) {
                emptied.push(key.to_vec());
            }
        }
        let emptied_bytes = emptied.iter().map(|key| key.len() as u64).sum();
        self.forget(emptied.len() as u64, emptied_bytes, freed.len() - freed_before);
        for key in emptied {
            self.keys.remove(&key);
        }
        next
    }

    /// The revisions with `main <= at` that the index holds once compacted at `at`, whether or not that
    /// compaction is done (at most one per life of each key).
    pub fn revisions_kept_at(&self, at: i64) -> HashSet<Revision> {
        self.keys.values().flat_map(|ki| ki.revisions_kept_at(at)).collect()
    }

    /// Number of keys in the index, dead or alive.
    /// Every key with its history, in key order (what a saved index holds).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8], &KeyIndex)> + '_ {
        self.keys.iter()
    }

    /// Adds `key`, absent so far, with its whole history (loading a saved index, in key order); a key
    /// already present is left as it is.
    pub(crate) fn restore_key(&mut self, key: &[u8], history: KeyIndex) {
        let revisions = history.revision_count() as u64;
        let mut history = Some(history);
        let new = self.keys.upsert(key, |present| if present.is_some() { None } else { history.take() });
        self.count_new(key, new);
        if new {
            self.size.revisions += revisions;
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.size = IndexSize::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    fn keys_at(index: &TreeIndex, start: &[u8], end: &[u8], at: i64) -> Vec<Vec<u8>> {
        index.range(KeyRange::new(start, end), at).map(|(k, _)| k.to_vec()).collect()
    }

    #[test]
    fn ranges_follow_etcd_forms() {
        let mut index = TreeIndex::default();
        for (i, key) in [&b"a"[..], b"b", b"ba", b"c"].iter().enumerate() {
            index.put(key, rev(i as i64 + 2));
        }
        index.tombstone(b"b", rev(6));
        let cases: [(&[u8], &[u8], i64, Vec<&[u8]>); 6] = [
            (b"b", b"", 5, vec![b"b"]),
            (b"b", b"", 6, vec![]),
            (b"b", b"c", 5, vec![b"b", b"ba"]),
            (b"b", b"\0", 6, vec![b"ba", b"c"]),
            (b"\0", b"\0", 6, vec![b"a", b"ba", b"c"]),
            (b"c", b"a", 6, vec![]),
        ];
        for (start, end, at, want) in cases {
            let want: Vec<Vec<u8>> = want.into_iter().map(|k| k.to_vec()).collect();
            assert_eq!(keys_at(&index, start, end, at), want, "{start:?}..{end:?} at {at}");
        }
    }

    /// What the index's counters should say, counted afresh.
    fn recount(index: &TreeIndex) -> IndexSize {
        IndexSize {
            keys: index.keys.len() as u64,
            key_bytes: index.keys.iter().map(|(k, _)| k.len() as u64).sum(),
            revisions: index.keys.values().map(|ki| ki.revisions_after(0).len() as u64).sum(),
        }
    }

    #[test]
    fn the_index_counts_what_it_holds() {
        let mut index = TreeIndex::default();
        index.put(b"a", rev(2));
        index.put(b"bb", rev(3));
        index.put(b"a", rev(4));
        assert!(index.tombstone(b"bb", rev(5)));
        assert!(!index.tombstone(b"bb", rev(6)), "a dead key has no life to end");
        index.restore(b"ccc", rev(7), rev(7), 1);
        assert!(index.restore_tombstone(b"ccc", rev(8)));
        assert_eq!(index.size(), IndexSize { keys: 3, key_bytes: 6, revisions: 6 });
        assert_eq!(index.size(), recount(&index));
        // Compacting past the tombstones takes their keys out; "a" keeps its newest revision.
        let mut freed = Vec::new();
        assert_eq!(index.compact_some(8, b"", 2, &mut freed), Some(b"ccc".to_vec()));
        assert_eq!(index.size(), recount(&index));
        assert_eq!(index.compact_some(8, b"ccc", 2, &mut freed), None);
        assert_eq!(index.size(), IndexSize { keys: 1, key_bytes: 1, revisions: 1 });
        assert_eq!(freed.len(), 5);
        index.put(b"dd", rev(9));
        assert_eq!(index.compact(9).len(), 0);
        assert_eq!(index.size(), recount(&index));
        assert!(index.size().estimated_bytes() > 2 * 48);
        index.clear();
        assert_eq!(index.size(), IndexSize::default());
    }

    #[test]
    fn compaction_in_steps_ends_as_compaction_at_once() {
        let mut whole = TreeIndex::default();
        let mut main = 1;
        for round in 0..3 {
            for k in 0..50u8 {
                main += 1;
                let key = [b'k', k];
                if round == 1 && k % 3 == 0 {
                    whole.tombstone(&key, rev(main));
                } else {
                    whole.put(&key, rev(main));
                }
            }
        }
        let at = main - 20;
        let mut stepped = TreeIndex { keys: whole.keys.clone(), size: whole.size };
        assert_eq!(whole.size(), recount(&whole));
        let kept: Vec<_> = whole.revisions_kept_at(at).into_iter().collect();
        let mut expected = whole.compact(at);
        expected.sort_unstable();
        let (mut freed, mut from, mut steps) = (Vec::new(), Some(Vec::new()), 0);
        while let Some(start) = from {
            assert_eq!(stepped.revisions_kept_at(at).len(), kept.len(), "kept depends on progress");
            from = stepped.compact_some(at, &start, 7, &mut freed);
            steps += 1;
        }
        freed.sort_unstable();
        assert_eq!(freed, expected);
        assert_eq!(stepped.keys, whole.keys);
        assert_eq!((stepped.size(), whole.size()), (recount(&whole), recount(&whole)));
        assert_eq!(steps, 50usize.div_ceil(7));
        let mut upto: Vec<_> = whole.keys.values().flat_map(|ki| ki.revisions_upto(at)).collect();
        let mut kept = kept;
        upto.sort_unstable();
        kept.sort_unstable();
        assert_eq!(kept, upto, "once compacted, the index holds exactly what was kept");
    }

    #[test]
    fn compaction_removes_dead_keys() {
        let mut index = TreeIndex::default();
        index.put(b"a", rev(2));
        index.put(b"b", rev(3));
        index.tombstone(b"a", rev(4));
        let mut freed = index.compact(4);
        freed.sort_unstable();
        assert_eq!(freed, vec![rev(2), rev(4)]);
        assert_eq!(index.len(), 1);
        assert_eq!(keys_at(&index, b"a", b"\0", 4), vec![b"b".to_vec()]);
    }
}
