//! [`kv_api::Consensus`] on openraft. Every member serves every request: what needs the leader runs
//! locally when this member leads, and is forwarded to the leader otherwise; a forwarded write or read
//! index is answered once this member has applied up to it, so a later local read sees it.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kv_api::consensus::SnapshotFile;
use kv_api::{Command, CommandResponse, Error, RaftStatus};
use openraft::ServerState;
use proto::etcdserverpb as pb;
use tokio::time::Instant;

use crate::leader::{members, wait_applied, Leader};
use crate::leader_wire::{LeaderReply, LeaderRequest};
use crate::metrics::{metrics, PendingProposal};
use crate::read_index::ReadRounds;
use crate::storage::snapshot_file;
use crate::typ::{NodeId, Raft};

/// How long a request waits for Raft before failing with etcd's "request timed out" (etcd: 5 s plus two
/// election timeouts).
pub fn request_timeout(election_timeout: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election_timeout
}

/// Pause before asking again after the leader moved.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

pub struct RaftConsensus {
    route: Route,
    /// Read index rounds, each shared by the reads that arrived before it began.
    reads: ReadRounds,
    /// Where `Maintenance.Snapshot` writes its copy of the store (the member dir: same disk, not memory).
    snapshot_dir: PathBuf,
}

/// Finds the leader and runs requests on it.
#[derive(Clone)]
struct Route {
    leader: Leader,
    timeout: Duration,
}

impl RaftConsensus {
    pub fn new(leader: Leader) -> Self {
        let route = Route { timeout: leader.request_timeout, leader };
        let reads = {
            let route = route.clone();
            ReadRounds::start(move || {
                let route = route.clone();
                async move {
                    match route.on_leader(LeaderRequest::ReadIndex).await? {
                        LeaderReply::ReadIndex(index) => Ok(index),
                        other => Err(unexpected(&other)),
                    }
                }
            })
        };
        Self { route, reads, snapshot_dir: std::env::temp_dir() }
    }

    /// Writes the copies of `Maintenance.Snapshot` in `dir` rather than the system's temp dir.
    pub fn with_snapshot_dir(mut self, dir: PathBuf) -> Self {
        self.snapshot_dir = dir;
        self
    }

    fn raft(&self) -> &Raft {
        &self.route.leader.raft
    }

    fn member_id(&self) -> NodeId {
        self.route.leader.member_id
    }

    async fn on_leader(&self, req: LeaderRequest) -> Result<LeaderReply, Error> {
        self.route.on_leader(req).await
    }
}

impl Route {
    fn raft(&self) -> &Raft {
        &self.leader.raft
    }

    fn member_id(&self) -> NodeId {
        self.leader.member_id
    }

    /// The current leader, waiting for one until `deadline`.
    async fn wait_for_leader(&self, deadline: Instant) -> Result<NodeId, Error> {
        let mut metrics = self.raft().metrics();
        let known = tokio::time::timeout_at(deadline, metrics.wait_for(|m| m.current_leader.is_some())).await;
        match known {
            Ok(Ok(m)) => m.current_leader.ok_or(Error::NoLeader),
            Ok(Err(_)) => Err(Error::Stopped),
            Err(_) => Err(Error::NoLeader),
        }
    }

    /// Runs `req` on the leader, wherever it is, retrying while leadership moves and nothing was started.
    async fn on_leader(&self, req: LeaderRequest) -> Result<LeaderReply, Error> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let leader = self.wait_for_leader(deadline).await?;
            let result = if leader == self.member_id() {
                self.leader.handle(req.clone()).await
            } else {
                let node = self.raft().metrics().borrow().membership_config.membership().get_node(&leader).cloned();
                match node {
                    Some(node) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        self.leader.forwarder.send(&node, &req, left).await
                    }
                    None => Err(Error::NotLeader),
                }
            };
            match result {
                Err(Error::NotLeader) if Instant::now() + RETRY_PAUSE < deadline => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(Error::NotLeader) => return Err(Error::Timeout),
                other => return other,
            }
        }
    }
}

impl RaftConsensus {
    /// Waits until this member has applied the log up to `index`.
    async fn wait_applied(&self, index: u64) -> Result<(), Error> {
        wait_applied(self.raft(), index, self.route.timeout).await
    }

    /// Runs a membership change on the leader and waits for it here.
    async fn change_members(&self, req: LeaderRequest) -> Result<(Option<pb::Member>, Vec<pb::Member>), Error> {
        // A member asked to remove itself never applies the end of its own removal (it is no longer
        // replicated to): the leader's answer is the last word, as etcd answers before it stops.
        let removes_self = matches!(req, LeaderRequest::MemberRemove { id } if id == self.member_id());
        match self.on_leader(req).await? {
            LeaderReply::Members { index, added, members } => {
                if !removes_self {
                    self.wait_applied(index).await?;
                }
                Ok((added, members))
            }
            other => Err(unexpected(&other)),
        }
    }
}

impl RaftConsensus {
    /// Publishes this member's attributes through the leader.
    pub async fn publish(&self, req: LeaderRequest) -> Result<(), Error> {
        self.change_members(req).await.map(|_| ())
    }
}

