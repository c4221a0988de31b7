//! Outbound Raft RPC to peers over tonic (`raftpb.RaftPeer`), openraft messages encoded with bincode.
//!
//! Connections are made lazily by a [`PeerDialer`] (this member's own peer IP, TLS for `https://`). One
//! channel per peer URL is
//! shared by every client openraft asks for: openraft makes a fresh client for each read-index quorum
//! round and each vote, and a fresh TCP and HTTP/2 handshake per linearizable read is what it would
//! otherwise cost. A channel reconnects by itself after its peer restarts.
//!
//! # Several connections per peer
//!
//! TCP delivers in order: one lost segment holds up everything sent after it on its connection until it
//! is retransmitted, and Linux waits at least 200 ms for that, twice as long each time the copy is lost
//! too. On a link losing a fifth of its packets a connection goes silent for a second or more several
//! times a minute, and with both of a leader's follower links silent at once it hears no quorum for an
//! election timeout (seen in the jepsen `loss` runs: about one run in three lost its quorum or timed a
//! client out). So each peer gets [`lanes::LANES`] connections ([`PeerLanes`]) and RPCs use one at a time; an
//! RPC that runs out of time (tonic's deadline, or openraft's own, which drops it) moves every later RPC
//! to that peer to the next one, which by then has usually recovered, instead of queueing it behind the
//! lost segment. Raft tolerates the reordering this allows (an append or vote left on a stalled
//! connection may arrive after later ones; appends are checked against the log, votes against the
//! term). A snapshot stays on the first connection: its chunks must arrive in order.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use proto::raftpb;
use proto::raftpb::raft_peer_client::RaftPeerClient;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::Channel;

use crate::append_stream::{AppendStream, Sent};
use crate::connectivity::Connectivity;
use crate::dial::PeerDialer;
use crate::early_append::{self, EarlyAppends};
use crate::lanes::{self, Lanes};
use crate::storage::log_store::{is_unread, UNREAD_FROM_ENTRIES};
use crate::storage::{decode, encode, LogStore};
use crate::typ::{LogId, MemberNode, NodeId, TypeConfig};

/// Creates [`PeerClient`]s.
#[derive(Clone, Debug, Default)]
pub struct PeerNetwork {
    dialer: PeerDialer,
    /// Which peers answer, for `--strict-reconfig-check`.
    connectivity: Connectivity,
    /// The connections to each peer URL, made on first use.
    lanes: Arc<Mutex<HashMap<String, Arc<PeerLanes>>>>,
    /// The leader's appends sent while it flushes them (`None` in tests of the network alone).
    early: Option<EarlyAppends>,
    /// The log, to read the entries a replication stream's reader left unread before they are sent.
    log: Option<LogStore>,
}

impl PeerNetwork {
    pub fn new(dialer: PeerDialer, connectivity: Connectivity, early: EarlyAppends, log: LogStore) -> Self {
        PeerNetwork { dialer, connectivity, lanes: Arc::default(), early: Some(early), log: Some(log) }
    }

    /// The shared connections to `url`, or `None` when it cannot be dialled.
    fn lanes(&self, url: &str) -> Option<Arc<PeerLanes>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lanes) = lanes.get(url) {
            return Some(lanes.clone());
        }
        // They connect lazily: the second one only once an RPC ran out of time on the first.
        let made = Arc::new(PeerLanes::new(lanes::channels(&self.dialer, url)?));
        lanes.insert(url.to_string(), made.clone());
        Some(made)
    }

    /// The first shared channel to `url` (health probes), or `None` when it cannot be dialled.
    pub(crate) fn channel(&self, url: &str) -> Option<Channel> {
        self.lanes(url).map(|lanes| lanes.first.clone())
    }
}

/// The connections to one peer URL (see the module doc).
#[derive(Debug)]
struct PeerLanes {
    /// The first lane's channel, for the health probes.
    first: Channel,
    lanes: Lanes<RaftPeerClient<Channel>>,
    /// Each lane's append stream.
    streams: Vec<AppendStream>,
}

