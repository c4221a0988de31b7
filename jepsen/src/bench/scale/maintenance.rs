//! The maintenance probe: after the load, compaction of every revision but the last, then
//! defragmentation, each timed as its RPC's own time to answer, while one writer keeps putting on a
//! connection of its own; every one of its puts is kept (when it was sent, how long it took) for the
//! plot, and the slowest put that overlapped each operation is reported. The member's RSS is read
//! after compaction and again once both are done.
//!
//! Both etcd and ours answer Compaction at once and delete in the background (etcdctl's default,
//! `physical` unset, which is what is sent here). So that the writer's "during compaction" window
//! covers that work, it ends when the member's `/metrics` says a compaction finished (both observe
//! [`COMPACTION_DONE`] at the end of it), or at the answer where a member has no such metric.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proto::etcdserverpb as pb;
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::server::Server;
use crate::bench::workload::connect;
use crate::client;
use crate::error::{Error, Result};

/// How long Compaction, Defragment and any put of the writer may take: far longer than a client's
/// usual 5 s, so that a slow one is measured rather than cut off.
const MAINTENANCE_TIMEOUT: Duration = Duration::from_secs(300);
/// The writer runs alone this long before compaction, between the two operations and after them,
/// so that the plot shows its usual latency around each.
const QUIET: Duration = Duration::from_secs(2);
/// etcd's histogram of whole compactions, observed when one has finished (3.4 and 3.5).
pub const COMPACTION_DONE: &str = "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds_count";
/// The key the writer overwrites.
const WRITER_KEY: &[u8] = b"writer";

/// One put of the writer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WriterPut {
    /// When it was sent, in seconds since the probe started.
    pub at_secs: f64,
    pub latency_ms: f64,
    pub ok: bool,
}

/// An operation's time span, in seconds since the probe started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Interval {
    pub start_secs: f64,
    pub end_secs: f64,
}

impl Interval {
    fn overlaps(&self, put: &WriterPut) -> bool {
        put.at_secs <= self.end_secs && put.at_secs + put.latency_ms / 1000.0 >= self.start_secs
    }
}

/// What the maintenance probe measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MaintenanceMeasure {
    /// The revision compacted at (the member's revision once the load was done).
    pub compact_revision: i64,
    /// Compaction's time to answer.
    pub compaction_rpc_secs: f64,
    /// From Compaction sent to the compaction done (see the module's doc).
    pub compaction: Interval,
    /// Whether the member reported the end of a background compaction on `/metrics`.
    pub compaction_done_reported: bool,
    pub defrag_rpc_secs: f64,
    pub defrag: Interval,
    pub slowest_put_during_compaction_ms: f64,
    pub slowest_put_during_defrag_ms: f64,
    pub writer_puts: Vec<WriterPut>,
    /// The member's RSS after compaction, before defrag.
    pub rss_after_compaction_bytes: u64,
    /// The member's RSS after compaction and defrag.
    pub rss_bytes: u64,
    pub first_error: Option<String>,
}

pub async fn run(server: &Server) -> Result<MaintenanceMeasure> {
    let admin = connect(&server.url).await?;
    let writer_channel = connect(&server.url).await?;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until(writer_channel, started, Arc::clone(&stop)));
    tokio::time::sleep(QUIET).await;

    let revision = client::status(&admin, MAINTENANCE_TIMEOUT)
        .await
        .map_err(|status| Error::Setup(format!("Status: {}", client::describe(&status))))?
        .revision;
    let finished_before = server.metric(COMPACTION_DONE).await;
    let sent = started.elapsed().as_secs_f64();
    let compacted = client::compact(&admin, revision, false, MAINTENANCE_TIMEOUT).await;
    let answered = started.elapsed().as_secs_f64();
    let mut first_error = compacted.err().map(|status| format!("Compaction: {}", client::describe(&status)));
    let mut compaction = Interval { start_secs: sent, end_secs: answered };
    let compaction_done_reported = match finished_before {
        Some(before) => {
            let done = wait_for_metric_above(server, COMPACTION_DONE, before).await;
            compaction.end_secs = compaction.end_secs.max(started.elapsed().as_secs_f64());
            if !done {
                first_error.get_or_insert_with(|| format!("{COMPACTION_DONE} did not grow"));
            }
            done
        }
        None => false,
    };
    tokio::time::sleep(QUIET).await;
    let rss_after_compaction_bytes = server.rss_bytes()?;

    let mut maintenance = pb::maintenance_client::MaintenanceClient::new(admin);
    let sent = started.elapsed().as_secs_f64();
    let defragged = client::with_timeout(MAINTENANCE_TIMEOUT, maintenance.defragment(pb::DefragmentRequest {})).await;
    let defrag = Interval { start_secs: sent, end_secs: started.elapsed().as_secs_f64() };
    if let Err(status) = defragged {
        first_error.get_or_insert_with(|| format!("Defragment: {}", client::describe(&status)));
    }
    tokio::time::sleep(QUIET).await;
    stop.store(true, Ordering::Relaxed);
    let (writer_puts, writer_error) = writer.await.map_err(|err| Error::Setup(format!("the writer died: {err}")))?;
    let rss_bytes = server.rss_bytes()?;
    if let Some(error) = writer_error {
        first_error.get_or_insert(error);
    }
    Ok(MaintenanceMeasure {
        compact_revision: revision,
        compaction_rpc_secs: answered - compaction.start_secs,
        compaction,
        compaction_done_reported,
        defrag_rpc_secs: defrag.end_secs - defrag.start_secs,
        defrag,
        slowest_put_during_compaction_ms: slowest(&writer_puts, &compaction),
        slowest_put_during_defrag_ms: slowest(&writer_puts, &defrag),
        writer_puts,
        rss_after_compaction_bytes,
        rss_bytes,
        first_error,
    })
}

