//! A Jepsen-style harness for the etcd-compatible store: a local three-member cluster (ours or real
//! etcd) in a private network namespace, a nemesis that partitions, kills and pauses members, client
//! workers that record what they saw as a [`history`], and [`checker`]s that decide whether that
//! history is allowed by etcd's guarantees. Every checker returns a [`CheckResult`] with readable
//! anomalies; a run writes a report folder.
//!
//! # Layout
//!
//! - [`options`]: the flags of `jepsen test` (target, workload, nemesis, seed, timings).
//! - [`campaign`]: `jepsen campaign`, many child runs over the workload × fault matrix, and their table.
//! - [`run`]: one run, phase by phase (start, workload + faults, heal, liveness, convergence, checks).
//! - [`netns`]: re-executing under `unshare --net`, and refusing to touch the host's network.
//! - [`net`]: partitions as nftables `drop` rules on loopback, by address and by member user id.
//! - [`cluster`] and [`member`]: member processes on 127.0.0.11..13, each under its own user id;
//!   SIGKILL and restart on the same data dir, SIGSTOP/SIGCONT, leader lookup.
//! - [`nemesis`]: the seeded fault schedule and the faults themselves.
//! - [`client`]: gRPC channels and probes (Status, HashKV, a liveness Put), each bounded by a timeout.
//! - [`workload`]: what the workers do; [`workload::register`] is read/write/CAS per key.
//! - [`recorder`]: the run's clock and the history as it is written (`history.jsonl`).
//! - [`report`]: the report folder (`summary.txt`, `summary.json`, history, nemesis log, member logs).
//! - [`history`]: Jepsen-shaped operations (`{process, type, f, value, time_ns}`), JSONL reading and
//!   writing, and pairing of invocations with their completions (`info` = indeterminate).
//! - [`checker`]: the common [`CheckResult`] and one module per checker:
//!   - [`checker::linear`]: generic Wing–Gong linearizability search with Lowe's cache, split per key,
//!     bounded by a deadline (expiry yields `Unknown`).
//!   - [`checker::register`]: the versioned read/write/CAS register model and the register workload.
//!   - [`checker::set_full`]: Jepsen's `set-full` (lost, stale, unexpected, duplicated elements).
//!   - [`checker::list_append`]: a reduced Elle list-append checker (prefix order, lost appends,
//!     ww/wr/rw/real-time dependency cycles).
//!   - [`checker::graph`]: the dependency graph, strongly connected components and cycle extraction.
//!   - [`checker::watch`]: etcd's watch guarantees checked against a ground-truth event list.
//!   - [`checker::revision`]: header revisions never go back in real time.
//!   - [`checker::convergence`]: after heal every member reports the same revision and `HashKV`.
//!   - [`checker::logs`]: panics and fatal errors in member logs.
//!   - [`checker::liveness`]: a write succeeds soon after the final heal.
//! - [`error`]: the crate's error type (malformed histories, I/O, processes, nft, setup).

pub mod campaign;
pub mod checker;
pub mod client;
pub mod cluster;
pub mod error;
pub mod history;
pub mod member;
pub mod nemesis;
pub mod net;
pub mod netns;
pub mod options;
pub mod recorder;
pub mod report;
pub mod run;
pub mod workload;

pub use checker::{Anomaly, AnomalyKind, CheckResult, Validity};
pub use error::{Error, Result};
pub use history::{Op, OpPair, OpType};
