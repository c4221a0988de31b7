//! Where a log append's `fdatasync` runs on a member of one thread: in the appending task, or on the
//! blocking pool.
//!
//! The leader's own appends always sync on the pool: its early sends to the followers go out on the
//! same thread meanwhile. A follower's sync has nothing to overlap with (openraft's core waits for the
//! append either way), and handing it to the pool cost two thread wake-ups on the path of every write:
//! the pool's thread woken to sync, then the runtime's thread woken by its answer. So a follower syncs
//! in place, as long as its syncs are quick. A sync slower than [`SLOW`] shows a busy disk, where a
//! thread held in `fdatasync` would hold up the member's reads, watches and forwards with it: the
//! follower then syncs on the pool for [`POOL_FOR`] after it.
//!
//! Measured (`jepsen bench --target ours --host-network`, release, one round each, the build before
//! and this one alternating three times on fresh clusters): put-1 1,753, 1,783, 1,769/s against
//! 2,038, 2,103, 1,992 (+16 % at the medians); put-100 on every member 17,837–19,197 against
//! 18,269–19,750; watch-latency p99 2.31, 2.87, 1.65 ms against 2.13, 1.56, 1.70. With [`SLOW`] at
//! 2 ms the gain was half of that: over 20 s of put-1 each follower had 3 or 4 syncs over 2 ms (the
//! store's flushes share the disk), each sending five seconds of syncs to the pool; none took 8 ms or more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// A sync that took this long or longer sends the next ones to the pool.
pub(crate) const SLOW: Duration = Duration::from_millis(10);

/// How long after a slow sync a follower keeps syncing on the pool.
pub(crate) const POOL_FOR: Duration = Duration::from_secs(5);

/// The instant the durations of [`SyncPlace`] count from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The choice of one log, shared by its handles.
#[derive(Debug, Default)]
pub(crate) struct SyncPlace {
    /// Until when (microseconds after [`EPOCH`]) a follower's syncs go to the pool.
    pool_until: AtomicU64,
}

impl SyncPlace {
    /// Whether an append syncs in the calling task: never the leader's own (`own`), and a follower's
    /// unless a recent sync was slow.
    pub(crate) fn here(&self, own: bool) -> bool {
        !own && micros_since_epoch(Instant::now()) >= self.pool_until.load(Ordering::Relaxed)
    }

    /// Runs `sync` and notes how long it took.
    pub(crate) fn timed<T>(&self, sync: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let synced = sync();
        self.synced(started);
        synced
    }

    /// A sync that started at `started` has just ended.
    fn synced(&self, started: Instant) {
        let now = Instant::now();
        if now.duration_since(started) >= SLOW {
            self.pool_until.fetch_max(micros_since_epoch(now + POOL_FOR), Ordering::Relaxed);
        }
    }
}

fn micros_since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_syncs_in_place_until_a_slow_sync_and_the_leader_never() {
        let place = SyncPlace::default();
        assert!(place.here(false));
        assert!(!place.here(true), "the leader's early sends go out while it syncs");
        place.synced(Instant::now());
        assert!(place.here(false), "a quick sync changes nothing");
        place.synced(Instant::now() - SLOW);
        assert!(!place.here(false), "after a slow sync the pool takes the next ones");
    }

    #[test]
    fn the_pool_keeps_a_followers_syncs_for_a_while_after_a_slow_one() {
        let place = SyncPlace::default();
        place.synced(Instant::now() - SLOW);
        let until = place.pool_until.load(Ordering::Relaxed);
        let now = micros_since_epoch(Instant::now());
        assert!(until > now + micros(POOL_FOR) - micros(Duration::from_secs(1)), "{until} vs {now}");
        // Once that time is over, in place again.
        place.pool_until.store(now.saturating_sub(1), Ordering::Relaxed);
        assert!(place.here(false));
    }

    fn micros(d: Duration) -> u64 {
        d.as_micros() as u64
    }
}
