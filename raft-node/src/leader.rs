//! What only the leader can do, asked by any member: writes, read index, membership changes, leadership
//! transfer. A member that is not the leader sends these over the peer network (`raftpb.RaftPeer/Forward`);
//! the leader runs them here.
//!
//! A request answered with [`Error::NotLeader`] was not started, so the sender may try the new leader. Any
//! other failure after a write was submitted is final: a write is never proposed twice (etcd's clients never
//! retry mutations either).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kv_api::lease::expiry::LeaseDeadlines;
use kv_api::{Command, Error, SharedStore};
use openraft::error::RaftError;
use openraft::{ChangeMembers, Membership};
use proto::etcdserverpb as pb;
use tracing::info;

use crate::config::address;
use crate::connectivity::Connectivity;
use crate::election::ElectionClock;
use crate::forward::Forwarder;
use crate::group_commit::GroupCommit;
use crate::leader_wire::{submitted_error, unix_ms, LeaderReply, LeaderRequest};
use crate::member_id::member_id_at;
use crate::read_index::ReadRounds;
use crate::typ::{MemberNode, NodeId, Raft};

/// What a leader needs to serve [`LeaderRequest`]s.
#[derive(Clone)]
pub struct Leader {
    pub raft: Raft,
    pub member_id: NodeId,
    pub cluster_id: u64,
    pub token: String,
    pub election_timeout: Duration,
    /// openraft's leader lease: how long a follower refuses votes after hearing from its leader.
    pub vote_lease: Duration,
    pub request_timeout: Duration,
    pub forwarder: Forwarder,
    pub clock: ElectionClock,
    pub store: SharedStore,
    /// Lease deadlines, meaningful only while this member leads.
    pub deadlines: Arc<LeaseDeadlines>,
    /// Writes waiting to be proposed, many to an entry.
    pub writes: GroupCommit,
    /// Leadership confirmations (read index, lease keep-alives), many to a quorum round.
    pub confirmations: ReadRounds,
    /// `--strict-reconfig-check`: refuse changes that would leave fewer started voters than a quorum, or
    /// that need members not reachable for [`HEALTH_INTERVAL`].
    pub strict_reconfig_check: bool,
    /// Since when each peer has answered this member's Raft messages.
    pub connectivity: Connectivity,
    /// `--max-learners` (etcd's default 1): how many learners the cluster may have at once.
    pub max_learners: usize,
}

/// The pause before a leadership confirmation asks again (see [`Leader::confirmation_rounds`]).
const CONFIRMATION_RETRY_PAUSE: Duration = Duration::from_millis(20);

/// etcd promotes a learner only once it has at least this share of the leader's log.
const LEARNER_READY_SHARE: f64 = 0.9;

impl Leader {
    /// Confirms with a quorum that this member still leads, then waits until it has applied every entry
    /// committed so far. Concurrent callers share quorum rounds (see [`ReadRounds`]).
    pub async fn confirm_leadership(&self) -> Result<(), Error> {
        self.wait_hand_over().await;
        let index = self.confirmations.read_index().await?;
        wait_applied(&self.raft, index, self.request_timeout).await
    }

    /// Commits and applies one write; answers its index and what apply produced.
    async fn write(&self, cmd: Command) -> Result<(u64, kv_api::Result<kv_api::CommandResponse>), Error> {
        let granted = match cmd.inner() {
            Command::LeaseGrant(grant) => Some((grant.id, grant.ttl)),
            _ => None,
        };
        let written = self.writes.write(cmd).await?;
        if let (Some((id, ttl)), Ok(_)) = (granted, &written.applied) {
            // The countdown starts at the grant, as etcd's.
            self.deadlines.renew(id, ttl, Instant::now());
        }
        Ok((written.index, written.applied))
    }

