//! `--force-new-cluster`, etcd's disaster recovery: a member of a cluster that lost its quorum for good
//! restarts as the only member of a new cluster, keeping its data.
//!
//! Before Raft starts, the storage is rewritten: every entry in the member's log is applied (etcd drops
//! the entries its WAL does not know committed; a follower learns of the last commits only with the next
//! heartbeat, so that would drop writes the dead cluster acknowledged: the member that now decides alone
//! keeps them); the log is emptied (purged up to the applied id, so openraft starts from the state
//! machine); the membership becomes this member alone; the vote is kept ungranted so the member elects
//! itself in a newer term. The member then runs as usual, and others can be added to it.

use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::{Membership, StorageError, Vote};
use tracing::warn;

use super::{LogStore, StateMachine};
use crate::typ::{NodeId, TypeConfig};

/// Rewrites the storage of member `own` into a one-member cluster.
pub async fn force_new_cluster(
    log: &mut LogStore,
    state_machine: &mut StateMachine,
    own: NodeId,
) -> Result<(), StorageError<NodeId>> {
    let (applied, membership) = state_machine.applied_state().await?;
    let log_state = log.get_log_state().await?;
    // Everything the log holds past the applied id (the backend commits applied state every 100 ms).
    let from = applied.map_or(0, |id| id.index + 1);
    let to = log_state.last_log_id.map_or(0, |id| id.index + 1);
    if to > from {
        let entries = log.try_get_log_entries(from..to).await?;
        RaftStateMachine::<TypeConfig>::apply(state_machine, entries).await?;
    }
    let (applied, _) = state_machine.applied_state().await?;
    let node = membership.membership().get_node(&own).cloned().ok_or_else(|| {
        let err = std::io::Error::other("this member is not in its own membership: nothing to force");
        StorageError::from(openraft::StorageIOError::read_state_machine(&err))
    })?;
    let others: Vec<String> =
        membership.membership().nodes().filter(|(id, _)| **id != own).map(|(id, _)| format!("{id:x}")).collect();
    warn!(
        local_member_id = format!("{own:x}"),
        removed_members = ?others,
        applied_index = applied.map_or(0, |id| id.index),
        applied_from_log = to.saturating_sub(from),
        "forcing a new one-member cluster from this member's data"
    );
    let nodes: std::collections::BTreeMap<NodeId, _> = [(own, node)].into();
    state_machine.force_membership(Membership::new(vec![[own].into()], nodes))?;
    if let Some(applied) = applied {
        log.purge(applied).await?;
    }
    log.save_committed(applied).await?;
    let term = log.read_vote().await?.map_or(0, |vote| vote.leader_id().get_term());
    log.save_vote(&Vote::new(term, own)).await?;
    Ok(())
}
