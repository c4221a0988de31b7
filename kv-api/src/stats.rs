//! Counts of the operations this member's store served or applied, for etcd's `etcd_mvcc_*_total`
//! metrics. Process-wide, as etcd's collectors (one member runs per process).

use std::sync::atomic::{AtomicU64, Ordering};

/// Ranges read, on their own or in a txn.
pub static RANGES: AtomicU64 = AtomicU64::new(0);
/// Puts applied, on their own or in a txn.
pub static PUTS: AtomicU64 = AtomicU64::new(0);
/// Deletes applied, on their own or in a txn.
pub static DELETES: AtomicU64 = AtomicU64::new(0);
/// Txns applied or served.
pub static TXNS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A counter's value.
pub fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}
