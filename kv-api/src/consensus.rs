//! The consensus seam: how the services reach Raft without knowing it.

use std::future::Future;

use proto::etcdserverpb as pb;

use crate::command::{Command, CommandResponse};
use crate::error::Result;

/// A point-in-time copy of a member's store, written out in etcd's snapshot file format by the consensus
/// layer (see [`crate::snapshot`]). `Maintenance.Snapshot` streams it and relies only on its last 32
/// bytes being the SHA-256 digest of the rest (which is what `etcdctl snapshot save` checks, with the
/// size being 32 modulo 512).
#[derive(Debug)]
pub struct SnapshotFile {
    /// Positioned at the start of the copy.
    pub file: std::fs::File,
    /// Bytes in the file, the digest included.
    pub size: u64,
}

/// What the Raft layer tells about itself, for `Maintenance.Status`.
#[derive(Clone, Debug, Default)]
pub struct RaftStatus {
    /// Member id of the current leader, 0 when there is none.
    pub leader: u64,
    pub raft_index: u64,
    pub raft_term: u64,
    pub raft_applied_index: u64,
    pub is_learner: bool,
}

/// Replication of commands and linearizable reads, as the etcd API needs them.
pub trait Consensus: Send + Sync + 'static {
    /// Proposes a write; resolves with the response apply produced, once this member applied it.
    fn propose(&self, cmd: Command) -> impl Future<Output = Result<CommandResponse>> + Send;

    /// Resolves once this member has applied everything committed before the call (read index), so a
    /// read of the local store that follows is linearizable.
    fn read_barrier(&self) -> impl Future<Output = Result<()>> + Send;

    /// A response header with the cluster id, this member's id and the current term (revision 0).
    fn header(&self) -> pb::ResponseHeader;

    fn raft_status(&self) -> RaftStatus;

    /// A consistent point-in-time copy of this member's store (one revision, with its leases and
    /// compaction state), written out for `Maintenance.Snapshot`.
    fn snapshot(&self) -> impl Future<Output = Result<SnapshotFile>> + Send;

    /// The cluster's members, with their published URLs.
    fn members(&self) -> Vec<pb::Member>;

    /// Whether this member currently knows a leader (for requests carrying etcd's `hasleader` metadata).
    fn has_leader(&self) -> bool;

    /// Whether this member is a learner (which serves only serializable reads, as in etcd).
    fn is_learner(&self) -> bool;

    /// Adds a member (a voter, or a learner); answers with the new member and the resulting list.
    fn member_add(
        &self,
        peer_urls: Vec<String>,
        is_learner: bool,
    ) -> impl Future<Output = Result<(pb::Member, Vec<pb::Member>)>> + Send;

    /// Removes a member; answers with the remaining members.
    fn member_remove(&self, id: u64) -> impl Future<Output = Result<Vec<pb::Member>>> + Send;

    /// Changes a member's peer URLs; answers with the resulting members.
    fn member_update(&self, id: u64, peer_urls: Vec<String>) -> impl Future<Output = Result<Vec<pb::Member>>> + Send;

    /// Makes a caught-up learner a voter; answers with the resulting members.
    fn member_promote(&self, id: u64) -> impl Future<Output = Result<Vec<pb::Member>>> + Send;

    /// Restarts a lease's countdown on the leader; answers its granted TTL, or 0 when the lease is unknown.
    fn lease_keep_alive(&self, id: i64) -> impl Future<Output = Result<i64>> + Send;

    /// Seconds left before a lease expires, from the leader; `None` when the lease is unknown.
    fn lease_time_to_live(&self, id: i64) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Every lease id, soonest expiry first, as the leader's deadlines order them (etcd's
    /// `LeaseLeases` sorts by expiry).
    fn leases_by_expiry(&self) -> impl Future<Output = Result<Vec<i64>>> + Send;

    /// Hands leadership to `target` (this member must be the leader).
    fn move_leader(&self, target: u64) -> impl Future<Output = Result<()>> + Send;
}
