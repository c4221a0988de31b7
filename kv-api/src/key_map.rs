//! [`KeyMap`]: the key index's ordered map from key bytes to a value, packed in sorted chunks.
//!
//! Why not one `BTreeMap` of every key: its nodes have room for 11 entries and split in the middle, so
//! keys written in order (etcd's benchmark, bulk loads, every member's start) leave each node about
//! half full; with the key's own allocation and the index beside it a key cost about 157 bytes at a
//! million keys. Here the entries sit in chunks (vectors) of at most [`CHUNK`], and a `BTreeMap` finds
//! the chunk: it maps each chunk's *separator*, a key at or below every key of the chunk and above
//! every key of the chunk before, to the chunk. So:
//!
//! - a full chunk that receives a key past its last one stays full and a new chunk takes the key;
//!   anywhere else it splits in two halves;
//! - a chunk's vector grows by a quarter at a time, and gives room back when removals leave most of it
//!   unused; neighbours that removals left small are merged;
//! - a lookup is the small tree's (a chunk's separator for every 16–32 keys), then a binary search
//!   inside the chunk. For a million keys in random order that is about 1.6 µs against a `BTreeMap`'s
//!   1.1 µs (keys written in order stay in the chunks last used, and cost less).
//!
//! No chunk is ever empty. A separator stays when the chunk's first key is removed (it is still at or
//! below every key of it) and moves down when a key below every chunk arrives.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Most entries a chunk holds; an insert moves at most this many. Larger chunks save little memory
/// (a chunk's own cost is about 90 bytes) and make lookups slower: a binary search inside a chunk
/// reads a key's bytes at every step.
const CHUNK: usize = 32;

/// Neighbouring chunks are merged once together they hold at most this many entries.
const MERGE_UPTO: usize = CHUNK / 2;

type Entry<V> = (Box<[u8]>, V);

type Chunk<V> = Vec<Entry<V>>;

/// An ordered map from key bytes to `V`; see the module documentation.
#[derive(Clone)]
pub struct KeyMap<V> {
    chunks: BTreeMap<Box<[u8]>, Chunk<V>>,
    len: usize,
}

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        Self { chunks: BTreeMap::new(), len: 0 }
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for KeyMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Equal when they hold the same entries, however they are cut into chunks.
impl<V: PartialEq> PartialEq for KeyMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<V: Eq> Eq for KeyMap<V> {}

/// Gives `chunk` room for one more entry, a quarter of its length at a time (at least 4, at most up to
/// [`CHUNK`]).
fn make_room<V>(chunk: &mut Chunk<V>) {
    if chunk.len() == chunk.capacity() {
        let more = (chunk.len() / 4).max(4).min(CHUNK.saturating_sub(chunk.len())).max(1);
        chunk.reserve_exact(more);
    }
}

/// Gives back room removals left unused (more than half of it).
fn give_back<V>(chunk: &mut Chunk<V>) {
    if chunk.capacity() > 2 * chunk.len() + 4 {
        chunk.shrink_to(chunk.len() + chunk.len() / 4);
    }
}

fn find<V>(chunk: &[Entry<V>], key: &[u8]) -> Result<usize, usize> {
    chunk.binary_search_by(|(k, _)| (**k).cmp(key))
}

/// Bounds selecting the chunk whose separator is the greatest at or below `key`.
fn upto(key: &[u8]) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (Bound::Unbounded, Bound::Included(key))
}