fn unexpected(reply: &LeaderReply) -> Error {
    Error::Internal(format!("the leader answered with an unexpected reply: {reply:?}"))
}

impl kv_api::Consensus for RaftConsensus {
    async fn propose(&self, cmd: Command) -> kv_api::Result<CommandResponse> {
        let _pending = PendingProposal::start();
        // As etcd, a proposal fails when it never gets applied here (no leader, timeout, stop), not when
        // apply answers with an error.
        let failed = |err| {
            metrics().proposals_failed.fetch_add(1, Ordering::Relaxed);
            err
        };
        match self.on_leader(LeaderRequest::Write(cmd)).await.map_err(failed)? {
            LeaderReply::Written { index, applied } => {
                self.wait_applied(index).await.map_err(failed)?;
                applied
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn read_barrier(&self) -> kv_api::Result<()> {
        let index = self.reads.read_index().await?;
        self.wait_applied(index).await
    }

    fn header(&self) -> pb::ResponseHeader {
        let term = self.raft().metrics().borrow().current_term;
        pb::ResponseHeader {
            cluster_id: self.route.leader.cluster_id,
            member_id: self.member_id(),
            revision: 0,
            raft_term: term,
        }
    }

    fn raft_status(&self) -> RaftStatus {
        let metrics = self.raft().metrics().borrow().clone();
        RaftStatus {
            // A member that went an election timeout without hearing from its leader knows none (etcd: 0).
            leader: if self.has_leader() { metrics.current_leader.unwrap_or(0) } else { 0 },
            raft_index: metrics.last_log_index.unwrap_or(0),
            raft_term: metrics.current_term,
            raft_applied_index: metrics.last_applied.map_or(0, |id| id.index),
            is_learner: metrics.state == ServerState::Learner,
        }
    }

    async fn snapshot(&self) -> kv_api::Result<SnapshotFile> {
        let (store, dir) = (self.route.leader.store.clone(), self.snapshot_dir.clone());
        let write = move || snapshot_file::write(&store, &dir).map_err(|e| e.to_string());
        match tokio::task::spawn_blocking(write).await {
            Ok(Ok((file, size))) => Ok(SnapshotFile { file, size }),
            Ok(Err(err)) => Err(Error::Internal(format!("snapshot: {err}"))),
            Err(err) => Err(Error::Internal(format!("snapshot: {err}"))),
        }
    }

    fn members(&self) -> Vec<pb::Member> {
        members(self.raft())
    }

    fn has_leader(&self) -> bool {
        self.route.leader.clock.has_leader()
    }

    fn is_learner(&self) -> bool {
        self.raft().metrics().borrow().state == ServerState::Learner
    }

    async fn member_add(
        &self,
        peer_urls: Vec<String>,
        is_learner: bool,
    ) -> kv_api::Result<(pb::Member, Vec<pb::Member>)> {
        let (added, members) = self.change_members(LeaderRequest::MemberAdd { peer_urls, is_learner }).await?;
        let added = added.ok_or_else(|| Error::Internal("the added member is missing from the membership".into()))?;
        Ok((added, members))
    }

    async fn member_remove(&self, id: u64) -> kv_api::Result<Vec<pb::Member>> {
        Ok(self.change_members(LeaderRequest::MemberRemove { id }).await?.1)
    }

    async fn member_update(&self, id: u64, peer_urls: Vec<String>) -> kv_api::Result<Vec<pb::Member>> {
        Ok(self.change_members(LeaderRequest::MemberUpdate { id, peer_urls }).await?.1)
    }

    async fn member_promote(&self, id: u64) -> kv_api::Result<Vec<pb::Member>> {
        Ok(self.change_members(LeaderRequest::MemberPromote { id }).await?.1)
    }

    async fn lease_keep_alive(&self, id: i64) -> kv_api::Result<i64> {
        match self.on_leader(LeaderRequest::LeaseKeepAlive { id }).await? {
            LeaderReply::LeaseTtl(ttl) => Ok(ttl),
            other => Err(unexpected(&other)),
        }
    }

    async fn lease_time_to_live(&self, id: i64) -> kv_api::Result<Option<i64>> {
        match self.on_leader(LeaderRequest::LeaseTimeToLive { id }).await? {
            LeaderReply::LeaseRemaining(left) => Ok(left),
            other => Err(unexpected(&other)),
        }
    }

    async fn leases_by_expiry(&self) -> kv_api::Result<Vec<i64>> {
        match self.on_leader(LeaderRequest::LeasesByExpiry).await? {
            LeaderReply::LeaseIds(ids) => Ok(ids),
            other => Err(unexpected(&other)),
        }
    }

    async fn move_leader(&self, target: u64) -> kv_api::Result<()> {
        // As etcd, only the leader takes this request (etcdctl finds it first).
        if self.raft().metrics().borrow().current_leader != Some(self.member_id()) {
            return Err(Error::NotLeader);
        }
        match self.route.leader.handle(LeaderRequest::MoveLeader { target }).await? {
            LeaderReply::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}
