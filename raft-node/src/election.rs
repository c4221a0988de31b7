//! Elections on a logical clock, with pre-vote, as etcd runs them.
//!
//! openraft decides elections on wall-clock time, so a member that was paused (SIGSTOP, a long stall) or
//! cut off campaigns the moment it runs again, and its higher term deposes a healthy leader. etcd counts
//! ticks instead — a pause is one tick — and with pre-vote a member campaigns only once a majority agrees the
//! leader is gone. This module does the same on top of openraft: openraft's own election timer is switched
//! off, a task ticks every heartbeat interval and counts ticks without a sign of the leader (openraft
//! refreshes the vote's timestamp on every accepted heartbeat; on the leader the same tick sends them), and
//! after a randomized election timeout's worth of ticks it asks the other voters for a pre-vote; only with a
//! majority does it start a real openraft election.
//!
//! A leader counts too, as etcd's check-quorum: one that heard from no quorum for an election timeout
//! knows no leader and grants pre-votes (see [`ElectionClock::check_quorum`]).
//!
//! The same question tells a member that no longer hears from anyone whether it was removed from the
//! cluster: the others answer [`PreVoteAnswer::Removed`], and the member stops, as etcd's does.
//!
//! openraft's heartbeats ride its replication streams: one waits behind an append on its way, and a
//! follower answers it only once its log is on disk. With slow disks (syncs of most of an election
//! timeout) followers went without a sign of the leader and the leader without a quorum's answer, and
//! the cluster held elections while nothing had failed (etcd #7617). So on each tick the leader also
//! sends every member a beat ([`LeaderRequest::Beat`]) on the forwarding connections, which carry no
//! appends; a member that follows the sender in that term counts it as a sign of the leader and says
//! so at once, without touching its disk, and the leader counts those answers for check-quorum. A
//! member of an older version does not know beats: its answer is an error, and only openraft's
//! heartbeats count for it, as before. A beat says the sender's Raft is alive, so a member beats and
//! answers beats only while its own openraft core answers the clock (within two election timeouts):
//! a leader whose disk hangs falls silent and is replaced, as etcd's is.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use openraft::ServerState;
use rand::Rng;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::forward::Forwarder;
use crate::leader_wire::{LeaderReply, LeaderRequest, PreVote, PreVoteAnswer};
use crate::typ::{MemberNode, NodeId, Raft, RaftMetrics};

/// When a member without a sign of its leader asks for pre-votes next.
///
/// Its own asks never reset the count of ticks since it last heard the leader: that count is also what
/// it answers other members' pre-votes with. Resetting it on every ask made two followers that lost
/// their leader refuse each other in turn — each had "just" started counting again when the other
/// asked — and a majority could go leaderless for many election timeouts (seen under jepsen leader
/// partitions and kills).
#[derive(Debug)]
struct Countdown {
    /// Ticks since the last sign of a leader.
    idle: u64,
    /// The idle tick count at which to ask next.
    next_ask: u64,
}

impl Countdown {
    fn new(timeout: u64) -> Self {
        Countdown { idle: 0, next_ask: timeout }
    }

    /// A sign of the leader: count again from zero, and ask `timeout` ticks from now at the earliest.
    fn heard_leader(&mut self, timeout: u64) {
        *self = Countdown::new(timeout);
    }

    /// One tick without a sign of the leader; true when it is time to ask, and then the next ask comes
    /// `timeout` ticks later.
    fn tick(&mut self, timeout: u64) -> bool {
        self.idle += 1;
        if self.idle < self.next_ask {
            return false;
        }
        self.next_ask = self.idle + timeout;
        true
    }
}

/// The beats' bookkeeping: as leader, which members answered one and which have one on its way; and
/// when this member's openraft core last answered.
#[derive(Debug, Default)]
struct Beats {
    /// A member's last answer that it follows this leader: the term of the beat and when it came.
    answered: parking_lot::Mutex<HashMap<NodeId, (u64, Instant)>>,
    /// Members with a beat on its way: a member that does not answer gets no second one meanwhile.
    on_the_way: parking_lot::Mutex<HashSet<NodeId>>,
    /// When openraft's core last answered this member's question, and whether one is on its way.
    core_answered: parking_lot::Mutex<Option<Instant>>,
    core_asked: AtomicBool,
}

