//! Lease deadlines, kept only by the leader: when a lease expires is never replicated, so apply stays
//! deterministic. The leader proposes a revoke for each lease past its deadline; a new leader starts every
//! lease's deadline afresh (etcd's promote), so no lease expires merely because leadership moved.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::LeaseId;

/// Deadlines of the leases this member expires while it leads.
#[derive(Debug, Default)]
pub struct LeaseDeadlines {
    deadlines: Mutex<HashMap<LeaseId, Instant>>,
    /// Extra time a lease gets when a new leader starts its countdown (etcd: one election timeout).
    promote_extension: Duration,
}

impl LeaseDeadlines {
    pub fn new(promote_extension: Duration) -> Self {
        Self { deadlines: Mutex::default(), promote_extension }
    }

    /// Restarts `id`'s countdown from `now` (a keep-alive, or a grant).
    pub fn renew(&self, id: LeaseId, ttl: i64, now: Instant) {
        self.deadlines.lock().insert(id, now + ttl_duration(ttl));
    }

    /// A keep-alive: restarts `id`'s countdown from `now`, unless its deadline has already passed. An
    /// expired lease is about to be revoked (the expiry loop may already be confirming leadership for
    /// it), so it stays expired and the keep-alive answers TTL 0, as etcd's does once the revoke is
    /// through. Renewing it here would let that revoke cut short the lease a client was just told
    /// lives on. Returns whether the lease was renewed.
    pub fn renew_unexpired(&self, id: LeaseId, ttl: i64, now: Instant) -> bool {
        let mut deadlines = self.deadlines.lock();
        if deadlines.get(&id).is_some_and(|deadline| *deadline <= now) {
            return false;
        }
        deadlines.insert(id, now + ttl_duration(ttl));
        true
    }

    /// Time left before `id` expires; what a new leader would give it when its countdown has not
    /// started here yet.
    pub fn remaining(&self, id: LeaseId, ttl: i64, now: Instant) -> Duration {
        match self.deadlines.lock().get(&id) {
            Some(deadline) => deadline.saturating_duration_since(now),
            None => ttl_duration(ttl) + self.promote_extension,
        }
    }

    /// Forgets every deadline (this member stopped leading).
    pub fn clear(&self) {
        self.deadlines.lock().clear();
    }

    /// Given every existing lease with its TTL: starts the countdown of leases without one, drops the
    /// deadlines of leases that are gone, and returns the leases past their deadline.
    pub fn expired(&self, leases: &[(LeaseId, i64)], now: Instant) -> Vec<LeaseId> {
        let mut deadlines = self.deadlines.lock();
        let known: HashMap<LeaseId, i64> = leases.iter().copied().collect();
        deadlines.retain(|id, _| known.contains_key(id));
        let mut expired = Vec::new();
        for (id, ttl) in leases {
            let deadline = *deadlines.entry(*id).or_insert_with(|| now + ttl_duration(*ttl) + self.promote_extension);
            if deadline <= now {
                expired.push(*id);
            }
        }
        expired
    }
}

fn ttl_duration(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_expire_after_their_ttl_and_renewals_push_back() {
        let deadlines = LeaseDeadlines::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let secs = |n| Duration::from_secs(n);
        let leases = [(1, 5), (2, 10)];
        // Leases first seen by this leader get an election timeout more.
        assert!(deadlines.expired(&leases, t0).is_empty());
        assert!(deadlines.expired(&leases, t0 + secs(5)).is_empty());
        assert_eq!(deadlines.expired(&leases, t0 + secs(6)), vec![1]);
        deadlines.renew(1, 5, t0 + secs(4));
        assert!(deadlines.expired(&leases, t0 + secs(8)).is_empty());
        assert_eq!(deadlines.remaining(1, 5, t0 + secs(8)), secs(1));
        assert_eq!(deadlines.expired(&leases, t0 + secs(11)), vec![1, 2]);
        // A revoked lease is forgotten; a new leader starts from the full TTL.
        assert!(deadlines.expired(&[(2, 10)], t0 + secs(12)) == vec![2]);
        deadlines.clear();
        assert_eq!(deadlines.remaining(2, 10, t0 + secs(20)), secs(11));
        assert!(deadlines.expired(&[(2, 10)], t0 + secs(20)).is_empty());
        // A grant starts the countdown at once, without the extension.
        deadlines.renew(3, 5, t0 + secs(20));
        assert_eq!(deadlines.remaining(3, 5, t0 + secs(21)), secs(4));
    }

    #[test]
    fn an_expired_lease_is_not_renewed() {
        let deadlines = LeaseDeadlines::new(Duration::ZERO);
        let t0 = Instant::now();
        let secs = |n| Duration::from_secs(n);
        deadlines.renew(1, 3, t0);
        assert!(deadlines.renew_unexpired(1, 3, t0 + secs(2)), "alive: renewed");
        assert_eq!(deadlines.remaining(1, 3, t0 + secs(2)), secs(3));
        // Past its deadline (t0 + 5 s), the expiry loop owns it.
        assert!(!deadlines.renew_unexpired(1, 3, t0 + secs(5)));
        assert_eq!(deadlines.expired(&[(1, 3)], t0 + secs(5)), vec![1]);
        // A lease this leader has no countdown for yet starts one.
        assert!(deadlines.renew_unexpired(2, 3, t0));
        assert_eq!(deadlines.remaining(2, 3, t0), secs(3));
    }
}
