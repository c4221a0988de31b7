//! Outbound Raft RPC to peers.
//!
//! A member of a one-voter cluster never sends Raft RPCs; the tonic peer network over `raftpb` arrives
//! with multi-member clusters. Until then every RPC reports the peer unreachable, which openraft handles
//! by backing off, so nothing here can affect the single member.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};

use crate::typ::{MemberNode, NodeId, TypeConfig};

#[derive(Debug, thiserror::Error)]
#[error("peer {0} is unreachable: this member has no peer network yet")]
struct NoPeerNetwork(NodeId);

/// Creates [`PeerClient`]s.
#[derive(Clone, Debug, Default)]
pub struct PeerNetwork;

/// The connection to one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
}

impl PeerClient {
    fn unreachable<E: std::error::Error>(&self) -> RPCError<NodeId, MemberNode, E> {
        RPCError::Unreachable(Unreachable::new(&NoPeerNetwork(self.target)))
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, _node: &MemberNode) -> Self::Network {
        PeerClient { target }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, MemberNode, RaftError<NodeId>>> {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, MemberNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, MemberNode, RaftError<NodeId>>> {
        Err(self.unreachable())
    }
}
