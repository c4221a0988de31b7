//! [`kv_api::Consensus`] on openraft. Every member serves every request: what needs the leader runs
//! locally when this member leads, and is forwarded to the leader otherwise; a forwarded write or read
//! index is answered once this member has applied up to it, so a later local read sees it.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use kv_api::consensus::SnapshotFile;
use kv_api::{Command, CommandResponse, Error, RaftStatus};
use openraft::ServerState;
use proto::etcdserverpb as pb;
use tokio::time::Instant;

use crate::config::Config;
use crate::forward_batch::ForwardedWrites;
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

/// openraft's settings for a member started with `config`, and openraft's leader lease in them.
pub fn raft_config(config: &Config, catchup_entries: u64) -> anyhow::Result<(openraft::Config, Duration)> {
    let rpc_window = raft_rpc_window(config.heartbeat_interval, config.election_timeout);
    // As short as openraft allows (above its heartbeat interval): a hand-over among more than three
    // voters waits it out.
    let vote_lease = rpc_window + 2;
    let raft_config = openraft::Config {
        cluster_name: config.initial_cluster_token.clone(),
        // openraft's heartbeat interval is also how long it waits for any answer to an append or a
        // leadership confirmation (see `raft_rpc_window`). Heartbeats themselves go out every
        // `--heartbeat-interval`: the election clock sends them on its ticks.
        heartbeat_interval: rpc_window,
        // openraft's own election timer is off: elections are `election`'s (etcd's ticks and pre-vote).
        // What is left of openraft's election timeout is its leader lease, in which a follower refuses a
        // candidate's vote after hearing from its leader; pre-vote already keeps disruptive candidates
        // out. openraft wants it above its heartbeat interval; a leadership hand-over waits it out only
        // where the outgoing leader and its target are no quorum by themselves (`leader.rs`).
        election_timeout_min: rpc_window + 1,
        election_timeout_max: vote_lease,
        // Built when `snapshot_policy` says (the count, and the log's growth against the store's size).
        snapshot_policy: openraft::SnapshotPolicy::Never,
        // Entries kept behind a snapshot for slow followers (etcd: --experimental-snapshot-catchup-entries,
        // 5000); a follower further behind catches up by snapshot install.
        max_in_snapshot_log_to_keep: config.snapshot_count.min(catchup_entries),
        ..Default::default()
    }
    .validate()
    .context("invalid Raft timing (heartbeat interval must be below the election timeout)")?;
    tracing::info!(
        heartbeat_ms = config.heartbeat_interval,
        rpc_window_ms = rpc_window,
        vote_lease_ms = vote_lease,
        "raft timing"
    );
    Ok((raft_config, Duration::from_millis(vote_lease)))
}

/// How long, in milliseconds, openraft waits for a peer's answer to an append or to a leadership
/// confirmation before it counts the peer as timed out: openraft 0.9 uses its heartbeat interval for
/// both. etcd's raft has no such deadline, its heartbeat only paces messages; at etcd's 100 ms a peer link
/// with 50 ms of delay each way, or one lost packet (Linux retransmits after at least 200 ms), would answer
/// nothing in time, and a leader would commit nothing and step down for want of a quorum while the fault
/// lasts (etcd #7617). A third of the election timeout still lets a leader notice a dead peer and retry
/// twice within one election timeout.
pub fn raft_rpc_window(heartbeat_ms: u64, election_timeout_ms: u64) -> u64 {
    heartbeat_ms.max(election_timeout_ms / 3)
}

/// The longest pause before asking again after the leader moved.
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
    /// Writes forwarded to the leader, many to a message.
    forwarded_writes: ForwardedWrites,
}

impl RaftConsensus {
    pub fn new(leader: Leader) -> Self {
        let forwarded_writes = ForwardedWrites::start(leader.forwarder.clone());
        let route = Route { timeout: leader.request_timeout, leader, forwarded_writes };
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
        let mut metrics = self.raft().server_metrics();
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
                        match &req {
                            LeaderRequest::Write(cmd) => self.forwarded_writes.send(&node, cmd.clone(), left).await,
                            _ => self.leader.forwarder.send(&node, &req, left).await,
                        }
                    }
                    None => Err(Error::NotLeader),
                }
            };
            match result {
                Err(Error::NotLeader) if Instant::now() + RETRY_PAUSE < deadline => {
                    // Ask again as soon as this member hears of another leader (a hand-over ends with the
                    // new leader's first append), or after a pause.
                    let mut metrics = self.raft().server_metrics();
                    let moved = metrics.wait_for(|m| m.current_leader.is_some_and(|now| now != leader));
                    let _ = tokio::time::timeout(RETRY_PAUSE, moved).await;
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn timing(heartbeat: u64, election: u64) -> (openraft::Config, Duration) {
        let args = [
            "raft-node".to_string(),
            format!("--heartbeat-interval={heartbeat}"),
            format!("--election-timeout={election}"),
        ];
        raft_config(&Config::try_parse_from(args).expect("valid flags"), 5000).expect("valid timing")
    }

    #[test]
    fn openraft_waits_a_third_of_the_election_timeout_for_answers_and_heartbeats_stay_etcds() {
        let (raft, lease) = timing(100, 1000);
        assert_eq!(raft.heartbeat_interval, 333, "room for 50 ms each way and a retransmission");
        assert!(lease > Duration::from_millis(333) && lease < Duration::from_millis(1000), "{lease:?}");
        // A heartbeat interval above a third of the election timeout is kept.
        assert_eq!(timing(300, 1500).0.heartbeat_interval, 500);
        assert_eq!(timing(400, 2000).0.heartbeat_interval, 666);
        assert_eq!(raft_rpc_window(500, 2500), 833);
        assert_eq!(raft_rpc_window(900, 1000), 900);
    }

    #[test]
    fn every_timing_etcd_accepts_gives_openraft_a_valid_config() {
        // etcd accepts an election timeout of five heartbeats or more, from 1 ms up to 50 s.
        for (heartbeat, election) in [(1, 5), (1, 6), (2, 10), (10, 50), (100, 500), (100, 50_000), (9_999, 50_000)] {
            let (raft, lease) = timing(heartbeat, election);
            assert!(raft.election_timeout_min > raft.heartbeat_interval, "{heartbeat}/{election}");
            assert_eq!(lease, Duration::from_millis(raft.election_timeout_max), "{heartbeat}/{election}");
        }
    }
}