impl PeerLanes {
    fn new(channels: Vec<Channel>) -> Self {
        let first = channels[0].clone();
        let streams = channels.iter().map(|_| AppendStream::default()).collect();
        let clients = channels
            .into_iter()
            .map(|channel| {
                RaftPeerClient::new(channel).max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX)
            })
            .collect();
        Self { first, lanes: Lanes::new(clients), streams }
    }

    /// An RPC on `lane` ran out of time: later ones take the next lane, unless another RPC that timed
    /// out on the same lane already moved them.
    fn timed_out(&self, lane: usize) {
        if self.lanes.move_on(lane).is_some() {
            crate::metrics::metrics().peer_lane_switches.fetch_add(1, Relaxed);
        }
    }
}

/// An RPC on its way: dropped before [`InFlight::settle`] (openraft timed it out and dropped it), or
/// settled by a reply that ran out of time, it moves later RPCs to the peer's next lane.
struct InFlight<'a> {
    lanes: &'a PeerLanes,
    lane: usize,
}

impl InFlight<'_> {
    /// Settles the RPC by its reply: an answer, or an error other than running out of time, keeps the
    /// lane.
    fn settle<T>(self, reply: &Result<T, tonic::Status>) {
        let out_of_time = matches!(reply, Err(status) if matches!(status.code(), tonic::Code::Cancelled | tonic::Code::DeadlineExceeded));
        if !out_of_time {
            std::mem::forget(self);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.lanes.timed_out(self.lane);
    }
}

/// The connections to one peer and where its answers are noted.
#[derive(Clone)]
struct Link {
    target: NodeId,
    node: MemberNode,
    lanes: Option<Arc<PeerLanes>>,
    connectivity: Connectivity,
}

/// The connection to one peer.
pub struct PeerClient {
    link: Link,
    early: Option<EarlyAppends>,
    log: Option<LogStore>,
    /// Whether the next long append is first probed (see [`PeerClient::append_entries`]): from the start
    /// of a replication stream until a probe finds the end of what the follower holds.
    probing: bool,
    /// Whether the follower answered an append of entries from this client: only a replication stream's
    /// client carries entries (openraft makes a fresh client for each read-index round and each vote).
    replicating: bool,
    /// The newest commit index this client sent the follower in an append it answered, or in a commit
    /// notice (see [`PeerClient::notice_unanswered`]).
    told_commit: Option<LogId>,
}

/// Entries in an append from which a probing stream first asks whether the follower already holds them
/// (as many as make a replication stream's reader leave the middle of a read unread).
const PROBE_FROM_ENTRIES: usize = UNREAD_FROM_ENTRIES;

#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("peer {0} has no usable peer URL")]
    NoUrl(NodeId),
    #[error("encoding a Raft message: {0}")]
    Codec(String),
    #[error("an append of log entries not read yet")]
    Unread,
    #[error("reading log entries to send: {0}")]
    Read(String),
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &MemberNode) -> Self::Network {
        let lanes = node.peer_urls.first().and_then(|url| self.lanes(url));
        let link = Link { target, node: node.clone(), lanes, connectivity: self.connectivity.clone() };
        PeerClient {
            link,
            early: self.early.clone(),
            log: self.log.clone(),
            probing: true,
            replicating: false,
            told_commit: None,
        }
    }
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, MemberNode, E>>;

impl Link {
    async fn send_append(
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        // Place holders of unread entries never leave this member (`PeerClient::send` reads them first).
        if rpc.entries.iter().any(is_unread) {
            return Err(RPCError::Network(NetworkError::new(&PeerError::Unread)));
        }
        self.send_encoded(message(rpc)?, option.hard_ttl()).await
    }

    async fn send_encoded(
        &self,
        message: raftpb::RaftMessage,
        ttl: Duration,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let (in_flight, mut client) = self.client(None)?;
        // On the lane's append stream (see `append_stream`), or as a call of its own while it is not open.
        let payload = match in_flight.lanes.streams[in_flight.lane].send(&client, message.payload, ttl).await {
            Sent::Answered(reply) => {
                let reply = reply.map(|payload| tonic::Response::new(raftpb::RaftMessage { payload }));
                in_flight.settle(&reply);
                return self.reply(reply);
            }
            Sent::NotOpen(payload) => payload,
        };
        let mut request = tonic::Request::new(raftpb::RaftMessage { payload });
        request.set_timeout(ttl);
        let reply = client.append_entries(request).await;
        in_flight.settle(&reply);
        self.reply(reply)
    }

