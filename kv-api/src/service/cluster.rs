//! `etcdserverpb.Cluster`: member listing; membership changes arrive with the cluster issue.

use std::sync::Arc;

use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status};

use crate::consensus::Consensus;

pub struct ClusterService<C> {
    consensus: Arc<C>,
}

impl<C: Consensus> ClusterService<C> {
    pub fn new(consensus: Arc<C>) -> Self {
        Self { consensus }
    }
}

fn not_yet(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not implemented yet"))
}

#[tonic::async_trait]
impl<C: Consensus> pb::cluster_server::Cluster for ClusterService<C> {
    async fn member_add(
        &self,
        _request: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        Err(not_yet("MemberAdd"))
    }

    async fn member_remove(
        &self,
        _request: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        Err(not_yet("MemberRemove"))
    }

    async fn member_update(
        &self,
        _request: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        Err(not_yet("MemberUpdate"))
    }

    async fn member_list(
        &self,
        _request: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        // etcd's Cluster service headers carry no revision.
        let header = Some(self.consensus.header());
        Ok(Response::new(pb::MemberListResponse {
            header,
            members: self.consensus.members(),
        }))
    }

    async fn member_promote(
        &self,
        _request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        Err(not_yet("MemberPromote"))
    }
}
