//! `etcdserverpb.Cluster`: membership, through consensus (the leader changes it for every member).

use std::sync::Arc;

use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status};

use crate::consensus::Consensus;
use crate::store::SharedStore;

pub struct ClusterService<C> {
    consensus: Arc<C>,
    store: SharedStore,
}

impl<C: Consensus> ClusterService<C> {
    pub fn new(consensus: Arc<C>, store: SharedStore) -> Self {
        Self { consensus, store }
    }

    /// etcd's Cluster service headers carry no revision.
    fn header(&self) -> Option<pb::ResponseHeader> {
        Some(self.consensus.header())
    }

    /// Membership changes need the root role while auth is enabled (etcd's
    /// `checkMembershipOperationPermission`; its errors mapped as every Cluster error is).
    async fn check_admin<T>(&self, request: &Request<T>) -> Result<(), Status> {
        Ok(crate::service::auth_request::require_admin(&*self.consensus, &self.store, request.metadata()).await?)
    }
}

#[tonic::async_trait]
impl<C: Consensus> pb::cluster_server::Cluster for ClusterService<C> {
    async fn member_add(
        &self,
        request: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        self.check_admin(&request).await?;
        let req = request.into_inner();
        let (member, members) = self.consensus.member_add(req.peer_ur_ls, req.is_learner).await?;
        Ok(Response::new(pb::MemberAddResponse { header: self.header(), member: Some(member), members }))
    }

    async fn member_remove(
        &self,
        request: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        self.check_admin(&request).await?;
        let members = self.consensus.member_remove(request.into_inner().id).await?;
        Ok(Response::new(pb::MemberRemoveResponse { header: self.header(), members }))
    }

    async fn member_update(
        &self,
        request: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        self.check_admin(&request).await?;
        let req = request.into_inner();
        let members = self.consensus.member_update(req.id, req.peer_ur_ls).await?;
        Ok(Response::new(pb::MemberUpdateResponse { header: self.header(), members }))
    }

    /// etcd 3.6.14: a linearizable list waits for a read barrier first; then, while auth is enabled, the
    /// request must name a user.
    async fn member_list(
        &self,
        request: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        if request.get_ref().linearizable {
            self.consensus.read_barrier().await?;
        }
        let token = crate::service::auth_request::token_of(request.metadata());
        crate::service::auth_request::require_user(&*self.consensus, &self.store, token.as_deref()).await?;
        Ok(Response::new(pb::MemberListResponse { header: self.header(), members: self.consensus.members() }))
    }

    async fn member_promote(
        &self,
        request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        self.check_admin(&request).await?;
        let members = self.consensus.member_promote(request.into_inner().id).await?;
        Ok(Response::new(pb::MemberPromoteResponse { header: self.header(), members }))
    }
}
