//! Workloads: what the client workers do during a run.
//!
//! Every workload follows the same client rules (see [`crate::history`]): one outstanding op per
//! logical process, no retries of writes, unique written values, an indeterminate write recorded
//! as `info` after which the worker continues under a fresh process id.
//!
//! - [`register`]: per-key read, write and compare-and-set through Range, Put and Txn.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use tokio::time::Instant;
use tonic::transport::Channel;

pub mod register;

/// What one worker needs to run.
#[derive(Clone, Debug)]
pub struct WorkerContext {
    /// The worker's number (from 0); it seeds the worker's RNG.
    pub index: usize,
    /// The member this worker talks to, and its name for the history.
    pub channel: Channel,
    pub member: String,
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
