//! One gRPC Watch stream carrying any number of watches, delivering what clientv3's `Watch`
//! channels deliver: created replies are swallowed, fragments merged, progress notifications sent
//! to every watch, a compaction or an error closes the watch after one final response, and a
//! broken connection is re-dialed with every open watch resumed after the last revision it saw.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use proto::etcdserverpb as pb;
use proto::mvccpb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::error::CliError;
use crate::global::Conn;

/// A watch as the caller names it: its index in the order watches were added.
pub type WatchHandle = usize;

/// clientv3's `WatchResponse`: the server's response plus, for a watch torn down by an error,
/// the error (`closeErr`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchResponse {
    pub header: pb::ResponseHeader,
    /// `None` only in the response clientv3 makes up for an error (Go's nil slice).
    pub events: Option<Vec<mvccpb::Event>>,
    pub compact_revision: i64,
    pub canceled: bool,
    pub created: bool,
    pub cancel_reason: String,
    pub close_err: Option<String>,
}

impl WatchResponse {
    fn from_pb(resp: pb::WatchResponse) -> Self {
        WatchResponse {
            header: resp.header.unwrap_or_default(),
            events: Some(resp.events),
            compact_revision: resp.compact_revision,
            canceled: resp.canceled,
            created: resp.created,
            cancel_reason: resp.cancel_reason,
            close_err: None,
        }
    }

    /// The final response of a watch ended by `err`.
    fn closed_by(err: String) -> Self {
        WatchResponse { canceled: true, events: None, close_err: Some(err), ..Default::default() }
    }

    pub fn events(&self) -> &[mvccpb::Event] {
        self.events.as_deref().unwrap_or_default()
    }

    /// clientv3's `WatchResponse.Err()`, as text.
    pub fn err(&self) -> Option<String> {
        if let Some(err) = &self.close_err {
            return Some(err.clone());
        }
        if self.compact_revision != 0 {
            return Some(ERR_COMPACTED.to_string());
        }
        if self.canceled {
            if self.cancel_reason.is_empty() {
                return Some(ERR_FUTURE_REV.to_string());
            }
            return Some(status_text(&Status::failed_precondition(self.cancel_reason.clone())));
        }
        None
    }

    /// clientv3's `IsProgressNotify`.
    pub fn is_progress_notify(&self) -> bool {
        self.events().is_empty()
            && !self.canceled
            && !self.created
            && self.compact_revision == 0
            && self.header.revision != 0
    }
}

pub const ERR_COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
const ERR_FUTURE_REV: &str = "etcdserver: mvcc: required revision is a future revision";
const ERR_NO_LEADER: &str = "etcdserver: no leader";

/// What [`WatchStream::next`] hands out.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// A response for one watch (events, a progress notification, or its final error).
    Response(WatchHandle, WatchResponse),
    /// The watch's channel closed: no more responses for it.
    Closed(WatchHandle),
}

struct Watch {
    /// The create request, its start revision moved past everything already delivered.
    request: pb::WatchCreateRequest,
    open: bool,
}

/// The request half and the response half of one gRPC Watch call.
struct Call {
    requests: mpsc::Sender<pb::WatchRequest>,
    responses: tonic::Streaming<pb::WatchResponse>,
}

pub struct WatchStream {
    conn: Conn,
    /// clientv3's `WithRequireLeader`: the server ends the stream when it loses its leader.
    require_leader: bool,
    call: Call,
    watches: Vec<Watch>,
    /// Watches whose create request is on the wire, in order: the server answers them in order.
    pending: VecDeque<WatchHandle>,
    by_id: HashMap<i64, WatchHandle>,
    /// Events of a fragmented response collected so far.
    fragments: Option<pb::WatchResponse>,
    queued: VecDeque<Delivery>,
    /// Set once the stream failed for good; every watch has been closed.
    ended: bool,
}

