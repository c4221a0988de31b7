//! etcd's rules for membership changes on the leader: `--strict-reconfig-check` (enough started voters
//! for a quorum; every voter reachable for [`HEALTH_INTERVAL`] before an add; an active quorum left after
//! removing a live voter) and adding a voter whose process is not started yet, which answers at once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kv_api::Error;
use openraft::{ChangeMembers, Membership};
use tracing::warn;

use crate::leader::{list_members, members, Leader};
use crate::leader_wire::{submitted_error, LeaderReply};
use crate::typ::{MemberNode, NodeId};

/// etcd's `HealthInterval`: how long the members a change needs must have been reachable.
const HEALTH_INTERVAL: Duration = Duration::from_secs(5);

impl Leader {
    /// etcd's `--strict-reconfig-check` rule: after adding a voter (`added`: whether it has started) or
    /// removing one, the started voters (those that published their name) must still make a quorum of
    /// the voters. A one-member cluster may always grow to two.
    pub(crate) fn check_started_quorum(
        &self,
        membership: &Membership<NodeId, MemberNode>,
        added: Option<bool>,
        removed: Option<NodeId>,
    ) -> Result<(), Error> {
        if !self.strict_reconfig_check {
            return Ok(());
        }
        let voters: Vec<NodeId> = membership.voter_ids().filter(|id| Some(*id) != removed).collect();
        let started = |id: &NodeId| membership.get_node(id).is_some_and(|node| !node.name.is_empty());
        let mut members = voters.len();
        let mut up = voters.iter().filter(|id| started(id)).count();
        if let Some(added_started) = added {
            if up == 1 && members == 1 {
                return Ok(());
            }
            members += 1;
            up += usize::from(added_started);
        }
        if up < members / 2 + 1 {
            return Err(Error::NotEnoughStartedMembers);
        }
        Ok(())
    }

    /// etcd's check before an add: every other voter reachable for [`HEALTH_INTERVAL`].
    pub(crate) fn check_voters_connected(&self, membership: &Membership<NodeId, MemberNode>) -> Result<(), Error> {
        if !self.strict_reconfig_check {
            return Ok(());
        }
        let Some(at) = Instant::now().checked_sub(HEALTH_INTERVAL) else { return Ok(()) };
        let connected = |id: NodeId| id == self.member_id || self.connectivity.connected_since(id, at);
        if membership.voter_ids().all(connected) {
            Ok(())
        } else {
            Err(Error::Unhealthy)
        }
    }

    /// etcd's check before removing voter `id`: a peer that is down may go; otherwise the voters still
    /// reachable for [`HEALTH_INTERVAL`] without it must make a quorum of those that remain.
    pub(crate) fn check_active_quorum_without(
        &self,
        membership: &Membership<NodeId, MemberNode>,
        id: NodeId,
    ) -> Result<(), Error> {
        if !self.strict_reconfig_check || (id != self.member_id && self.connectivity.active_since(id).is_none()) {
            return Ok(());
        }
        let Some(at) = Instant::now().checked_sub(HEALTH_INTERVAL) else { return Ok(()) };
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let active =
            voters.iter().filter(|v| **v == self.member_id || self.connectivity.connected_since(**v, at)).count();
        if active.saturating_sub(1) < 1 + (voters.len() - 1) / 2 {
            return Err(Error::Unhealthy);
        }
        Ok(())
    }

    /// Adds a voter whose process may not run yet, answering as soon as the leader has written the new
    /// membership to its log, as etcd answers once the change is applied. etcd commits a membership change
    /// with the old configuration's quorum; openraft's joint consensus needs the new one's too, which may
    /// need the new member itself (one member growing to two): the change then completes in the
    /// background once the member starts, and the cluster waits for it meanwhile, as etcd's does.
    pub(crate) async fn add_voter(&self, id: NodeId, node: MemberNode) -> Result<LeaderReply, Error> {
        let raft = self.raft.clone();
        let mut change = tokio::spawn(async move {
            let outcome = raft.change_membership(ChangeMembers::AddVoters(BTreeMap::from([(id, node)])), false).await;
            if let Err(err) = &outcome {
                warn!(member = format!("{id:x}"), %err, "adding the member did not complete");
            }
            outcome
        });
        let mut metrics = self.raft.metrics();
        let written = metrics.wait_for(|m| m.membership_config.membership().get_node(&id).is_some());
        tokio::select! {
            outcome = &mut change => {
                let written = outcome.map_err(|_| Error::Stopped)?.map_err(submitted_error)?;
                let members = match &written.membership {
                    Some(membership) => list_members(membership),
                    None => members(&self.raft),
                };
                let added = members.iter().find(|m| m.id == id).cloned();
                Ok(LeaderReply::Members { index: written.log_id.index, added, members })
            }
            seen = written => {
                seen.map_err(|_| Error::Stopped)?;
                let members = members(&self.raft);
                let added = members.iter().find(|m| m.id == id).cloned();
                // Nothing to wait for on the asking member: the change is not committed yet.
                Ok(LeaderReply::Members { index: 0, added, members })
            }
        }
    }
}
