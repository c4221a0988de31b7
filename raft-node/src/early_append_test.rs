//! Tests of [`super`]: which appends go early, to whom, how openraft's appends find their answers, and
//! what a failure stops.

use openraft::{CommittedLeaderId, EntryPayload};
use tokio::sync::Semaphore;

use super::*;

const ME: NodeId = 1;
const PEER: NodeId = 2;

fn entry(term: u64, leader: NodeId, index: u64) -> Entry {
    Entry { log_id: LogId::new(CommittedLeaderId::new(term, leader), index), payload: EntryPayload::Blank }
}

fn append(vote: Vote, prev: Option<LogId>, entries: Vec<Entry>) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest { vote, prev_log_id: prev, leader_commit: None, entries }
}

/// A follower that records what it is sent and takes it or not, one append per permit of `gate`.
struct Peer {
    sent: Arc<Mutex<Vec<AppendEntriesRequest<TypeConfig>>>>,
    gate: Arc<Semaphore>,
}

impl Peer {
    fn new(permits: usize) -> Self {
        Self { sent: Arc::default(), gate: Arc::new(Semaphore::new(permits)) }
    }

    fn send(&self, takes: bool) -> Send {
        let (sent, gate) = (self.sent.clone(), self.gate.clone());
        Arc::new(move |batch: Arc<Batch>| {
            let (sent, gate) = (sent.clone(), gate.clone());
            Box::pin(async move {
                gate.acquire().await.expect("gate").forget();
                sent.lock().push(batch.request.clone());
                Some(if takes { AppendEntriesResponse::Success } else { AppendEntriesResponse::Conflict })
            })
        })
    }

    /// The (prev index, entry indexes) of each append it was sent.
    fn appends(&self) -> Vec<(Option<u64>, Vec<u64>)> {
        let sent = self.sent.lock();
        sent.iter()
            .map(|rpc| (rpc.prev_log_id.map(|id| id.index), rpc.entries.iter().map(|e| e.log_id.index).collect()))
            .collect()
    }
}

/// Early appends of member [`ME`], leader of term 3, whose replication to [`PEER`] reached index 4.
fn leading(peer: &Peer, takes: bool) -> (EarlyAppends, Vote) {
    let early = EarlyAppends::new(ME, Duration::from_secs(1));
    let vote = Vote::new_committed(3, ME);
    early.saved_vote(vote);
    let reached = append(vote, Some(entry(3, ME, 4).log_id), vec![]);
    early.answered(PEER, &reached, true, &|| peer.send(takes));
    (early, vote)
}

async fn answer_of(early: &EarlyAppends, rpc: &AppendEntriesRequest<TypeConfig>) -> Option<bool> {
    let mut taken = early.covering(PEER, rpc)?.taken;
    let answer = *taken.wait_for(Option::is_some).await.expect("answer");
    answer
}

#[tokio::test]
async fn the_leaders_own_append_goes_early_and_answers_openraft_s() {
    let peer = Peer::new(100);
    let (early, vote) = leading(&peer, true);
    early.saved_committed(Some(entry(3, ME, 4).log_id));
    early.offer(Some(entry(3, ME, 4).log_id), &[entry(3, ME, 5), entry(3, ME, 6)]);

    // openraft's append of the same entries, after the leader's flush, and one of only the first.
    let whole = append(vote, Some(entry(3, ME, 4).log_id), vec![entry(3, ME, 5), entry(3, ME, 6)]);
    assert_eq!(answer_of(&early, &whole).await, Some(true));
    let part = append(vote, Some(entry(3, ME, 4).log_id), vec![entry(3, ME, 5)]);
    assert_eq!(answer_of(&early, &part).await, Some(true));
    assert_eq!(peer.appends(), vec![(Some(4), vec![5, 6])]);
    assert_eq!(peer.sent.lock()[0].leader_commit.map(|id| id.index), Some(4), "the saved commit index travels");
    let told = early.covering(PEER, &whole).and_then(|covering| covering.commit).map(|id| id.index);
    assert_eq!(told, Some(4), "the commit index the early append told, for the network to compare");

    // Nothing carried index 7 yet, and another vote's append is never answered early.
    assert!(early.covering(PEER, &append(vote, Some(entry(3, ME, 6).log_id), vec![entry(3, ME, 7)])).is_none());
    let other = Vote::new_committed(4, ME);
    assert!(early.covering(PEER, &append(other, Some(entry(3, ME, 4).log_id), vec![entry(3, ME, 5)])).is_none());

    // The next append follows the one sent: it goes too.
    early.answered(PEER, &whole, true, &|| unreachable!("the follower is known"));
    early.offer(Some(entry(3, ME, 6).log_id), &[entry(3, ME, 7)]);
    let next = append(vote, Some(entry(3, ME, 6).log_id), vec![entry(3, ME, 7)]);
    assert_eq!(answer_of(&early, &next).await, Some(true));
    assert_eq!(peer.appends(), vec![(Some(4), vec![5, 6]), (Some(6), vec![7])]);
}

