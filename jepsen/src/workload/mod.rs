//! Workloads: what the client workers do during a run.
//!
//! Every workload follows the same client rules (see [`crate::history`]): one outstanding op per
//! logical process, no retries of writes, unique written values, an indeterminate write recorded
//! as `info` after which the worker continues under a fresh process id.
//!
//! Each workload implements [`Workload`]: its workers run until the end of the run while the
//! nemesis injects faults; after the final heal and convergence, [`Workload::finish`] may do final
//! reads (recorded in the history like any op) or collect ground truth; then [`Workload::check`]
//! judges the paired history.
//!
//! - [`register`]: per-key read, write and compare-and-set through Range, Put and Txn.
//! - [`watch`]: writers on a few keys, and watchers that resume from their last revision after a
//!   break (possibly on another member); checked with etcd's watch rules against the ground truth.
//! - [`mixed`]: puts, deletes, txns, linearizable and serializable ranges on a few keys; every op
//!   checked against the ground truth replayed to its header revision.
//! - [`truth`]: the ground truth both of them are judged against (every event persisted under the
//!   workload's prefix); [`watch_client`]: the watch stream, stall detection and event conversion
//!   they share.
//! - [`set`]: unique adds through a create-revision compare, whole-set reads, final reads.
//! - [`list_append`]: Elle-style transactions as pre-read plus a mod-revision-guarded commit.
//! - [`lease`]: grants, puts attached to leases, revokes, keep-alives and reads; expiry after the run.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::checker::CheckResult;
use crate::history::OpPair;
use crate::recorder::Recorder;

pub mod lease;
pub mod list_append;
pub mod mixed;
pub mod register;
pub mod set;
pub mod truth;
pub mod watch;
pub mod watch_client;

/// What a workload does and how its history is judged.
pub trait Workload: Send + Sync + 'static {
    /// The history's `f`/`value` payload.
    type Op: Clone + std::fmt::Debug + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Runs one worker until `ctx.end` (no op is invoked after it; the last one may complete later).
    fn run_worker(
        self: Arc<Self>,
        ctx: WorkerContext,
        recorder: Arc<Recorder<Self::Op>>,
    ) -> impl Future<Output = ()> + Send;

    /// After the final heal, once the members agree on a revision (or the convergence wait gave
    /// up), and before they stop: final reads, ground truth. The default does nothing.
    fn finish(
        &self,
        _ctx: &FinishContext,
        _recorder: &Recorder<Self::Op>,
    ) -> impl Future<Output = crate::Result<()>> + Send {
        async { Ok(()) }
    }

    /// Judges the history; every result counts towards the run's verdict.
    fn check(&self, pairs: &[OpPair<Self::Op>], budget: Duration) -> Vec<CheckResult>;

    /// Lines for the report's notes (what a reader needs to judge the verdict).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What [`Workload::finish`] can use.
#[derive(Clone, Debug)]
pub struct FinishContext {
    /// Every member's name and channel, in member order.
    pub members: Vec<(String, Channel)>,
    pub op_timeout: Duration,
    /// The report folder (for extra files such as `watches.jsonl`).
    pub dir: PathBuf,
    /// The revision every member agreed on, when they did.
    pub converged_revision: Option<i64>,
}

/// What one worker needs to run.
#[derive(Clone, Debug)]
pub struct WorkerContext {
    /// The worker's number (from 0); it seeds the worker's RNG.
    pub index: usize,
    /// The member this worker talks to, and its name for the history.
    pub channel: Channel,
    pub member: String,
    /// Every member's name and channel, in member order (for workers that move between members).
    pub members: Vec<(String, Channel)>,
    /// The mean pause between two of this worker's ops (workers × this = 1 / rate).
    pub period: Duration,
    pub op_timeout: Duration,
    /// No op is invoked after this.
    pub end: Instant,
}

impl WorkerContext {
    /// Sleeps a random time with mean `period` (uniform in `[0, 2 period)`); false when the run is
    /// over by then.
    pub async fn pace(&self, rng: &mut StdRng) -> bool {
        let max = self.period.as_secs_f64() * 2.0;
        let pause = if max > 0.0 { Duration::from_secs_f64(rng.gen_range(0.0..max)) } else { Duration::ZERO };
        tokio::time::sleep_until(self.end.min(Instant::now() + pause)).await;
        Instant::now() < self.end
    }
}
