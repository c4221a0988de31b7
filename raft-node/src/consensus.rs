//! [`kv_api::Consensus`] on openraft: proposals through `client_write`, linearizable reads through read
//! index (`ensure_linearizable`).

use std::time::Duration;

use kv_api::{Command, CommandResponse, Error, RaftStatus};
use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};
use openraft::ServerState;
use proto::etcdserverpb as pb;

use crate::typ::{MemberNode, NodeId, Raft};

/// How long a request waits for Raft before failing with etcd's "request timed out" (etcd: 5 s plus two
/// election timeouts).
pub fn request_timeout(election_timeout: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election_timeout
}

pub struct RaftConsensus {
    raft: Raft,
    member_id: NodeId,
    cluster_id: u64,
    timeout: Duration,
}

impl RaftConsensus {
    pub fn new(raft: Raft, member_id: NodeId, cluster_id: u64, timeout: Duration) -> Self {
        Self {
            raft,
            member_id,
            cluster_id,
            timeout,
        }
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }
}

fn forward_error(forward: &ForwardToLeader<NodeId, MemberNode>) -> Error {
    match forward.leader_id {
        None => Error::NoLeader,
        // Forwarding to the leader arrives with multi-member clusters; until then this member can't serve.
        Some(_) => Error::NotCapable,
    }
}

fn write_error(err: RaftError<NodeId, ClientWriteError<NodeId, MemberNode>>) -> Error {
    match err {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => forward_error(&forward),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => Error::Internal(e.to_string()),
        RaftError::Fatal(_) => Error::Stopped,
    }
}

fn read_error(err: RaftError<NodeId, CheckIsLeaderError<NodeId, MemberNode>>) -> Error {
    match err {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward)) => forward_error(&forward),
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)) => Error::Timeout,
        RaftError::Fatal(_) => Error::Stopped,
    }
}

impl kv_api::Consensus for RaftConsensus {
    async fn propose(&self, cmd: Command) -> kv_api::Result<CommandResponse> {
        let written = tokio::time::timeout(self.timeout, self.raft.client_write(cmd))
            .await
            .map_err(|_| Error::Timeout)?
            .map_err(write_error)?;
        written
            .data
            .unwrap_or_else(|| Err(Error::Internal("a command was applied without a response".into())))
    }

    async fn read_barrier(&self) -> kv_api::Result<()> {
        tokio::time::timeout(self.timeout, self.raft.ensure_linearizable())
            .await
            .map_err(|_| Error::Timeout)?
            .map_err(read_error)?;
        Ok(())
    }

    fn header(&self) -> pb::ResponseHeader {
        let term = self.raft.metrics().borrow().current_term;
        pb::ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.member_id,
            revision: 0,
            raft_term: term,
        }
    }

    fn raft_status(&self) -> RaftStatus {
        let metrics = self.raft.metrics().borrow().clone();
        RaftStatus {
            leader: metrics.current_leader.unwrap_or(0),
            raft_index: metrics.last_log_index.unwrap_or(0),
            raft_term: metrics.current_term,
            raft_applied_index: metrics.last_applied.map_or(0, |id| id.index),
            is_learner: metrics.state == ServerState::Learner,
        }
    }

    fn members(&self) -> Vec<pb::Member> {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, node)| pb::Member {
                id: *id,
                name: node.name.clone(),
                peer_ur_ls: node.peer_urls.clone(),
                client_ur_ls: node.client_urls.clone(),
                is_learner: !voters.contains(id),
            })
            .collect()
    }
}