impl Beats {
    /// Whether a majority of `voters` (`me` counting for itself) answered a beat of `term` within
    /// `window`.
    fn quorum_heard(&self, voters: &[NodeId], me: NodeId, term: u64, window: Duration) -> bool {
        let answered = self.answered.lock();
        let heard = voters
            .iter()
            .filter(|id| **id == me || answered.get(id).is_some_and(|(t, at)| *t == term && at.elapsed() <= window))
            .count();
        heard * 2 > voters.len()
    }
}

/// A member's election clock, shared by its ticking task and the pre-vote handler.
#[derive(Clone)]
pub struct ElectionClock {
    raft: Raft,
    member_id: NodeId,
    /// Ticks since this member last saw a sign of a live leader, and its next pre-vote.
    countdown: Arc<Mutex<Countdown>>,
    /// An election timeout in ticks.
    election_ticks: u64,
    /// Set once an election timeout passed without a sign of the leader (etcd's pre-candidate, which
    /// knows no leader), cleared by the next sign of one.
    leader_lost: Arc<AtomicBool>,
    /// Set while this member leads without having heard from a quorum for an election timeout (etcd's
    /// check-quorum would have made it a follower).
    quorum_lost: Arc<AtomicBool>,
    tick: Duration,
    removed: watch::Sender<bool>,
    /// Set while this member, as leader, hands its leadership over (see `Leader::move_leader`): it is
    /// silent on purpose then, which check-quorum must not take for a lost quorum.
    handing_over: Arc<watch::Sender<bool>>,
    /// Its beats as leader, and its core's last answer.
    beats: Arc<Beats>,
}

impl ElectionClock {
    pub fn new(raft: Raft, member_id: NodeId, heartbeat: Duration, election_timeout: Duration) -> Self {
        let election_ticks = (election_timeout.as_millis() / heartbeat.as_millis().max(1)).max(2) as u64;
        let (removed, _) = watch::channel(false);
        Self {
            raft,
            member_id,
            countdown: Arc::new(Mutex::new(Countdown::new(election_ticks))),
            election_ticks,
            leader_lost: Arc::new(AtomicBool::new(false)),
            quorum_lost: Arc::new(AtomicBool::new(false)),
            tick: heartbeat,
            removed,
            handing_over: Arc::new(watch::channel(false).0),
            beats: Arc::default(),
        }
    }

    /// Marks the start of a hand-over; false when one is already under way.
    pub fn begin_hand_over(&self) -> bool {
        self.handing_over.send_if_modified(|h| !std::mem::replace(h, true))
    }

    pub fn end_hand_over(&self) {
        self.handing_over.send_replace(false);
    }

    /// Resolves when no hand-over is under way.
    pub async fn hand_over_done(&self) {
        let mut handing_over = self.handing_over.subscribe();
        // The sender lives as long as `self`.
        let _ = handing_over.wait_for(|h| !*h).await;
    }

    /// Resolves once the other members said this one was removed from the cluster.
    pub async fn removed(&self) {
        let mut removed = self.removed.subscribe();
        if removed.wait_for(|r| *r).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether this member knows a live leader. As in etcd, a member that went an election timeout without
    /// hearing from its leader knows none, whatever openraft still remembers; nor does a leader that went
    /// as long without hearing from a quorum.
    pub fn has_leader(&self) -> bool {
        let (state, leader) = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            (metrics.state, metrics.current_leader)
        };
        if state == ServerState::Leader {
            return !self.quorum_lost.load(Ordering::Relaxed);
        }
        leader.is_some() && !self.leader_lost.load(Ordering::Relaxed)
    }

