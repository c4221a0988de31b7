//! Lease expiry on the leader.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kv_api::Consensus;
use proto::etcdserverpb as pb;
use tracing::{info, warn};

use crate::consensus::RaftConsensus;
use crate::leader::Leader;

/// How often the leader looks for expired leases.
const LEASE_EXPIRY_TICK: Duration = Duration::from_millis(500);

/// Expires leases while this member leads: each lease past its deadline is revoked through Raft (so every
/// member deletes its keys at the same revision). Deadlines start over whenever this member becomes leader.
pub async fn expire_leases(leader: Leader, consensus: Arc<RaftConsensus>) {
    let mut ticker = tokio::time::interval(LEASE_EXPIRY_TICK);
    loop {
        ticker.tick().await;
        let leading = leader.raft.metrics().borrow().current_leader == Some(leader.member_id);
        if !leading {
            leader.deadlines.clear();
            continue;
        }
        let leases = leader.store.read().leases();
        for id in leader.deadlines.expired(&leases, Instant::now()) {
            info!(lease_id = format!("{id:x}"), "lease expired");
            match consensus.propose(kv_api::Command::LeaseRevoke(pb::LeaseRevokeRequest { id })).await {
                Ok(_) | Err(kv_api::Error::LeaseNotFound) => {}
                Err(err) => warn!(lease_id = format!("{id:x}"), %err, "revoking an expired lease failed; will retry"),
            }
        }
    }
}
