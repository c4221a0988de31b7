//! Inbound Raft RPC: the `raftpb.RaftPeer` service, handing decoded openraft messages to the local Raft and
//! forwarded requests to the [`Leader`].

use std::time::SystemTime;

use proto::raftpb;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::leader::Leader;
use crate::leader_wire::{unix_ms, Forwarded, LeaderReply};
use crate::storage::{decode, encode};
use crate::typ::{SnapshotMeta, Vote};

/// How long a `HashKv` asked at a revision this member has not applied yet waits for it.
const FUTURE_REVISION_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A member's answer to [`raftpb::raft_peer_server::RaftPeer::hash_kv`]: hash, current revision and
/// compacted revision, or why it could not hash.
pub type PeerHash = Result<(u32, i64, i64), String>;

pub struct PeerService {
    leader: Leader,
    /// Turns true when the member stops: its append streams end then, so that the server can drain.
    stop: tokio::sync::watch::Receiver<bool>,
}

impl PeerService {
    pub fn new(leader: Leader, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        Self { leader, stop }
    }
}

fn decoded<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Status> {
    decode(bytes).map_err(|e| Status::invalid_argument(format!("undecodable Raft message: {e}")))
}

/// Encodes a whole result, errors included, for the peer to decode.
fn encoded<T: Serialize>(result: &T) -> Result<Vec<u8>, Status> {
    encode(result).map_err(|e| Status::internal(format!("encoding a Raft reply: {e}")))
}

/// [`encoded`], as the answer of a call.
fn reply<T: Serialize>(result: &T) -> Result<Response<raftpb::RaftMessage>, Status> {
    Ok(Response::new(raftpb::RaftMessage { payload: encoded(result)? }))
}

/// The answers of one append stream (see [`raftpb::raft_peer_server::RaftPeer::append_stream`]).
pub type AnswerStream = UnboundedReceiverStream<Result<raftpb::TaggedMessage, Status>>;

#[tonic::async_trait]
impl raftpb::raft_peer_server::RaftPeer for PeerService {
    type AppendStreamStream = AnswerStream;

    /// Each append that arrives goes to Raft in a task of its own, as a call of its own did, so that the
    /// stream is read on while Raft works; answers go back as they are ready, tagged with their append's
    /// id, except to appends sent `unanswered` (the leader's commit notices).
    async fn append_stream(
        &self,
        request: Request<Streaming<raftpb::TaggedMessage>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        let mut appends = request.into_inner();
        let (answers, answer_stream) = tokio::sync::mpsc::unbounded_channel();
        let raft = self.leader.raft.clone();
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            // Ends with the stream (the peer closed it, or its connection went), or when this member stops
            // (the stream would otherwise hold the server's drain forever; the peer's appends waiting
            // on it get an error, as on a closed connection).
            loop {
                let append = tokio::select! {
                    append = appends.message() => match append {
                        Ok(Some(append)) => append,
                        _ => break,
                    },
                    _ = stop.wait_for(|stopped| *stopped) => break,
                };
                let (raft, answers) = (raft.clone(), answers.clone());
                tokio::spawn(async move {
                    let answer = match decoded(&append.payload) {
                        Ok(rpc) => encoded(&raft.append_entries(rpc).await),
                        Err(status) => Err(status),
                    };
                    if append.unanswered {
                        return;
                    }
                    let (payload, error) = match answer {
                        Ok(payload) => (payload, String::new()),
                        Err(status) => (Vec::new(), status.message().to_string()),
                    };
                    let _ =
                        answers.send(Ok(raftpb::TaggedMessage { id: append.id, payload, error, unanswered: false }));
                });
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(answer_stream)))
    }

    async fn append_entries(
        &self,
        request: Request<raftpb::RaftMessage>,
    ) -> Result<Response<raftpb::RaftMessage>, Status> {
        let rpc = decoded(&request.into_inner().payload)?;
        reply(&self.leader.raft.append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        let rpc = decoded(&request.into_inner().payload)?;
        reply(&self.leader.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<raftpb::SnapshotChunk>>,
    ) -> Result<Response<raftpb::RaftMessage>, Status> {
        let mut chunks = request.into_inner();
        let mut last = None;
        while let Some(chunk) = chunks.message().await? {
            let (vote, meta): (Vote, SnapshotMeta) = decoded(&chunk.meta)?;
            let rpc = openraft::raft::InstallSnapshotRequest {
                vote,
                meta,
                offset: chunk.offset,
                data: chunk.data,
                done: chunk.done,
            };
            let result = self.leader.raft.install_snapshot(rpc).await;
            let failed = result.is_err();
            last = Some(result);
            if failed {
                break;
            }
        }
        match last {
            Some(result) => reply(&result),
            None => Err(Status::invalid_argument("an empty snapshot stream")),
        }
    }

    async fn hash_kv(&self, request: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        let revision: i64 = decoded(&request.into_inner().payload)?;
        let store = self.leader.store.clone();
        // The asking member fixed `revision` on its own store and asks at once: this one may not have
        // applied that far yet ("future revision", and the check would skip this member).
        let waited = tokio::time::Instant::now();
        while store.read().current_revision() < revision && waited.elapsed() < FUTURE_REVISION_WAIT {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let hashed = tokio::task::spawn_blocking(move || kv_api::hash::hash_kv_shared(&store, revision))
            .await
            .map_err(|e| Status::internal(format!("hash task failed: {e}")))?;
        let answer: PeerHash =
            hashed.map(|h| (h.hash, h.current_revision, h.compact_revision)).map_err(|e| e.to_string());
        reply(&answer)
    }

    async fn forward(&self, request: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        let forwarded: Forwarded = decoded(&request.into_inner().payload)?;
        if unix_ms(SystemTime::now()) > forwarded.deadline_unix_ms {
            return reply(&Err::<LeaderReply, _>(kv_api::Error::Timeout));
        }
        reply(&self.leader.handle(forwarded.request).await)
    }
}
