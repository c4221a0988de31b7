//! Workloads: what the client workers do during a run.
//!
//! Every workload follows the same client rules (see [`crate::history`]): one outstanding op per
//! logical process, no retries of writes, unique written values, an indeterminate write recorded
//! as `info` after which the worker continues under a fresh process id. [`perform`] applies them to
//! one op; the lease workload, whose errors can carry an observation, applies [`failed_kind`] itself.
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
use crate::client;
use crate::history::{Op, OpPair, OpType};
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

/// Why an op did not complete `ok`.
#[derive(Debug)]
pub(crate) struct OpError {
    /// The history's `error`.
    pub(crate) text: String,
    /// The op certainly had no effect: it was never sent, or the server answered that it changed
    /// nothing.
    pub(crate) definite: bool,
}

impl OpError {
    /// A gRPC error: definite only when the request never left the client.
    pub(crate) fn status(status: tonic::Status) -> OpError {
        OpError { text: client::describe(&status), definite: client::never_sent(&status) }
    }

    /// The server answered, but not as the workload expects: what the op did is unknown.
    pub(crate) fn answered(text: impl Into<String>) -> OpError {
        OpError { text: text.into(), definite: false }
    }
}

/// The completion type of an op that erred: `fail` when it certainly had no effect (it only reads,
/// or the error is definite), else `info`.
pub(crate) fn failed_kind(read_only: bool, definite: bool) -> OpType {
    if read_only || definite {
        OpType::Fail
    } else {
        OpType::Info
    }
}

/// Runs one op by the client rules: records its invocation under `*process`, awaits `request`
/// (which sends it, once), and records the completion: `ok` with the payload and header revision
/// the request returned, or the invoked op with the error text as `fail` or `info` (see
/// [`failed_kind`]). After an `info` the process is crashed, so `*process` becomes a fresh one.
/// `stamp` adds what both entries carry (member, key). Returns the `ok` payload and revision.
pub(crate) async fn perform<P: Clone + Serialize>(
    recorder: &Recorder<P>,
    process: &mut u64,
    op: P,
    read_only: bool,
    stamp: impl Fn(Op<P>) -> Op<P>,
    request: impl Future<Output = Result<(P, i64), OpError>>,
) -> Option<(P, i64)> {
    let invoker = *process;
    recorder.record(|t| stamp(Op::invoke(invoker, op.clone(), t)));
    match request.await {
        Ok((done, revision)) => {
            recorder.record(|t| stamp(Op::new(invoker, OpType::Ok, done.clone(), t)).with_revision(revision));
            Some((done, revision))
        }
        Err(err) => {
            let kind = failed_kind(read_only, err.definite);
            recorder.record(|t| stamp(Op::new(invoker, kind, op, t)).with_error(err.text));
            if kind == OpType::Info {
                *process = recorder.fresh_process();
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::register::{RegisterOp, RegisterWrite};
    use crate::recorder::Clock;

    fn write(value: i64, version: Option<i64>) -> RegisterOp {
        RegisterOp::Write(RegisterWrite { value, version })
    }

    fn stamp(op: Op<RegisterOp>) -> Op<RegisterOp> {
        op.with_member("n1").with_key("k")
    }

    /// Each way a request can end: what is recorded, and whether the worker keeps its process.
    #[tokio::test]
    async fn perform_follows_the_client_rules() {
        let dir = tempfile::tempdir().expect("temp dir");
        let recorder: Recorder<RegisterOp> =
            Recorder::create(&dir.path().join("history.jsonl"), Clock::start()).expect("create");
        let refused = OpError { text: "refused".into(), definite: true };
        type Case = (&'static str, bool, Result<(RegisterOp, i64), OpError>, OpType, bool);
        let cases: Vec<Case> = vec![
            ("ok", false, Ok((write(1, Some(3)), 7)), OpType::Ok, true),
            ("read that erred", true, Err(OpError::answered("garbage")), OpType::Fail, true),
            ("write never sent", false, Err(refused), OpType::Fail, true),
            ("write timed out", false, Err(OpError::answered("timeout")), OpType::Info, false),
        ];
        for (name, read_only, result, kind, keeps_process) in cases {
            let mut process = recorder.fresh_process();
            let invoked = process;
            let mut done = stamp(Op::new(invoked, kind, write(1, None), 0));
            match &result {
                Ok((payload, revision)) => done = Op { payload: payload.clone(), ..done.with_revision(*revision) },
                Err(err) => done.error = Some(err.text.clone()),
            }
            let want_ok = result.as_ref().ok().cloned();

            let got = perform(&recorder, &mut process, write(1, None), read_only, stamp, async { result }).await;
            assert_eq!(got, want_ok, "{name}");
            assert_eq!(process == invoked, keeps_process, "{name}");
            let mut ops = recorder.finish().expect("finish");
            ops.iter_mut().for_each(|op| op.time_ns = 0);
            assert_eq!(ops, vec![stamp(Op::invoke(invoked, write(1, None), 0)), done], "{name}");
        }
    }
}
