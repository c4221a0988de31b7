//! What one benchmark workload measured: every request's latency, kept whole and sorted once at the
//! end (a few hundred thousand samples at most, so an exact percentile costs less than a histogram's
//! bucketing error), the errors, and the wall time that gives the throughput.

use std::time::Duration;

use serde::Serialize;

/// The summary of one workload run, as etcd's benchmark prints it (latencies in milliseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Requests that succeeded (each has a latency sample).
    pub count: u64,
    /// Requests that failed or timed out; they count towards neither throughput nor latency.
    pub errors: u64,
    /// From the first request sent to the last answer received.
    pub elapsed_secs: f64,
    /// Successful requests per second of `elapsed_secs`.
    pub qps: f64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Stats {
    /// Summarizes `latencies` (in any order) of the successful requests of a run that took `elapsed`.
    pub fn from_latencies(mut latencies: Vec<Duration>, errors: u64, elapsed: Duration) -> Stats {
        latencies.sort_unstable();
        let count = latencies.len() as u64;
        let elapsed_secs = elapsed.as_secs_f64();
        let total: Duration = latencies.iter().sum();
        Stats {
            count,
            errors,
            elapsed_secs,
            qps: if elapsed_secs > 0.0 { count as f64 / elapsed_secs } else { 0.0 },
            avg_ms: if count > 0 { ms(total) / count as f64 } else { 0.0 },
            p50_ms: ms(percentile(&latencies, 50.0)),
            p99_ms: ms(percentile(&latencies, 99.0)),
            p999_ms: ms(percentile(&latencies, 99.9)),
            max_ms: latencies.last().copied().map_or(0.0, ms),
        }
    }
}

/// The nearest-rank percentile of `sorted` (ascending): the smallest sample that at least `p`% of
/// the samples are less than or equal to. Zero for no samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // The small subtraction keeps float error (99.9 / 100 * 1000 = 999.0000000000001) from moving
    // an exact rank up by one.
    let rank = (p / 100.0 * sorted.len() as f64 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
/// Rounds of the same workload are combined this way, so that one disturbed round cannot move it.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 })
}

/// A duration in milliseconds, fractions kept.
pub(crate) fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_millis).collect()
    }

    #[test]
    fn percentiles_of_one_to_a_thousand_milliseconds() {
        let sorted = millis(1..=1000);
        let cases = [(50.0, 500), (99.0, 990), (99.9, 999), (100.0, 1000), (0.0, 1), (0.05, 1), (10.0, 100)];
        for (p, want) in cases {
            assert_eq!(percentile(&sorted, p), Duration::from_millis(want), "p{p}");
        }
        assert_eq!(percentile(&[], 99.0), Duration::ZERO);
        assert_eq!(percentile(&millis([7]), 99.9), Duration::from_millis(7));
    }

    #[test]
    fn stats_sort_their_samples_and_ignore_errors_for_latency() {
        // 1..=100 ms shuffled by a fixed stride; two errors; ten seconds.
        let shuffled: Vec<Duration> = (0..100u64).map(|i| Duration::from_millis((i * 37) % 100 + 1)).collect();
        let stats = Stats::from_latencies(shuffled, 2, Duration::from_secs(10));
        assert_eq!((stats.count, stats.errors), (100, 2));
        assert!((stats.qps - 10.0).abs() < 1e-9, "{stats:?}");
        assert!((stats.avg_ms - 50.5).abs() < 1e-9, "{stats:?}");
        assert_eq!((stats.p50_ms, stats.p99_ms, stats.p999_ms, stats.max_ms), (50.0, 99.0, 100.0, 100.0));
    }

    #[test]
    fn no_samples_give_zeroes_not_nan() {
        let stats = Stats::from_latencies(Vec::new(), 5, Duration::ZERO);
        assert_eq!(stats, Stats { errors: 5, ..Stats::default() });
    }

    #[test]
    fn medians_of_odd_even_and_empty_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }
}
