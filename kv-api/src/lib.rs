//! etcd v3 API semantics, independent of Raft and of the disk.
//!
//! # Layout
//!
//! - [`alarm`]: the alarm table (NOSPACE, CORRUPT) and etcd's quota charges.
//! - [`auth`]: users, roles, permissions, simple tokens and JWTs (the state; its service is in `service`).
//! - [`hash`]: `Hash` and `HashKV`, identical on every member at the same revision.
//! - [`revision`]: `(main, sub)` revisions and their byte encoding.
//! - [`key_index`]: one key's history as generations (with a worked example of compaction).
//! - [`index`]: the in-memory index of every key, and etcd's key-range forms.
//! - `key_map`: the index's ordered map, packed in sorted chunks (half a `BTreeMap`'s memory a key).
//! - [`backend`]: the [`Backend`] storage seam, and [`MemBackend`] for tests.
//! - [`compactor`]: the store's thread deleting what compactions freed, in batches, in the background.
//! - [`store`]: the MVCC store: reads at any revision, history and commit; apply of writes (`write`);
//!   txns: compares, checks and runs (`txn`).
//! - [`range`]: Range options applied after the index scan (filters, sort, limit).
//! - [`validate`]: request checks made before proposing (etcd's gRPC-layer checks and limits).
//! - [`lease`]: the lease table and the leader's expiry deadlines.
//! - [`command`]: the commands that travel through the log, and their responses.
//! - [`consensus`]: the [`Consensus`] seam to Raft.
//! - [`downgrade`]: etcd 3.6's cluster downgrade: validation, the recorded target, the storage version.
//! - [`error`]: the one error type and its mapping to gRPC statuses.
//! - [`service`]: every tonic service (KV, Watch, Lease, Auth, Maintenance, Cluster, Lock, Election; Lock
//!   and Election run etcd's lock and election recipes through the member's own KV and Lease services),
//!   and the request-side auth helpers (`auth_request`).
//! - [`snapshot`]: etcd's snapshot file (a bbolt database in etcd's layout and its digest), written
//!   from a store and read back into one; `raft-node`, `kvctl` and `kvutl` share it.
//! - [`stats`]: counts of ranges, puts, deletes and txns, for etcd's metrics.
//! - [`watch`]: the [`watch::WatchHub`] the apply path feeds, and one watcher's steps.

pub mod alarm;
pub mod auth;
pub mod backend;
pub mod command;
pub mod compactor;
pub mod consensus;
pub mod downgrade;
pub mod error;
pub mod hash;
pub mod index;
pub mod key_index;
mod key_map;
pub mod lease;
pub mod range;
pub mod revision;
pub mod service;
pub mod snapshot;
pub mod stats;
pub mod store;
pub mod validate;
pub mod watch;

pub use backend::{Backend, BackendError, Bucket, MemBackend, Record, WriteBatch};
pub use command::{Command, CommandResponse};
pub use consensus::{Consensus, RaftStatus};
pub use error::{Error, Result};
pub use store::{KeyExport, MvccStore, SharedStore};

/// The etcd version this server emulates, reported by `Maintenance.Status` unless configured otherwise:
/// etcd 3.6, the line Kubernetes 1.34-1.36 deploys (kube-apiserver enables watch progress requests from
/// 3.5.13 on; kubeadm's external-etcd check wants 3.5.24 or later).
pub const ETCD_VERSION: &str = "3.6.14";
