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

/// Revisions the compactor deleted (etcd's `db_compaction_keys_total`).
pub static COMPACTED_KEYS: AtomicU64 = AtomicU64::new(0);

/// Whole compactions, from the compactor taking one to its last deletion (etcd's
/// `db_compaction_total_duration_milliseconds`), in etcd's buckets: 100 ms doubling, 14 bounds.
pub static COMPACTION_DURATIONS: Durations = Durations::new();

/// Counts of durations per bucket, and their sum, in milliseconds.
pub struct Durations {
    /// One count per bound, then the `+Inf` bucket.
    counts: [AtomicU64; COMPACTION_BOUNDS + 1],
    /// The sum, an `f64` kept as bits.
    sum_ms: AtomicU64,
}

const COMPACTION_BOUNDS: usize = 14;

impl Durations {
    const fn new() -> Self {
        Durations { counts: [const { AtomicU64::new(0) }; COMPACTION_BOUNDS + 1], sum_ms: AtomicU64::new(0) }
    }

    /// The buckets' upper bounds, in milliseconds.
    pub fn bounds() -> impl Iterator<Item = f64> {
        (0..COMPACTION_BOUNDS as i32).map(|i| 100.0 * 2f64.powi(i))
    }

    pub(crate) fn observe(&self, elapsed: std::time::Duration) {
        let ms = elapsed.as_secs_f64() * 1000.0;
        let bucket = Self::bounds().position(|bound| ms <= bound).unwrap_or(COMPACTION_BOUNDS);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some((f64::from_bits(bits) + ms).to_bits()));
    }

    /// (upper bound, cumulative count) per bucket, `+Inf` last; and the sum.
    pub fn cumulative(&self) -> (Vec<(f64, u64)>, f64) {
        let mut total = 0;
        let buckets = Self::bounds()
            .chain([f64::INFINITY])
            .zip(&self.counts)
            .map(|(bound, count)| {
                total += count.load(Ordering::Relaxed);
                (bound, total)
            })
            .collect();
        (buckets, f64::from_bits(self.sum_ms.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_etcds_buckets() {
        let durations = Durations::new();
        for ms in [50, 100, 101, 5_000, 1_000_000] {
            durations.observe(std::time::Duration::from_millis(ms));
        }
        let (buckets, sum) = durations.cumulative();
        assert_eq!(buckets.len(), 15);
        assert_eq!(buckets[0], (100.0, 2), "50 and 100 ms are in the first bucket");
        assert_eq!(buckets[1], (200.0, 3));
        assert_eq!(buckets[6], (6_400.0, 4), "5 s is in the 6.4 s bucket");
        assert_eq!(buckets[13], (819_200.0, 4), "the last bound is 100 ms × 2^13");
        assert_eq!(buckets[14], (f64::INFINITY, 5));
        assert_eq!(sum, 1_005_251.0);
    }
}