    /// Quorum rounds that confirm this member's leadership, each shared by the requests that arrived
    /// before it began; a round answers the commit index.
    ///
    /// openraft gives up on a round once its messages went unanswered for its RPC window (a third of the
    /// election timeout). On a lossy link that is one delayed TCP retransmission, and the reads of the
    /// round failed with "request timed out" (25 reads in 14 jepsen runs with 20 % loss). etcd asks again
    /// until the request's deadline; a round here asks again for up to `retry_for` (the election
    /// timeout, after which a leader that heard no quorum knows no leader), each attempt on the
    /// connections the timed-out messages moved to (`network`). Any attempt begins after the round's
    /// requests arrived, so its answer serves them as the first would have.
    pub fn confirmation_rounds(raft: &Raft, retry_for: Duration) -> ReadRounds {
        let raft = raft.clone();
        ReadRounds::start(move || {
            let raft = raft.clone();
            async move {
                let started = Instant::now();
                loop {
                    match raft.get_read_log_id().await {
                        Ok((read_log_id, _applied)) => return Ok(read_log_id.map_or(0, |id| id.index)),
                        Err(RaftError::APIError(openraft::error::CheckIsLeaderError::QuorumNotEnough(_)))
                            if started.elapsed() < retry_for =>
                        {
                            // Peers that refuse connections fail at once: no busy loop.
                            tokio::time::sleep(CONFIRMATION_RETRY_PAUSE).await;
                        }
                        Err(err) => return Err(leadership_error(err)),
                    }
                }
            }
        })
    }

    /// Serves a request on this member, which must be the leader (except for `ClusterInfo`, `PreVote`,
    /// `Beat` and `Campaign`), within etcd's request timeout: a leader cut off from its quorum never commits, and the
    /// request then fails with "request timed out".
    pub async fn handle(&self, req: LeaderRequest) -> Result<LeaderReply, Error> {
        tokio::time::timeout(self.request_timeout, self.handle_now(req)).await.map_err(|_| Error::Timeout)?
    }

