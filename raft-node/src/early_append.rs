//! Early appends: the leader sends its new entries to its followers while it flushes them itself.
//!
//! openraft 0.9's core waits for the leader's own flush of an append before it hands the entries to
//! replication, so a write paid two flushes in series: the leader's, then a follower's (issue 19; half
//! of a single client's put). The Raft thesis (§10.2.1) lets the leader write its log in parallel with
//! replication, as long as it counts itself in a quorum only once its own write is durable; openraft
//! still does that part. So the log store [`offers`](EarlyAppends::offer) each append of the leader's
//! own entries here before it flushes, and a task per follower sends it at once, an ordinary
//! AppendEntries of the leader's vote. When openraft's replication later sends the same entries, the
//! network finds the early send that covered them ([`EarlyAppends::covering`]) and answers openraft
//! with its result instead of sending them again: a follower that acknowledged an append of this vote
//! ending at or after them holds them (Raft's log matching), and that acknowledgement is a true answer
//! delayed, which Raft tolerates as it tolerates any delayed message. Anything else (a conflict, a
//! higher vote, a transport failure, no early send) and the network sends openraft's append as usual.
//!
//! What an early send may carry: only entries of this member's own leadership (their log ids' leader is
//! the vote it saved, committed and its own), following an entry the follower is known to hold or was
//! sent just before, under that vote. A follower is offered appends only while openraft's replication to
//! it under that vote succeeds (its last answer less than [`FRESH`] ago, nothing failed since): a
//! lagging, unreachable or removed member gets only openraft's own appends.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use crate::typ::{Entry, LogId, NodeId, TypeConfig, Vote};

/// How recently openraft's replication to a follower must have succeeded for it to be offered appends.
const FRESH: Duration = Duration::from_secs(1);
/// Early sends to one follower not yet matched by openraft's, at most.
const MAX_PENDING: usize = 64;

/// One early append, the same for every follower (it is encoded once, by the first sender).
pub struct Batch {
    pub request: AppendEntriesRequest<TypeConfig>,
    /// Its encoding, made by the first sender (`None` if it could not be encoded).
    pub encoded: std::sync::OnceLock<Option<Vec<u8>>>,
}

/// Sends a batch to one follower and returns its answer, `None` when none came (transport failure or
/// out of time).
pub type Send = Arc<
    dyn Fn(Arc<Batch>) -> Pin<Box<dyn Future<Output = Option<AppendEntriesResponse<NodeId>>> + std::marker::Send>>
        + std::marker::Send
        + Sync,
>;

/// The early appends of a member, shared by its log store (which offers them) and its network (which
/// registers followers and matches openraft's appends against them).
#[derive(Clone)]
pub struct EarlyAppends {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EarlyAppends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EarlyAppends").field("me", &self.inner.me).finish_non_exhaustive()
    }
}

struct Inner {
    me: NodeId,
    /// How long an early append waits for its answer: openraft's own window for an append.
    window: Duration,
    /// The vote this member saved last.
    vote: Mutex<Option<Vote>>,
    /// The commit index this member saved last (an early append carries it, as openraft's would).
    committed: Mutex<Option<LogId>>,
    followers: Mutex<HashMap<NodeId, Follower>>,
}

/// What is known of one follower under one leader vote.
struct Follower {
    vote: Vote,
    /// The last entry sent to it under `vote` (early or by openraft) with nothing failed since; `None`
    /// after a failure, until openraft's replication succeeds again.
    sent: Option<LogId>,
    /// When openraft's replication to it last succeeded.
    answered: Instant,
    /// Early sends not yet matched by openraft's appends, in log order.
    pending: VecDeque<Pending>,
    queue: mpsc::UnboundedSender<(Arc<Batch>, watch::Sender<Option<bool>>)>,
}

/// An early send to one follower: the indexes it carried and whether the follower took them.
struct Pending {
    after: u64,
    last: u64,
    /// The commit index it told the follower.
    commit: Option<LogId>,
    taken: watch::Receiver<Option<bool>>,
}

