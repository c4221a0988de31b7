//! What etcd's Watch service serves (the service and its stream tasks are in [`crate::service`]).
//!
//! # Layout
//!
//! - [`hub`]: [`WatchHub`], every watcher of the member; the apply path hands it each committed batch's
//!   events, and it buffers them per watcher (bounded) and wakes the streams.
//! - [`watcher`]: one watcher as its stream sees it, and the pure steps from events to responses
//!   (filters, `prev_kv`, one response per revision, fragments).
//! - `service::watch_stream`: the task behind one `Watch` stream: requests, catch-up from the store,
//!   progress; `service::watch`: the tonic handler that starts a stream task and watches the leader.

pub mod hub;
mod range;
pub(crate) mod watcher;

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

pub use hub::{Backlog, Inbox, WatchHub, WatchRange};

/// etcd's default `--experimental-watch-progress-notify-interval`.
pub const DEFAULT_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_secs(600);
/// etcd raises shorter progress intervals to this.
pub const MIN_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_millis(100);

/// Settings of the Watch service.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// Timed progress notifications to watchers that asked for them (etcd adds up to 10 % of jitter).
    pub progress_notify_interval: Duration,
    /// The size a fragmented response is cut at: etcd uses `--max-request-bytes` plus its 512 KiB of gRPC
    /// overhead (the server's receive limit).
    pub fragment_bytes: usize,
    /// How often a stream opened with `hasleader` checks that the member has a leader (the election
    /// timeout); it is cancelled after three checks in a row without one, as etcd does.
    pub leader_check_interval: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            progress_notify_interval: DEFAULT_PROGRESS_NOTIFY_INTERVAL,
            fragment_bytes: crate::validate::Limits::default().max_request_bytes + 512 * 1024,
            leader_check_interval: Duration::from_secs(1),
        }
    }
}

impl WatchConfig {
    /// The period of one stream's timed progress notifications: the interval (at least 100 ms) plus up to
    /// a tenth of it at random, so that streams opened together do not notify together.
    pub(crate) fn progress_interval(&self) -> Duration {
        let interval = self.progress_notify_interval.max(MIN_PROGRESS_NOTIFY_INTERVAL);
        let tenth = u64::try_from(interval.as_nanos() / 10).unwrap_or(u64::MAX).max(1);
        let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
        interval + Duration::from_nanos(random % tenth)
    }
}