    async fn handle_now(&self, req: LeaderRequest) -> Result<LeaderReply, Error> {
        match req {
            LeaderRequest::ClusterInfo => {
                return Ok(LeaderReply::ClusterInfo { cluster_id: self.cluster_id, members: members(&self.raft) })
            }
            LeaderRequest::PreVote(pre_vote) => return Ok(LeaderReply::PreVote(self.clock.answer(&pre_vote))),
            LeaderRequest::Beat { term, leader } => return Ok(LeaderReply::Beat(self.clock.beat(term, leader))),
            LeaderRequest::Campaign => {
                self.raft.trigger().elect().await.map_err(|_| Error::Stopped)?;
                return Ok(LeaderReply::Done);
            }
            _ => {}
        }
        self.wait_hand_over().await;
        if self.raft.metrics().borrow().current_leader != Some(self.member_id) {
            return Err(Error::NotLeader);
        }
        match req {
            LeaderRequest::Write(cmd) => {
                let (index, applied) = self.write(cmd).await?;
                Ok(LeaderReply::Written { index, applied })
            }
            LeaderRequest::Writes(writes) => {
                let now = unix_ms(SystemTime::now());
                // Each write joins the group commit's queue in order at its first poll.
                let each = writes.into_iter().map(|(deadline_unix_ms, cmd)| async move {
                    // Its sender already answered "request timed out": it must not happen behind its back.
                    if now > deadline_unix_ms {
                        return Err(Error::Timeout);
                    }
                    self.write(cmd).await
                });
                Ok(LeaderReply::WrittenMany(futures::future::join_all(each).await))
            }
            LeaderRequest::ReadIndex => Ok(LeaderReply::ReadIndex(self.confirmations.read_index().await?)),
            LeaderRequest::MemberAdd { peer_urls, is_learner } => self.member_add(peer_urls, is_learner).await,
            LeaderRequest::MemberRemove { id } => {
                let membership = self.membership();
                if membership.get_node(&id).is_none() {
                    return Err(Error::MemberNotFound);
                }
                let change = if membership.voter_ids().any(|v| v == id) {
                    self.check_started_quorum(&membership, None, Some(id))?;
                    self.check_active_quorum_without(&membership, id)?;
                    ChangeMembers::RemoveVoters(BTreeSet::from([id]))
                } else {
                    ChangeMembers::RemoveNodes(BTreeSet::from([id]))
                };
                self.change(change, None).await
            }
            LeaderRequest::MemberUpdate { id, peer_urls } => {
                let membership = self.membership();
                let mut node = membership.get_node(&id).cloned().ok_or(Error::MemberNotFound)?;
                check_peer_urls(&membership, &peer_urls, Some(id))?;
                node.peer_urls = peer_urls;
                self.change(ChangeMembers::SetNodes(BTreeMap::from([(id, node)])), None).await
            }
            LeaderRequest::MemberPromote { id } => {
                let membership = self.membership();
                if membership.get_node(&id).is_none() {
                    return Err(Error::MemberNotFound);
                }
                if membership.voter_ids().any(|v| v == id) {
                    return Err(Error::MemberNotLearner);
                }
                if !self.caught_up(id, LEARNER_READY_SHARE) {
                    return Err(Error::LearnerNotReady);
                }
                let started = membership.get_node(&id).is_some_and(|node| !node.name.is_empty());
                self.check_started_quorum(&membership, Some(started), None)?;
                self.change(ChangeMembers::AddVoterIds(BTreeSet::from([id])), None).await
            }
            LeaderRequest::Publish { id, name, client_urls } => {
                let mut node = self.membership().get_node(&id).cloned().ok_or(Error::MemberNotFound)?;
                if node.name == name && node.client_urls == client_urls {
                    return Ok(LeaderReply::Done);
                }
                node.name = name;
                node.client_urls = client_urls;
                self.change(ChangeMembers::SetNodes(BTreeMap::from([(id, node)])), None).await
            }
            LeaderRequest::MoveLeader { target } => match self.move_leader(target).await? {
                // As etcd, the transfer counts only when the target leads.
                leader if leader == target => Ok(LeaderReply::Done),
                _ => Err(Error::Timeout),
            },
            LeaderRequest::LeaseKeepAlive { id } => {
                // Only a leader that a quorum still follows may renew. A deposed leader that has not
                // noticed yet (it was paused or cut off) would promise a TTL the real leader never
                // grants, and could answer for a lease already revoked (etcd #15247). This also waits
                // until every committed entry is applied, so a committed revoke is seen.
                self.confirm_leadership().await?;
                let ttl = self.store.read().lease(id).map_or(0, |lease| lease.ttl);
                if ttl > 0 && self.deadlines.renew_unexpired(id, ttl, Instant::now()) {
                    return Ok(LeaderReply::LeaseTtl(ttl));
                }
                // Unknown, or past its deadline and about to be revoked.
                Ok(LeaderReply::LeaseTtl(0))
            }
            LeaderRequest::LeaseTimeToLive { id } => {
                let ttl = self.store.read().lease(id).map(|lease| lease.ttl);
                let left = ttl.map(|ttl| self.deadlines.remaining(id, ttl, Instant::now()).as_secs() as i64);
                Ok(LeaderReply::LeaseRemaining(left))
            }
            LeaderRequest::LeasesByExpiry => {
                let now = Instant::now();
                let mut leases: Vec<(Duration, i64)> = self
                    .store
                    .read()
                    .leases()
                    .into_iter()
                    .map(|(id, ttl)| (self.deadlines.remaining(id, ttl, now), id))
                    .collect();
                leases.sort_unstable();
                Ok(LeaderReply::LeaseIds(leases.into_iter().map(|(_, id)| id).collect()))
            }
            LeaderRequest::ClusterInfo
            | LeaderRequest::Campaign
            | LeaderRequest::PreVote(_)
            | LeaderRequest::Beat { .. } => {
                unreachable!("answered above")
            }
        }
    }

    fn membership(&self) -> Membership<NodeId, MemberNode> {
        self.raft.metrics().borrow().membership_config.membership().clone()
    }

