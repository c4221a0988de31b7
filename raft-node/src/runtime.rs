//! The runtime a member's tasks run on, and how they block without holding the others up.
//!
//! On a machine of two cores or fewer, every task of a member runs on one thread (tokio's
//! single-threaded runtime); with more cores, on tokio's multi-threaded runtime, a worker per core.
//! `TOKIO_WORKER_THREADS=N` (tokio's own variable) asks for N workers of the multi-threaded runtime
//! whatever the cores.
//!
//! Why one thread on small machines: a write's serial path hops through many tasks (the request read,
//! the proposal, the append, its sync, the early sends to followers, their answers, the commit, the
//! apply, the answer). On the multi-threaded runtime each hop may land on another worker, which has to
//! be woken (a futex call and a context switch) or steal the task; on two cores shared by three members
//! and their clients, that churn was most of what a put cost. Counted with `perf stat` during a lone
//! client's puts (three members on loopback): 12.5 futex calls and 15 context switches per put on each
//! follower, 21 on the leader, 57 % of all CPU in the kernel. On one thread a hop is a plain task switch;
//! only blocking work leaves it ([`blocking`]: the leader's log syncs (a follower's quick ones stay, see
//! `storage::sync_place`), roll-overs, truncations and purges;
//! reads of many keys, hashes and bcrypt were already handed to the blocking pool). Measured by `jepsen bench --target ours --host-network`,
//! alternating fresh clusters (members' CPU per put, 3 rounds each): put-1 1,406–1,724 µs on two workers
//! against 1,301–1,365 on one thread, and 816 → 889 puts/s at the medians; put-100 113–130 → 95–118 µs.
//! A member then uses one core for its tasks (plus the blocking pool): on a bigger machine it keeps the
//! multi-threaded runtime, whose workers serve more clients at once.

use std::io;

use tokio::runtime::{Builder, Handle, Runtime, RuntimeFlavor};

/// The environment variable tokio's multi-threaded runtime reads for its number of workers.
pub const WORKERS_ENV: &str = "TOKIO_WORKER_THREADS";

/// Which runtime a member runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Every task on the thread that starts the member.
    OneThread,
    /// tokio's multi-threaded runtime with this many workers.
    Workers(usize),
}

/// The flavor for a machine of `cores` cores, given `TOKIO_WORKER_THREADS` (`workers`), or one line
/// naming what is wrong with it.
pub fn flavor(cores: usize, workers: Option<&str>) -> Result<Flavor, String> {
    match workers {
        Some(text) => match text.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(Flavor::Workers(n)),
            _ => Err(format!("invalid {WORKERS_ENV} {text:?}: want a number of threads, 1 or more")),
        },
        None if cores <= 2 => Ok(Flavor::OneThread),
        None => Ok(Flavor::Workers(cores)),
    }
}

/// Builds the runtime for this machine (see the module doc).
pub fn build() -> Result<Runtime, String> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = std::env::var(WORKERS_ENV).ok();
    let built = match flavor(cores, workers.as_deref())? {
        Flavor::OneThread => Builder::new_current_thread().enable_all().build(),
        Flavor::Workers(n) => Builder::new_multi_thread().worker_threads(n).enable_all().build(),
    };
    built.map_err(|err| format!("cannot start the runtime: {err}"))
}

/// Runs `work`, which blocks (a file sync), without holding up the runtime's other tasks: on the
/// multi-threaded runtime in this task (`block_in_place` moves the worker's other tasks to another
/// thread; a blocking-pool thread cost two more wake-ups there), on the single-threaded one on a
/// blocking-pool thread, so that the leader's early sends go out while it syncs.
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    match Handle::current().runtime_flavor() {
        RuntimeFlavor::MultiThread => Ok(tokio::task::block_in_place(work)),
        _ => tokio::task::spawn_blocking(work).await.map_err(io::Error::other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_machines_run_on_one_thread_unless_told() {
        assert_eq!(flavor(1, None), Ok(Flavor::OneThread));
        assert_eq!(flavor(2, None), Ok(Flavor::OneThread));
        assert_eq!(flavor(8, None), Ok(Flavor::Workers(8)));
        assert_eq!(flavor(2, Some("4")), Ok(Flavor::Workers(4)));
        assert_eq!(flavor(8, Some(" 1 ")), Ok(Flavor::Workers(1)));
        let err = flavor(2, Some("many")).expect_err("not a number");
        assert!(err.contains("TOKIO_WORKER_THREADS") && err.contains("\"many\""), "{err}");
        assert!(flavor(2, Some("0")).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn blocking_work_leaves_a_single_threaded_runtime_free() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // The work waits for a task of this runtime: run inline, it would never end.
        let work = tokio::spawn(blocking(move || rx.recv().is_ok()));
        tokio::spawn(async move { tx.send(()).expect("send") }).await.expect("sender");
        assert!(work.await.expect("join").expect("blocking"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_work_runs_in_place_on_workers() {
        let here = std::thread::current().id();
        let ran = blocking(move || std::thread::current().id()).await.expect("blocking");
        assert_eq!(ran, here);
    }
}
