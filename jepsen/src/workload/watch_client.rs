//! The watch client the workloads share: [`WatchConn`] (one Watch stream, with etcd's `hasleader`
//! metadata when asked), [`Stall`] (deciding that a stream stopped making progress, measured against
//! the [`AckedRevision`] of the run's writes) and [`event`] (a watch event converted for the
//! checkers).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use proto::etcdserverpb as pb;
use proto::mvccpb;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::checker::watch::{Event, EventKind, PrevKv};
use crate::client::with_timeout;
use crate::error::Result;

/// A stream that has not reached an acknowledged revision within this long is stalled.
pub const STALL_AFTER: Duration = Duration::from_secs(3);
/// How often a watcher asks for a progress notification and looks for a stall.
pub const TICK: Duration = Duration::from_millis(500);
/// The pause before trying the next member after a failed connection.
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The highest revision any write of the run was acknowledged at; watchers compare their stream's
/// progress with it to notice a stall.
#[derive(Debug, Default)]
pub struct AckedRevision(AtomicI64);

impl AckedRevision {
    pub fn observe(&self, revision: i64) {
        self.0.fetch_max(revision, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Decides when a stream is stalled: some write was acknowledged at revision A, and for
/// [`STALL_AFTER`] the stream delivered no response whose header reached A. A stream on a paused
/// or partitioned member says nothing, or keeps reporting its old revision; a healthy one reaches
/// A within milliseconds, since its watcher asks for progress every [`TICK`].
#[derive(Debug, Default)]
pub struct Stall {
    /// The acknowledged revision being waited for, and since when.
    waiting: Option<(i64, Instant)>,
}

impl Stall {
    /// `seen`: the highest header revision of the stream so far; `acked`: see [`AckedRevision`].
    pub fn stalled(&mut self, seen: i64, acked: i64, now: Instant, limit: Duration) -> bool {
        if let Some((target, since)) = self.waiting {
            if seen < target {
                return now.duration_since(since) >= limit;
            }
            self.waiting = None;
        }
        // Wait for the revision acknowledged now, not a moving one: a busy stream always trails
        // the latest write a little.
        if seen < acked {
            self.waiting = Some((acked, now));
        }
        false
    }
}

/// One open Watch stream.
pub struct WatchConn {
    requests: mpsc::Sender<pb::WatchRequest>,
    responses: tonic::Streaming<pb::WatchResponse>,
}

impl WatchConn {
    /// Opens a stream on `channel` and sends `create`. With `require_leader`, the member ends the
    /// stream when it loses its leader (etcd's `hasleader` metadata, as Kubernetes sets it), so a
    /// watcher on a partitioned member learns of it.
    pub async fn open(
        channel: Channel,
        create: pb::WatchCreateRequest,
        require_leader: bool,
        timeout: Duration,
    ) -> Result<WatchConn, tonic::Status> {
        let (requests, outbound) = mpsc::channel(4);
        let create = pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) };
        requests.try_send(create).map_err(|_| tonic::Status::internal("the request queue is full"))?;
        let outbound = futures::stream::unfold(outbound, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        let mut request = tonic::Request::new(outbound);
        if require_leader {
            request.metadata_mut().insert("hasleader", MetadataValue::from_static("true"));
        }
        let mut client = pb::watch_client::WatchClient::new(channel);
        let responses = with_timeout(timeout, client.watch(request)).await?;
        Ok(WatchConn { requests, responses })
    }

    /// The next response; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<pb::WatchResponse>, tonic::Status> {
        self.responses.message().await
    }

    /// Asks for a progress notification (dropped when requests are queued already).
    pub fn request_progress(&self) {
        let progress = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::ProgressRequest(pb::WatchProgressRequest {})),
        };
        let _ = self.requests.try_send(progress);
    }
}

/// A watch event as the checkers see it.
pub fn event(e: &mvccpb::Event) -> Event {
    let kv = e.kv.clone().unwrap_or_default();
    let kind = if e.r#type == mvccpb::event::EventType::Delete as i32 { EventKind::Delete } else { EventKind::Put };
    Event {
        kind,
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        value: if kind == EventKind::Put { String::from_utf8_lossy(&kv.value).into_owned() } else { String::new() },
        revision: kv.mod_revision,
        is_create: kind == EventKind::Put && kv.create_revision == kv.mod_revision,
        prev_kv: e
            .prev_kv
            .as_ref()
            .map(|p| PrevKv { value: String::from_utf8_lossy(&p.value).into_owned(), mod_revision: p.mod_revision }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_waits_for_the_revision_acknowledged_when_it_started() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let limit = Duration::from_secs(3);
        let mut stall = Stall::default();
        assert!(!stall.stalled(5, 5, at(0), limit), "caught up");
        assert!(!stall.stalled(5, 8, at(100), limit), "starts waiting for 8");
        // A busy stream trails the newest write but reaches each older target: never stalled.
        assert!(!stall.stalled(8, 12, at(2000), limit));
        assert!(!stall.stalled(12, 20, at(4000), limit));
        assert!(!stall.stalled(20, 30, at(6000), limit));
        // Then it stops making progress.
        assert!(!stall.stalled(20, 30, at(8000), limit));
        assert!(stall.stalled(29, 31, at(9000), limit), "30 not reached 3 s after 6 s");
    }

    #[test]
    fn events_convert_with_their_create_flag() {
        let kv = |value: &str, create_revision, mod_revision| mvccpb::KeyValue {
            key: b"k".to_vec(),
            value: value.as_bytes().to_vec(),
            create_revision,
            mod_revision,
            version: 1,
            lease: 0,
        };
        let created = mvccpb::Event { r#type: 0, kv: Some(kv("1", 4, 4)), prev_kv: None };
        let e = event(&created);
        assert_eq!((e.kind, e.value.as_str(), e.revision, e.is_create), (EventKind::Put, "1", 4, true));
        let deleted = mvccpb::Event { r#type: 1, kv: Some(kv("", 0, 6)), prev_kv: Some(kv("1", 4, 4)) };
        let e = event(&deleted);
        assert_eq!((e.kind, e.revision, e.is_create), (EventKind::Delete, 6, false));
        assert_eq!(e.prev_kv, Some(PrevKv { value: "1".into(), mod_revision: 4 }));
    }
}