/// The early append that carried an append of openraft's replication: whether the follower took it,
/// and the commit index it told the follower.
pub struct Covering {
    pub taken: watch::Receiver<Option<bool>>,
    pub commit: Option<LogId>,
}

/// The index after which an append of `prev` starts.
fn index_after(prev: Option<LogId>) -> u64 {
    prev.map_or(0, |id| id.index + 1)
}

impl EarlyAppends {
    pub fn new(me: NodeId, window: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                me,
                window,
                vote: Mutex::default(),
                committed: Mutex::default(),
                followers: Mutex::default(),
            }),
        }
    }

    /// How long an early append waits for its answer.
    pub fn window(&self) -> Duration {
        self.inner.window
    }

    /// The log store saved `vote`.
    pub fn saved_vote(&self, vote: Vote) {
        *self.inner.vote.lock() = Some(vote);
    }

    /// The log store saved `committed`.
    pub fn saved_committed(&self, committed: Option<LogId>) {
        *self.inner.committed.lock() = committed;
    }

    /// The log store appended `entries` after the entry `prev` and is about to flush them: when they are
    /// this member's own as leader, they go to every follower whose replication is up to `prev`. Answers
    /// whether they are (a follower's appends are not).
    pub fn offer(&self, prev: Option<LogId>, entries: &[Entry]) -> bool {
        let Some(vote) = *self.inner.vote.lock() else { return false };
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else { return false };
        let own = vote.committed
            && vote.leader_id.voted_for() == Some(self.inner.me)
            && entries.iter().all(|entry| entry.log_id.leader_id == vote.leader_id);
        if !own {
            return false;
        }
        if first.log_id.index != index_after(prev) {
            return true;
        }
        let mut followers = self.inner.followers.lock();
        let mut batch = None;
        for follower in followers.values_mut() {
            if follower.vote != vote
                || follower.sent != prev
                || follower.answered.elapsed() > FRESH
                || follower.pending.len() >= MAX_PENDING
            {
                continue;
            }
            let batch = batch
                .get_or_insert_with(|| {
                    Arc::new(Batch {
                        request: AppendEntriesRequest {
                            vote,
                            prev_log_id: prev,
                            leader_commit: *self.inner.committed.lock(),
                            entries: entries.to_vec(),
                        },
                        encoded: std::sync::OnceLock::new(),
                    })
                })
                .clone();
            let (taken_tx, taken) = watch::channel(None);
            let commit = batch.request.leader_commit;
            if follower.queue.send((batch, taken_tx)).is_err() {
                continue;
            }
            follower.pending.push_back(Pending { after: index_after(prev), last: last.log_id.index, commit, taken });
            follower.sent = Some(last.log_id);
        }
        true
    }

    /// An early send to `target` of this vote that carried the last entry of `rpc`, to wait on instead of
    /// sending `rpc`: `Some(true)` from it means the follower holds everything `rpc` carries (but it may
    /// not know `rpc`'s commit index).
    pub fn covering(&self, target: NodeId, rpc: &AppendEntriesRequest<TypeConfig>) -> Option<Covering> {
        let last = rpc.entries.last()?.log_id.index;
        let followers = self.inner.followers.lock();
        let follower = followers.get(&target).filter(|follower| follower.vote == rpc.vote)?;
        let pending = follower.pending.iter().find(|pending| pending.after <= last && last <= pending.last)?;
        Some(Covering { taken: pending.taken.clone(), commit: pending.commit })
    }

    /// openraft's append `rpc` to `target` was answered, by the follower or by an early append that
    /// carried it: `success` if the follower holds everything `rpc` carries. A follower first known
    /// under this vote gets a task that sends its early appends through `send()`.
    pub fn answered(
        &self,
        target: NodeId,
        rpc: &AppendEntriesRequest<TypeConfig>,
        success: bool,
        send: &dyn Fn() -> Send,
    ) {
        let mut followers = self.inner.followers.lock();
        if !success {
            if let Some(follower) = followers.get_mut(&target).filter(|follower| follower.vote == rpc.vote) {
                follower.sent = None;
            }
            return;
        }
        let holds = rpc.entries.last().map(|entry| entry.log_id).or(rpc.prev_log_id);
        let known = followers.get(&target).is_some_and(|follower| follower.vote == rpc.vote);
        if !known {
            followers.insert(target, Follower::start(self, target, rpc.vote, send()));
        }
        let Some(follower) = followers.get_mut(&target) else { return };
        follower.answered = Instant::now();
        // What openraft's replication has reached: `sent` resumes from there after a failure.
        if follower.sent.is_none() || follower.sent.map(|id| id.index) < holds.map(|id| id.index) {
            follower.sent = holds;
        }
        let reached = index_after(holds);
        while follower.pending.front().is_some_and(|pending| pending.last < reached) {
            follower.pending.pop_front();
        }
    }

    /// An early send to `target` under `vote` failed: nothing more is offered to it until openraft's
    /// replication succeeds again.
    fn failed(&self, target: NodeId, vote: Vote) {
        if let Some(follower) = self.inner.followers.lock().get_mut(&target).filter(|follower| follower.vote == vote) {
            follower.sent = None;
        }
    }
}