    /// Sends `message`, an append, without awaiting an answer: on the lane's append stream, which asks the
    /// follower for none, or, while it is not open, as a call of its own in a task of its own.
    fn send_unanswered(&self, message: raftpb::RaftMessage, ttl: Duration) {
        let Some(lanes) = self.lanes.as_deref() else { return };
        let (lane, client) = lanes.lanes.client(None);
        if let Err(payload) = lanes.streams[lane].send_unanswered(&client, message.payload) {
            let link = self.clone();
            tokio::spawn(async move {
                let _ = link.send_encoded(raftpb::RaftMessage { payload }, ttl).await;
            });
        }
    }

    /// How the early appends reach this peer.
    fn early_sender(&self, window: Duration) -> early_append::Send {
        let link = self.clone();
        Arc::new(move |batch: Arc<early_append::Batch>| {
            let link = link.clone();
            Box::pin(async move {
                let payload = batch.encoded.get_or_init(|| encode(&batch.request).ok()).clone()?;
                link.send_encoded(raftpb::RaftMessage { payload }, window).await.ok()
            })
        })
    }

    /// The client of lane `pinned`, or of the lane RPCs to this peer use now, with the RPC to send on it.
    fn client<E: std::error::Error>(
        &self,
        pinned: Option<usize>,
    ) -> RpcResult<(InFlight<'_>, RaftPeerClient<Channel>), E> {
        let lanes = self
            .lanes
            .as_deref()
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&PeerError::NoUrl(self.target))))?;
        let (lane, client) = lanes.lanes.client(pinned);
        Ok((InFlight { lanes, lane }, client))
    }

    /// Turns the peer's encoded `Result` into openraft's RPC result.
    fn reply<T: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &self,
        reply: Result<tonic::Response<raftpb::RaftMessage>, tonic::Status>,
    ) -> RpcResult<T, E> {
        let message = match reply {
            Ok(reply) => {
                self.connectivity.answered(self.target);
                reply.into_inner()
            }
            // Out of time (ours or the peer's deadline): the peer may be slow or the link lossy, not gone.
            // openraft backs off for half a second after `Unreachable`, and under delay or loss that
            // pause, not the link, would stop commits; any other error resends at the next heartbeat.
            Err(status) if matches!(status.code(), tonic::Code::Cancelled | tonic::Code::DeadlineExceeded) => {
                return Err(RPCError::Network(NetworkError::new(&status)));
            }
            Err(status) => {
                self.connectivity.failed(self.target);
                return Err(RPCError::Unreachable(Unreachable::new(&status)));
            }
        };
        let result: Result<T, E> = decode(&message.payload)
            .map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Codec(e.to_string()))))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e)))
    }
}

fn message<T: Serialize, E: std::error::Error>(value: &T) -> RpcResult<raftpb::RaftMessage, E> {
    let payload = encode(value).map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Codec(e.to_string()))))?;
    Ok(raftpb::RaftMessage { payload })
}

fn with_deadline<T>(message: T, option: &RPCOption) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(option.hard_ttl());
    request
}