/// Requests waiting to be written to the stream; it only fills when the server stops reading.
const QUEUE_DEPTH: usize = 64;
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl WatchStream {
    /// Opens a stream with its first watch (a gRPC stream has no response headers before its
    /// first message, so it is never opened empty).
    pub async fn open(
        conn: &Conn,
        require_leader: bool,
        request: pb::WatchCreateRequest,
    ) -> Result<(WatchStream, WatchHandle), CliError> {
        let call = open_call(conn, require_leader, std::slice::from_ref(&request)).await?;
        let stream = WatchStream {
            conn: conn.clone(),
            require_leader,
            call,
            watches: vec![Watch { request, open: true }],
            pending: VecDeque::from([0]),
            by_id: HashMap::new(),
            fragments: None,
            queued: VecDeque::new(),
            ended: false,
        };
        Ok((stream, 0))
    }

    /// Adds a watch on the same stream.
    pub async fn add(&mut self, request: pb::WatchCreateRequest) -> WatchHandle {
        let handle = self.watches.len();
        self.watches.push(Watch { request: request.clone(), open: true });
        if self.ended {
            self.close_with(handle, "watch stream ended".to_string());
            return handle;
        }
        self.pending.push_back(handle);
        // A failed send means the call broke; `next` notices and resends every open watch.
        let _ = self.call.requests.send(create(request)).await;
        handle
    }

    /// clientv3's `RequestProgress`: the server answers with a progress notification for every
    /// watch on the stream.
    pub async fn request_progress(&mut self) {
        let request = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::ProgressRequest(pb::WatchProgressRequest {})),
        };
        let _ = self.call.requests.send(request).await;
    }

    /// The next delivery; `None` once every watch is closed and nothing is left to deliver.
    pub async fn next(&mut self) -> Option<Delivery> {
        let mut backoff = Duration::from_millis(10);
        loop {
            if let Some(delivery) = self.queued.pop_front() {
                return Some(delivery);
            }
            if self.ended || self.watches.iter().all(|w| !w.open) {
                return None;
            }
            match self.call.responses.message().await {
                Ok(Some(resp)) => self.handle(resp),
                // A server shutting down ends the stream cleanly as tonic sees it, where grpc-go
                // sees "transport is closing" (Unavailable): both mean "come back later".
                Ok(None) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    self.resume().await;
                }
                Err(status) if retryable(&status) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    self.resume().await;
                }
                Err(status) => self.end(status_text(&status)),
            }
        }
    }

    /// Re-dials and re-creates every open watch from the revision after the last one delivered.
    /// A failed dial leaves the old, broken call in place: the next receive fails again and
    /// comes back here.
    async fn resume(&mut self) {
        let open: Vec<WatchHandle> = (0..self.watches.len()).filter(|&h| self.watches[h].open).collect();
        let requests: Vec<_> = open.iter().map(|&h| self.watches[h].request.clone()).collect();
        if let Ok(call) = open_call(&self.conn, self.require_leader, &requests).await {
            self.call = call;
            self.pending = open.into();
            self.by_id.clear();
            self.fragments = None;
        }
    }

    /// Sorts one server response into deliveries. Never awaits, so `next` stays cancel-safe
    /// (a `select!` may drop it between two messages, never in the middle of one).
    fn handle(&mut self, resp: pb::WatchResponse) {
        let resp = match self.fragments.take() {
            Some(mut merged) if !resp.created && !resp.canceled && merged.watch_id == resp.watch_id => {
                merged.events.extend(resp.events);
                merged.fragment = resp.fragment;
                merged
            }
            _ => resp,
        };
        if resp.created {
            self.on_created(resp);
        } else if resp.canceled && resp.compact_revision == 0 {
            if let Some(handle) = self.by_id.remove(&resp.watch_id) {
                self.watches[handle].open = false;
                self.queued.push_back(Delivery::Closed(handle));
            }
        } else if resp.fragment {
            self.fragments = Some(resp);
        } else {
            self.dispatch(resp);
        }
    }

    fn on_created(&mut self, resp: pb::WatchResponse) {
        let Some(handle) = self.pending.pop_front() else { return };
        if resp.watch_id == -1 || (resp.canceled && !resp.cancel_reason.is_empty()) {
            self.close_with(handle, resp.cancel_reason);
            return;
        }
        let watch = &mut self.watches[handle];
        if watch.request.start_revision == 0 {
            // A watch "from now" resumes after the revision it was created at.
            watch.request.start_revision = resp.header.as_ref().map_or(0, |h| h.revision) + 1;
        }
        if watch.open {
            self.by_id.insert(resp.watch_id, handle);
        }
    }

    fn dispatch(&mut self, resp: pb::WatchResponse) {
        let watch_id = resp.watch_id;
        let resp = WatchResponse::from_pb(resp);
        if resp.is_progress_notify() && watch_id == -1 {
            let mut handles: Vec<WatchHandle> = self.by_id.values().copied().collect();
            handles.sort_unstable();
            for handle in handles {
                self.watches[handle].request.start_revision = resp.header.revision + 1;
                self.queued.push_back(Delivery::Response(handle, resp.clone()));
            }
            return;
        }
        let Some(&handle) = self.by_id.get(&watch_id) else {
            // Events for a watch we no longer know: cancel it on the server, as clientv3 does.
            let cancel = pb::watch_request::RequestUnion::CancelRequest(pb::WatchCancelRequest { watch_id });
            let _ = self.call.requests.try_send(pb::WatchRequest { request_union: Some(cancel) });
            return;
        };
        let next_rev = match resp.events().last() {
            Some(event) => event.kv.as_ref().map_or(0, |kv| kv.mod_revision) + 1,
            None => resp.header.revision + 1,
        };
        self.watches[handle].request.start_revision = next_rev;
        let compacted = resp.compact_revision != 0;
        self.queued.push_back(Delivery::Response(handle, resp));
        if compacted {
            self.by_id.remove(&watch_id);
            self.watches[handle].open = false;
            self.queued.push_back(Delivery::Closed(handle));
        }
    }

    /// Closes one watch with a final error response, as clientv3's `closeErr`.
    fn close_with(&mut self, handle: WatchHandle, err: String) {
        self.watches[handle].open = false;
        self.queued.push_back(Delivery::Response(handle, WatchResponse::closed_by(err)));
        self.queued.push_back(Delivery::Closed(handle));
    }

    /// The stream failed for good: every open watch gets the error and closes.
    fn end(&mut self, err: String) {
        self.ended = true;
        for handle in 0..self.watches.len() {
            if self.watches[handle].open {
                self.close_with(handle, err.clone());
            }
        }
    }
}

