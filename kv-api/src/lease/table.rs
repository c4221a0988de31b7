//! The leases the store knows: granted TTLs and the keys attached to each. Part of the replicated state
//! (changed only by apply, persisted in the lease bucket); when leases expire is not — only the leader
//! tracks deadlines (see `expiry`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The longest TTL etcd grants, in seconds.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// A lease id (etcd's `LeaseID`): positive; 0 means "no lease".
pub type LeaseId = i64;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    /// Granted TTL in seconds.
    pub ttl: i64,
    /// Keys currently put with this lease.
    pub keys: BTreeSet<Vec<u8>>,
}

/// Every lease, by id.
#[derive(Clone, Debug, Default)]
pub struct LeaseTable {
    leases: BTreeMap<LeaseId, Lease>,
    /// The lease of every key that has one.
    key_lease: HashMap<Vec<u8>, LeaseId>,
}

impl LeaseTable {
    pub fn clear(&mut self) {
        self.leases.clear();
        self.key_lease.clear();
    }

    /// Every key attached to a lease, with its lease.
    pub fn attachments(&self) -> impl Iterator<Item = (&[u8], LeaseId)> + '_ {
        self.key_lease.iter().map(|(key, lease)| (key.as_slice(), *lease))
    }

    pub fn grant(&mut self, id: LeaseId, ttl: i64) {
        self.leases.insert(id, Lease { ttl, keys: BTreeSet::new() });
    }

    /// Removes a lease; returns it with its keys (which the caller deletes).
    pub fn revoke(&mut self, id: LeaseId) -> Option<Lease> {
        let lease = self.leases.remove(&id)?;
        for key in &lease.keys {
            self.key_lease.remove(key);
        }
        Some(lease)
    }

    pub fn get(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(&id)
    }

    pub fn contains(&self, id: LeaseId) -> bool {
        self.leases.contains_key(&id)
    }

    /// Attaches `key` to lease `to` (0: none), detaching it from its previous lease. An unknown lease
    /// holds nothing.
    pub fn attach(&mut self, key: &[u8], to: LeaseId) {
        let from = if to != 0 && self.leases.contains_key(&to) {
            self.key_lease.insert(key.to_vec(), to)
        } else {
            self.key_lease.remove(key)
        };
        if from == Some(to) {
            return;
        }
        if let Some(lease) = from.and_then(|from| self.leases.get_mut(&from)) {
            lease.keys.remove(key);
        }
        if let Some(lease) = self.leases.get_mut(&to) {
            lease.keys.insert(key.to_vec());
        }
    }

    /// Every lease id with its granted TTL, in id order.
    pub fn list(&self) -> Vec<(LeaseId, i64)> {
        self.leases.iter().map(|(id, lease)| (*id, lease.ttl)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_their_lease() {
        let mut table = LeaseTable::default();
        table.grant(1, 10);
        table.grant(2, 20);
        table.attach(b"a", 1);
        table.attach(b"b", 1);
        table.attach(b"a", 2);
        table.attach(b"b", 0);
        table.attach(b"c", 9); // an unknown lease holds nothing
        assert_eq!(table.get(1).map(|l| l.keys.len()), Some(0));
        assert_eq!(table.get(2).map(|l| l.keys.iter().cloned().collect::<Vec<_>>()), Some(vec![b"a".to_vec()]));
        assert_eq!(table.list(), vec![(1, 10), (2, 20)]);
        assert_eq!(table.revoke(2).map(|l| l.ttl), Some(20));
        assert!(!table.contains(2));
        // A key of a revoked lease is free again.
        table.attach(b"a", 1);
        assert_eq!(table.get(1).map(|l| l.keys.len()), Some(1));
    }
}