impl PeerClient {
    /// Sends `rpc`'s commit index, which the early append that carried its entries did not know, in an
    /// empty append after them, unanswered: openraft put it in this append (a commit it learnt while the
    /// append waited to go out) and sends no other, so a follower would otherwise apply, and its watchers
    /// hear of, those writes only at the next heartbeat.
    fn tell_commit(
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> RpcResult<(), RaftError<NodeId>> {
        let notice: AppendEntriesRequest<TypeConfig> = AppendEntriesRequest {
            vote: rpc.vote,
            prev_log_id: rpc.entries.last().map(|entry| entry.log_id),
            leader_commit: rpc.leader_commit,
            entries: Vec::new(),
        };
        crate::metrics::metrics().early_commit_notices.fetch_add(1, Relaxed);
        self.link.send_unanswered(message(&notice)?, option.hard_ttl());
        Ok(())
    }

    /// openraft's replication sends a follower each new commit index as soon as it learns it, in an empty
    /// append (the entries it commits were answered already). The follower's answer tells nothing new,
    /// yet waiting for it held this stream's next append back, and it cost a message. So once the
    /// follower answered entries from this client, an empty append that brings a newer commit index goes
    /// unanswered (see `append_stream`) and counts as a success at once: `Some(Success)`. A heartbeat
    /// (no newer commit index), a read-index round's or a vote's append (a fresh client's), and any
    /// append before the follower answered entries are sent and answered as before, so their answers
    /// still prove the follower there (check-quorum, linearizable reads). The notice's previous entry
    /// is what the follower last answered for, so a follower that refuses it had lost its log or moved
    /// to a newer term, which the next append it answers shows.
    fn notice_unanswered(
        &mut self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> RpcResult<Option<AppendEntriesResponse<NodeId>>, RaftError<NodeId>> {
        if !rpc.entries.is_empty() || !self.replicating || rpc.leader_commit <= self.told_commit {
            return Ok(None);
        }
        self.link.send_unanswered(message(rpc)?, option.hard_ttl());
        self.told_commit = rpc.leader_commit;
        crate::metrics::metrics().commit_notices_unanswered.fetch_add(1, Relaxed);
        Ok(Some(AppendEntriesResponse::Success))
    }

    /// Notes how the follower answered `rpc` (`success` or not): for the early appends, and what this
    /// client knows the follower holds.
    fn noted(&mut self, early: Option<&EarlyAppends>, rpc: &AppendEntriesRequest<TypeConfig>, success: bool) {
        if let Some(early) = early {
            let link = &self.link;
            early.answered(link.target, rpc, success, &|| link.early_sender(early.window()));
        }
        if success {
            self.replicating |= !rpc.entries.is_empty();
            self.told_commit = self.told_commit.max(rpc.leader_commit);
        }
    }

    /// A new leader does not know how much of its log a follower holds. openraft 0.9 then starts from the
    /// middle of the unpurged log and sends everything from there, 300 entries to a message, although
    /// after a hand-over the follower holds it all: after a busy run, many megabytes read from disk and
    /// sent for nothing while writes wait for the new leader's first commit (55-85 ms held at a
    /// SIGTERM). So while a stream is probing, a long append is first sent empty, with its last entry's
    /// id as the previous one: by Raft's log matching, a follower that has that entry has all the
    /// others, and this answer is the whole append's. Any other answer sends the append as it is (a
    /// conflicting tail the probe made the follower drop is one the append would have replaced), and
    /// the stream stops probing. The stream's log reader left the middle of such a long append unread
    /// (`LogStore::limited_get_log_entries`): it is read here only when it is sent.
    async fn send(
        &mut self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        if self.probing && rpc.entries.len() >= PROBE_FROM_ENTRIES {
            let probe = AppendEntriesRequest {
                vote: rpc.vote,
                prev_log_id: rpc.entries.last().map(|entry| entry.log_id),
                leader_commit: rpc.leader_commit,
                entries: Vec::new(),
            };
            match self.link.send_append(&probe, option).await? {
                AppendEntriesResponse::Success => {
                    crate::metrics::metrics().append_entries_skipped.fetch_add(rpc.entries.len() as u64, Relaxed);
                    return Ok(AppendEntriesResponse::Success);
                }
                higher @ AppendEntriesResponse::HigherVote(_) => return Ok(higher),
                AppendEntriesResponse::Conflict | AppendEntriesResponse::PartialSuccess(_) => self.probing = false,
            }
        }
        let filled = match &self.log {
            Some(log) => log.filled(&rpc.entries),
            None => Ok(None),
        };
        match filled.map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Read(e.to_string()))))? {
            Some(entries) => {
                let whole = AppendEntriesRequest {
                    vote: rpc.vote,
                    prev_log_id: rpc.prev_log_id,
                    leader_commit: rpc.leader_commit,
                    entries,
                };
                self.link.send_append(&whole, option).await
            }
            None => self.link.send_append(rpc, option).await,
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    /// An early append (see `early_append`) that carried `rpc`'s entries answers for it; otherwise it
    /// goes as [`PeerClient::send`] sends it.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        if let Some(success) = self.notice_unanswered(&rpc, &option)? {
            return Ok(success);
        }
        let early = self.early.clone();
        if let Some(mut covering) = early.as_ref().and_then(|early| early.covering(self.link.target, &rpc)) {
            // The follower's answer to the early append, which carried these entries (see `early_append`).
            if matches!(covering.taken.wait_for(Option::is_some).await.as_deref(), Ok(Some(true))) {
                crate::metrics::metrics().early_answers.fetch_add(1, Relaxed);
                if rpc.leader_commit > covering.commit {
                    self.tell_commit(&rpc, &option)?;
                }
                self.noted(early.as_ref(), &rpc, true);
                return Ok(AppendEntriesResponse::Success);
            }
        }
        let result = self.send(&rpc, &option).await;
        self.noted(early.as_ref(), &rpc, matches!(result, Ok(AppendEntriesResponse::Success)));
        result
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        let meta = encode(&(&rpc.vote, &rpc.meta))
            .map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Codec(e.to_string()))))?;
        let chunk = raftpb::SnapshotChunk { meta, offset: rpc.offset, data: rpc.data, done: rpc.done };
        let request = with_deadline(tokio_stream::iter([chunk]), &option);
        // Always the first lane: chunks must arrive in order.
        let (in_flight, mut client) = self.link.client(Some(0))?;
        let reply = client.install_snapshot(request).await;
        in_flight.settle(&reply);
        self.link.reply(reply)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, RaftError<NodeId>> {
        let request = with_deadline(message(&rpc)?, &option);
        let (in_flight, mut client) = self.link.client(None)?;
        let reply = client.vote(request).await;
        in_flight.settle(&reply);
        self.link.reply(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typ::Entry;

    #[tokio::test]
    async fn an_rpc_out_of_time_moves_later_ones_to_the_next_connection_once() {
        let dialer = PeerDialer::default();
        let lanes = PeerLanes::new(lanes::channels(&dialer, "http://127.0.0.1:1").expect("channels"));
        let in_use = || lanes.lanes.current();
        lanes.timed_out(0);
        assert_eq!(in_use(), 1);
        // A second RPC that had gone out on the first lane and timed out too moves nothing on.
        lanes.timed_out(0);
        assert_eq!(in_use(), 1);
        lanes.timed_out(1);
        lanes.timed_out(2);
        assert_eq!(in_use(), 0);
    }

    #[tokio::test]
    async fn an_rpc_dropped_or_out_of_time_moves_the_lane_and_an_answer_keeps_it() {
        let dialer = PeerDialer::default();
        let lanes = PeerLanes::new(lanes::channels(&dialer, "http://127.0.0.1:1").expect("channels"));
        let sent = || InFlight { lanes: &lanes, lane: lanes.lanes.current() };
        sent().settle(&Ok::<(), tonic::Status>(()));
        sent().settle(&Err::<(), _>(tonic::Status::unavailable("connection refused")));
        assert_eq!(lanes.lanes.current(), 0, "answers and other errors keep the lane");
        sent().settle(&Err::<(), _>(tonic::Status::cancelled("Timeout expired")));
        assert_eq!(lanes.lanes.current(), 1, "tonic's deadline moves it");
        drop(sent());
        assert_eq!(lanes.lanes.current(), 2, "openraft's timeout, which drops the RPC, moves it");
    }

    /// A client of a peer that is not there, and an append of `entries` (from index 1) committing `commit`.
    fn absent_peer() -> (PeerClient, impl Fn(u64, u64) -> AppendEntriesRequest<TypeConfig>) {
        let lanes =
            Arc::new(PeerLanes::new(lanes::channels(&PeerDialer::default(), "http://127.0.0.1:1").expect("channels")));
        let link =
            Link { target: 2, node: MemberNode::default(), lanes: Some(lanes), connectivity: Connectivity::default() };
        let client = PeerClient { link, early: None, log: None, probing: false, replicating: false, told_commit: None };
        let append = |entries: u64, commit: u64| {
            let id = |index| LogId::new(openraft::CommittedLeaderId::new(1, 1), index);
            let entry = |index| Entry { log_id: id(index), payload: openraft::EntryPayload::Blank };
            AppendEntriesRequest {
                vote: crate::typ::Vote::new_committed(1, 1),
                prev_log_id: if entries == 0 { Some(id(1)) } else { None },
                leader_commit: Some(id(commit)),
                entries: (1..=entries).map(entry).collect(),
            }
        };
        (client, append)
    }

    #[tokio::test]
    async fn only_a_newer_commit_index_after_answered_entries_goes_unanswered() {
        let (mut client, append) = absent_peer();
        let option = RPCOption::new(Duration::from_secs(1));
        // Before the follower answered entries from this client (a read-index round's or a vote's client
        // never carries any), an empty append is sent and its answer awaited: none comes from no peer.
        let awaited = client.append_entries(append(0, 1), option.clone()).await;
        assert!(matches!(awaited, Err(RPCError::Unreachable(_))), "{awaited:?}");
        client.noted(None, &append(1, 1), true);
        // A newer commit index: sent unanswered, a success at once.
        let notice = client.append_entries(append(0, 2), option.clone()).await;
        assert!(matches!(notice, Ok(AppendEntriesResponse::Success)), "{notice:?}");
        // A heartbeat (the same commit index) still needs the follower's answer.
        let heartbeat = client.append_entries(append(0, 2), option.clone()).await;
        assert!(matches!(heartbeat, Err(RPCError::Unreachable(_))), "{heartbeat:?}");
        // A refused append teaches nothing: the next commit notice still goes unanswered.
        client.noted(None, &append(1, 9), false);
        let notice = client.append_entries(append(0, 3), option).await;
        assert!(matches!(notice, Ok(AppendEntriesResponse::Success)), "{notice:?}");
    }

    /// An append as a replication stream's reader reads entries 10 to 49 of a log of 60 (the middle
    /// left unread), and the log.
    async fn unread_append(dir: &std::path::Path) -> (AppendEntriesRequest<TypeConfig>, LogStore) {
        use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
        use openraft::{CommittedLeaderId, EntryPayload, RaftLogReader};
        let entry =
            |index| Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Blank };
        {
            let (mut log, _sm, _store) = crate::storage::open(dir).expect("open");
            log.blocking_append((1..=60).map(entry)).await.expect("append");
        }
        let (mut log, _sm, _store) = crate::storage::reopen(dir);
        let entries = log.get_log_reader().await.limited_get_log_entries(10, 50).await.expect("read");
        assert!(entries.iter().any(is_unread));
        let vote = crate::typ::Vote::new_committed(1, 1);
        (AppendEntriesRequest { vote, prev_log_id: Some(entry(9).log_id), leader_commit: None, entries }, log)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn entries_left_unread_are_read_before_an_append_goes_and_never_sent_unread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (rpc, log) = unread_append(dir.path()).await;
        let lanes =
            Arc::new(PeerLanes::new(lanes::channels(&PeerDialer::default(), "http://127.0.0.1:1").expect("channels")));
        let link =
            Link { target: 2, node: MemberNode::default(), lanes: Some(lanes), connectivity: Connectivity::default() };
        let option = RPCOption::new(Duration::from_secs(1));
        let refused = link.send_append(&rpc, &option).await.expect_err("not sent");
        assert!(refused.to_string().contains("not read yet"), "{refused}");
        // Through the client, which reads them first: it gets as far as the (absent) peer.
        let mut client =
            PeerClient { link, early: None, log: Some(log), probing: false, replicating: false, told_commit: None };
        let failed = client.send(&rpc, &option).await.expect_err("no peer there");
        assert!(matches!(failed, RPCError::Unreachable(_)), "{failed}");
    }
}
