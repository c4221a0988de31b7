//! The storage seam under the MVCC store: ordered buckets of bytes with atomic batch writes.
//!
//! `raft-node` implements it on sled; [`MemBackend`] is the in-memory implementation for unit tests.

use std::collections::BTreeMap;

use parking_lot::RwLock;

/// The buckets the store keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bucket {
    /// Revision (16 bytes, big-endian) → a kind byte (put or tombstone) and the encoded `KeyValue`.
    Key,
    /// Bookkeeping: the compacted revision, and whatever the embedding layer adds (the applied log id).
    Meta,
    /// Lease id (8 bytes, big-endian) → granted TTL in seconds (8 bytes, big-endian).
    Lease,
    /// Active alarms: member id (8 bytes, big-endian) and alarm type (4 bytes, big-endian) → nothing.
    Alarm,
    /// The auth state: flags, revision, users and roles (see [`crate::auth`]).
    Auth,
}

impl Bucket {
    pub const ALL: [Bucket; 5] = [Bucket::Key, Bucket::Meta, Bucket::Lease, Bucket::Alarm, Bucket::Auth];

    /// A one-byte tag, for backends that keep every bucket in one keyspace.
    pub fn tag(self) -> u8 {
        match self {
            Bucket::Key => b'k',
            Bucket::Meta => b'm',
            Bucket::Lease => b'l',
            Bucket::Alarm => b'a',
            Bucket::Auth => b'u',
        }
    }
}

/// One change of a batch: a value to set, or `None` to delete.
pub type BatchOp = (Bucket, Vec<u8>, Option<Vec<u8>>);

/// Changes applied atomically by [`Backend::write`].
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub ops: Vec<BatchOp>,
    /// The keys' and values' bytes in `ops`.
    bytes: usize,
}

impl WriteBatch {
    pub fn put(&mut self, bucket: Bucket, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let (key, value) = (key.into(), value.into());
        self.bytes += key.len() + value.len();
        self.ops.push((bucket, key, Some(value)));
    }

