//! Leases: the replicated table of leases and their keys ([`table`]) and the leader's expiry deadlines
//! ([`expiry`]). The `etcdserverpb.Lease` service is in [`crate::service`].

pub mod expiry;
pub mod table;

pub use table::{Lease, LeaseId, LeaseTable, MAX_LEASE_TTL};
