//! The history of one key: its revisions grouped into generations.
//!
//! A *generation* is one life of a key, from the put that creates it to the delete (tombstone) that ends
//! it. A key's index holds its generations oldest first; the last one is the current life, which is empty
//! while the key is deleted.
//!
//! # Worked example
//!
//! ```text
//! put foo @2, put foo @3, delete foo @4, put foo @5, put foo @7
//!
//! generations: {created 2, revs [2, 3, 4(tombstone)]}
//!              {created 5, revs [5, 7]}              <- current life, version 2
//! ```
//!
//! Reading at a revision finds the generation alive then and the newest revision not after it:
//! at 3 the key is `(mod 3, create 2, version 2)`; at 4 it does not exist (its tombstone is at 4); at 6 it is
//! `(mod 5, create 5, version 1)`.
//!
//! Compacting at revision `c` keeps, in each generation, the newest revision `<= c` (what a read at `c` needs)
//! and everything after `c`, and drops the rest. A generation whose tombstone is `<= c` goes entirely, since
//! no read at or after `c` can see it:
//!
//! ```text
//! compact @4: the first generation ends with its tombstone @4 -> removed (2, 3, 4 are freed)
//!             {created 5, revs [5, 7]}                         -> unchanged
//! compact @6: {created 5, revs [5, 7]} keeps 5 (newest <= 6) and 7
//! compact @7: keeps only 7; a read at 7 still sees (mod 7, create 5, version 2)
//! ```
//!
//! When every generation is gone and the current one is empty, the key leaves the index.

use std::num::NonZeroI64;

use crate::revision::Revision;

/// One life of a key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Generation {
    /// Revision of the put that created the key in this life.
    created: Revision,
    /// Version of the key at the newest revision of `revs` (1 for the creating put, +1 per change).
    version: i64,
    /// Revisions of the changes of this life, oldest first; the last one is the tombstone once the life ended.
    revs: Vec<Revision>,
}

/// Up to this many revisions (or generations), a key's vectors grow one at a time: most keys have one or
/// two revisions, and Vec's doubling would give each room for four (64 bytes instead of 16 or 32, a
/// tenth of a member's memory for 200k keys).
const GROW_EXACTLY_BELOW: usize = 4;

/// Pushes `item`, growing `items` by exactly one slot while it is small.
fn push_small<T>(items: &mut Vec<T>, item: T) {
    if items.len() == items.capacity() && items.len() < GROW_EXACTLY_BELOW {
        items.reserve_exact(1);
    }
    items.push(item);
}

/// Gives back room a compaction freed.
fn shrink_small<T>(items: &mut Vec<T>) {
    let (len, capacity) = (items.len(), items.capacity());
    if capacity > len && (len < GROW_EXACTLY_BELOW || len * 4 <= capacity) {
        items.shrink_to_fit();
    }
}

impl Generation {
    fn is_empty(&self) -> bool {
        self.revs.is_empty()
    }

    /// Index in `revs` of the newest revision with `main <= at`.
    fn newest_at(&self, at: i64) -> Option<usize> {
        let n = self.revs.partition_point(|rev| rev.main <= at);
        n.checked_sub(1)
    }
}

/// Where a key stood at some revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyAt {
    /// Revision of the change that produced the value seen.
    pub modified: Revision,
    /// Revision of the put that created the key's current life.
    pub created: Revision,
    /// Number of changes since creation (1 for the creating put).
    pub version: i64,
}

/// Generations of one key; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyIndex(Repr);

/// How a key's history is held. Most keys have one revision in one life (every key after its first
/// put, and nearly every key once compacted): those sit in the index's own entry, 40 bytes with no
/// allocation of their own. Any other history is a vector of generations. A history is always held in
/// the first form when it fits it, so equal histories compare equal.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr {
    /// One life, alive, with one revision.
    One { created: Revision, modified: Revision, version: NonZeroI64 },
    /// Generations, oldest first; the last is the current life, empty while the key is deleted.
    Generations(Vec<Generation>),
}

impl Default for KeyIndex {
    /// A key with no revision yet (its current life not started).
    fn default() -> Self {
        Self(Repr::Generations(vec![Generation::default()]))
    }
}

