//! Lease expiry on the leader.

use std::time::{Duration, Instant};

use proto::etcdserverpb as pb;
use tracing::{info, warn};

use crate::leader::Leader;
use crate::leader_wire::LeaderRequest;

/// How often the leader looks for expired leases.
const LEASE_EXPIRY_TICK: Duration = Duration::from_millis(500);

/// Expires leases while this member leads: each lease past its deadline is revoked through Raft (so every
/// member deletes its keys at the same revision). Deadlines start over whenever this member becomes leader.
pub async fn expire_leases(leader: Leader) {
    let mut ticker = tokio::time::interval(LEASE_EXPIRY_TICK);
    loop {
        ticker.tick().await;
        let leading = leader.raft.metrics().borrow().current_leader == Some(leader.member_id);
        if !leading {
            leader.deadlines.clear();
            continue;
        }
        let leases = leader.store.read().leases();
        let expired = leader.deadlines.expired(&leases, Instant::now());
        if expired.is_empty() {
            continue;
        }
        // Deadlines are this member's own: after a pause they are stale, and another member may have
        // led (and renewed) meanwhile. Revoke only as a leader a quorum still follows, and only
        // through this member's own log: a revoke forwarded to a newer leader would cut short a
        // lease that leader renewed (etcd #15247). A leader that lost its quorum steps down and
        // clears its deadlines on the next tick.
        if let Err(err) = leader.confirm_leadership().await {
            warn!(%err, "not revoking expired leases: leadership not confirmed");
            continue;
        }
        for id in expired {
            info!(lease_id = format!("{id:x}"), "lease expired");
            let revoke = kv_api::Command::LeaseRevoke(pb::LeaseRevokeRequest { id });
            // The leader answers once the revoke is applied here.
            if let Err(err) = leader.handle(LeaderRequest::Write(revoke)).await {
                warn!(lease_id = format!("{id:x}"), %err, "revoking an expired lease failed; will retry");
            }
        }
    }
}
