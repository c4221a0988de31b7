//! `etcdserverpb.Maintenance`: Status, alarm listing and Snapshot; the rest arrives with the operations issue.

use std::sync::Arc;

use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status};

use super::snapshot::{self, SnapshotStream};
use super::{current_header, ApiConfig};
use crate::consensus::{Consensus, SharedStore};

pub struct MaintenanceService<C> {
    consensus: Arc<C>,
    store: SharedStore,
    config: ApiConfig,
}

impl<C: Consensus> MaintenanceService<C> {
    pub fn new(consensus: Arc<C>, store: SharedStore, config: ApiConfig) -> Self {
        Self { consensus, store, config }
    }

    fn header(&self) -> Option<pb::ResponseHeader> {
        current_header(&*self.consensus, &self.store)
    }
}

fn not_yet(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not implemented yet"))
}

#[tonic::async_trait]
impl<C: Consensus> pb::maintenance_server::Maintenance for MaintenanceService<C> {
    async fn alarm(&self, request: Request<pb::AlarmRequest>) -> Result<Response<pb::AlarmResponse>, Status> {
        match request.into_inner().action() {
            // No alarm can be raised yet (the quota arrives with the operations issue), so none is active.
            pb::alarm_request::AlarmAction::Get | pb::alarm_request::AlarmAction::Deactivate => {
                // etcd 3.4 answers alarms without a header.
                Ok(Response::new(pb::AlarmResponse { header: None, alarms: vec![] }))
            }
            pb::alarm_request::AlarmAction::Activate => Err(not_yet("raising alarms")),
        }
    }

    async fn status(&self, _request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let raft = self.consensus.raft_status();
        let db_size = self.store.read().backend().size_bytes() as i64;
        let mut errors = Vec::new();
        if raft.leader == 0 {
            errors.push(crate::error::Error::NoLeader.to_string());
        }
        Ok(Response::new(pb::StatusResponse {
            header: self.header(),
            version: self.config.version.clone(),
            db_size,
            leader: raft.leader,
            raft_index: raft.raft_index,
            raft_term: raft.raft_term,
            raft_applied_index: raft.raft_applied_index,
            errors,
            db_size_in_use: db_size,
            is_learner: raft.is_learner,
        }))
    }

    async fn defragment(
        &self,
        _request: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        Err(not_yet("Defragment"))
    }

    async fn hash(&self, _request: Request<pb::HashRequest>) -> Result<Response<pb::HashResponse>, Status> {
        Err(not_yet("Hash"))
    }

    async fn hash_kv(&self, _request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        Err(not_yet("HashKV"))
    }

    type SnapshotStream = SnapshotStream;

    /// As etcd, a copy of this member's own store, without a round through the leader.
    async fn snapshot(&self, _request: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        let file = self.consensus.snapshot().await?;
        Ok(Response::new(snapshot::stream(file)))
    }

    async fn move_leader(
        &self,
        request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        self.consensus.move_leader(request.into_inner().target_id).await?;
        // etcd 3.4 answers MoveLeader without a header.
        Ok(Response::new(pb::MoveLeaderResponse { header: None }))
    }

    async fn downgrade(
        &self,
        _request: Request<pb::DowngradeRequest>,
    ) -> Result<Response<pb::DowngradeResponse>, Status> {
        Err(not_yet("Downgrade"))
    }
}