    pub fn delete(&mut self, bucket: Bucket, key: impl Into<Vec<u8>>) {
        let key = key.into();
        self.bytes += key.len();
        self.ops.push((bucket, key, None));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The keys' and values' bytes the batch writes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One entry of a bucket: what a snapshot holds, entry by entry.
pub type Record = (Bucket, Vec<u8>, Vec<u8>);

/// A backend failure (disk I/O, corruption): never caused by a client request.
#[derive(Debug, thiserror::Error)]
#[error("backend: {0}")]
pub struct BackendError(pub String);

/// Ordered key-value buckets with atomic batches.
pub trait Backend: Send + Sync + 'static {
    fn get(&self, bucket: Bucket, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError>;

    /// Lends the value of `key` to `read` without copying it out, when there is one (a Range encodes
    /// thousands of stored values straight into its answer). Returns whether there was.
    fn read(&self, bucket: Bucket, key: &[u8], read: &mut dyn FnMut(&[u8])) -> Result<bool, BackendError> {
        let value = self.get(bucket, key)?;
        if let Some(value) = &value {
            read(value);
        }
        Ok(value.is_some())
    }

    /// Calls `visit` on every entry of `bucket` in key order until it returns false.
    fn scan(&self, bucket: Bucket, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError>;

    /// [`Backend::scan`] from `start` on (itself included). Safe to call from several threads at once.
    fn scan_from(
        &self,
        bucket: Bucket,
        start: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), BackendError> {
        self.scan(bucket, &mut |key, value| key < start || visit(key, value))
    }

    /// The last key of `bucket`, if it has any.
    fn last_key(&self, bucket: Bucket) -> Result<Option<Vec<u8>>, BackendError> {
        let mut last = None;
        self.scan(bucket, &mut |key, _| {
            last = Some(key.to_vec());
            true
        })?;
        Ok(last)
    }

    /// Applies every change of `batch`, all or nothing.
    fn write(&self, batch: WriteBatch) -> Result<(), BackendError>;

    /// Applies `batch`'s changes in order, but not as one: other writes may come between them, and a
    /// crash may leave only the first ones applied. For work every prefix of which is a valid state and
    /// that must not hold other writers back for its whole length (the compactor's deletions of dead
    /// revisions). By default, [`Backend::write`].
    fn write_in_pieces(&self, batch: WriteBatch) -> Result<(), BackendError> {
        self.write(batch)
    }

    /// Replaces the whole content of every bucket with `content`, all or nothing (snapshot install).
    /// `content` is read as it is written, so a snapshot larger than memory can be installed; an error
    /// it yields leaves the old content in place.
    fn replace_all(&self, content: &mut dyn Iterator<Item = Result<Record, BackendError>>) -> Result<(), BackendError>;

    /// Makes every write so far durable (a persistent backend may otherwise persist them a little later).
    fn sync(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Bytes the backend occupies (on disk for persistent backends).
    fn size_bytes(&self) -> u64;

    /// Bytes the live content takes, an estimate (etcd's `dbSizeInUse`); the rest is space a
    /// [`Backend::defragment`] can give back.
    fn size_in_use_bytes(&self) -> u64 {
        self.size_bytes()
    }

    /// Rewrites the backend so that it occupies only what its content needs (etcd's defragmentation),
    /// while other threads go on reading and writing it. Blocking.
    fn defragment(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// The entries of a [`MemBackend`], by bucket and key.
type MemBuckets = BTreeMap<(Bucket, Vec<u8>), Vec<u8>>;

/// An in-memory [`Backend`] for tests.
#[derive(Debug, Default)]
pub struct MemBackend {
    buckets: RwLock<MemBuckets>,
}

impl MemBackend {
    fn apply(map: &mut BTreeMap<(Bucket, Vec<u8>), Vec<u8>>, batch: WriteBatch) {
        for (bucket, key, value) in batch.ops {
            match value {
                Some(value) => map.insert((bucket, key), value),
                None => map.remove(&(bucket, key)),
            };
        }
    }
}

impl Backend for MemBackend {
    fn get(&self, bucket: Bucket, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.buckets.read().get(&(bucket, key.to_vec())).cloned())
    }

    fn scan(&self, bucket: Bucket, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        let map = self.buckets.read();
        for ((_, key), value) in map.range((bucket, Vec::new())..).take_while(|((b, _), _)| *b == bucket) {
            if !visit(key, value) {
                break;
            }
        }
        Ok(())
    }

    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        Self::apply(&mut self.buckets.write(), batch);
        Ok(())
    }

    fn replace_all(&self, content: &mut dyn Iterator<Item = Result<Record, BackendError>>) -> Result<(), BackendError> {
        let mut next = BTreeMap::new();
        for item in content {
            let (bucket, key, value) = item?;
            next.insert((bucket, key), value);
        }
        *self.buckets.write() = next;
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.buckets.read().iter().map(|((_, k), v)| (k.len() + v.len()) as u64).sum()
    }
}

/// Visits the entries of `bucket` from `start` on, in key order, while `visit` answers `Ok(true)`;
/// stops at the first `Ok(false)` or error (which it returns).
pub(crate) fn try_scan_from(
    backend: &dyn Backend,
    bucket: Bucket,
    start: &[u8],
    mut visit: impl FnMut(&[u8], &[u8]) -> crate::error::Result<bool>,
) -> crate::error::Result<()> {
    let mut failure = None;
    backend.scan_from(bucket, start, &mut |key, value| match visit(key, value) {
        Ok(more) => more,
        Err(err) => {
            failure = Some(err);
            false
        }
    })?;
    failure.map_or(Ok(()), Err)
}

/// Visits every entry of `bucket` in key order, stopping at the first error `visit` returns.
pub(crate) fn try_scan(
    backend: &dyn Backend,
    bucket: Bucket,
    mut visit: impl FnMut(&[u8], &[u8]) -> crate::error::Result<()>,
) -> crate::error::Result<()> {
    try_scan_while(backend, bucket, |key, value| visit(key, value).map(|()| true))
}

/// Visits the entries of `bucket` in key order while `visit` answers `Ok(true)`; stops at the first
/// `Ok(false)` or error (which it returns).
pub(crate) fn try_scan_while(
    backend: &dyn Backend,
    bucket: Bucket,
    visit: impl FnMut(&[u8], &[u8]) -> crate::error::Result<bool>,
) -> crate::error::Result<()> {
    try_scan_from(backend, bucket, &[], visit)
}
