//! Inbound Raft RPC: the `raftpb.RaftPeer` service, handing decoded openraft messages to the local Raft.

use proto::raftpb;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use crate::storage::{decode, encode};
use crate::typ::{Raft, SnapshotMeta, Vote};

pub struct PeerService {
    raft: Raft,
}

impl PeerService {
    pub fn new(raft: Raft) -> Self {
        Self { raft }
    }
}

fn decoded<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Status> {
    decode(bytes).map_err(|e| Status::invalid_argument(format!("undecodable Raft message: {e}")))
}

/// Encodes the local Raft's whole result, errors included, for the peer to decode.
fn reply<T: Serialize>(result: &T) -> Result<Response<raftpb::RaftMessage>, Status> {
    let payload = encode(result).map_err(|e| Status::internal(format!("encoding a Raft reply: {e}")))?;
    Ok(Response::new(raftpb::RaftMessage { payload }))
}

#[tonic::async_trait]
impl raftpb::raft_peer_server::RaftPeer for PeerService {
    async fn append_entries(
        &self,
        request: Request<raftpb::RaftMessage>,
    ) -> Result<Response<raftpb::RaftMessage>, Status> {
        let rpc = decoded(&request.into_inner().payload)?;
        reply(&self.raft.append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<raftpb::RaftMessage>) -> Result<Response<raftpb::RaftMessage>, Status> {
        let rpc = decoded(&request.into_inner().payload)?;
        reply(&self.raft.vote(rpc).await)
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
            let result = self.raft.install_snapshot(rpc).await;
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
}