#[tokio::test]
async fn only_a_leaders_own_entries_after_what_the_follower_holds_go_early() {
    let peer = Peer::new(100);
    let (early, _) = leading(&peer, true);
    // Not after index 4, which the follower holds (the leader's own entries all the same).
    assert!(early.offer(Some(entry(3, ME, 5).log_id), &[entry(3, ME, 6)]));
    // Not contiguous with the previous entry named.
    assert!(early.offer(Some(entry(3, ME, 4).log_id), &[entry(3, ME, 6)]));
    // Entries of an earlier leadership, or of another leader: not its own.
    assert!(!early.offer(Some(entry(3, ME, 4).log_id), &[entry(2, ME, 5)]));
    assert!(!early.offer(Some(entry(3, ME, 4).log_id), &[entry(3, PEER, 5)]));
    // A vote not yet granted, and a vote for another member (a follower's appends).
    early.saved_vote(Vote::new(3, ME));
    assert!(!early.offer(Some(entry(3, ME, 4).log_id), &[entry(3, ME, 5)]));
    early.saved_vote(Vote::new_committed(3, PEER));
    assert!(!early.offer(Some(entry(3, ME, 4).log_id), &[entry(3, PEER, 5)]));
    tokio::task::yield_now().await;
    assert_eq!(peer.appends(), vec![]);
}

#[tokio::test]
async fn a_refused_early_append_stops_them_until_openraft_s_replication_succeeds() {
    let peer = Peer::new(100);
    let (early, vote) = leading(&peer, false);
    early.offer(Some(entry(3, ME, 4).log_id), &[entry(3, ME, 5)]);
    let rpc = append(vote, Some(entry(3, ME, 4).log_id), vec![entry(3, ME, 5)]);
    assert_eq!(answer_of(&early, &rpc).await, Some(false), "openraft's append must then go itself");

    early.offer(Some(entry(3, ME, 5).log_id), &[entry(3, ME, 6)]);
    tokio::task::yield_now().await;
    assert_eq!(peer.appends(), vec![(Some(4), vec![5])], "nothing offered after a refusal");

    // openraft's own append of 5 failed too; then one of 5 and 6 succeeds: offers resume after 6.
    early.answered(PEER, &rpc, false, &|| unreachable!());
    let caught_up = append(vote, Some(entry(3, ME, 4).log_id), vec![entry(3, ME, 5), entry(3, ME, 6)]);
    early.answered(PEER, &caught_up, true, &|| unreachable!());
    early.offer(Some(entry(3, ME, 6).log_id), &[entry(3, ME, 7)]);
    let next = append(vote, Some(entry(3, ME, 6).log_id), vec![entry(3, ME, 7)]);
    assert_eq!(answer_of(&early, &next).await, Some(false));
    assert_eq!(peer.appends(), vec![(Some(4), vec![5]), (Some(6), vec![7])]);
}

#[tokio::test]
async fn appends_queued_behind_a_slow_follower_go_as_one() {
    let peer = Peer::new(0);
    let (early, vote) = leading(&peer, true);
    early.offer(Some(entry(3, ME, 4).log_id), &[entry(3, ME, 5)]);
    // The first is on its way (held at the follower); the next three wait and then go together.
    tokio::task::yield_now().await;
    for index in 6..=8 {
        early.offer(Some(entry(3, ME, index - 1).log_id), &[entry(3, ME, index)]);
    }
    peer.gate.add_permits(2);
    let last = append(vote, Some(entry(3, ME, 7).log_id), vec![entry(3, ME, 8)]);
    assert_eq!(answer_of(&early, &last).await, Some(true));
    assert_eq!(peer.appends(), vec![(Some(4), vec![5]), (Some(5), vec![6, 7, 8])]);
}

#[test]
fn queued_appends_are_cut_where_one_does_not_follow_the_one_before() {
    let vote = Vote::new_committed(3, ME);
    let queued = |prev: u64, index: u64| {
        let batch = Batch {
            request: append(vote, Some(entry(3, ME, prev).log_id), vec![entry(3, ME, index)]),
            encoded: std::sync::OnceLock::new(),
        };
        (Arc::new(batch), watch::channel(None).0)
    };
    let cut = runs(vec![queued(4, 5), queued(5, 6), queued(8, 9), queued(9, 10)]);
    let firsts: Vec<Vec<u64>> =
        cut.iter().map(|run| run.iter().map(|(batch, _)| batch.request.entries[0].log_id.index).collect()).collect();
    assert_eq!(firsts, vec![vec![5, 6], vec![9, 10]]);
    let batches: Vec<&Arc<Batch>> = cut[0].iter().map(|(batch, _)| batch).collect();
    let one = merged(&batches);
    assert_eq!(one.request.prev_log_id.map(|id| id.index), Some(4));
    assert_eq!(one.request.entries.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), vec![5, 6]);
}
