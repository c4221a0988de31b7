//! Group commit: the writes of many clients travel in one log entry.
//!
//! openraft 0.9 appends each `client_write` on its own and waits for that append's flush before it
//! takes the next, so one entry per write caps a leader at one write per disk flush. The leader's
//! writes therefore queue here: while [`MAX_IN_FLIGHT`] entries are on their way, new writes wait,
//! and the next entry carries all of them (up to [`MAX_COMMANDS`] commands or about [`MAX_BYTES`]).
//! A lone client still gets an entry of its own at once. Apply gives each command of an entry its
//! own revision, in order, exactly as if each had had its own entry.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kv_api::{Command, CommandResponse, Error};
use openraft::raft::ClientWriteResult;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use crate::typ::{Raft, TypeConfig};

/// Entries proposed and not yet applied, at most: one being flushed and replicated while the next
/// one gathers writes.
pub const MAX_IN_FLIGHT: usize = 2;

/// Commands in one entry, at most.
pub const MAX_COMMANDS: usize = 1000;

/// Once an entry's requests reach this size (protobuf bytes), it takes no more (a single bigger
/// request still goes alone: etcd's request limit bounds it).
pub const MAX_BYTES: usize = 1024 * 1024;

/// A write as committed and applied.
#[derive(Debug)]
pub struct Written {
    /// The log index of the entry that carried it.
    pub index: u64,
    /// What apply answered (a request's own error, such as a failed lease lookup, is an answer).
    pub applied: kv_api::Result<CommandResponse>,
}

struct Pending {
    command: Command,
    done: oneshot::Sender<Reply>,
}

/// What the proposing task hands back to a writer.
enum Reply {
    /// The entry carries this write alone: the writer waits for openraft's answer itself, one task
    /// wake-up fewer on a lone client's path than going through [`answer`]. The slot is freed when
    /// the answer is in.
    Alone(oneshot::Receiver<ClientWriteResult<TypeConfig>>, OwnedSemaphorePermit),
    /// The answer, from the task that waited for an entry of many writes.
    Answered(Result<Written, Error>),
}

/// The leader's queue of writes; cloning gives another handle on the same queue.
#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::UnboundedSender<Pending>,
    /// Writes taken and not answered yet.
    outstanding: Arc<Outstanding>,
}

/// A count of writes in progress (two atomic operations per write, on the write path), with a signal
/// for whoever waits for it to fall to zero.
#[derive(Default)]
struct Outstanding {
    count: AtomicUsize,
    drained: Notify,
}

/// One write counted in [`Outstanding`] for as long as it lives.
struct Taken<'a>(&'a Outstanding);

impl Outstanding {
    fn take(&self) -> Taken<'_> {
        self.count.fetch_add(1, Ordering::AcqRel);
        Taken(self)
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

impl GroupCommit {
    /// Starts proposing queued writes to `raft`, which must be running on this runtime.
    pub fn start(raft: Raft) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        tokio::spawn(propose_batches(raft, receiver));
        Self { queue, outstanding: Arc::default() }
    }

    /// Proposes `command` with whatever other writes are waiting, and answers once it is applied here.
    /// [`Error::NotLeader`] means it was not proposed at all.
    pub async fn write(&self, command: Command) -> Result<Written, Error> {
        let _taken = self.outstanding.take();
        let (done, answer) = oneshot::channel();
        self.queue.send(Pending { command, done }).map_err(|_| Error::Stopped)?;
        match answer.await.map_err(|_| Error::Stopped)? {
            Reply::Answered(written) => written,
            Reply::Alone(applied, _slot) => {
                let (index, applied) = settle(applied.await, 1)?;
                let applied = applied.into_iter().next().ok_or_else(|| Error::Internal("no answer".into()))?;
                Ok(Written { index, applied })
            }
        }
    }

    /// Whether every write taken so far has been answered.
    pub fn is_drained(&self) -> bool {
        self.outstanding.count.load(Ordering::Acquire) == 0
    }

    /// Resolves once every write taken so far has been answered: its entry, if it got one, is in the log.
    pub async fn drained(&self) {
        loop {
            // Made before the check, so a fall to zero right after it still wakes this wait.
            let fell_to_zero = self.outstanding.drained.notified();
            if self.is_drained() {
                return;
            }
            fell_to_zero.await;
        }
    }
}

