//! Talking to one member over etcd's gRPC API: channels and the probes the runner needs (Status,
//! HashKV), and the nemesis's cluster calls (members, compaction). Workloads build their own
//! requests on the same channels.
//!
//! Every call is bounded by a timeout on the future itself, so a paused member or a stalled
//! connection costs at most that long; the expired call is dropped (cancelled), never retried.

use std::future::Future;
use std::time::Duration;

use proto::etcdserverpb as pb;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::error::{Error, Result};

/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A lazily connecting channel to `url` (`http://127.0.0.11:2379`); it reconnects by itself after
/// a member restarts.
pub fn channel(url: &str) -> Result<Channel> {
    let endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|err| Error::Setup(format!("bad client URL {url}: {err}")))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    Ok(endpoint.connect_lazy())
}

/// Runs a gRPC call with a deadline; expiry becomes `DeadlineExceeded` with the text "timeout".
pub async fn with_timeout<T>(
    timeout: Duration,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(status),
        Err(_) => Err(tonic::Status::deadline_exceeded("timeout")),
    }
}

/// A response header's revision; 0 when the answer had no header.
pub fn header_revision(header: Option<&pb::ResponseHeader>) -> i64 {
    header.map_or(0, |h| h.revision)
}

/// The `range_end` that covers every key starting with `prefix` (etcd's `--prefix`): the prefix
/// with its last byte below 0xff incremented and the rest cut off.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Empty, or only 0xff bytes: `\0`, which etcd reads as "to the end of the keyspace".
    vec![0]
}

/// What Maintenance.Status says about a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    pub member_id: u64,
    /// The leader this member knows of; 0 when none.
    pub leader: u64,
    pub raft_term: u64,
    /// The index of the last entry in this member's Raft log.
    pub raft_index: u64,
    pub revision: i64,
    /// The size of its backend database (etcd's `dbSize`), in bytes.
    pub db_size: i64,
}

pub async fn status(channel: &Channel, timeout: Duration) -> Result<MemberStatus, tonic::Status> {
    let mut client = pb::maintenance_client::MaintenanceClient::new(channel.clone());
    let response = with_timeout(timeout, client.status(pb::StatusRequest {})).await?;
    let header = response.header.unwrap_or_default();
    Ok(MemberStatus {
        member_id: header.member_id,
        leader: response.leader,
        raft_term: response.raft_term,
        raft_index: response.raft_index,
        revision: header.revision,
        db_size: response.db_size,
    })
}

/// A member's answer to HashKV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAnswer {
    Hash {
        hash: u32,
        compact_revision: i64,
    },
    /// The member does not implement HashKV (ours, for now).
    Unimplemented,
}

/// HashKV of the keyspace at `revision`.
pub async fn hash_kv(channel: &Channel, revision: i64, timeout: Duration) -> Result<HashAnswer, tonic::Status> {
    let mut client = pb::maintenance_client::MaintenanceClient::new(channel.clone());
    match with_timeout(timeout, client.hash_kv(pb::HashKvRequest { revision })).await {
        Ok(response) => Ok(HashAnswer::Hash { hash: response.hash, compact_revision: response.compact_revision }),
        Err(status) if status.code() == Code::Unimplemented => Ok(HashAnswer::Unimplemented),
        Err(status) => Err(status),
    }
}

/// A Put (no retries), for liveness probes.
pub async fn put(channel: &Channel, key: &str, value: &str, timeout: Duration) -> Result<i64, tonic::Status> {
    let mut client = pb::kv_client::KvClient::new(channel.clone());
    let request =
        pb::PutRequest { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec(), ..Default::default() };
    let response = with_timeout(timeout, client.put(request)).await?;
    Ok(header_revision(response.header.as_ref()))
}

/// A member as Cluster.MemberList shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedMember {
    pub id: u64,
    /// Empty for a member added but not started yet.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
}

impl From<pb::Member> for ListedMember {
    fn from(member: pb::Member) -> ListedMember {
        ListedMember { id: member.id, name: member.name, peer_urls: member.peer_ur_ls, is_learner: member.is_learner }
    }
}

/// Cluster.MemberList, linearizable (so a member cut off from the leader errs rather than answer
/// with an old membership).
pub async fn member_list(channel: &Channel, timeout: Duration) -> Result<Vec<ListedMember>, tonic::Status> {
    let mut client = pb::cluster_client::ClusterClient::new(channel.clone());
    let response = with_timeout(timeout, client.member_list(pb::MemberListRequest { linearizable: true })).await?;
    Ok(response.members.into_iter().map(ListedMember::from).collect())
}

/// Cluster.MemberAdd; returns the new member (its id is assigned by the cluster).
pub async fn member_add(
    channel: &Channel,
    peer_url: &str,
    is_learner: bool,
    timeout: Duration,
) -> Result<ListedMember, tonic::Status> {
    let mut client = pb::cluster_client::ClusterClient::new(channel.clone());
    let request = pb::MemberAddRequest { peer_ur_ls: vec![peer_url.to_string()], is_learner };
    let response = with_timeout(timeout, client.member_add(request)).await?;
    response.member.map(ListedMember::from).ok_or_else(|| tonic::Status::internal("MemberAdd answered no member"))
}

/// Cluster.MemberRemove.
pub async fn member_remove(channel: &Channel, id: u64, timeout: Duration) -> Result<(), tonic::Status> {
    let mut client = pb::cluster_client::ClusterClient::new(channel.clone());
    with_timeout(timeout, client.member_remove(pb::MemberRemoveRequest { id })).await.map(|_| ())
}

/// Cluster.MemberPromote (learner to voter).
pub async fn member_promote(channel: &Channel, id: u64, timeout: Duration) -> Result<(), tonic::Status> {
    let mut client = pb::cluster_client::ClusterClient::new(channel.clone());
    with_timeout(timeout, client.member_promote(pb::MemberPromoteRequest { id })).await.map(|_| ())
}

/// KV.Compact at `revision`; with `physical` the answer waits until this member has compacted.
pub async fn compact(channel: &Channel, revision: i64, physical: bool, timeout: Duration) -> Result<(), tonic::Status> {
    let mut client = pb::kv_client::KvClient::new(channel.clone());
    with_timeout(timeout, client.compact(pb::CompactionRequest { revision, physical })).await.map(|_| ())
}

/// Maintenance.Defragment of the member `channel` reaches.
pub async fn defragment(channel: &Channel, timeout: Duration) -> Result<(), tonic::Status> {
    let mut client = pb::maintenance_client::MaintenanceClient::new(channel.clone());
    with_timeout(timeout, client.defragment(pb::DefragmentRequest {})).await.map(|_| ())
}

/// Whether the request certainly never reached the server: the connection could not be made
/// (refused, or the connect timed out), so nothing was sent. Such a write is a `fail`, not `info`.
pub fn never_sent(status: &tonic::Status) -> bool {
    if status.code() != Code::Unavailable {
        return false;
    }
    // tonic reports a failed connect as `Unavailable: tcp connect error`, with the I/O error below.
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        source = err.source();
    }
    status.message() == "tcp connect error"
}

/// A short description of a gRPC error for the history (`Unavailable: etcdserver: request timed out`).
pub fn describe(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"jepsen/lease/"), b"jepsen/lease0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
