//! Sending [`LeaderRequest`]s to another member over the peer network, with cached connections per peer
//! URL (made by the member's [`PeerDialer`]).
//!
//! Each peer gets [`lanes::LANES`] connections ([`Lanes`]) and requests take one at a time. A lost TCP
//! segment holds up everything after it on its connection while Linux retransmits it (200 ms at least,
//! doubling each time the copy is lost too): with 20 % loss on peer links, writes forwarded behind one
//! waited out their client's two seconds. So when a request sent on the current connection has waited
//! [`STALLED`] with no answer coming back on it since, new requests take the next connection; the
//! waiting ones wait on (a forwarded write is never sent twice).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kv_api::Error;
use parking_lot::Mutex;
use proto::raftpb;
use proto::raftpb::raft_peer_client::RaftPeerClient;
use tonic::transport::Channel;
use tracing::debug;

use crate::dial::PeerDialer;
use crate::lanes::{self, Lanes};
use crate::leader_wire::{unix_ms, Forwarded, LeaderReply, LeaderRequest};
use crate::storage::{decode, encode};
use crate::typ::MemberNode;

/// How long a request waits with no answer on its connection before new requests take the next one.
const STALLED: Duration = Duration::from_millis(300);

/// Connections to peers for forwarded requests.
#[derive(Clone, Default)]
pub struct Forwarder {
    dialer: PeerDialer,
    links: Arc<Mutex<HashMap<String, Arc<Links>>>>,
}

/// The connections to one peer, and since when a request waits on each (see the module doc).
struct Links {
    lanes: Lanes<RaftPeerClient<Channel>>,
    /// Per connection: when (ms after `epoch`, never 0) the first request sent on it since its last
    /// answer went out; 0 when no request waits for one.
    waiting_since: Vec<AtomicU64>,
    epoch: Instant,
}

impl Links {
    fn new(clients: Vec<RaftPeerClient<Channel>>) -> Self {
        let waiting_since = clients.iter().map(|_| AtomicU64::new(0)).collect();
        Self { lanes: Lanes::new(clients), waiting_since, epoch: Instant::now() }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// The connection a new request takes, its client, and the request marked as waiting on it.
    fn send(&self) -> (usize, RaftPeerClient<Channel>) {
        let now = self.now_ms();
        let mut link = self.lanes.current();
        let since = self.waiting_since[link].load(Relaxed);
        if since != 0 && now.saturating_sub(since) >= STALLED.as_millis() as u64 {
            if let Some(next) = self.lanes.move_on(link) {
                debug!(from = link, to = next, "a forwarded request waits on a silent connection; moving on");
                // What still waits there from an earlier turn was given up on: the measure starts afresh.
                self.waiting_since[next].store(0, Relaxed);
            }
            link = self.lanes.current();
        }
        let _ = self.waiting_since[link].compare_exchange(0, now, Relaxed, Relaxed);
        self.lanes.client(Some(link))
    }

    /// An answer came back on `link`: it delivers.
    fn answered(&self, link: usize) {
        self.waiting_since[link].store(0, Relaxed);
    }
}

impl Forwarder {
    pub fn new(dialer: PeerDialer) -> Self {
        Self { dialer, links: Default::default() }
    }

    fn links(&self, node: &MemberNode) -> Result<Arc<Links>, Error> {
        let url = node.peer_urls.first().ok_or(Error::NotLeader)?;
        let mut links = self.links.lock();
        if let Some(links) = links.get(url) {
            return Ok(links.clone());
        }
        // Lazy: a connection is made when a request first takes it.
        let channels = lanes::channels(&self.dialer, url).ok_or(Error::MemberBadUrls)?;
        let clients = channels.into_iter().map(|c| RaftPeerClient::new(c).max_decoding_message_size(usize::MAX));
        let made = Arc::new(Links::new(clients.collect()));
        links.insert(url.clone(), made.clone());
        Ok(made)
    }

    /// Sends `req` to `node` and waits up to `timeout` for its answer.
    ///
    /// [`Error::NotLeader`] means the request was not started anywhere and may be sent again (to the new
    /// leader). A request that may have reached the peer is never reported that way unless it is harmless to
    /// repeat: a write that got lost in transit answers "request timed out", as etcd's does.
    pub async fn send(&self, node: &MemberNode, req: &LeaderRequest, timeout: Duration) -> Result<LeaderReply, Error> {
        match self.call(node, req, timeout).await {
            Ok(answer) => answer,
            Err(status) => Err(transport_error(req, &status)),
        }
    }

