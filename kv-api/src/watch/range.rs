//! [`WatchRange`]: a watcher's key range, shared rather than copied.
//!
//! With 100k watchers every byte a watcher takes is 100 kB, so a range is one allocation that the hub's
//! slot and the stream's watcher both hold, and the hub gives every watcher of the same single key the
//! same one ([`SingleKey`]): a thousand watchers of one key hold its bytes once.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::index::KeyRange;

/// A watcher's key range (etcd's forms: empty end = one key, `[0]` = from the key on). Its clones share
/// one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchRange(Arc<Bounds>);

#[derive(Debug, PartialEq, Eq)]
struct Bounds {
    key: Box<[u8]>,
    range_end: Box<[u8]>,
}

impl WatchRange {
    pub fn new(key: Vec<u8>, range_end: Vec<u8>) -> Self {
        Self(Arc::new(Bounds { key: key.into_boxed_slice(), range_end: range_end.into_boxed_slice() }))
    }

    pub fn key(&self) -> &[u8] {
        &self.0.key
    }

    pub fn range_end(&self) -> &[u8] {
        &self.0.range_end
    }

    pub fn as_key_range(&self) -> KeyRange<'_> {
        KeyRange::new(self.key(), self.range_end())
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.as_key_range().contains(key)
    }

    /// Whether `self` and `other` are the same allocation (not only equal ranges).
    #[cfg(test)]
    pub(crate) fn shares_with(&self, other: &WatchRange) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// How many holders the allocation has.
    #[cfg(test)]
    pub(crate) fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

/// The range of a single-key watcher as a map key: hashed, compared and looked up by its key alone (the
/// hub's table of single-key watchers holds no other kind).
#[derive(Clone, Debug)]
pub(crate) struct SingleKey(pub WatchRange);

impl PartialEq for SingleKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for SingleKey {}

impl Hash for SingleKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `[u8]` hashes: `Borrow` requires the same hash for the key and its borrowed form.
        self.0.key().hash(state)
    }
}

impl Borrow<[u8]> for SingleKey {
    fn borrow(&self) -> &[u8] {
        self.0.key()
    }
}