    /// Whether `id`'s replicated log reaches `share` of the leader's.
    fn caught_up(&self, id: NodeId, share: f64) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        let last = metrics.last_log_index.unwrap_or(0);
        let matched =
            metrics.replication.as_ref().and_then(|r| r.get(&id).copied().flatten()).map_or(0, |log_id| log_id.index);
        matched as f64 >= last as f64 * share
    }

    async fn member_add(&self, peer_urls: Vec<String>, is_learner: bool) -> Result<LeaderReply, Error> {
        let membership = self.membership();
        if peer_urls.is_empty() || peer_urls.iter().any(|u| address(u).is_err()) {
            return Err(Error::MemberBadUrls);
        }
        check_peer_urls(&membership, &peer_urls, None)?;
        if is_learner && membership.learner_ids().count() >= self.max_learners {
            return Err(Error::TooManyLearners);
        }
        // As etcd: the time keeps a re-added member (same URLs) from reusing a removed member's id.
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let id = member_id_at(&peer_urls, &self.token, Some(now));
        if membership.get_node(&id).is_some() {
            return Err(Error::MemberExists);
        }
        let node = MemberNode { name: String::new(), peer_urls, client_urls: Vec::new() };
        if is_learner {
            self.check_voters_connected(&membership)?;
            return self.change(ChangeMembers::AddNodes(BTreeMap::from([(id, node)])), Some(id)).await;
        }
        self.check_started_quorum(&membership, Some(false), None)?;
        self.check_voters_connected(&membership)?;
        self.add_voter(id, node).await
    }

    async fn change(
        &self,
        change: ChangeMembers<NodeId, MemberNode>,
        added: Option<NodeId>,
    ) -> Result<LeaderReply, Error> {
        let written = self.raft.change_membership(change, false).await.map_err(submitted_error)?;
        let members = match &written.membership {
            Some(membership) => list_members(membership),
            None => members(&self.raft),
        };
        let added = added.and_then(|id| members.iter().find(|m| m.id == id).cloned());
        Ok(LeaderReply::Members { index: written.log_id.index, added, members })
    }

    /// On a stopping leader, as etcd does on shutdown: hands leadership to the voter whose log is furthest
    /// along, so the cluster does not wait out an election timeout for a new leader. Does nothing on a
    /// follower or the only voter; answers the new leader, or why the hand-over failed.
    pub async fn hand_over_leadership(&self) -> Result<Option<NodeId>, Error> {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.member_id) {
            return Ok(None);
        }
        let matched = |id: &NodeId| {
            metrics.replication.as_ref().and_then(|r| r.get(id).copied().flatten()).map_or(0, |log_id| log_id.index)
        };
        let membership = self.membership();
        let Some(target) = membership.voter_ids().filter(|id| *id != self.member_id).max_by_key(matched) else {
            return Ok(None);
        };
        let started = Instant::now();
        let moved = tokio::time::timeout(self.request_timeout, self.move_leader(target)).await;
        let leader = moved.map_err(|_| Error::Timeout)??;
        info!(
            target = format!("{target:x}"),
            leader = format!("{leader:x}"),
            took_ms = started.elapsed().as_millis() as u64,
            "handed leadership over"
        );
        Ok(Some(leader))
    }

    /// Waits while a hand-over is under way: requests that reach the leader meanwhile would renew the
    /// followers' leader lease (and delay the transfer), so they wait and then find the new leader.
    async fn wait_hand_over(&self) {
        self.clock.hand_over_done().await
    }

    /// Leadership transfer. openraft 0.9 has no transfer (etcd's MsgTimeoutNow): a voter refuses to vote
    /// while its leader lease (see `consensus::raft_config`) runs. So the leader holds back new requests and
    /// heartbeats, lets the target catch up, waits out the leases that would refuse the target a majority
    /// ([`Leader::lease_left`]) and asks the target to campaign; the target wins before the other
    /// followers' election clocks fire. Answers the new leader, which is `target` unless another member's
    /// campaign won the race.
    async fn move_leader(&self, target: NodeId) -> Result<NodeId, Error> {
        if target == self.member_id {
            return Ok(target);
        }
        let membership = self.membership();
        if !membership.voter_ids().any(|v| v == target) {
            return Err(Error::BadLeaderTransferee);
        }
        let node = membership.get_node(&target).cloned().ok_or(Error::BadLeaderTransferee)?;
        let term = self.raft.metrics().borrow().current_term;
        if !self.clock.begin_hand_over() {
            // Another hand-over is under way: its outcome is this one's.
            self.wait_hand_over().await;
            return match self.raft.metrics().borrow().current_leader {
                Some(leader) if leader != self.member_id => Ok(leader),
                _ => Err(Error::Timeout),
            };
        }
        self.raft.runtime_config().heartbeat(false);
        let outcome = async {
            // Writes taken before the gate closed are still proposed and replicated; the target needs all
            // of them, or this member, whose log would then be longer, refuses it its vote (etcd's raft
            // also waits up to an election timeout for the transferee to catch up).
            let mut metrics = self.raft.metrics();
            let gate_closed = Instant::now();
            let mut drained_after = Duration::ZERO;
            let caught_up = async {
                // Again if a write slipped in while the target caught up.
                loop {
                    self.writes.drained().await;
                    drained_after = gate_closed.elapsed();
                    metrics
                        .wait_for(|m| {
                            let matched = m.replication.as_ref().and_then(|r| r.get(&target).copied().flatten());
                            matched.map(|log_id| log_id.index) >= m.last_log_index
                        })
                        .await?;
                    if self.writes.is_drained() {
                        return Ok::<_, tokio::sync::watch::error::RecvError>(());
                    }
                }
            };
            tokio::time::timeout(self.election_timeout, caught_up)
                .await
                .map_err(|_| Error::BadLeaderTransferee)?
                .map_err(|_| Error::Stopped)?;
            let caught_up_after = gate_closed.elapsed();
            let lease_left = self.lease_left(&membership, target).await;
            tokio::time::sleep(lease_left).await;
            info!(
                target = format!("{target:x}"),
                drained_ms = drained_after.as_millis() as u64,
                caught_up_ms = caught_up_after.as_millis() as u64,
                lease_waited_ms = lease_left.as_millis() as u64,
                "asking the target to campaign"
            );
            self.forwarder.send(&node, &LeaderRequest::Campaign, self.election_timeout * 2).await?;
            // Granting the target's vote leaves this member without a leader until the target's first
            // append arrives: wait for a leader in a newer term, not for the old one to be gone.
            let moved = metrics.wait_for(|m| m.current_term > term && m.current_leader.is_some());
            let leader = tokio::time::timeout(self.election_timeout * 4, moved)
                .await
                .map_err(|_| Error::Timeout)?
                .map_err(|_| Error::Stopped)?
                .current_leader;
            match leader {
                Some(leader) if leader != self.member_id => Ok(leader),
                _ => Err(Error::Timeout),
            }
        }
        .await;
        self.raft.runtime_config().heartbeat(true);
        self.clock.end_hand_over();
        outcome
    }

    /// How long `target` must wait before the voters grant it their votes. A voter refuses votes for
    /// openraft's leader lease after its vote last changed or it last heard from its leader. This
    /// leader's own vote last changed when it was elected, usually long ago; so where it and the target are
    /// a majority of every voter set (three voters or fewer), only what is left of that lease is waited
    /// out, as etcd's MsgTimeoutNow lets a transferee campaign at once. Otherwise the other followers'
    /// leases run from the last append they got, which is now.
    async fn lease_left(&self, membership: &Membership<NodeId, MemberNode>, target: NodeId) -> Duration {
        let full = self.vote_lease + LEASE_MARGIN;
        if !pair_is_quorum(membership, self.member_id, target) {
            return full;
        }
        match self.raft.with_raft_state(|state| state.vote_last_modified()).await {
            Ok(Some(since)) => (since + full).saturating_duration_since(tokio::time::Instant::now()),
            Ok(None) => Duration::ZERO,
            Err(_) => full,
        }
    }
}

