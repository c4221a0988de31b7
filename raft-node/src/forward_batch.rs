//! Writes a follower forwards travel to the leader many to a message.
//!
//! Each forwarded write used to be one peer RPC: with clients spread over every member, two thirds of a
//! three-member cluster's writes cost an RPC each on both ends, and put throughput through followers fell
//! below the leader's. etcd's followers send their proposals on the Raft message stream, many per
//! message. Here, while [`MAX_IN_FLIGHT`] messages are on their way to the leader, new writes wait, and
//! the next message carries all of them (the group commit's limits, [`MAX_COMMANDS`] and [`MAX_BYTES`]).
//! A lone write still goes at once, on its own, exactly as before.
//!
//! Each write keeps its own deadline: the leader drops one whose sender already answered "request timed
//! out". A leader that does not know batches (an older member, during a rolling upgrade) refuses the
//! message undecoded, and its writes are sent one by one.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use kv_api::{Command, Error};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::forward::{transport_error, Forwarder};
use crate::group_commit::{MAX_BYTES, MAX_COMMANDS};
use crate::leader_wire::{unix_ms, LeaderReply, LeaderRequest};
use crate::metrics::metrics;
use crate::typ::MemberNode;

/// Messages of writes on their way to the leader, at most.
pub const MAX_IN_FLIGHT: usize = 2;

struct Queued {
    node: MemberNode,
    command: Command,
    deadline: Instant,
    done: oneshot::Sender<Result<LeaderReply, Error>>,
}

/// The queue of writes to forward; cloning gives another handle on the same queue.
#[derive(Clone)]
pub struct ForwardedWrites {
    queue: mpsc::UnboundedSender<Queued>,
}

impl ForwardedWrites {
    /// Starts sending queued writes through `forwarder`; must be called on the member's runtime.
    pub fn start(forwarder: Forwarder) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        tokio::spawn(send_batches(forwarder, receiver));
        Self { queue }
    }

    /// Sends `command` to the leader `node` with whatever other writes wait for it, within `timeout`.
    /// Answers as [`Forwarder::send`] does for a `LeaderRequest::Write`.
    pub async fn send(&self, node: &MemberNode, command: Command, timeout: Duration) -> Result<LeaderReply, Error> {
        let (done, answer) = oneshot::channel();
        let queued = Queued { node: node.clone(), command, deadline: Instant::now() + timeout, done };
        self.queue.send(queued).map_err(|_| Error::Stopped)?;
        answer.await.map_err(|_| Error::Stopped)?
    }
}

async fn send_batches(forwarder: Forwarder, mut receiver: mpsc::UnboundedReceiver<Queued>) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    // A write for another leader than the batch before it starts the next batch.
    let mut held: Option<Queued> = None;
    loop {
        // Waiting for a free slot first lets writes pile up in the queue meanwhile.
        let Ok(slot) = in_flight.clone().acquire_owned().await else { return };
        let first = match held.take() {
            Some(first) => first,
            None => match receiver.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let batch = gather(first, &mut receiver, &mut held);
        tokio::spawn(send_batch(forwarder.clone(), batch, slot));
    }
}

/// Takes the writes waiting now for the same leader as `first`, up to the batch limits (at least one).
fn gather(first: Queued, receiver: &mut mpsc::UnboundedReceiver<Queued>, held: &mut Option<Queued>) -> Vec<Queued> {
    let mut bytes = first.command.encoded_len();
    let mut batch = vec![first];
    while batch.len() < MAX_COMMANDS && bytes < MAX_BYTES {
        let Ok(next) = receiver.try_recv() else { break };
        if next.node.peer_urls != batch[0].node.peer_urls {
            *held = Some(next);
            break;
        }
        bytes += next.command.encoded_len();
        batch.push(next);
    }
    batch
}

async fn send_batch(forwarder: Forwarder, batch: Vec<Queued>, _slot: OwnedSemaphorePermit) {
    let now = Instant::now();
    let (live, late): (Vec<Queued>, Vec<Queued>) = batch.into_iter().partition(|q| q.deadline > now);
    for queued in late {
        let _ = queued.done.send(Err(Error::Timeout));
    }
    if !live.is_empty() {
        metrics().forwarded_writes.fetch_add(live.len() as u64, Ordering::Relaxed);
        metrics().forward_messages.fetch_add(1, Ordering::Relaxed);
    }
    match live.len() {
        0 => {}
        1 => send_alone(&forwarder, live.into_iter().next().expect("one write")).await,
        _ => send_together(&forwarder, live).await,
    }
}

async fn send_alone(forwarder: &Forwarder, queued: Queued) {
    let left = queued.deadline.saturating_duration_since(Instant::now());
    let answer = forwarder.send(&queued.node, &LeaderRequest::Write(queued.command), left).await;
    let _ = queued.done.send(answer);
}

