//! A Jepsen-style harness for the etcd-compatible store: the history model and the checkers.
//!
//! This first slice is pure logic. A runner (added later) drives a local cluster, injects faults and
//! records what clients saw as a [`history`]; the [`checker`]s then decide whether that history is
//! allowed by etcd's guarantees. Every checker returns a [`CheckResult`] with readable anomalies.
//!
//! # Layout
//!
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
//! - [`error`]: the crate's error type (malformed histories, I/O).

pub mod checker;
pub mod error;
pub mod history;

pub use checker::{Anomaly, AnomalyKind, CheckResult, Validity};
pub use error::{Error, Result};
pub use history::{Op, OpPair, OpType};
