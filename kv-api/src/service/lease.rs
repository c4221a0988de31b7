//! `etcdserverpb.Lease`: grant and revoke through consensus; keep-alive and time-to-live answered by the
//! leader (followers forward), as etcd does.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status, Streaming};

use crate::command::{Command, CommandResponse};
use crate::consensus::Consensus;
use crate::error::{Error, Result};
use crate::service::{current_header, fill_header, ApiConfig};
use crate::store::SharedStore;

use crate::lease::MAX_LEASE_TTL;

pub struct LeaseService<C> {
    consensus: Arc<C>,
    store: SharedStore,
    config: ApiConfig,
}

impl<C: Consensus> LeaseService<C> {
    pub fn new(consensus: Arc<C>, store: SharedStore, config: ApiConfig) -> Self {
        Self { consensus, store, config }
    }

    fn header(&self) -> Option<pb::ResponseHeader> {
        current_header(&*self.consensus, &self.store)
    }

    async fn propose(&self, cmd: Command) -> Result<CommandResponse> {
        if self.consensus.is_learner() {
            return Err(Error::NotSupportedForLearner);
        }
        self.consensus.propose(cmd).await
    }

    async fn grant(&self, mut req: pb::LeaseGrantRequest) -> Result<pb::LeaseGrantResponse> {
        if req.ttl > MAX_LEASE_TTL {
            return Err(Error::LeaseTtlTooLarge);
        }
        // The proposer settles what apply must not decide: a free id, and etcd's minimum TTL.
        req.ttl = req.ttl.max(self.config.min_lease_ttl);
        if req.id == 0 {
            req.id = loop {
                let id = rand::random::<i64>() & i64::MAX;
                if id != 0 && self.store.read().lease(id).is_none() {
                    break id;
                }
            };
        }
        let cmd = Command::LeaseGrant(req);
        crate::service::quota::check(&*self.consensus, &self.store, self.config.quota_backend_bytes, &cmd).await?;
        match self.propose(cmd).await? {
            CommandResponse::LeaseGrant(mut resp) => {
                fill_header(&*self.consensus, &self.store, &mut resp.header);
                Ok(resp)
            }
            other => Err(Error::Internal(format!("apply answered a lease grant with {other:?}"))),
        }
    }

    async fn revoke(&self, token: Option<&str>, req: pb::LeaseRevokeRequest) -> Result<pb::LeaseRevokeResponse> {
        // Revoking deletes the lease's keys: apply checks the caller may write every one of them.
        let caller = crate::service::auth_request::caller(&*self.consensus, &self.store, token).await?;
        match self.propose(crate::service::auth_request::as_caller(caller, Command::LeaseRevoke(req))).await? {
            CommandResponse::LeaseRevoke(mut resp) => {
                fill_header(&*self.consensus, &self.store, &mut resp.header);
                Ok(resp)
            }
            other => Err(Error::Internal(format!("apply answered a lease revoke with {other:?}"))),
        }
    }

    async fn time_to_live(
        &self,
        token: Option<&str>,
        req: pb::LeaseTimeToLiveRequest,
    ) -> Result<pb::LeaseTimeToLiveResponse> {
        let remaining = self.consensus.lease_time_to_live(req.id).await?;
        // The lease's keys as of now: this member must have applied what the leader has.
        self.consensus.read_barrier().await?;
        let caller = crate::service::auth_request::caller(&*self.consensus, &self.store, token).await?;
        let lease = self.store.read().lease(req.id).cloned();
        // As etcd 3.6: with auth on, the caller must be able to read every key on the lease when it asks for
        // the keys.
        if let (true, Some(caller), Some(lease)) = (req.keys, &caller, &lease) {
            let store = self.store.read();
            for key in &lease.keys {
                store.auth().check_read(caller, key, &[])?;
            }
        }
        let (ttl, granted_ttl, keys) = match (remaining, lease) {
            (Some(remaining), Some(lease)) => {
                let keys = if req.keys { lease.keys.into_iter().collect() } else { Vec::new() };
                (remaining, lease.ttl, keys)
            }
            // An unknown lease answers TTL -1, not an error (etcd).
            _ => (-1, 0, Vec::new()),
        };
        Ok(pb::LeaseTimeToLiveResponse { header: self.header(), id: req.id, ttl, granted_ttl, keys })
    }

    async fn leases(&self) -> Result<pb::LeaseLeasesResponse> {
        let leases = self.consensus.leases_by_expiry().await?.into_iter().map(|id| pb::LeaseStatus { id }).collect();
        Ok(pb::LeaseLeasesResponse { header: self.header(), leases })
    }
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<C: Consensus> pb::lease_server::Lease for LeaseService<C> {
    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        // A grant needs no permission, but a token it carries must be valid (etcd checks every token of
        // a request that goes through the log).
        let token = crate::service::auth_request::token_of(request.metadata());
        if token.is_some() {
            crate::service::auth_request::caller(&*self.consensus, &self.store, token.as_deref()).await?;
        }
        Ok(Response::new(self.grant(request.into_inner()).await?))
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let token = crate::service::auth_request::token_of(request.metadata());
        Ok(Response::new(self.revoke(token.as_deref(), request.into_inner()).await?))
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        if self.consensus.is_learner() {
            return Err(Error::NotSupportedForLearner.into());
        }
        let consensus = self.consensus.clone();
        let store = self.store.clone();
        let requests = request.into_inner();
        // One answer per request, in order; an unknown or expired lease answers TTL 0 (etcd).
        let responses = requests.then(move |req| {
            let consensus = consensus.clone();
            let store = store.clone();
            async move {
                let req = req?;
                let ttl = consensus.lease_keep_alive(req.id).await?;
                let header = current_header(&*consensus, &store);
                Ok(pb::LeaseKeepAliveResponse { header, id: req.id, ttl })
            }
        });
        Ok(Response::new(Box::pin(responses)))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let token = crate::service::auth_request::token_of(request.metadata());
        Ok(Response::new(self.time_to_live(token.as_deref(), request.into_inner()).await?))
    }

    async fn lease_leases(
        &self,
        _request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        Ok(Response::new(self.leases().await?))
    }
}
