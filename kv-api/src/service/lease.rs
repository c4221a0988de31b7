//! `etcdserverpb.Lease`: grant and revoke through consensus; keep-alive and time-to-live answered by the
//! leader (followers forward), as etcd does.
//!
//! With auth enabled, every lease request must name a user, and one without the root role must hold a
//! permission on the keys a lease carries: read to see them (time-to-live with keys, the lease list),
//! write to keep them alive or revoke them (etcd 3.6.14's `requireAuthInfo`, `checkLeaseTimeToLive`,
//! `checkLeaseLeases`, `checkLeaseRenew`; before 3.6.9 anyone could).

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::Caller;
use crate::command::{Command, CommandResponse};
use crate::consensus::Consensus;
use crate::error::{Error, Result};
use crate::service::{current_header, fill_header, ApiConfig};
use crate::store::SharedStore;

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
        let caller = crate::service::auth_request::require_user(&*self.consensus, &self.store, token).await?;
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
        let caller = crate::service::auth_request::require_user(&*self.consensus, &self.store, token).await?;
        let remaining = self.consensus.lease_time_to_live(req.id).await?;
        // The lease's keys as of now: this member must have applied what the leader has.
        self.consensus.read_barrier().await?;
        // Asking for the keys needs read permission on every one of them.
        if let (true, Some(caller)) = (req.keys, &caller) {
            check_lease_keys(&self.store, caller, &[req.id], Access::Read)?;
        }
        let lease = self.store.read().lease(req.id).cloned();
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

    async fn leases(&self, token: Option<&str>) -> Result<pb::LeaseLeasesResponse> {
        let caller = crate::service::auth_request::require_user(&*self.consensus, &self.store, token).await?;
        let ids = self.consensus.leases_by_expiry().await?;
        if let Some(caller) = &caller {
            check_lease_keys(&self.store, caller, &ids, Access::Read)?;
        }
        let leases = ids.into_iter().map(|id| pb::LeaseStatus { id }).collect();
        Ok(pb::LeaseLeasesResponse { header: self.header(), leases })
    }
}

/// What a caller must hold on a lease's keys.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// Whether `caller` (auth enabled) may see or touch the keys on `leases` as this member knows them: the root
/// role may always; anyone else needs `access` to every key.
fn check_lease_keys(store: &SharedStore, caller: &Caller, leases: &[i64], access: Access) -> Result<()> {
    let store = store.read();
    let auth = store.auth();
    if auth.check_admin(caller).is_ok() {
        return Ok(());
    }
    for key in leases.iter().filter_map(|id| store.lease(*id)).flat_map(|lease| &lease.keys) {
        match access {
            Access::Read => auth.check_read(caller, key, &[])?,
            Access::Write => auth.check_write(caller, key, &[])?,
        }
    }
    Ok(())
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<C: Consensus> pb::lease_server::Lease for LeaseService<C> {
    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        // A grant needs no permission, but a user (etcd 3.6.14; 3.5 checked only that a token was valid).
        let token = crate::service::auth_request::token_of(request.metadata());
        crate::service::auth_request::require_user(&*self.consensus, &self.store, token.as_deref()).await?;
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
        let token = crate::service::auth_request::token_of(request.metadata());
        let requests = request.into_inner();
        // One answer per request, in order; an unknown or expired lease answers TTL 0 (etcd).
        let responses = requests.then(move |req| {
            let consensus = consensus.clone();
            let store = store.clone();
            let token = token.clone();
            async move {
                let req = req?;
                // Each renewal is checked against the auth state of its moment, as etcd's: an error ends
                // the stream.
                let caller = crate::service::auth_request::require_user(&*consensus, &store, token.as_deref()).await?;
                if let Some(caller) = &caller {
                    check_lease_keys(&store, caller, &[req.id], Access::Write)?;
                }
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
        request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        let token = crate::service::auth_request::token_of(request.metadata());
        Ok(Response::new(self.leases(token.as_deref()).await?))
    }
}
