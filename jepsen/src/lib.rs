//! A Jepsen-style harness for the etcd-compatible store: a local three-member cluster (ours or real
//! etcd) in a private network namespace, a nemesis that partitions, kills and pauses members, client
//! workers that record what they saw as a [`history`], and [`checker`]s that decide whether that
//! history is allowed by etcd's guarantees. Every checker returns a [`CheckResult`] with readable
//! anomalies; a run writes a report folder.
//!
//! # Layout
//!
//! - [`options`]: the flags of `jepsen test` (target, workload, nemesis, seed, timings).
//! - [`bench`]: `jepsen bench`, etcd's benchmark workloads against fresh clusters of ours and etcd, and
//!   their side-by-side table (QPS, latency percentiles, members' RSS and CPU).
//! - [`fuzz`]: `jepsen fuzz`, random requests built from the protobuf descriptors sent to one member of
//!   ours and one of etcd 3.5.1, their answers compared and grouped into a table of differences.
//! - [`campaign`]: `jepsen campaign`, many child runs over the workload × fault matrix, and their table.
//! - [`run`]: one run, phase by phase (start, workload + faults, heal, liveness, convergence, checks).
//! - [`netns`]: re-executing under `unshare --net`, and refusing to touch the host's network.
//! - [`net`]: partitions, one-way drops, client cuts and random loss as nftables `drop` rules on
//!   loopback (by address and by member user id); link delay through [`proxy`], a relay per peer
//!   link that can hold bytes back.
//! - [`cluster`] and [`member`]: member processes on 127.0.0.11..13, each under its own user id;
//!   SIGKILL and restart on the same data dir, SIGSTOP/SIGCONT, leader lookup.
//! - [`nemesis`]: the seeded fault schedule and the faults themselves.
//!   - [`membership`]: remove a member, add it back through learner → voter, repair at the final
//!     heal so that every member is a voter (`member-shrink-grow`).
//!   - [`truncation`]: compaction (`compact`), and a follower cut off until the leader has
//!     snapshotted and dropped the log it needs (`blackhole-snapshot`).
//! - [`client`]: gRPC channels and probes (Status, HashKV, a liveness Put), each bounded by a timeout.
//! - [`workload`]: what the workers do; [`workload::register`] is read/write/CAS per key,
//!   [`workload::set`] unique adds and whole-set reads, [`workload::list_append`] Elle-style txns,
//!   [`workload::lease`] grants, leased puts, revokes, keep-alives and expiry, [`workload::watch`]
//!   writers and resuming watchers, [`workload::mixed`] puts, deletes, txns and (serializable)
//!   ranges; [`workload::truth`] collects the ground truth (every event persisted) they are judged by,
//!   and [`workload::watch_client`] is the watch stream and stall detector they share.
//! - [`recorder`]: the run's clock and the history as it is written (`history.jsonl`).
//! - [`report`]: the report folder (`summary.txt`, `summary.json`, history, nemesis log, member logs).
//! - [`plot`]: the report's `latency.png` and `throughput.png`, fault windows shaded; [`html`]: its
//!   `index.html`.
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
//!   - [`checker::kv_model`]: the keyspace replayed from the ground truth; every read and write
//!     checked at its header revision, lost and unexpected writes (ops, replay, attribution of the
//!     truth's revisions and descriptions in files of their own).
//!   - [`checker::lease`]: etcd's lease promises (gone stays gone, no early expiry, expiry happens);
//!     the op payload, the indexed history and the rules in files of their own.
//!   - [`checker::revision`]: header revisions never go back in real time.
//!   - [`checker::convergence`]: after heal every member reports the same revision and `HashKV`.
//!   - [`checker::logs`]: panics and fatal errors in member logs.
//!   - [`checker::liveness`]: a write succeeds soon after the final heal.
//! - [`error`]: the crate's error type (malformed histories, I/O, processes, nft, setup).

pub mod bench;
pub mod campaign;
pub mod checker;
pub mod client;
pub mod cluster;
pub mod error;
pub mod fuzz;
pub mod history;
pub mod html;
pub mod member;
pub mod membership;
pub mod nemesis;
pub mod net;
pub mod netns;
pub mod options;
pub mod plot;
pub mod proxy;
pub mod recorder;
pub mod report;
pub mod run;
pub mod summary;
pub mod truncation;
pub mod workload;

pub use checker::{Anomaly, AnomalyKind, CheckResult, Validity};
pub use error::{Error, Result};
pub use history::{Op, OpPair, OpType};