/// Takes the writes waiting now, up to the entry limits (at least one).
fn gather(first: Pending, receiver: &mut mpsc::UnboundedReceiver<Pending>) -> Vec<Pending> {
    let mut bytes = first.command.encoded_len();
    let mut batch = vec![first];
    while batch.len() < MAX_COMMANDS && bytes < MAX_BYTES {
        let Ok(next) = receiver.try_recv() else { break };
        bytes += next.command.encoded_len();
        batch.push(next);
    }
    batch
}

async fn propose_batches(raft: Raft, mut receiver: mpsc::UnboundedReceiver<Pending>) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        // Waiting for a free slot first lets writes pile up in the queue meanwhile.
        let Ok(slot) = in_flight.clone().acquire_owned().await else { return };
        let Some(first) = receiver.recv().await else { return };
        let (commands, waiting): (Vec<Command>, Vec<_>) =
            gather(first, &mut receiver).into_iter().map(|p| (p.command, p.done)).unzip();
        // Submitted in queue order, so entries follow the order the writes arrived in.
        match raft.client_write_ff(Arc::new(commands)).await {
            Ok(receiver) if waiting.len() == 1 => {
                let done = waiting.into_iter().next().expect("one writer");
                let _ = done.send(Reply::Alone(receiver, slot));
            }
            Ok(receiver) => {
                tokio::spawn(answer(receiver, waiting, slot));
            }
            Err(_) => {
                for done in waiting {
                    let _ = done.send(Reply::Answered(Err(Error::Stopped)));
                }
            }
        }
    }
}

/// Waits for an entry to be applied and answers each of its writes.
async fn answer(
    applied: oneshot::Receiver<ClientWriteResult<TypeConfig>>,
    waiting: Vec<oneshot::Sender<Reply>>,
    _slot: OwnedSemaphorePermit,
) {
    match settle(applied.await, waiting.len()) {
        Ok((index, answers)) => {
            for (done, applied) in waiting.into_iter().zip(answers) {
                let _ = done.send(Reply::Answered(Ok(Written { index, applied })));
            }
        }
        Err(err) => {
            for done in waiting {
                let _ = done.send(Reply::Answered(Err(err.clone())));
            }
        }
    }
}

/// An entry of `writes` writes as openraft answered it: its log index and each write's answer, in order.
fn settle(
    applied: Result<ClientWriteResult<TypeConfig>, oneshot::error::RecvError>,
    writes: usize,
) -> Result<(u64, Vec<kv_api::Result<CommandResponse>>), Error> {
    match applied {
        Ok(Ok(response)) if response.data.len() == writes => Ok((response.log_id.index, response.data)),
        Ok(Ok(response)) => Err(Error::Internal(format!(
            "an entry of {writes} writes was applied with {} answers",
            response.data.len()
        ))),
        Ok(Err(err)) => Err(crate::leader_wire::write_error(err)),
        Err(_) => Err(Error::Stopped),
    }
}

#[cfg(test)]
mod tests {
    use proto::etcdserverpb as pb;

    use super::*;

    #[tokio::test]
    async fn a_write_counts_as_outstanding_until_it_is_answered_or_given_up() {
        let (queue, mut taken) = mpsc::unbounded_channel();
        let writes = GroupCommit { queue, outstanding: Arc::default() };
        assert!(writes.is_drained());
        let put = |key: &str| Command::Put(pb::PutRequest { key: key.into(), ..Default::default() });

        let answered = tokio::spawn({
            let writes = writes.clone();
            async move { writes.write(put("a")).await }
        });
        let given_up = tokio::spawn({
            let writes = writes.clone();
            async move { writes.write(put("b")).await }
        });
        let (first, second) = (taken.recv().await.expect("a"), taken.recv().await.expect("b"));
        assert!(!writes.is_drained());
        let drained = tokio::spawn({
            let writes = writes.clone();
            async move { writes.drained().await }
        });

        let answer = Reply::Answered(Ok(Written { index: 7, applied: Err(Error::Timeout) }));
        assert!(first.done.send(answer).is_ok());
        assert_eq!(answered.await.expect("joined").expect("written").index, 7);
        assert!(!writes.is_drained(), "b is still on its way");
        assert!(!drained.is_finished());
        // A write whose answer never comes (its sender dropped) is not waited for forever.
        drop(second);
        assert!(matches!(given_up.await.expect("joined"), Err(Error::Stopped)));
        tokio::time::timeout(std::time::Duration::from_secs(5), drained).await.expect("drained").expect("joined");
        assert!(writes.is_drained());
    }
}