/// Whether two voters alone are a majority of every voter set of `membership` (both sets while it is joint).
fn pair_is_quorum(membership: &Membership<NodeId, MemberNode>, a: NodeId, b: NodeId) -> bool {
    membership.get_joint_config().iter().all(|voters| {
        let present = usize::from(voters.contains(&a)) + usize::from(voters.contains(&b));
        present * 2 > voters.len()
    })
}

/// How much longer than openraft's leader lease a transferring leader stays silent before the target
/// campaigns, for the appends still in flight when it fell silent.
const LEASE_MARGIN: Duration = Duration::from_millis(50);

/// Refuses peer URLs another member (other than `except`) already has.
fn check_peer_urls(
    membership: &Membership<NodeId, MemberNode>,
    peer_urls: &[String],
    except: Option<NodeId>,
) -> Result<(), Error> {
    let taken = membership
        .nodes()
        .filter(|(id, _)| Some(**id) != except)
        .any(|(_, node)| node.peer_urls.iter().any(|u| peer_urls.contains(u)));
    if taken {
        return Err(Error::PeerUrlExists);
    }
    Ok(())
}

/// Waits until this member has applied the log up to `index`; "request timed out" after `timeout`.
pub async fn wait_applied(raft: &Raft, index: u64, timeout: Duration) -> Result<(), Error> {
    // Mostly true at once (on the leader a write is answered once applied): openraft's wait would
    // first clone the whole metrics and format its message, for every write.
    if raft.metrics().borrow().last_applied.is_some_and(|applied| applied.index >= index) {
        return Ok(());
    }
    raft.wait(Some(timeout)).applied_index_at_least(Some(index), "applied up to a log index").await.map(|_| ()).map_err(
        |e| match e {
            openraft::metrics::WaitError::Timeout(..) => Error::Timeout,
            openraft::metrics::WaitError::ShuttingDown => Error::Stopped,
        },
    )
}

