//! The large range probe: one Range over every key of the load (its whole prefix, no limit), on a
//! connection of its own: how long the answer took (sent to decoded, so the client's decoding is
//! in it), how far the member's RSS rose above its level before while it served it, and the slowest
//! put of a writer putting one key at a time meanwhile (the maintenance probe's writer).
//!
//! The answer is about `--keys` times the value, key and revisions (~210 MB by default). Neither
//! server limits it (etcd caps the messages it sends at 2 GiB; `--max-request-bytes` applies only
//! to requests, ours sets no cap), but tonic's client refuses to decode more than 4 MiB by default,
//! so this client lifts that limit, as etcd's own client does for answers (up to 2 GiB).
//!
//! The peak is the member's `VmHWM` (its RSS high-water mark). That is a lifetime peak, so it is
//! reset to the current RSS just before the Range (writing 5 to `/proc/<pid>/clear_refs`, Linux
//! 4.0 and later); the peak growth is then `VmHWM` after minus `VmRSS` before. If the reset is
//! refused, `VmHWM` only tells when the Range set a new lifetime peak; otherwise the highest RSS
//! sampled every [`SAMPLE_PERIOD`] stands in (a lower bound); `peak_source` says which. Memory the
//! member freed earlier but kept (its allocator's, or Go's heap not yet returned) is reused without
//! growth, so the figure is a lower bound of what the Range allocated.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use proto::etcdserverpb as pb;
use serde::Serialize;
use tokio::time::Instant;

use super::maintenance::{self, Interval};
use super::server::Server;
use crate::bench::resources::{self, Memory};
use crate::bench::workload::connect;
use crate::client;
use crate::error::{Error, Result};

/// The loaded keys' prefix (the load probe's).
const PREFIX: &str = super::load::PREFIX;
/// How long the Range may take: far longer than a client's usual 5 s, so that a slow one is
/// measured rather than cut off.
const RANGE_TIMEOUT: Duration = Duration::from_secs(300);
/// How often the member's RSS is sampled while the Range runs.
const SAMPLE_PERIOD: Duration = Duration::from_millis(10);
/// The member settles this long before the Range, so that the previous probe's work is over.
const SETTLE: Duration = Duration::from_secs(2);
/// The writer puts this long before the Range is sent.
const WRITER_WARMUP: Duration = Duration::from_millis(300);

/// Where the peak growth came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakSource {
    /// `VmHWM` after the Range, reset just before it.
    #[default]
    ResetHighWaterMark,
    /// `VmHWM` after the Range, not reset but above its value before (a new lifetime peak).
    NewHighWaterMark,
    /// The highest RSS sampled during the Range (the reset was refused and the Range set no new
    /// lifetime peak).
    Sampled,
}

/// What the large range probe measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LargeRangeMeasure {
    /// Keys in the answer, and its encoded size.
    pub keys: u64,
    pub response_bytes: u64,
    /// From the Range sent to its answer decoded.
    pub secs: f64,
    /// Whether `VmHWM` was reset just before the Range, and why not when it was not.
    pub peak_reset: bool,
    pub peak_reset_error: Option<String>,
    pub before: Memory,
    pub after: Memory,
    /// The highest RSS sampled while the Range ran.
    pub sampled_peak_rss_bytes: u64,
    /// How far RSS rose above `before.rss_bytes` at its peak during the Range.
    pub peak_growth_bytes: u64,
    pub peak_source: PeakSource,
    /// The slowest put of the concurrent writer in flight during the Range.
    pub slowest_put_ms: f64,
    pub first_error: Option<String>,
}

