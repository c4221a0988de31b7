//! Read index rounds shared by many linearizable reads (and by the leader's other leadership checks).
//!
//! A round asks the leader to confirm with a quorum that it still leads and to name its commit index;
//! a read may then be served locally once that index is applied. Any round that *began after a read
//! arrived* serves that read, so reads queue here while a round runs and the next round takes all of
//! them: one quorum round for many reads (etcd's `linearizableReadLoop` shares its rounds the same way).

use std::future::Future;

use kv_api::Error;
use tokio::sync::{mpsc, oneshot};

type Answer = oneshot::Sender<Result<u64, Error>>;

/// The queue of reads waiting for a round; cloning gives another handle on the same queue.
#[derive(Clone)]
pub struct ReadRounds {
    queue: mpsc::UnboundedSender<Answer>,
}

impl ReadRounds {
    /// Starts running `round` (which answers a read index) whenever reads wait, one round at a time.
    pub fn start<F, R>(round: F) -> Self
    where
        F: Fn() -> R + Send + 'static,
        R: Future<Output = Result<u64, Error>> + Send + 'static,
    {
        let (queue, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run_rounds(round, receiver));
        Self { queue }
    }

    /// A read index from a round that began after this call.
    pub async fn read_index(&self) -> Result<u64, Error> {
        let (answer, answered) = oneshot::channel();
        self.queue.send(answer).map_err(|_| Error::Stopped)?;
        answered.await.map_err(|_| Error::Stopped)?
    }
}

async fn run_rounds<F, R>(round: F, mut receiver: mpsc::UnboundedReceiver<Answer>)
where
    F: Fn() -> R,
    R: Future<Output = Result<u64, Error>>,
{
    while let Some(first) = receiver.recv().await {
        // Everything queued now arrived before the round below begins.
        let mut waiting = vec![first];
        while let Ok(next) = receiver.try_recv() {
            waiting.push(next);
        }
        // Reads whose client gave up need no round.
        waiting.retain(|answer| !answer.is_closed());
        if waiting.is_empty() {
            continue;
        }
        let result = round().await;
        for answer in waiting {
            let _ = answer.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// Rounds that count themselves and take a while; each answers its own number.
    fn counted_rounds() -> (ReadRounds, Arc<AtomicU64>, Arc<tokio::sync::Notify>) {
        let rounds = Arc::new(AtomicU64::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let reads = {
            let (rounds, release) = (rounds.clone(), release.clone());
            ReadRounds::start(move || {
                let number = rounds.fetch_add(1, Ordering::SeqCst) + 1;
                let release = release.clone();
                async move {
                    release.notified().await;
                    Ok(number)
                }
            })
        };
        (reads, rounds, release)
    }

    #[tokio::test]
    async fn reads_waiting_together_share_one_round_and_later_reads_get_a_later_one() {
        let (reads, rounds, release) = counted_rounds();
        let first = tokio::spawn({
            let reads = reads.clone();
            async move { reads.read_index().await }
        });
        // The first round is under way before the next reads arrive.
        while rounds.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let later: Vec<_> = (0..10)
            .map(|_| {
                let reads = reads.clone();
                tokio::spawn(async move { reads.read_index().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        release.notify_one();
        assert_eq!(first.await.expect("join"), Ok(1));
        // The ten reads arrived during round 1, so round 1 cannot serve them: all share round 2.
        while rounds.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        release.notify_one();
        for read in later {
            assert_eq!(read.await.expect("join"), Ok(2));
        }
        assert_eq!(rounds.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_round_fails_every_read_it_serves() {
        let reads = ReadRounds::start(|| async { Err(Error::Timeout) });
        let answers = futures::future::join_all((0..3).map(|_| reads.read_index())).await;
        assert_eq!(answers, vec![Err(Error::Timeout); 3]);
    }
}