async fn send_together(forwarder: &Forwarder, batch: Vec<Queued>) {
    let node = batch[0].node.clone();
    let latest = batch.iter().map(|q| q.deadline).max().unwrap_or_else(Instant::now);
    let to_unix = |deadline: Instant| unix_ms(SystemTime::now() + deadline.saturating_duration_since(Instant::now()));
    let request = LeaderRequest::Writes(batch.iter().map(|q| (to_unix(q.deadline), q.command.clone())).collect());
    let timeout = latest.saturating_duration_since(Instant::now());
    match forwarder.call(&node, &request, timeout).await {
        Ok(Ok(LeaderReply::WrittenMany(answers))) if answers.len() == batch.len() => {
            for (queued, answer) in batch.into_iter().zip(answers) {
                let _ = queued.done.send(answer.map(|(index, applied)| LeaderReply::Written { index, applied }));
            }
        }
        Ok(Ok(other)) => {
            let err = Error::Internal(format!("the leader answered {} writes with {other:?}", batch.len()));
            answer_all(batch, &err);
        }
        Ok(Err(err)) => answer_all(batch, &err),
        // A leader that cannot decode the message did not start any of it.
        Err(status) if status.code() == tonic::Code::InvalidArgument => {
            join_all(batch.into_iter().map(|queued| send_alone(forwarder, queued))).await;
        }
        Err(status) => answer_all(batch, &transport_error(&request, &status)),
    }
}

fn answer_all(batch: Vec<Queued>, err: &Error) {
    for queued in batch {
        let _ = queued.done.send(Err(err.clone()));
    }
}

#[cfg(test)]
mod tests {
    use proto::etcdserverpb as pb;

    use super::*;

    fn node(name: &str) -> MemberNode {
        MemberNode { name: name.into(), peer_urls: vec![format!("http://{name}:2380")], client_urls: Vec::new() }
    }

    fn queued(to: &str, key: &str, deadline: Instant) -> (Queued, oneshot::Receiver<Result<LeaderReply, Error>>) {
        let (done, answer) = oneshot::channel();
        let command = Command::Put(pb::PutRequest { key: key.into(), ..Default::default() });
        (Queued { node: node(to), command, deadline, done }, answer)
    }

    fn key(q: &Queued) -> Vec<u8> {
        match &q.command {
            Command::Put(put) => put.key.clone(),
            other => panic!("not a put: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_batch_takes_what_waits_for_the_same_leader_in_order_and_holds_the_next_leaders_write() {
        let later = Instant::now() + Duration::from_secs(5);
        let (queue, mut receiver) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        for (to, k) in [("a", "1"), ("a", "2"), ("a", "3"), ("b", "4"), ("b", "5")] {
            let (q, answer) = queued(to, k, later);
            queue.send(q).expect("queued");
            answers.push(answer);
        }
        let first = receiver.recv().await.expect("first");
        let mut held = None;
        let batch = gather(first, &mut receiver, &mut held);
        assert_eq!(batch.iter().map(key).collect::<Vec<_>>(), [b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]);
        let next = held.take().expect("b's write held for the next batch");
        assert_eq!(key(&next), b"4");
        let batch = gather(next, &mut receiver, &mut held);
        assert_eq!(batch.iter().map(key).collect::<Vec<_>>(), [b"4".to_vec(), b"5".to_vec()]);
        assert!(held.is_none());
    }

    #[tokio::test]
    async fn a_batch_stops_at_the_command_limit() {
        let later = Instant::now() + Duration::from_secs(5);
        let (queue, mut receiver) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        for i in 0..MAX_COMMANDS + 5 {
            let (q, answer) = queued("a", &i.to_string(), later);
            queue.send(q).expect("queued");
            answers.push(answer);
        }
        let first = receiver.recv().await.expect("first");
        let mut held = None;
        assert_eq!(gather(first, &mut receiver, &mut held).len(), MAX_COMMANDS);
        let first = receiver.recv().await.expect("first");
        assert_eq!(gather(first, &mut receiver, &mut held).len(), 5);
    }

    #[tokio::test]
    async fn writes_past_their_deadline_are_answered_timed_out_and_never_sent() {
        let past = Instant::now() - Duration::from_millis(1);
        let (a, answer_a) = queued("a", "1", past);
        let (b, answer_b) = queued("a", "2", past);
        let slot = Arc::new(Semaphore::new(1)).acquire_owned().await.expect("slot");
        let sent_before = metrics().forward_messages.load(Ordering::Relaxed);
        // No connection exists to `a`: a message sent would fail otherwise than with a timeout.
        send_batch(Forwarder::default(), vec![a, b], slot).await;
        for answer in [answer_a, answer_b] {
            assert!(matches!(answer.await.expect("answered"), Err(Error::Timeout)));
        }
        assert_eq!(metrics().forward_messages.load(Ordering::Relaxed), sent_before, "nothing was sent");
    }
}
