//! The tonic services: thin handlers that validate, call the store or consensus, map errors and fill
//! headers.

pub mod auth;
pub mod auth_request;
pub mod cluster;
pub mod election;
pub mod kv;
pub mod lease;
pub mod limit;
pub mod local_client;
pub mod lock;
pub mod maintenance;
pub mod quota;
pub mod range_route;
pub mod snapshot;
pub mod watch;
mod watch_stream;

use proto::etcdserverpb as pb;

use crate::consensus::Consensus;
use crate::store::SharedStore;

/// Completes a header from apply (which carries only a revision): identity and term from consensus, and
/// the current store revision when apply left it 0.
pub(crate) fn fill_header<C: Consensus>(consensus: &C, store: &SharedStore, header: &mut Option<pb::ResponseHeader>) {
    let revision = header.as_ref().map_or(0, |h| h.revision);
    let mut full = consensus.header();
    full.revision = if revision != 0 { revision } else { store.read().current_revision() };
    *header = Some(full);
}

/// A header for a response that carries no revision of its own: the current store revision.
pub(crate) fn current_header<C: Consensus>(consensus: &C, store: &SharedStore) -> Option<pb::ResponseHeader> {
    let mut header = None;
    fill_header(consensus, store, &mut header);
    header
}

/// Go's `bcrypt.DefaultCost`, etcd's `--bcrypt-cost` default.
pub const DEFAULT_BCRYPT_COST: u32 = 10;

/// Settings the API reports and enforces.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    pub limits: crate::validate::Limits,
    /// The etcd version reported by `Maintenance.Status` (kube-apiserver gates features on it).
    pub version: String,
    /// The shortest lease TTL granted, in seconds (etcd: 1.5 election timeouts, rounded up).
    pub min_lease_ttl: i64,
    /// `--quota-backend-bytes` as it applies (`None`: no quota, etcd's negative value).
    pub quota_backend_bytes: Option<u64>,
    /// `--bcrypt-cost`: the work factor of stored password hashes (etcd's default 10).
    pub bcrypt_cost: u32,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            limits: Default::default(),
            version: crate::ETCD_VERSION.to_string(),
            min_lease_ttl: 2,
            quota_backend_bytes: Some(quota::DEFAULT_QUOTA_BYTES),
            bcrypt_cost: DEFAULT_BCRYPT_COST,
        }
    }
}