pub async fn run(server: &Server) -> Result<LargeRangeMeasure> {
    let channel = connect(&server.url).await?;
    let mut kv = pb::kv_client::KvClient::new(channel).max_decoding_message_size(usize::MAX);
    tokio::time::sleep(SETTLE).await;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(maintenance::write_until(connect(&server.url).await?, started, Arc::clone(&stop)));
    tokio::time::sleep(WRITER_WARMUP).await;
    let pid = server.host_pid()?;
    let read = |pid| resources::memory(pid).map_err(Error::system(format!("read /proc/{pid}/status")));
    let reset = resources::reset_peak_rss(pid);
    let before = read(pid)?;
    let sampler = Sampler::start(pid, before.rss_bytes);

    let request = pb::RangeRequest {
        key: PREFIX.as_bytes().to_vec(),
        range_end: client::prefix_end(PREFIX.as_bytes()),
        ..Default::default()
    };
    let sent = Instant::now();
    let answer = client::with_timeout(RANGE_TIMEOUT, kv.range(request)).await;
    let secs = sent.elapsed().as_secs_f64();
    let sampled_peak_rss_bytes = sampler.stop();
    let after = read(pid)?;
    let start_secs = sent.duration_since(started).as_secs_f64();
    let during = Interval { start_secs, end_secs: start_secs + secs };
    stop.store(true, Ordering::Relaxed);
    let (writer_puts, writer_error) = writer.await.map_err(|err| Error::Setup(format!("the writer died: {err}")))?;

    let (keys, response_bytes, first_error) = match &answer {
        Ok(response) => (response.kvs.len() as u64, response.encoded_len() as u64, writer_error),
        Err(status) => (0, 0, Some(format!("Range: {}", client::describe(status)))),
    };
    let (peak_growth_bytes, peak_source) = peak_growth(&before, &after, reset.is_ok(), sampled_peak_rss_bytes);
    Ok(LargeRangeMeasure {
        keys,
        response_bytes,
        secs,
        peak_reset: reset.is_ok(),
        peak_reset_error: reset.err().map(|err| format!("write /proc/{pid}/clear_refs: {err}")),
        before,
        after,
        sampled_peak_rss_bytes,
        peak_growth_bytes,
        peak_source,
        slowest_put_ms: maintenance::slowest(&writer_puts, &during),
        first_error,
    })
}

/// How far RSS rose above `before.rss_bytes` during the Range, and how that is known (see the
/// module's doc).
fn peak_growth(before: &Memory, after: &Memory, reset: bool, sampled_peak: u64) -> (u64, PeakSource) {
    let above = |peak: u64| peak.saturating_sub(before.rss_bytes);
    if reset {
        (above(after.peak_rss_bytes.max(sampled_peak)), PeakSource::ResetHighWaterMark)
    } else if after.peak_rss_bytes > before.peak_rss_bytes {
        (above(after.peak_rss_bytes.max(sampled_peak)), PeakSource::NewHighWaterMark)
    } else {
        (above(sampled_peak), PeakSource::Sampled)
    }
}

/// A task that reads the member's RSS every [`SAMPLE_PERIOD`] and keeps the highest, until dropped.
struct Sampler {
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32, rss_now: u64) -> Sampler {
        let peak = Arc::new(AtomicU64::new(rss_now));
        let task = tokio::spawn({
            let peak = Arc::clone(&peak);
            async move {
                loop {
                    if let Ok(memory) = resources::memory(pid) {
                        peak.fetch_max(memory.rss_bytes, Ordering::Relaxed);
                    }
                    tokio::time::sleep(SAMPLE_PERIOD).await;
                }
            }
        });
        Sampler { peak, task }
    }

    /// Stops sampling; the highest RSS seen.
    fn stop(self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn memory(rss_mb: u64, peak_mb: u64) -> Memory {
        Memory { rss_bytes: rss_mb * MB, peak_rss_bytes: peak_mb * MB }
    }

    #[test]
    fn the_peak_growth_is_taken_from_the_best_source_there_is() {
        // Reset: the high-water mark after is the Range's own peak.
        let before = memory(300, 300);
        assert_eq!(peak_growth(&before, &memory(320, 700), true, 650 * MB), (400 * MB, PeakSource::ResetHighWaterMark));
        // A sample may see more than a lagging counter; the higher wins.
        assert_eq!(peak_growth(&before, &memory(320, 600), true, 650 * MB).0, 350 * MB);
        // Not reset, but a new lifetime peak: still the Range's.
        let old_peak = memory(300, 900);
        assert_eq!(
            peak_growth(&old_peak, &memory(320, 1000), false, 950 * MB),
            (700 * MB, PeakSource::NewHighWaterMark)
        );
        // Not reset and under the old peak: only the samples tell.
        assert_eq!(peak_growth(&old_peak, &memory(320, 900), false, 500 * MB), (200 * MB, PeakSource::Sampled));
        // RSS that fell during the Range is no growth.
        assert_eq!(peak_growth(&before, &memory(200, 300), true, 300 * MB).0, 0);
    }
}
