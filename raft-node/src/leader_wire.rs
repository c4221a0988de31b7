//! What members ask of the leader (or of each other) over the peer network, and what comes back: the
//! types `leader`, `forward`, `election` and `group_commit` share, in a file of their own so that none
//! of them reaches back into another for them.

use std::time::{SystemTime, UNIX_EPOCH};

use kv_api::{Command, CommandResponse, Error};
use openraft::error::{ClientWriteError, RaftError};
use proto::etcdserverpb as pb;
use serde::{Deserialize, Serialize};

use crate::typ::{MemberNode, NodeId};

/// What a would-be candidate tells the members it asks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PreVote {
    pub candidate: NodeId,
    pub last_log_index: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreVoteAnswer {
    Granted,
    Refused,
    /// The candidate is not a member of the cluster any more.
    Removed,
}

/// A request for the leader (or, for [`LeaderRequest::ClusterInfo`], for any member).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderRequest {
    Write(Command),
    ReadIndex,
    MemberAdd {
        peer_urls: Vec<String>,
        is_learner: bool,
    },
    MemberRemove {
        id: NodeId,
    },
    MemberUpdate {
        id: NodeId,
        peer_urls: Vec<String>,
    },
    MemberPromote {
        id: NodeId,
    },
    /// A member announces its name and client URLs (as etcd members publish their attributes).
    Publish {
        id: NodeId,
        name: String,
        client_urls: Vec<String>,
    },
    MoveLeader {
        target: NodeId,
    },
    /// Restart a lease's countdown (a keep-alive).
    LeaseKeepAlive {
        id: i64,
    },
    /// Seconds left on a lease.
    LeaseTimeToLive {
        id: i64,
    },
    /// Every lease, soonest expiry first.
    LeasesByExpiry,
    /// Sent by the leader to a transferee: campaign now.
    Campaign,
    /// The cluster id and members, for a member joining with `--initial-cluster-state existing`.
    ClusterInfo,
    /// Would this member vote for the sender (see [`crate::election`])?
    PreVote(PreVote),
    /// The leader's beat, apart from Raft's appends (see [`crate::election`]): answered at once with
    /// whether this member follows `leader` in `term`.
    Beat {
        term: u64,
        leader: NodeId,
    },
    /// Writes forwarded together ([`crate::forward_batch`]), each with its sender's deadline (as in
    /// [`Forwarded`]); answered by [`LeaderReply::WrittenMany`], in the same order.
    Writes(Vec<(u64, Command)>),
}

/// A [`LeaderRequest`] as it travels to another member, with the sender's deadline (milliseconds since
/// the Unix epoch): past it the sender has already answered its client "request timed out", so a request
/// that arrives late (the receiver was paused or cut off) is dropped, never run behind the client's back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Forwarded {
    pub deadline_unix_ms: u64,
    pub request: LeaderRequest,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl LeaderRequest {
    /// Whether sending the request twice does no harm (so a lost request may be sent again).
    pub fn is_repeatable(&self) -> bool {
        matches!(
            self,
            LeaderRequest::ReadIndex
                | LeaderRequest::ClusterInfo
                | LeaderRequest::Publish { .. }
                | LeaderRequest::PreVote(_)
                | LeaderRequest::Beat { .. }
                | LeaderRequest::LeaseTimeToLive { .. }
                | LeaderRequest::LeasesByExpiry
        )
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderReply {
    /// The write is committed at `index`; `applied` is what apply produced.
    Written {
        index: u64,
        applied: kv_api::Result<CommandResponse>,
    },
    /// Each of [`LeaderRequest::Writes`]'s writes: the index it is committed at and what apply produced,
    /// or why it was not written.
    WrittenMany(Vec<Result<(u64, kv_api::Result<CommandResponse>), Error>>),
    /// Apply everything up to `index`, then a local read is linearizable.
    ReadIndex(u64),
    PreVote(PreVoteAnswer),
    /// Whether the member follows the beat's sender in its term.
    Beat(bool),
    /// A lease's granted TTL after a keep-alive (0: unknown).
    LeaseTtl(i64),
    /// Seconds left on a lease (`None`: unknown).
    LeaseRemaining(Option<i64>),
    /// Lease ids in the order asked for.
    LeaseIds(Vec<i64>),
    /// A membership change committed at `index`, with the member it added.
    Members {
        index: u64,
        added: Option<pb::Member>,
        members: Vec<pb::Member>,
    },
    ClusterInfo {
        cluster_id: u64,
        members: Vec<pb::Member>,
    },
    Done,
}

/// A write or membership change that failed after it reached Raft.
pub(crate) fn submitted_error(err: RaftError<NodeId, ClientWriteError<NodeId, MemberNode>>) -> Error {
    match err {
        RaftError::APIError(err) => write_error(err),
        RaftError::Fatal(_) => Error::Stopped,
    }
}

/// A refused write or membership change.
pub fn write_error(err: ClientWriteError<NodeId, MemberNode>) -> Error {
    match err {
        ClientWriteError::ForwardToLeader(forward) if forward.leader_id.is_none() => Error::NoLeader,
        ClientWriteError::ForwardToLeader(_) => Error::LeaderChanged,
        ClientWriteError::ChangeMembershipError(e) => Error::Internal(e.to_string()),
    }
}