impl KeyIndex {
    /// A key whose only revision is `modified`, in the life `created` started, at `version`.
    pub fn one(created: Revision, modified: Revision, version: i64) -> Self {
        Self::from_generations(vec![Generation { created, version, revs: vec![modified] }])
    }

    /// Holds `generations` in the smallest form that fits them.
    fn from_generations(mut generations: Vec<Generation>) -> Self {
        if let [Generation { created, version, revs }] = generations.as_slice() {
            if let ([modified], Some(version)) = (revs.as_slice(), NonZeroI64::new(*version)) {
                return Self(Repr::One { created: *created, modified: *modified, version });
            }
        }
        shrink_small(&mut generations);
        Self(Repr::Generations(generations))
    }

    /// Changes the history through its generations, then holds it in the smallest form again.
    fn change<T>(&mut self, change: impl FnOnce(&mut Vec<Generation>) -> T) -> T {
        let mut generations = match std::mem::replace(&mut self.0, Repr::Generations(Vec::new())) {
            Repr::One { created, modified, version } => {
                // Room for the revision that usually comes next.
                let mut revs = Vec::with_capacity(2);
                revs.push(modified);
                vec![Generation { created, version: version.get(), revs }]
            }
            Repr::Generations(generations) => generations,
        };
        let out = change(&mut generations);
        *self = Self::from_generations(generations);
        out
    }

    /// The generations, as a slice; `None` when the key is held as one revision.
    fn generations(&self) -> Option<&[Generation]> {
        match &self.0 {
            Repr::One { .. } => None,
            Repr::Generations(generations) => Some(generations),
        }
    }

    /// True while the key's current life has started and not ended.
    pub fn is_alive(&self) -> bool {
        self.generations().is_none_or(|generations| generations.last().is_some_and(|g| !g.is_empty()))
    }

    /// The newest revision of the key, tombstones included.
    pub fn modified(&self) -> Option<Revision> {
        match &self.0 {
            Repr::One { modified, .. } => Some(*modified),
            Repr::Generations(generations) => generations.iter().rev().find_map(|g| g.revs.last().copied()),
        }
    }

