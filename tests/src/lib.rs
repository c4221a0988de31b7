//! Integration test harness: run real members as processes and drive them with `etcdctl` and the
//! `etcd-client` crate.
//!
//! Every expectation in `tests/it` is what real etcd 3.4 does, so the same tests run against real
//! etcd (to validate them) and against our `raft-node`. `KV_TEST_SERVER=etcd|ours` picks the server
//! (default `ours`).
//!
//! # Layout
//!
//! - [`server`]: which binary to run (`KV_TEST_SERVER`, `RAFT_NODE_BIN`, `ETCD_BIN`).
//! - [`member`]: one member process with its temp data dir, free ports, log file, readiness wait,
//!   `kill9`/`restart`, killed on `Drop`.
//! - [`cluster`]: a multi-member cluster (`n1`, `n2`, ...) bootstrapped on free ports with a unique
//!   token; leader and convergence waits; `member add` as an operator does it.
//! - [`cluster_member`]: one member of a cluster: `kill9`/`restart` with the same flags,
//!   `pause`/`resume` (SIGSTOP/SIGCONT), Status.
//! - `process`: free ports, log files and signals, shared by both kinds of member.
//! - [`etcdctl`]: runs `/usr/bin/etcdctl` against a member and captures its output.
//! - [`kvctl`]: finds our `kvctl` binary (`KVCTL_BIN`, or next to the test executable).
//! - [`diff`]: a line diff for failure messages.
//! - [`http`]: a plain HTTP/1.1 client for the client port, and a Prometheus text parser.
//! - [`grpc`]: pulls the gRPC code and message out of an `etcd_client::Error`.
//! - [`normalize`]: masks member-specific values (IDs, ports, terms, timings) so that the outputs of
//!   two different servers can be compared line by line.
//! - [`spawned`]: a server process started with exactly the flags, variables and files a test gives.
//! - [`table`]: parses etcdctl's `-w table` output and checks its layout.
//! - [`tls`]: test certificates (`openssl`) and a cluster with TLS on every URL.

pub mod cluster;
pub mod cluster_member;
pub mod diff;
pub mod etcdctl;
pub mod grpc;
pub mod http;
pub mod kvctl;
pub mod member;
pub mod normalize;
mod process;
pub mod server;
pub mod spawned;
pub mod table;
pub mod tls;

pub use cluster::{Bootstrap, Cluster, ClusterConfig, Timing};
pub use cluster_member::{ClusterMember, MemberStatus};
pub use etcdctl::CtlOutput;
pub use grpc::{assert_grpc_error, grpc_error};
pub use member::{Member, MemberConfig};
pub use server::ServerKind;
