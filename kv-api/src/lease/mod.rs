//! Leases: the replicated table of leases and their keys ([`table`]), the leader's expiry deadlines
//! ([`expiry`]), and the `etcdserverpb.Lease` service ([`service`]).

pub mod expiry;
pub mod service;
pub mod table;

pub use table::{Lease, LeaseId, LeaseTable, MAX_LEASE_TTL};