    /// This member's answer to a pre-vote: granted when it has itself gone an election timeout without
    /// hearing from a leader (or knows none), is not a leader that a quorum still answers, and the
    /// candidate's log is not behind its own.
    pub fn answer(&self, request: &PreVote) -> PreVoteAnswer {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.membership_config.membership().get_node(&request.candidate).is_none() {
            return PreVoteAnswer::Removed;
        }
        // A leader cut off from its quorum steps aside, as etcd's check-quorum makes it a follower.
        let is_leader = metrics.state == ServerState::Leader;
        let leading = is_leader && !self.quorum_lost.load(Ordering::Relaxed);
        let leader_alive =
            !is_leader && metrics.current_leader.is_some() && self.lock_countdown().idle < self.election_ticks;
        let log_ok = request.last_log_index >= metrics.last_log_index.unwrap_or(0);
        if !leader_alive && !leading && log_ok {
            PreVoteAnswer::Granted
        } else {
            PreVoteAnswer::Refused
        }
    }

    /// This member's answer to a beat: whether it follows `leader` in `term`, which is then a sign of
    /// the leader as an accepted heartbeat is. A member whose own Raft core has not answered its clock
    /// for two election timeouts (its disk hangs) follows nobody.
    pub fn beat(&self, term: u64, leader: NodeId) -> bool {
        let follows = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            metrics.state != ServerState::Leader
                && metrics.current_term == term
                && metrics.current_leader == Some(leader)
        } && self.beats.core_answered.lock().is_some_and(|at| at.elapsed() <= self.core_window());
        if follows {
            self.lock_countdown().heard_leader(self.randomized_timeout());
            self.leader_lost.store(false, Ordering::Relaxed);
        }
        follows
    }

    /// Whether openraft's core answered within `window`; asks it again, one question at a time, without
    /// waiting for the answer. A core that waits on a log flush answers once it is done; one that waits
    /// on a disk that hangs never does, and its leader must then stop beating so that the followers
    /// elect another (as etcd's leader, whose loop the disk holds, stops sending heartbeats).
    fn core_alive(&self, window: Duration) -> bool {
        if !self.beats.core_asked.swap(true, Ordering::AcqRel) {
            let (raft, beats) = (self.raft.clone(), self.beats.clone());
            tokio::spawn(async move {
                if raft.with_raft_state(|_| ()).await.is_ok() {
                    *beats.core_answered.lock() = Some(Instant::now());
                }
                beats.core_asked.store(false, Ordering::Release);
            });
        }
        self.beats.core_answered.lock().is_some_and(|at| at.elapsed() <= window)
    }

    /// As leader, sends a beat to every other member that has none on its way (see the module doc).
    fn send_beats(&self, forwarder: &Forwarder, metrics: &RaftMetrics) {
        let term = metrics.current_term;
        let request = LeaderRequest::Beat { term, leader: self.member_id };
        let wait = self.election_timeout();
        let others: Vec<(NodeId, MemberNode)> = metrics
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != self.member_id)
            .map(|(id, node)| (*id, node.clone()))
            .collect();
        for (id, node) in others {
            if !self.beats.on_the_way.lock().insert(id) {
                continue;
            }
            let (beats, forwarder, request) = (self.beats.clone(), forwarder.clone(), request.clone());
            crate::metrics::metrics().beats_sent.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let answer = forwarder.send(&node, &request, wait).await;
                if let Ok(LeaderReply::Beat(true)) = answer {
                    crate::metrics::metrics().beats_followed.fetch_add(1, Ordering::Relaxed);
                    beats.answered.lock().insert(id, (term, Instant::now()));
                } else {
                    debug!(member = id, ?answer, "a beat not answered as followed");
                }
                beats.on_the_way.lock().remove(&id);
            });
        }
    }

    /// Runs the clock until Raft stops; campaigns (after a granted pre-vote) when the leader is gone.
    pub async fn run(self, forwarder: Forwarder) {
        self.raft.runtime_config().elect(false);
        let mut ticker = tokio::time::interval(self.tick);
        // After a pause, one tick: the clock is logical.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_seen = None;
        // Ticks as leader without any quorum acknowledgement yet (openraft reports none until the first).
        let mut unacked_ticks = 0;
        self.lock_countdown().heard_leader(self.randomized_timeout());
        loop {
            ticker.tick().await;
            let metrics = self.raft.metrics().borrow().clone();
            let membership = metrics.membership_config.membership();
            let voters = membership.voter_ids().count();
            let is_voter = membership.voter_ids().any(|id| id == self.member_id);
            if is_voter && voters == 1 && metrics.current_leader.is_none() {
                // The only voter needs nobody's agreement (and should not wait an election timeout).
                if self.raft.trigger().elect().await.is_err() {
                    return;
                }
                continue;
            }
            if metrics.state == ServerState::Leader {
                // Nothing here waits for openraft's core: it holds its own log's flush in its loop
                // (`append_to_log`), and the beats must go out meanwhile. The vote's timestamp is read
                // afresh once this member follows again.
                last_seen = None;
                self.lock_countdown().heard_leader(self.randomized_timeout());
                self.leader_lost.store(false, Ordering::Relaxed);
                unacked_ticks = if metrics.millis_since_quorum_ack.is_some() { 0 } else { unacked_ticks + 1 };
                let alive = self.core_alive(self.core_window());
                self.check_quorum(&metrics, unacked_ticks, alive);
                // etcd's heartbeat, every tick. openraft's own comes only every 1.5 of its interval, which
                // is also its wait for an answer (`consensus::raft_rpc_window`) and so may be longer.
                if !*self.handing_over.borrow() {
                    if alive {
                        self.send_beats(&forwarder, &metrics);
                    }
                    if self.raft.trigger().heartbeat().await.is_err() {
                        return;
                    }
                }
                continue;
            }
            unacked_ticks = 0;
            self.quorum_lost.store(false, Ordering::Relaxed);
            let Ok(seen) = self.raft.with_raft_state(|st| st.vote_last_modified()).await else {
                return;
            };
            // The core answered: a new leader's `core_alive` starts from here.
            *self.beats.core_answered.lock() = Some(Instant::now());
            if seen != last_seen {
                last_seen = seen;
                self.lock_countdown().heard_leader(self.randomized_timeout());
                self.leader_lost.store(false, Ordering::Relaxed);
                continue;
            }
            let timeout = self.randomized_timeout();
            if !self.lock_countdown().tick(timeout) {
                continue;
            }
            self.leader_lost.store(true, Ordering::Relaxed);
            let (granted, removed) = self.pre_vote(&forwarder, &metrics).await;
            if removed {
                self.removed.send_replace(true);
                return;
            }
            if is_voter && granted {
                info!(
                    term = metrics.current_term,
                    "no leader for an election timeout and a majority agrees; campaigning"
                );
                if self.raft.trigger().elect().await.is_err() {
                    return;
                }
            }
        }
    }

    /// etcd's check-quorum: a leader that has not heard from a quorum for an election timeout knows no
    /// leader (`etcd_server_has_leader` 0, Status without a leader, "no leader" for requests that require
    /// one) and grants pre-votes, so the members it can reach may replace it. openraft keeps it leader
    /// until it sees a higher term. A quorum's answers to openraft's appends count, and so do a quorum's
    /// answers to beats (which do not wait on the followers' disks).
    fn check_quorum(&self, metrics: &RaftMetrics, unacked_ticks: u64, core_alive: bool) {
        let voters: Vec<NodeId> = metrics.membership_config.membership().voter_ids().collect();
        let election_ms = self.election_timeout().as_millis() as u64;
        // openraft's figure is as old as its last metrics: a core that hangs reports it no more.
        let openraft_lost = !core_alive
            || match metrics.millis_since_quorum_ack {
                Some(ms) => ms > election_ms,
                None => unacked_ticks >= self.election_ticks,
            };
        let lost = voters.len() > 1
            && !*self.handing_over.borrow()
            && openraft_lost
            && !self.beats.quorum_heard(
                &voters,
                self.member_id,
                metrics.current_term,
                Duration::from_millis(election_ms),
            );
        if lost != self.quorum_lost.swap(lost, Ordering::Relaxed) {
            if lost {
                warn!(
                    term = metrics.current_term,
                    "no quorum heard for an election timeout; this leader knows no leader"
                );
            } else {
                info!(term = metrics.current_term, "a quorum answers this leader again");
            }
        }
    }

    fn lock_countdown(&self) -> std::sync::MutexGuard<'_, Countdown> {
        // Two integers: a panic elsewhere cannot leave them half-updated.
        self.countdown.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn election_timeout(&self) -> Duration {
        self.tick * self.election_ticks as u32
    }

    /// How long openraft's core may go without answering the clock before this member counts it as
    /// hung: two election timeouts, since a core that flushes two appends of slow syncs in a row
    /// answers only between them.
    fn core_window(&self) -> Duration {
        2 * self.election_timeout()
    }

    /// etcd randomizes the election timeout in [timeout, 2 × timeout).
    fn randomized_timeout(&self) -> u64 {
        rand::thread_rng().gen_range(self.election_ticks..self.election_ticks * 2)
    }

    /// Asks every other member; returns whether a majority of voters (counting this one) granted, and
    /// whether a majority of voters said this member was removed.
    async fn pre_vote(&self, forwarder: &Forwarder, metrics: &RaftMetrics) -> (bool, bool) {
        let membership = metrics.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let request = LeaderRequest::PreVote(PreVote {
            candidate: self.member_id,
            last_log_index: metrics.last_log_index.unwrap_or(0),
        });
        let asks =
            voters.iter().filter(|id| **id != self.member_id).filter_map(|id| membership.get_node(id)).map(|node| {
                let request = request.clone();
                async move {
                    match forwarder.send(node, &request, self.tick * 5).await {
                        Ok(LeaderReply::PreVote(answer)) => Some(answer),
                        _ => None,
                    }
                }
            });
        let answers: Vec<PreVoteAnswer> = join_all(asks).await.into_iter().flatten().collect();
        let count = |want| answers.iter().filter(|a| **a == want).count();
        let granted = 1 + count(PreVoteAnswer::Granted);
        debug!(granted, voters = voters.len(), "pre-vote");
        (granted * 2 > voters.len(), count(PreVoteAnswer::Removed) * 2 > voters.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two followers lose their leader at the same moment, with different randomized timeouts. Every
    /// ask one of them makes finds the other past an election timeout without the leader, so it is
    /// granted (logs permitting) — also right after the other's own ask failed. (When an ask reset the
    /// asker's count, the two refused each other in turn.)
    #[test]
    fn a_members_own_asks_do_not_make_it_refuse_the_next_candidate() {
        let election_ticks = 10;
        let (mut a, mut b) = (Countdown::new(10), Countdown::new(13));
        let mut asks = Vec::new();
        for tick in 1..=40u64 {
            let (a_asks, b_asks) = (a.tick(15), b.tick(17));
            if a_asks {
                assert!(b.idle >= election_ticks, "b would refuse a at tick {tick}");
                asks.push(("a", tick));
            }
            if b_asks {
                assert!(a.idle >= election_ticks, "a would refuse b at tick {tick}");
                asks.push(("b", tick));
            }
        }
        assert_eq!(asks, vec![("a", 10), ("b", 13), ("a", 25), ("b", 30), ("a", 40)]);
        a.heard_leader(12);
        assert_eq!((a.idle, a.next_ask), (0, 12));
    }

    /// Check-quorum by beats: the leader counts for itself, an answer counts only in the beat's term
    /// and only within the window.
    #[test]
    fn beats_make_a_quorum_only_in_the_term_and_the_window() {
        let beats = Beats::default();
        let (voters, window) = ([1, 2, 3], Duration::from_secs(60));
        assert!(!beats.quorum_heard(&voters, 1, 5, window), "the leader alone is no quorum of three");
        beats.answered.lock().insert(2, (4, Instant::now()));
        assert!(!beats.quorum_heard(&voters, 1, 5, window), "an answer of an earlier term");
        beats.answered.lock().insert(2, (5, Instant::now()));
        assert!(beats.quorum_heard(&voters, 1, 5, window));
        assert!(!beats.quorum_heard(&voters, 1, 5, Duration::ZERO), "an answer older than the window");
        assert!(!beats.quorum_heard(&[1, 2, 3, 4, 5], 1, 5, window), "two of five");
        beats.answered.lock().insert(9, (5, Instant::now()));
        assert!(!beats.quorum_heard(&[1, 2, 3, 4, 5], 1, 5, window), "a learner's answer does not count");
    }
}