/// Puts [`WRITER_KEY`] one at a time until `stop`, each bounded by [`MAINTENANCE_TIMEOUT`]; also
/// how the first failed put failed, and when.
pub(super) async fn write_until(
    channel: Channel,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> (Vec<WriterPut>, Option<String>) {
    let mut kv = pb::kv_client::KvClient::new(channel);
    let mut puts = Vec::new();
    let mut first_error = None;
    while !stop.load(Ordering::Relaxed) {
        let request = pb::PutRequest { key: WRITER_KEY.to_vec(), value: vec![b'w'; 64], ..Default::default() };
        let sent = Instant::now();
        let answer = client::with_timeout(MAINTENANCE_TIMEOUT, kv.put(request)).await;
        let put = WriterPut {
            at_secs: sent.duration_since(started).as_secs_f64(),
            latency_ms: sent.elapsed().as_secs_f64() * 1000.0,
            ok: answer.is_ok(),
        };
        puts.push(put);
        if let Err(status) = answer {
            first_error.get_or_insert_with(|| {
                let when = format!("sent at {:.3} s, answered after {:.0} ms", put.at_secs, put.latency_ms);
                format!("a writer put failed ({when}): {}", client::describe(&status))
            });
            // A member that refuses puts would otherwise be asked thousands of times a second.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    (puts, first_error)
}

/// Waits until `metric` exceeds `before` (true), or [`MAINTENANCE_TIMEOUT`] passes (false).
async fn wait_for_metric_above(server: &Server, metric: &str, before: f64) -> bool {
    let deadline = Instant::now() + MAINTENANCE_TIMEOUT;
    while Instant::now() < deadline {
        if server.metric(metric).await.is_some_and(|now| now > before) {
            return true;
        }
        // The window's end is known to this period; a full compaction takes seconds.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The slowest put that was in flight at some point of `interval`; 0 when none was.
pub(super) fn slowest(puts: &[WriterPut], interval: &Interval) -> f64 {
    puts.iter().filter(|p| interval.overlaps(p)).map(|p| p.latency_ms).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(at_secs: f64, latency_ms: f64) -> WriterPut {
        WriterPut { at_secs, latency_ms, ok: true }
    }

    #[test]
    fn the_slowest_put_is_the_slowest_in_flight_during_the_interval() {
        let puts = [put(0.5, 900.0), put(1.4, 50.0), put(1.5, 3000.0), put(4.6, 1.0), put(5.0, 2.0)];
        let interval = Interval { start_secs: 1.45, end_secs: 4.5 };
        // The first put ended at 1.4 s, before the interval; the one sent at 1.4 s was still in
        // flight at 1.45 s; the one sent at 4.6 s came after it.
        assert_eq!(slowest(&puts, &interval), 3000.0);
        let before = Interval { start_secs: 0.0, end_secs: 0.4 };
        assert_eq!(slowest(&puts, &before), 0.0, "nothing in flight");
        let late = Interval { start_secs: 4.59, end_secs: 4.6 };
        assert_eq!(slowest(&puts, &late), 1.0);
    }
}