/// The members as etcd lists them.
pub fn members(raft: &Raft) -> Vec<pb::Member> {
    list_members(raft.metrics().borrow().membership_config.membership())
}

pub(crate) fn list_members(membership: &Membership<NodeId, MemberNode>) -> Vec<pb::Member> {
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
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

/// A failed leadership check: another member leads, or this one cannot reach a quorum.
fn leadership_error(err: RaftError<NodeId, openraft::error::CheckIsLeaderError<NodeId, MemberNode>>) -> Error {
    match err {
        RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(_)) => Error::NotLeader,
        RaftError::APIError(openraft::error::CheckIsLeaderError::QuorumNotEnough(_)) => Error::Timeout,
        RaftError::Fatal(_) => Error::Stopped,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn voters(sets: &[&[NodeId]]) -> Membership<NodeId, MemberNode> {
        let configs: Vec<BTreeSet<NodeId>> = sets.iter().map(|set| set.iter().copied().collect()).collect();
        Membership::new(configs, None)
    }

    #[test]
    fn a_leader_and_its_target_are_a_quorum_of_three_voters_or_fewer_only() {
        assert!(pair_is_quorum(&voters(&[&[1, 2]]), 1, 2));
        assert!(pair_is_quorum(&voters(&[&[1, 2, 3]]), 1, 3));
        assert!(!pair_is_quorum(&voters(&[&[1, 2, 3, 4]]), 1, 2), "two of four is no majority");
        assert!(!pair_is_quorum(&voters(&[&[1, 2, 3, 4, 5]]), 1, 2));
        // Joint: a majority of both sets.
        assert!(pair_is_quorum(&voters(&[&[1, 2, 3], &[1, 2, 4]]), 1, 2));
        assert!(!pair_is_quorum(&voters(&[&[1, 2, 3], &[1, 3, 4]]), 1, 2), "2 is not in the new set");
    }
}