    /// Appends the history to `out`: the count of lives, then each life's creating revision, version
    /// and revisions (see [`crate::store`]'s saved index). [`KeyIndex::decode`] gives it back.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        fn life(out: &mut Vec<u8>, created: Revision, version: i64, revs: &[Revision]) {
            for n in [created.main, created.sub, version] {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(&(revs.len() as u32).to_le_bytes());
            for rev in revs {
                out.extend_from_slice(&rev.main.to_le_bytes());
                out.extend_from_slice(&rev.sub.to_le_bytes());
            }
        }
        match &self.0 {
            Repr::One { created, modified, version } => {
                out.extend_from_slice(&1u32.to_le_bytes());
                life(out, *created, version.get(), std::slice::from_ref(modified));
            }
            Repr::Generations(generations) => {
                out.extend_from_slice(&(generations.len() as u32).to_le_bytes());
                for g in generations {
                    life(out, g.created, g.version, &g.revs);
                }
            }
        }
    }

    /// A history [`KeyIndex::encode`] wrote at the start of `bytes`, and the bytes after it; `None`
    /// when they hold none (at least one life, every revision in order).
    pub(crate) fn decode(bytes: &[u8]) -> Option<(Self, &[u8])> {
        fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
            let (head, rest) = bytes.split_first_chunk::<N>()?;
            *bytes = rest;
            Some(*head)
        }
        let mut rest = bytes;
        let lives = u32::from_le_bytes(take(&mut rest)?) as usize;
        if lives == 0 || lives > rest.len() {
            return None;
        }
        let mut generations = Vec::with_capacity(lives);
        let mut newest = Revision::default();
        for _ in 0..lives {
            let created = Revision::new(i64::from_le_bytes(take(&mut rest)?), i64::from_le_bytes(take(&mut rest)?));
            let version = i64::from_le_bytes(take(&mut rest)?);
            let count = u32::from_le_bytes(take(&mut rest)?) as usize;
            if count > rest.len() / 16 {
                return None;
            }
            let mut revs = Vec::with_capacity(count);
            for _ in 0..count {
                let rev = Revision::new(i64::from_le_bytes(take(&mut rest)?), i64::from_le_bytes(take(&mut rest)?));
                if rev <= newest {
                    return None;
                }
                newest = rev;
                revs.push(rev);
            }
            generations.push(Generation { created, version, revs });
        }
        Some((Self::from_generations(generations), rest))
    }

    /// How many revisions it holds, tombstones included.
    pub(crate) fn revision_count(&self) -> usize {
        self.generations().map_or(1, |generations| generations.iter().map(|g| g.revs.len()).sum())
    }

    /// Records a put at `rev`.
    pub fn put(&mut self, rev: Revision) {
        self.change(|generations| current(generations).put(rev));
    }

    /// Restores a key found in the backend at `rev`, whose stored value says it was created at `created`
    /// with `version`; used to rebuild the index on startup.
    pub fn restore(&mut self, created: Revision, rev: Revision, version: i64) {
        self.change(|generations| {
            let current = current(generations);
            if current.is_empty() {
                current.created = created;
            }
            push_small(&mut current.revs, rev);
            current.version = version;
        });
    }

    /// Records a delete at `rev`, ending the current life. Returns false (and changes nothing) when the key
    /// is not alive.
    pub fn tombstone(&mut self, rev: Revision) -> bool {
        if !self.is_alive() {
            return false;
        }
        self.change(|generations| {
            current(generations).put(rev);
            push_small(generations, Generation::default());
        });
        true
    }

    /// Restores a tombstone found in the backend at `rev`. Returns false when the key is not alive: the
    /// life this tombstone ended was compacted away except for the tombstone itself (an interrupted
    /// compaction had not deleted it yet), so there is nothing to restore.
    pub fn restore_tombstone(&mut self, rev: Revision) -> bool {
        self.is_alive() && self.tombstone(rev)
    }

    /// The key as a read at main revision `at` sees it, or `None` when it did not exist then.
    pub fn get(&self, at: i64) -> Option<KeyAt> {
        let generations = match &self.0 {
            Repr::One { created, modified, version } => {
                return (modified.main <= at).then_some(KeyAt {
                    modified: *modified,
                    created: *created,
                    version: version.get(),
                });
            }
            Repr::Generations(generations) => generations,
        };
        let last = generations.len() - 1;
        for (i, generation) in generations.iter().enumerate().rev() {
            let Some(first) = generation.revs.first() else { continue };
            if first.main > at {
                continue;
            }
            // This is the newest generation that had started by `at`.
            let n = generation.newest_at(at)?;
            if i != last && n == generation.revs.len() - 1 {
                // `at` is at or after the tombstone that ended this life.
                return None;
            }
            let behind = (generation.revs.len() - 1 - n) as i64;
            return Some(KeyAt {
                modified: generation.revs[n],
                created: generation.created,
                version: generation.version - behind,
            });
        }
        None
    }

    /// Drops the revisions no read at or after `at` can see, appending them to `freed`. Returns true when the
    /// key has no revision left and can leave the index.
    pub fn compact(&mut self, at: i64, freed: &mut Vec<Revision>) -> bool {
        // Every key of the index comes through here (in steps, under the store's lock): keys with
        // nothing at or before `at` (generations are in revision order), and keys held as one
        // revision (a read at `at` needs it, or it came after), are left untouched.
        match self.generations() {
            None => return false,
            Some(generations) if generations[0].revs.first().is_some_and(|first| first.main > at) => return false,
            Some(_) => {}
        }
        self.change(|generations| {
            let last = generations.len() - 1;
            let mut i = 0;
            generations.retain_mut(|generation| {
                let closed = i != last;
                i += 1;
                match generation.newest_at(at) {
                    Some(n) if closed && n == generation.revs.len() - 1 => {
                        // The whole life, tombstone included, is at or before `at`.
                        freed.extend_from_slice(&generation.revs);
                        false
                    }
                    Some(n) if n > 0 => {
                        freed.extend(generation.revs.drain(..n));
                        shrink_small(&mut generation.revs);
                        true
                    }
                    _ => true,
                }
            });
            if generations.is_empty() {
                generations.push(Generation::default());
            }
            generations.len() == 1 && generations[0].is_empty()
        })
    }

    /// What [`KeyIndex::revisions_upto`] gives once compacted at `at`, without compacting: the newest
    /// revision `<= at` of each life that did not end by `at`.
    pub fn revisions_kept_at(&self, at: i64) -> impl Iterator<Item = Revision> + '_ {
        let (one, generations) = match &self.0 {
            Repr::One { modified, .. } => ((modified.main <= at).then_some(*modified), &[][..]),
            Repr::Generations(generations) => (None, generations.as_slice()),
        };
        let last = generations.len().saturating_sub(1);
        one.into_iter().chain(generations.iter().enumerate().filter_map(move |(i, generation)| {
            let n = generation.newest_at(at)?;
            let ended = i != last && n == generation.revs.len() - 1;
            (!ended).then_some(generation.revs[n])
        }))
    }

    /// Revisions of this key with `main <= at` (after a compaction at `at`, at most one per life).
    #[cfg(test)]
    pub fn revisions_upto(&self, at: i64) -> Vec<Revision> {
        self.revisions_after(i64::MIN).into_iter().map(|(rev, _)| rev).filter(|rev| rev.main <= at).collect()
    }

    /// Revisions of this key with `main > after`, oldest first, each with whether it is a tombstone; for
    /// watchers catching up from history.
    pub fn revisions_after(&self, after: i64) -> Vec<(Revision, bool)> {
        let generations = match &self.0 {
            Repr::One { modified, .. } => {
                return if modified.main > after { vec![(*modified, false)] } else { Vec::new() }
            }
            Repr::Generations(generations) => generations,
        };
        let last = generations.len() - 1;
        let mut out = Vec::new();
        for (i, generation) in generations.iter().enumerate() {
            let start = generation.revs.partition_point(|rev| rev.main <= after);
            for (j, rev) in generation.revs.iter().enumerate().skip(start) {
                let tombstone = i != last && j == generation.revs.len() - 1;
                out.push((*rev, tombstone));
            }
        }
        out
    }
}