    /// [`Forwarder::send`] with the transport's own failure, for callers that tell failures apart.
    pub async fn call(
        &self,
        node: &MemberNode,
        req: &LeaderRequest,
        timeout: Duration,
    ) -> Result<Result<LeaderReply, Error>, tonic::Status> {
        let forwarded = Forwarded { deadline_unix_ms: unix_ms(SystemTime::now() + timeout), request: req.clone() };
        let payload = match encode(&forwarded) {
            Ok(payload) => payload,
            Err(e) => return Ok(Err(Error::Internal(format!("encoding a forwarded request: {e}")))),
        };
        let links = match self.links(node) {
            Ok(links) => links,
            Err(err) => return Ok(Err(err)),
        };
        let (link, mut client) = links.send();
        let mut request = tonic::Request::new(raftpb::RaftMessage { payload });
        request.set_timeout(timeout);
        // The deadline travels to the peer, but the client side must enforce it too: a paused peer accepts
        // the connection and never answers.
        let sent = tokio::time::timeout(timeout, client.forward(request)).await;
        if matches!(&sent, Ok(Ok(_))) {
            links.answered(link);
        }
        let reply = sent.unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer from the peer in time")));
        let reply = reply.inspect_err(|status| debug!(peer = %node, ?status, "forwarding failed"))?.into_inner();
        Ok(decode::<Result<LeaderReply, Error>>(&reply.payload)
            .map_err(|e| Error::Internal(format!("decoding a forwarded reply: {e}")))
            .and_then(|answer| answer))
    }
}

/// What a request that did not get its answer over the wire gets instead.
pub fn transport_error(req: &LeaderRequest, status: &tonic::Status) -> Error {
    if req.is_repeatable() || never_sent(status) {
        Error::NotLeader
    } else {
        Error::Timeout
    }
}

/// Whether the request certainly never left this member: the connection to the peer could not be made,
/// or it closed while the request still waited to be sent on it (hyper hands such a request back
/// unsent as "canceled"; a peer that stops closes its connections once its answers are out).
fn never_sent(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        if err.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_canceled) {
            return true;
        }
        if err.to_string() == "tcp connect error" {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::Empty;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    use super::*;

    /// A request hyper never put on the wire: its connection closed while the request waited for it.
    async fn unsent_request_error() -> hyper::Error {
        let (ours, _theirs) = tokio::io::duplex(64 * 1024);
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(ours)).await.expect("handshake");
        let request = http::Request::post("http://peer/raftpb.RaftPeer/Forward").body(Empty::<Bytes>::new()).unwrap();
        let answer = sender.send_request(request);
        // The connection closes before it ever runs, with the request still queued for it.
        drop(connection);
        answer.await.expect_err("the connection is gone")
    }

    #[tokio::test]
    async fn new_requests_leave_a_connection_whose_request_waited_too_long_without_an_answer() {
        let dialer = PeerDialer::default();
        let client = || RaftPeerClient::new(dialer.channel("http://127.0.0.1:1").expect("channel"));
        let links = Links::new((0..lanes::LANES).map(|_| client()).collect());
        assert_eq!(links.send().0, 0);
        links.answered(0);
        // Answered: a request sent long after still takes the same connection.
        std::thread::sleep(STALLED + Duration::from_millis(20));
        assert_eq!(links.send().0, 0);
        assert_eq!(links.send().0, 0, "the first request has not waited long yet");
        std::thread::sleep(STALLED + Duration::from_millis(20));
        assert_eq!(links.send().0, 1, "the request on the first connection waited too long");
        assert_eq!(links.send().0, 1);
        links.answered(1);
        std::thread::sleep(STALLED + Duration::from_millis(20));
        assert_eq!(links.send().0, 1, "the second connection answers");
        // Round the lanes back to the first, whose request never got its answer: it starts afresh.
        std::thread::sleep(STALLED + Duration::from_millis(20));
        assert_eq!(links.send().0, 2);
        std::thread::sleep(STALLED + Duration::from_millis(20));
        assert_eq!(links.send().0, 0);
        assert_eq!(links.send().0, 0, "the first connection's old request does not count");
    }

    #[tokio::test]
    async fn a_write_hyper_handed_back_unsent_may_go_to_the_new_leader() {
        let unsent = unsent_request_error().await;
        assert!(unsent.is_canceled(), "{unsent:?}");
        let status = tonic::Status::from_error(Box::new(unsent));
        assert!(matches!(transport_error(&LeaderRequest::Write(put()), &status), Error::NotLeader));
    }

    #[test]
    fn a_write_lost_in_transit_times_out_and_a_refused_connection_never_sent_it() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let lost = tonic::Status::from_error(Box::new(reset));
        assert!(matches!(transport_error(&LeaderRequest::Write(put()), &lost), Error::Timeout));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let refused = tonic::Status::from_error(Box::new(refused));
        assert!(matches!(transport_error(&LeaderRequest::Write(put()), &refused), Error::NotLeader));
    }

    fn put() -> kv_api::Command {
        kv_api::Command::Put(proto::etcdserverpb::PutRequest { key: b"k".to_vec(), ..Default::default() })
    }
}