impl Follower {
    /// A follower first answered under `vote`, with the task that sends its early appends in order.
    fn start(early: &EarlyAppends, target: NodeId, vote: Vote, send: Send) -> Self {
        let (queue, batches) = mpsc::unbounded_channel();
        tokio::spawn(send_in_order(Arc::downgrade(&early.inner), target, vote, send, batches));
        Self { vote, sent: None, answered: Instant::now(), pending: VecDeque::new(), queue }
    }
}

type Queued = (Arc<Batch>, watch::Sender<Option<bool>>);

/// Sends one follower's early appends in order, one at a time; those that queued up meanwhile go as one
/// append (one flush on the follower), as openraft's replication would send them.
async fn send_in_order(
    early: Weak<Inner>,
    target: NodeId,
    vote: Vote,
    send: Send,
    mut queue: mpsc::UnboundedReceiver<Queued>,
) {
    while let Some(first) = queue.recv().await {
        let mut group = vec![first];
        while let Ok(next) = queue.try_recv() {
            group.push(next);
        }
        for run in runs(group) {
            let batches: Vec<&Arc<Batch>> = run.iter().map(|(batch, _)| batch).collect();
            let took = matches!(send(merged(&batches)).await, Some(AppendEntriesResponse::Success));
            if !took {
                match early.upgrade() {
                    Some(inner) => EarlyAppends { inner }.failed(target, vote),
                    None => return,
                }
            }
            crate::metrics::metrics().early_appends.fetch_add(1, Relaxed);
            for (_, taken) in run {
                let _ = taken.send(Some(took));
            }
        }
    }
}

/// `queued` cut where one append does not follow the one before (a follower offered appends again
/// after a failure, while older ones still waited).
fn runs(queued: Vec<Queued>) -> Vec<Vec<Queued>> {
    let mut runs: Vec<Vec<Queued>> = Vec::new();
    for item in queued {
        let follows = runs.last().and_then(|run| run.last()).is_some_and(|(before, _)| {
            before.request.entries.last().map(|entry| entry.log_id) == item.0.request.prev_log_id
        });
        match runs.last_mut() {
            Some(run) if follows => run.push(item),
            _ => runs.push(vec![item]),
        }
    }
    runs
}

/// One append carrying `batches`, consecutive appends of one vote (each offered after the one before).
fn merged(batches: &[&Arc<Batch>]) -> Arc<Batch> {
    match batches {
        [one] => Arc::clone(one),
        _ => {
            let first = &batches[0].request;
            let last = &batches[batches.len() - 1].request;
            Arc::new(Batch {
                request: AppendEntriesRequest {
                    vote: first.vote,
                    prev_log_id: first.prev_log_id,
                    leader_commit: last.leader_commit,
                    entries: batches.iter().flat_map(|batch| batch.request.entries.iter().cloned()).collect(),
                },
                encoded: std::sync::OnceLock::new(),
            })
        }
    }
}

#[cfg(test)]
#[path = "early_append_test.rs"]
mod tests;