/// The current life: the last generation.
fn current(generations: &mut Vec<Generation>) -> &mut Generation {
    if generations.is_empty() {
        generations.push(Generation::default());
    }
    let last = generations.len() - 1;
    &mut generations[last]
}

impl Generation {
    /// Records a change at `rev` in this life, starting it when it had not started.
    fn put(&mut self, rev: Revision) {
        if self.is_empty() {
            self.created = rev;
            self.version = 0;
        }
        push_small(&mut self.revs, rev);
        self.version += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    /// The key of the module documentation's worked example.
    fn example() -> KeyIndex {
        let mut ki = KeyIndex::default();
        ki.put(rev(2));
        ki.put(rev(3));
        assert!(ki.tombstone(rev(4)));
        ki.put(rev(5));
        ki.put(rev(7));
        ki
    }

    fn at(modified: i64, created: i64, version: i64) -> Option<KeyAt> {
        Some(KeyAt { modified: rev(modified), created: rev(created), version })
    }

    /// The room a key's vectors have: `None` when it is held as one revision, in no vector.
    fn room(ki: &KeyIndex) -> Option<(usize, Vec<usize>)> {
        match &ki.0 {
            Repr::One { .. } => None,
            Repr::Generations(generations) => {
                Some((generations.capacity(), generations.iter().map(|g| g.revs.capacity()).collect()))
            }
        }
    }

    #[test]
    fn small_keys_take_only_the_room_their_revisions_need() {
        let mut ki = KeyIndex::default();
        ki.put(rev(2));
        assert_eq!(room(&ki), None, "one revision sits in the entry itself");
        assert_eq!(ki, KeyIndex::one(rev(2), rev(2), 1));
        ki.put(rev(3));
        assert_eq!(room(&ki), Some((1, vec![2])));
        assert!(ki.tombstone(rev(4)));
        ki.put(rev(5));
        assert_eq!(room(&ki), Some((2, vec![3, 1])));
        // Past four revisions, the vector doubles as usual.
        for main in 6..=9 {
            ki.put(rev(main));
        }
        assert_eq!(room(&ki).map(|(_, revs)| revs[1]), Some(8));
        let mut freed = Vec::new();
        assert!(!ki.compact(8, &mut freed));
        assert_eq!(freed.len(), 6);
        assert_eq!(room(&ki), Some((1, vec![2])));
        assert!(!ki.compact(9, &mut freed));
        assert_eq!(freed.len(), 7);
        assert_eq!(room(&ki), None, "compacted to one revision, the key is back in its entry");
        assert_eq!(ki.get(9), at(9, 5, 5));
        assert_eq!(ki.get(8), None, "compacted away");
        assert_eq!(ki.revisions_after(0), [(rev(9), false)]);
        assert_eq!(ki.revisions_kept_at(9).collect::<Vec<_>>(), [rev(9)]);
        assert_eq!(ki.revisions_kept_at(8).count(), 0);
        // A delete of a key held in its entry ends its life as one in vectors does.
        assert!(ki.tombstone(rev(10)));
        assert!(!ki.is_alive());
        assert_eq!((ki.get(9), ki.get(10)), (at(9, 5, 5), None));
        assert!(ki.compact(10, &mut freed), "a life ended by 10 leaves nothing once compacted at 10");
    }

    #[test]
    fn reads_follow_generations() {
        let ki = example();
        let cases = [(1, None), (2, at(2, 2, 1)), (3, at(3, 2, 2)), (4, None), (5, at(5, 5, 1)), (6, at(5, 5, 1))];
        for (read_at, want) in cases {
            assert_eq!(ki.get(read_at), want, "read at {read_at}");
        }
        assert_eq!(ki.get(100), at(7, 5, 2));
        assert!(ki.is_alive());
        assert_eq!(ki.modified(), Some(rev(7)));
    }

    #[test]
    fn tombstone_of_a_dead_key_is_refused() {
        let mut ki = KeyIndex::default();
        assert!(!ki.tombstone(rev(2)));
        ki.put(rev(2));
        assert!(ki.tombstone(rev(3)));
        assert!(!ki.tombstone(rev(4)));
        assert_eq!(ki.get(3), None);
        assert_eq!(ki.modified(), Some(rev(3)));
    }

    #[test]
    fn compaction_follows_the_worked_example() {
        let cases: [(i64, &[i64], bool); 5] = [
            (1, &[], false),
            (3, &[2], false),
            (4, &[2, 3, 4], false),
            (6, &[2, 3, 4], false),
            (7, &[2, 3, 4, 5], false),
        ];
        for (compact_at, freed_want, empty_want) in cases {
            let mut ki = example();
            let mut freed = Vec::new();
            let empty = ki.compact(compact_at, &mut freed);
            let freed: Vec<i64> = freed.iter().map(|r| r.main).collect();
            assert_eq!(freed, freed_want, "compact at {compact_at}");
            assert_eq!(empty, empty_want);
            // Every read at or after the compaction point answers as before.
            for read_at in compact_at..9 {
                assert_eq!(ki.get(read_at), example().get(read_at), "compact {compact_at}, read {read_at}");
            }
        }
    }

    #[test]
    fn compacting_a_deleted_key_empties_it() {
        let mut ki = KeyIndex::default();
        ki.put(rev(2));
        ki.tombstone(rev(3));
        let mut freed = Vec::new();
        assert!(!ki.compact(2, &mut freed));
        assert_eq!(freed, vec![]);
        assert!(ki.compact(3, &mut freed));
        assert_eq!(freed, vec![rev(2), rev(3)]);
    }

    #[test]
    fn restore_rebuilds_the_same_answers() {
        let mut ki = KeyIndex::default();
        ki.restore(rev(5), rev(7), 2);
        assert_eq!(ki.get(7), at(7, 5, 2));
        ki.put(rev(9));
        assert_eq!(ki.get(9), at(9, 5, 3));
    }

    #[test]
    fn revisions_after_marks_tombstones() {
        let ki = example();
        assert_eq!(ki.revisions_after(3), vec![(rev(4), true), (rev(5), false), (rev(7), false)]);
        assert_eq!(ki.revisions_after(7), vec![]);
    }
}
