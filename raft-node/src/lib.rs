//! One member of a cluster: openraft on sled, serving etcd's gRPC API.
//!
//! # Layout
//!
//! - [`cli`]: what the binaries do: flags in, one line out for a bad one, a member run until a signal.
//! - [`config`]: etcd's flags, defaults, `ETCD_*` environment variables and YAML config file.
//! - [`member_id`]: etcd-style member and cluster ids.
//! - [`bootstrap`]: this member's identity at first boot, and a new cluster's initial membership.
//! - [`identity`]: the ids fixed at first boot, kept in the data dir.
//! - [`typ`]: the openraft type configuration and aliases.
//! - [`storage`]: the sled log store, the sled [`kv_api::Backend`] and the state machine (with snapshots).
//! - [`snapshot_policy`]: when a member builds a snapshot (etcd's count, and the log's growth against the store).
//! - [`dial`]: how this member dials its peers (own peer IP, TLS for `https://`).
//! - [`connectivity`]: since when each peer has answered without a break (for `--strict-reconfig-check`).
//! - [`early_append`]: the leader's new entries sent to followers while it flushes them itself.
//! - [`network`]: outbound Raft RPC to peers (tonic, `raftpb`).
//! - [`peer_service`]: inbound Raft RPC from peers.
//! - [`probe`]: timing round trips to every peer, as etcd's prober.
//! - [`election`]: elections on a logical clock with pre-vote, as etcd, and the leader's beats outside Raft's streams.
//! - [`failpoint`]: the etcd failpoints (`GOFAIL_FAILPOINTS`) this member honours.
//! - [`group_commit`]: many clients' writes proposed in one log entry.
//! - [`leader`]: what only the leader does (writes, read index, membership, leadership transfer).
//! - [`reconfig`]: etcd's rules for membership changes (`--strict-reconfig-check`, adding unstarted voters).
//! - [`forward`]: sending those requests to the leader from any member.
//! - [`read_index`]: read index rounds shared by many linearizable reads.
//! - [`consensus`]: [`kv_api::Consensus`] on openraft: local on the leader, forwarded elsewhere.
//! - [`tls`]: etcd's TLS flags; `https://` client and peer listeners.
//! - [`cert_identity`]: a client certificate's Common Name as the user of requests without a token.
//! - [`authority`]: accepting the `:authority` etcdctl sends when it dials a member by URL.
//! - [`http`]: HTTP on the client port beside gRPC: `/health`, `/version`, `/metrics`; the metrics URLs.
//! - [`health`]: `/livez` and `/readyz`, as etcd 3.6.
//! - [`gateway`]: etcd's gRPC gateway, the unary RPCs as JSON under `/v3/`.
//! - [`metrics`]: etcd's Prometheus metrics, counted where things happen, and their text exposition.
//! - [`grpc_metrics`]: the gRPC started/handled counters, a layer around the client services.
//! - [`auto_compaction`]: etcd's periodic and revision auto compaction, on the leader.
//! - [`index_compaction`]: steps of the key index's compaction between commits.
//! - [`lease_expiry`]: the leader's lease expiry loop.
//! - [`corrupt_check`]: the leader's periodic comparison of every member's `HashKV` (CORRUPT alarm).
//! - [`date`]: UTC calendar dates and RFC 3339 timestamps.
//! - [`zap_json`]: JSON log lines as etcd's zap logger writes them.
//! - [`logging`]: the binaries' tracing subscriber.
//! - [`server`]: starting a member and serving the etcd gRPC services.
//! - [`restore`]: a new member's data dir from a snapshot file (`kvutl snapshot restore`).
//! - [`offline`]: `kvutl defrag` and `kvutl hashkv` on a stopped member's data dir.

pub mod append_stream;
pub mod authority;
pub mod auto_compaction;
pub mod bootstrap;
pub mod cert_identity;
pub mod cli;
pub mod config;
pub mod connectivity;
pub mod consensus;
pub mod corrupt_check;
pub mod date;
pub mod dial;
pub mod early_append;
pub mod election;
pub mod exposition;
pub mod failpoint;
pub mod forward;
pub mod forward_batch;
pub mod gateway;
pub mod group_commit;
pub mod grpc_metrics;
pub mod health;
pub mod http;
pub mod identity;
pub mod index_compaction;
pub mod lanes;
pub mod leader;
pub mod leader_wire;
pub mod lease_expiry;
pub mod logging;
pub mod member_id;
pub mod metrics;
pub mod network;
pub mod offline;
pub mod peer_service;
pub mod probe;
pub mod read_index;
pub mod reconfig;
pub mod restore;
pub mod runtime;
pub mod server;
pub mod snapshot_policy;
pub mod storage;
pub mod tls;
pub mod typ;
pub mod zap_json;
