//! The one openraft type configuration of a member, and short aliases for openraft's generic types.

use std::fmt;
use std::sync::Arc;

use kv_api::{Command, CommandResponse};
use serde::{Deserialize, Serialize};

/// A member as Raft membership records it: its name and the URLs it publishes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberNode {
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
}

impl fmt::Display for MemberNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (peer {})", self.name, self.peer_urls.join(","))
    }
}

/// The commands of one log entry (shared: the log keeps its newest entries in memory for replication,
/// and copies of an entry cost a pointer).
pub type Commands = Arc<Vec<Command>>;

/// What applying one log entry produced: each of its commands' responses (or deterministic errors), in
/// order; nothing for blank and membership entries.
pub type Applied = Vec<kv_api::Result<CommandResponse>>;

openraft::declare_raft_types!(
    /// Types of a member: etcd commands in the log (many clients' writes to an entry, see
    /// [`crate::group_commit`]), etcd-style u64 member ids.
    pub TypeConfig:
        D = Commands,
        R = Applied,
        NodeId = u64,
        Node = MemberNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::storage::snapshot::SnapshotFile,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, MemberNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, MemberNode>;
pub type Snapshot = openraft::storage::Snapshot<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type RaftMetrics = openraft::RaftMetrics<NodeId, MemberNode>;
