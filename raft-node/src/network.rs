//! Outbound Raft RPC to peers over tonic (`raftpb.RaftPeer`), openraft messages encoded with bincode.
//!
//! Connections are made lazily by a [`PeerDialer`] (this member's own peer IP, TLS for `https://`). One
//! channel per peer URL is
//! shared by every client openraft asks for: openraft makes a fresh client for each read-index quorum
//! round and each vote, and a fresh TCP and HTTP/2 handshake per linearizable read is what it would
//! otherwise cost. A channel reconnects by itself after its peer restarts.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use proto::raftpb;
use proto::raftpb::raft_peer_client::RaftPeerClient;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::Channel;

use crate::connectivity::Connectivity;
use crate::dial::PeerDialer;
use crate::storage::{decode, encode};
use crate::typ::{MemberNode, NodeId, TypeConfig};

/// Creates [`PeerClient`]s.
#[derive(Clone, Debug, Default)]
pub struct PeerNetwork {
    dialer: PeerDialer,
    /// Which peers answer, for `--strict-reconfig-check`.
    connectivity: Connectivity,
    /// The channel to each peer URL, made on first use.
    channels: Arc<Mutex<HashMap<String, Channel>>>,
}

impl PeerNetwork {
    pub fn new(dialer: PeerDialer, connectivity: Connectivity) -> Self {
        PeerNetwork { dialer, connectivity, channels: Arc::default() }
    }

    /// The shared channel to `url`, or `None` when it cannot be dialled.
    pub(crate) fn channel(&self, url: &str) -> Option<Channel> {
        let mut channels = self.channels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(channel) = channels.get(url) {
            return Some(channel.clone());
        }
        let channel = self.dialer.channel(url)?;
        channels.insert(url.to_string(), channel.clone());
        Some(channel)
    }
}

/// The connection to one peer.
pub struct PeerClient {
    target: NodeId,
    node: MemberNode,
    client: Option<RaftPeerClient<Channel>>,
    connectivity: Connectivity,
    /// Whether the next long append is first probed (see [`PeerClient::append_entries`]): from the start
    /// of a replication stream until a probe finds the end of what the follower holds.
    probing: bool,
}

/// Entries in an append from which a probing stream first asks whether the follower already holds them.
const PROBE_FROM_ENTRIES: usize = 16;

#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("peer {0} has no usable peer URL")]
    NoUrl(NodeId),
    #[error("encoding a Raft message: {0}")]
    Codec(String),
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &MemberNode) -> Self::Network {
        let client = node.peer_urls.first().and_then(|url| self.channel(url)).map(|channel| {
            RaftPeerClient::new(channel).max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX)
        });
        PeerClient { target, node: node.clone(), client, connectivity: self.connectivity.clone(), probing: true }
    }
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, MemberNode, E>>;

impl PeerClient {
    async fn send_append(
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let request = with_deadline(message(rpc)?, option);
        let reply = self.client()?.append_entries(request).await;
        self.reply(reply)
    }

    fn client<E: std::error::Error>(&self) -> RpcResult<RaftPeerClient<Channel>, E> {
        self.client.clone().ok_or_else(|| RPCError::Unreachable(Unreachable::new(&PeerError::NoUrl(self.target))))
    }

    /// Turns the peer's encoded `Result` into openraft's RPC result.
    fn reply<T: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &self,
        reply: Result<tonic::Response<raftpb::RaftMessage>, tonic::Status>,
    ) -> RpcResult<T, E> {
        let message = match reply {
            Ok(reply) => {
                self.connectivity.answered(self.target);
                reply.into_inner()
            }
            // Out of time (ours or the peer's deadline): the peer may be slow or the link lossy, not gone.
            // openraft backs off for half a second after `Unreachable`, and under delay or loss that
            // pause, not the link, would stop commits; any other error resends at the next heartbeat.
            Err(status) if matches!(status.code(), tonic::Code::Cancelled | tonic::Code::DeadlineExceeded) => {
                return Err(RPCError::Network(NetworkError::new(&status)));
            }
            Err(status) => {
                self.connectivity.failed(self.target);
                return Err(RPCError::Unreachable(Unreachable::new(&status)));
            }
        };
        let result: Result<T, E> = decode(&message.payload)
            .map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Codec(e.to_string()))))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e)))
    }
}

fn message<T: Serialize, E: std::error::Error>(value: &T) -> RpcResult<raftpb::RaftMessage, E> {
    let payload = encode(value).map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Codec(e.to_string()))))?;
    Ok(raftpb::RaftMessage { payload })
}

fn with_deadline<T>(message: T, option: &RPCOption) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(option.hard_ttl());
    request
}

impl RaftNetwork<TypeConfig> for PeerClient {
    /// A new leader does not know how much of its log a follower holds. openraft 0.9 then starts from the
    /// middle of the unpurged log and sends everything from there, 300 entries to a message, although
    /// after a hand-over the follower holds it all: after a busy run, many megabytes read from disk and
    /// sent for nothing while writes wait for the new leader's first commit (55-85 ms held at a
    /// SIGTERM). So while a stream is probing, a long append is first sent empty, with its last entry's
    /// id as the previous one: by Raft's log matching, a follower that has that entry has all the
    /// others, and this answer is the whole append's. Any other answer sends the append as it is (a
    /// conflicting tail the probe made the follower drop is one the append would have replaced), and
    /// the stream stops probing.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        if self.probing && rpc.entries.len() >= PROBE_FROM_ENTRIES {
            let probe = AppendEntriesRequest {
                vote: rpc.vote,
                prev_log_id: rpc.entries.last().map(|entry| entry.log_id),
                leader_commit: rpc.leader_commit,
                entries: Vec::new(),
            };
            match self.send_append(&probe, &option).await? {
                AppendEntriesResponse::Success => {
                    crate::metrics::metrics().append_entries_skipped.fetch_add(rpc.entries.len() as u64, Relaxed);
                    return Ok(AppendEntriesResponse::Success);
                }
                higher @ AppendEntriesResponse::HigherVote(_) => return Ok(higher),
                AppendEntriesResponse::Conflict | AppendEntriesResponse::PartialSuccess(_) => self.probing = false,
            }
        }
        self.send_append(&rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let meta = encode(&(&rpc.vote, &rpc.meta))
            .map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Codec(e.to_string()))))?;
        let chunk = raftpb::SnapshotChunk { meta, offset: rpc.offset, data: rpc.data, done: rpc.done };
        let request = with_deadline(tokio_stream::iter([chunk]), &option);
        let reply = self.client()?.install_snapshot(request).await;
        self.reply(reply)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, RaftError<NodeId>> {
        let request = with_deadline(message(&rpc)?, &option);
        let reply = self.client()?.vote(request).await;
        self.reply(reply)
    }
}
