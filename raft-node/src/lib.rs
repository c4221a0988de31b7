//! One member of a cluster: openraft on sled, serving etcd's gRPC API.
//!
//! # Layout
//!
//! - [`config`]: etcd's flags, defaults and `ETCD_*` environment variables.
//! - [`member_id`]: etcd-style member and cluster ids.
//! - [`bootstrap`]: this member's identity at first boot, and a new cluster's initial membership.
//! - [`identity`]: the ids fixed at first boot, kept in the data dir.
//! - [`typ`]: the openraft type configuration and aliases.
//! - [`storage`]: the sled log store, the sled [`kv_api::Backend`] and the state machine (with snapshots).
//! - [`network`]: outbound Raft RPC to peers (tonic, `raftpb`).
//! - [`peer_service`]: inbound Raft RPC from peers.
//! - [`election`]: elections on a logical clock with pre-vote, as etcd.
//! - [`group_commit`]: many clients' writes proposed in one log entry.
//! - [`leader`]: what only the leader does (writes, read index, membership, leadership transfer).
//! - [`forward`]: sending those requests to the leader from any member.
//! - [`read_index`]: read index rounds shared by many linearizable reads.
//! - [`consensus`]: [`kv_api::Consensus`] on openraft: local on the leader, forwarded elsewhere.
//! - [`authority`]: accepting the `:authority` etcdctl sends when it dials a member by URL.
//! - [`lease_expiry`]: the leader's lease expiry loop.
//! - [`logging`]: the binaries' tracing subscriber.
//! - [`server`]: starting a member and serving the etcd gRPC services.
//! - [`restore`]: a new member's data dir from a snapshot file (`snapshot restore`).

pub mod authority;
pub mod bootstrap;
pub mod config;
pub mod consensus;
pub mod election;
pub mod forward;
pub mod group_commit;
pub mod identity;
pub mod leader;
pub mod lease_expiry;
pub mod logging;
pub mod member_id;
pub mod network;
pub mod peer_service;
pub mod read_index;
pub mod restore;
pub mod server;
pub mod storage;
pub mod typ;