/// Starts a Watch call whose first messages are `requests`.
async fn open_call(conn: &Conn, require_leader: bool, requests: &[pb::WatchCreateRequest]) -> Result<Call, Status> {
    let (tx, rx) = mpsc::channel(QUEUE_DEPTH.max(requests.len()));
    for request in requests {
        // Cannot fail: the receiver is alive and the queue has room for all of them.
        let _ = tx.try_send(create(request.clone()));
    }
    let mut call = tonic::Request::new(ReceiverStream::new(rx));
    if require_leader {
        call.metadata_mut().insert("hasleader", MetadataValue::from_static("true"));
    }
    let responses = pb::watch_client::WatchClient::new(conn.clone()).watch(call).await?.into_inner();
    Ok(Call { requests: tx, responses })
}

fn create(request: pb::WatchCreateRequest) -> pb::WatchRequest {
    pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(request)) }
}

/// clientv3's `isHaltErr` inverted: Unavailable and Internal mean "the system will be right
/// back", except a lost leader when the watch requires one. A connection lost mid-stream is
/// Unavailable in grpc-go but comes out of tonic as Unknown with hyper's or h2's text.
fn retryable(status: &Status) -> bool {
    let lost_connection = status.code() == Code::Unknown
        && ["h2 protocol error", "transport error", "connection"].iter().any(|m| status.message().contains(m));
    (matches!(status.code(), Code::Unavailable | Code::Internal) || lost_connection)
        && status.message() != ERR_NO_LEADER
}

/// An error as clientv3 words it (etcd's own errors bare, others in grpc-go's form).
pub fn status_text(status: &Status) -> String {
    CliError::from(status.clone()).message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: mvccpb::event::EventType, rev: i64) -> mvccpb::Event {
        let kv = mvccpb::KeyValue { key: b"k".to_vec(), mod_revision: rev, ..Default::default() };
        mvccpb::Event { r#type: kind as i32, kv: Some(kv), prev_kv: None }
    }

    fn header(revision: i64) -> pb::ResponseHeader {
        pb::ResponseHeader { revision, ..Default::default() }
    }

    #[test]
    fn errors_like_clientv3() {
        let compacted = WatchResponse { compact_revision: 3, canceled: true, ..Default::default() };
        assert_eq!(compacted.err().as_deref(), Some(ERR_COMPACTED));
        let canceled = WatchResponse { canceled: true, ..Default::default() };
        assert_eq!(canceled.err().as_deref(), Some(ERR_FUTURE_REV));
        let reason = WatchResponse { canceled: true, cancel_reason: "boom".into(), ..Default::default() };
        assert_eq!(reason.err().as_deref(), Some("rpc error: code = FailedPrecondition desc = boom"));
        assert_eq!(WatchResponse::closed_by("EOF".into()).err().as_deref(), Some("EOF"));
        assert_eq!(WatchResponse::default().err(), None);
    }

    #[test]
    fn progress_notify() {
        let progress = WatchResponse { header: header(7), events: Some(vec![]), ..Default::default() };
        assert!(progress.is_progress_notify());
        let with_events = WatchResponse {
            header: header(7),
            events: Some(vec![event(mvccpb::event::EventType::Put, 7)]),
            ..Default::default()
        };
        assert!(!with_events.is_progress_notify());
        assert!(!WatchResponse::default().is_progress_notify());
    }

    #[test]
    fn retry_only_transient_errors() {
        assert!(retryable(&Status::unavailable("connection reset")));
        assert!(retryable(&Status::internal("frame")));
        assert!(retryable(&Status::unknown("h2 protocol error: error reading a body from connection")));
        assert!(!retryable(&Status::unknown("etcdserver: request timed out")));
        assert!(!retryable(&Status::unavailable(ERR_NO_LEADER)));
        assert!(!retryable(&Status::permission_denied("etcdserver: permission denied")));
    }
}