impl<V> KeyMap<V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
    }

    /// The chunk that holds `key` if any does, with its separator.
    fn chunk_of(&self, key: &[u8]) -> Option<(&[u8], &Chunk<V>)> {
        self.chunks.range::<[u8], _>(upto(key)).next_back().map(|(sep, chunk)| (&**sep, chunk))
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        let (_, chunk) = self.chunk_of(key)?;
        find(chunk, key).ok().map(|i| &chunk[i].1)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let (_, chunk) = self.chunks.range_mut::<[u8], _>(upto(key)).next_back()?;
        find(chunk, key).ok().map(|i| &mut chunk[i].1)
    }

    /// Inserts `value` under `key`; returns the value it replaced, if any.
    #[cfg(test)]
    pub fn insert(&mut self, key: &[u8], value: V) -> Option<V> {
        let mut old = None;
        self.upsert(key, |existing| match existing {
            Some(present) => {
                old = Some(std::mem::replace(present, value));
                None
            }
            None => Some(value),
        });
        old
    }

    /// One lookup for both cases: `change` gets the value of `key` when present (and returns `None`),
    /// or `None` when absent, and then returns the value to insert (`None`: insert nothing). True when
    /// a value was inserted.
    pub fn upsert(&mut self, key: &[u8], change: impl FnOnce(Option<&mut V>) -> Option<V>) -> bool {
        // Keys arriving in order (bulk loads, every member's start) go past the last one: no search.
        if self.chunks.last_key_value().is_some_and(|(_, chunk)| *chunk[chunk.len() - 1].0 < *key) {
            let Some(value) = change(None) else { return false };
            self.len += 1;
            if let Some(mut last) = self.chunks.last_entry() {
                let chunk = last.get_mut();
                if chunk.len() < CHUNK {
                    make_room(chunk);
                    chunk.push((key.into(), value));
                    return true;
                }
            }
            self.chunks.insert(key.into(), vec![(key.into(), value)]);
            return true;
        }
        let Some((_, chunk)) = self.chunks.range_mut::<[u8], _>(upto(key)).next_back() else {
            let Some(value) = change(None) else { return false };
            self.insert_first(key, value);
            return true;
        };
        let i = match find(chunk, key) {
            Ok(i) => {
                let inserted = change(Some(&mut chunk[i].1));
                debug_assert!(inserted.is_none(), "a present key's value is changed in place");
                return false;
            }
            Err(i) => i,
        };
        let Some(value) = change(None) else { return false };
        self.len += 1;
        if chunk.len() < CHUNK {
            make_room(chunk);
            chunk.insert(i, (key.into(), value));
            return true;
        }
        if i == chunk.len() {
            // Past the last key of a full chunk: the next chunk's separator is above the key.
            self.chunks.insert(key.into(), vec![(key.into(), value)]);
            return true;
        }
        let half = chunk.len() / 2;
        let mut right = chunk.split_off(half);
        // Both halves start with a quarter of room to grow.
        chunk.shrink_to(half + half / 4);
        if i <= half {
            make_room(chunk);
            chunk.insert(i, (key.into(), value));
        } else {
            right.reserve_exact(half / 4);
            right.insert(i - half, (key.into(), value));
        }
        self.chunks.insert(right[0].0.clone(), right);
        true
    }

    /// Inserts a key below every separator (the map's new first key, or its very first).
    fn insert_first(&mut self, key: &[u8], value: V) {
        self.len += 1;
        match self.chunks.pop_first() {
            Some((_, mut chunk)) if chunk.len() < CHUNK => {
                make_room(&mut chunk);
                chunk.insert(0, (key.into(), value));
                self.chunks.insert(key.into(), chunk);
            }
            first => {
                if let Some((sep, chunk)) = first {
                    self.chunks.insert(sep, chunk);
                }
                self.chunks.insert(key.into(), vec![(key.into(), value)]);
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let (sep, chunk) = self.chunks.range_mut::<[u8], _>(upto(key)).next_back()?;
        let (_, value) = chunk.remove(find(chunk, key).ok()?);
        self.len -= 1;
        if chunk.len() > MERGE_UPTO / 2 {
            give_back(chunk);
        } else {
            let sep = sep.clone();
            self.tidy(sep);
        }
        Some(value)
    }

    /// After removals left the chunk of `sep` small: drops it when empty, else merges it with a
    /// neighbour small enough, and gives back room.
    fn tidy(&mut self, sep: Box<[u8]>) {
        let len = self.chunks.get(&sep).map_or(0, Vec::len);
        if len == 0 {
            self.chunks.remove(&sep);
            return;
        }
        let before = self.chunks.range::<[u8], _>((Bound::Unbounded, Bound::Excluded(&*sep))).next_back();
        let after = self.chunks.range::<[u8], _>((Bound::Excluded(&*sep), Bound::Unbounded)).next();
        // Merge into the chunk before when it is small enough, else take the one after in.
        let (left, right) = match (before, after) {
            (Some((before, chunk)), _) if chunk.len() + len <= MERGE_UPTO => (before.clone(), sep),
            (_, Some((after, chunk))) if chunk.len() + len <= MERGE_UPTO => (sep, after.clone()),
            _ => {
                if let Some(chunk) = self.chunks.get_mut(&sep) {
                    give_back(chunk);
                }
                return;
            }
        };
        let right = self.chunks.remove(&right).unwrap_or_default();
        if let Some(chunk) = self.chunks.get_mut(&left) {
            chunk.extend(right);
            give_back(chunk);
        }
    }

    /// Keeps the entries `keep` says to keep, in key order; then merges and shrinks what it emptied.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &mut V) -> bool) {
        let mut tidied: Vec<(Box<[u8]>, Chunk<V>)> = Vec::with_capacity(self.chunks.len());
        for (sep, mut chunk) in std::mem::take(&mut self.chunks) {
            chunk.retain_mut(|(key, value)| keep(key, value));
            match tidied.last_mut() {
                _ if chunk.is_empty() => {}
                Some((_, previous)) if previous.len() + chunk.len() <= MERGE_UPTO => previous.extend(chunk),
                _ => tidied.push((sep, chunk)),
            }
        }
        tidied.iter_mut().for_each(|(_, chunk)| give_back(chunk));
        self.len = tidied.iter().map(|(_, chunk)| chunk.len()).sum();
        // In order already: the tree is built without sorting.
        self.chunks = tidied.into_iter().collect();
    }

    /// Entries with keys within the bounds, in key order (none when `lower` is above `upper`).
    pub fn range(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> impl Iterator<Item = (&[u8], &V)> + '_ {
        let (first_sep, skip) = match lower {
            Bound::Unbounded => (None, 0),
            Bound::Included(key) | Bound::Excluded(key) => match self.chunk_of(key) {
                None => (None, 0),
                Some((sep, chunk)) => {
                    let skip = match find(chunk, key) {
                        Ok(i) if matches!(lower, Bound::Excluded(_)) => i + 1,
                        Ok(i) | Err(i) => i,
                    };
                    (Some(sep), skip)
                }
            },
        };
        let chunks = match first_sep {
            None => self.chunks.range::<[u8], _>(..),
            Some(sep) => self.chunks.range::<[u8], _>((Bound::Included(sep), Bound::Unbounded)),
        };
        // The iterator outlives the caller's bound, so it keeps its own copy.
        let upper: Bound<Box<[u8]>> = upper.map(Into::into);
        chunks
            .enumerate()
            .flat_map(move |(n, (_, chunk))| chunk[if n == 0 { skip.min(chunk.len()) } else { 0 }..].iter())
            .map(|(key, value)| (&**key, value))
            .take_while(move |(key, _)| match &upper {
                Bound::Unbounded => true,
                Bound::Included(end) => *key <= &**end,
                Bound::Excluded(end) => *key < &**end,
            })
    }

    /// Entries from `from` (itself included) to the last, in key order, their values mutable.
    pub fn iter_mut_from(&mut self, from: &[u8]) -> impl Iterator<Item = (&[u8], &mut V)> + '_ {
        let (first_sep, skip) = match self.chunk_of(from) {
            None => (None, 0),
            Some((sep, chunk)) => (Some(Box::<[u8]>::from(sep)), find(chunk, from).unwrap_or_else(|i| i)),
        };
        let chunks = match &first_sep {
            None => self.chunks.range_mut::<[u8], _>(..),
            Some(sep) => self.chunks.range_mut::<[u8], _>((Bound::Included(&**sep), Bound::Unbounded)),
        };
        chunks
            .enumerate()
            .flat_map(move |(n, (_, chunk))| {
                let skip = if n == 0 { skip.min(chunk.len()) } else { 0 };
                chunk[skip..].iter_mut()
            })
            .map(|(key, value)| (&**key, value))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> + '_ {
        self.chunks.values().flatten().map(|(key, value)| (&**key, value))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.chunks.values().flatten().map(|(_, value)| value)
    }

    /// Bytes the chunks' vectors hold (their room, not only what is used).
    #[cfg(test)]
    fn room(&self) -> usize {
        let entry = std::mem::size_of::<Entry<V>>();
        self.chunks.values().map(|chunk| chunk.capacity() * entry).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A small deterministic generator (xorshift), so failures repeat.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn key(n: u64) -> Vec<u8> {
        format!("key{n:07}").into_bytes()
    }

    /// Every chunk non-empty, at most `CHUNK` long, sorted within and across chunks, its separator at
    /// or below its first key and above the chunk before's last; `len` right.
    fn check_shape(map: &KeyMap<u64>) {
        assert!(map.chunks.values().all(|chunk| !chunk.is_empty() && chunk.len() <= CHUNK));
        let mut previous_last: Option<&[u8]> = None;
        for (sep, chunk) in &map.chunks {
            assert!(**sep <= *chunk[0].0, "separator above the chunk's first key");
            assert!(
                previous_last.is_none_or(|last| last < &**sep),
                "separator at or below the chunk before's last key"
            );
            previous_last = Some(&chunk[chunk.len() - 1].0);
        }
        let keys: Vec<&[u8]> = map.iter().map(|(key, _)| key).collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "keys out of order");
        assert_eq!(keys.len(), map.len());
    }

    fn same_as(map: &KeyMap<u64>, model: &BTreeMap<Vec<u8>, u64>) {
        check_shape(map);
        assert!(map.iter().map(|(k, v)| (k.to_vec(), *v)).eq(model.iter().map(|(k, v)| (k.clone(), *v))));
    }

    #[test]
    fn random_inserts_removals_and_retains_match_a_btree_map() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut map = KeyMap::default();
        let mut model = BTreeMap::new();
        for step in 0..60_000u64 {
            let k = key(rng.next() % 3_000);
            match rng.next() % 10 {
                0..=3 => assert_eq!(map.insert(&k, step), model.insert(k, step)),
                4..=5 => {
                    if let Some(value) = map.get_mut(&k) {
                        *value += 1;
                    }
                    if let Some(value) = model.get_mut(&k) {
                        *value += 1;
                    }
                }
                6..=8 => assert_eq!(map.remove(&k), model.remove(&k)),
                _ => assert_eq!(map.get(&k), model.get(&k)),
            }
            if step % 10_000 == 9_999 {
                let cut = rng.next() % 4;
                map.retain(|_, v| *v % 4 != cut);
                model.retain(|_, v| *v % 4 != cut);
            }
            if step % 1_000 == 0 {
                same_as(&map, &model);
            }
        }
        same_as(&map, &model);
    }

    #[test]
    fn ranges_match_a_btree_maps_for_every_kind_of_bound() {
        let mut map = KeyMap::default();
        let mut model = BTreeMap::new();
        for n in (0..2_000u64).map(|n| n * 3) {
            map.insert(&key(n), n);
            model.insert(key(n), n);
        }
        let probes: Vec<Vec<u8>> = [0u64, 1, 2, 3, 299, 300, 301, 3_000, 5_997, 5_998, 9_000]
            .into_iter()
            .map(key)
            .chain([Vec::new(), b"z".to_vec()])
            .collect();
        let bounds = |k: &[u8]| -> [Bound<Vec<u8>>; 3] {
            [Bound::Included(k.to_vec()), Bound::Excluded(k.to_vec()), Bound::Unbounded]
        };
        for lo_key in &probes {
            for hi_key in &probes {
                for lo in bounds(lo_key) {
                    for hi in bounds(hi_key) {
                        let lower = lo.as_ref().map(Vec::as_slice);
                        let upper = hi.as_ref().map(Vec::as_slice);
                        let got: Vec<u64> = map.range(lower, upper).map(|(_, v)| *v).collect();
                        let inverted = match (lower, upper) {
                            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
                                a > b
                                    || (a == b
                                        && !(matches!(lower, Bound::Included(_))
                                            && matches!(upper, Bound::Included(_))))
                            }
                            _ => false,
                        };
                        let want: Vec<u64> = if inverted {
                            Vec::new()
                        } else {
                            model.range::<[u8], _>((lower, upper)).map(|(_, v)| *v).collect()
                        };
                        assert_eq!(got, want, "{lo:?}..{hi:?}");
                    }
                }
            }
        }
        let from: Vec<u64> = map.iter_mut_from(&key(301)).map(|(_, v)| *v).take(3).collect();
        assert_eq!(from, [303, 306, 309]);
        assert_eq!(map.iter_mut_from(b"z").count(), 0);
    }

    #[test]
    fn keys_written_in_order_fill_their_chunks() {
        let mut map = KeyMap::default();
        let n = 100 * CHUNK as u64;
        for k in 0..n {
            map.insert(&key(k), k);
        }
        assert_eq!(map.chunks.len(), 100);
        assert!(map.chunks.values().all(|chunk| chunk.len() == CHUNK && chunk.capacity() == CHUNK));
        // Written backwards, they fill their chunks too.
        let mut backwards = KeyMap::default();
        for k in (0..n).rev() {
            backwards.insert(&key(k), k);
        }
        assert_eq!(backwards.chunks.len(), 100);
        assert_eq!(backwards, map);
        // Entries and room, per key: no more than 5/4 of an entry in random order either.
        let mut random = KeyMap::default();
        let mut rng = Rng(7);
        while random.len() < n as usize {
            let k = rng.next() % (4 * n);
            random.insert(&key(k), k);
        }
        let entry = std::mem::size_of::<Entry<u64>>();
        assert!(
            random.room() <= random.len() * entry * 5 / 3,
            "{} bytes of room for {} entries",
            random.room(),
            random.len()
        );
    }

    #[test]
    fn removals_merge_small_neighbours_and_give_room_back() {
        let mut map = KeyMap::default();
        for k in 0..(10 * CHUNK as u64) {
            map.insert(&key(k), k);
        }
        // Leave one key in eight.
        for k in 0..(10 * CHUNK as u64) {
            if k % 8 != 0 {
                assert_eq!(map.remove(&key(k)), Some(k));
            }
        }
        check_shape(&map);
        assert_eq!(map.len(), 10 * CHUNK / 8);
        assert!(map.chunks.len() <= 5, "{} chunks for {} keys", map.chunks.len(), map.len());
        let entry = std::mem::size_of::<Entry<u64>>();
        assert!(map.room() <= 2 * map.len() * entry + 4 * entry * map.chunks.len());
        map.retain(|_, v| *v % 16 == 0);
        check_shape(&map);
        assert_eq!(map.len(), 10 * CHUNK / 16);
        assert_eq!(map.chunks.len(), map.len().div_ceil(MERGE_UPTO), "merged up to {MERGE_UPTO} a chunk");
        map.retain(|_, _| false);
        assert!(map.is_empty() && map.chunks.is_empty());
        assert_eq!(map.get(&key(0)), None);
        assert_eq!(map.range(Bound::Unbounded, Bound::Unbounded).count(), 0);
    }
}
