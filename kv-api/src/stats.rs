//! Counts of the operations this member's store served or applied, for etcd's `etcd_mvcc_*_total`
//! metrics. Process-wide, as etcd's collectors (one member runs per process).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

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

/// Watch streams open (etcd's `watch_stream_total` gauge).
pub static WATCH_STREAMS: AtomicU64 = AtomicU64::new(0);
/// Watchers registered (etcd's `watcher_total` gauge).
pub static WATCHERS: AtomicU64 = AtomicU64::new(0);

/// Counts one more in `gauge` until dropped.
pub(crate) struct Held(&'static AtomicU64);

impl Held {
    pub(crate) fn new(gauge: &'static AtomicU64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Self(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Revisions the compactor deleted (etcd's `db_compaction_keys_total`).
pub static COMPACTED_KEYS: AtomicU64 = AtomicU64::new(0);

/// Whole compactions, from the compactor taking one to its last deletion (etcd's
/// `db_compaction_total_duration_milliseconds`), in etcd's buckets: 100 ms doubling, 14 bounds.
pub static COMPACTION_DURATIONS: LazyLock<Histogram> = LazyLock::new(|| Histogram::milliseconds(100.0, 2.0, 14));

/// A Prometheus histogram of durations in seconds or milliseconds: cumulative buckets are computed at
/// scrape time from per-bucket counts.
pub struct Histogram {
    bounds: Vec<f64>,
    /// One count per bound, plus the `+Inf` bucket.
    counts: Vec<AtomicU64>,
    /// The sum of observations, an `f64` kept as bits.
    sum: AtomicU64,
    /// Units per second (1 for seconds, 1,000 for milliseconds).
    per_second: f64,
}

impl Histogram {
    /// Observations in seconds; `n` buckets from `start`, each `factor` times the last, as Go's
    /// `prometheus.ExponentialBuckets`.
    pub fn seconds(start: f64, factor: f64, n: usize) -> Self {
        Self::exponential(start, factor, n, 1.0)
    }

    /// [`Histogram::seconds`] in milliseconds.
    pub fn milliseconds(start: f64, factor: f64, n: usize) -> Self {
        Self::exponential(start, factor, n, 1000.0)
    }

    fn exponential(start: f64, factor: f64, n: usize, per_second: f64) -> Self {
        let bounds = std::iter::successors(Some(start), |bound| Some(bound * factor)).take(n).collect();
        let counts = (0..=n).map(|_| AtomicU64::new(0)).collect();
        Histogram { bounds, counts, sum: AtomicU64::new(0f64.to_bits()), per_second }
    }

    pub fn observe(&self, elapsed: Duration) {
        let value = elapsed.as_secs_f64() * self.per_second;
        let bucket = self.bounds.iter().position(|&b| value <= b).unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some((f64::from_bits(bits) + value).to_bits()));
    }

    /// (upper bound, cumulative count) per bucket, `+Inf` last; and the sum.
    pub fn cumulative(&self) -> (Vec<(f64, u64)>, f64) {
        let mut total = 0;
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        let buckets = bounds
            .zip(&self.counts)
            .map(|(bound, count)| {
                total += count.load(Ordering::Relaxed);
                (bound, total)
            })
            .collect();
        (buckets, f64::from_bits(self.sum.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_etcds_buckets() {
        let durations = Histogram::milliseconds(100.0, 2.0, 14);
        for ms in [50, 100, 101, 5_000, 1_000_000] {
            durations.observe(Duration::from_millis(ms));
        }
        let (buckets, sum) = durations.cumulative();
        assert_eq!(buckets.len(), 15);
        assert_eq!(buckets[0], (100.0, 2), "50 and 100 ms are in the first bucket");
        assert_eq!(buckets[1], (200.0, 3));
        assert_eq!(buckets[6], (6_400.0, 4), "5 s is in the 6.4 s bucket");
        assert_eq!(buckets[13], (819_200.0, 4), "the last bound is 100 ms × 2^13");
        assert_eq!(buckets[14], (f64::INFINITY, 5));
        assert_eq!(sum, 1_005_251.0);
        let seconds = Histogram::seconds(0.001, 2.0, 3);
        seconds.observe(Duration::from_micros(1500));
        assert_eq!(seconds.cumulative(), (vec![(0.001, 0), (0.002, 1), (0.004, 1), (f64::INFINITY, 1)], 0.0015));
    }
}
