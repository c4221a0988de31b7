//! Sending [`LeaderRequest`]s to another member over the peer network, with one cached connection per peer
//! URL (made by the member's [`PeerDialer`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kv_api::Error;
use parking_lot::Mutex;
use proto::raftpb;
use proto::raftpb::raft_peer_client::RaftPeerClient;
use tonic::transport::Channel;
use tracing::debug;

use crate::dial::PeerDialer;
use crate::leader_wire::{unix_ms, Forwarded, LeaderReply, LeaderRequest};
use crate::storage::{decode, encode};
use crate::typ::MemberNode;

/// Connections to peers for forwarded requests.
#[derive(Clone, Default)]
pub struct Forwarder {
    dialer: PeerDialer,
    clients: Arc<Mutex<HashMap<String, RaftPeerClient<Channel>>>>,
}

impl Forwarder {
    pub fn new(dialer: PeerDialer) -> Self {
        Self { dialer, clients: Default::default() }
    }

    fn client(&self, node: &MemberNode) -> Result<RaftPeerClient<Channel>, Error> {
        let url = node.peer_urls.first().ok_or(Error::NotLeader)?;
        let mut clients = self.clients.lock();
        if let Some(client) = clients.get(url) {
            return Ok(client.clone());
        }
        let channel = self.dialer.channel(url).ok_or(Error::MemberBadUrls)?;
        let client = RaftPeerClient::new(channel).max_decoding_message_size(usize::MAX);
        clients.insert(url.clone(), client.clone());
        Ok(client)
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
        let mut client = match self.client(node) {
            Ok(client) => client,
            Err(err) => return Ok(Err(err)),
        };
        let mut request = tonic::Request::new(raftpb::RaftMessage { payload });
        request.set_timeout(timeout);
        // The deadline travels to the peer, but the client side must enforce it too: a paused peer accepts
        // the connection and never answers.
        let sent = tokio::time::timeout(timeout, client.forward(request)).await;
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
