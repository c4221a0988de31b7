//! `v3lockpb.Lock`: Lock and Unlock, etcd's `concurrency.Mutex` run inside the member.
//!
//! A lock named `n` is the set of keys `n/<lease id in hex>`, one per waiter, each bound to its waiter's
//! lease; the key created first holds the lock. Lock puts the caller's key (or finds it, when the same
//! lease asks again) and waits until every key created before it is deleted, by an Unlock or with its
//! lease. A holder loses the lock with its lease, so writes made under a lock should be fenced: compared
//! on the lock key's create revision, which no later holder shares.
//!
//! Like every recipe error in etcd, failures reach the client with code Unknown and etcd's text (etcd's
//! in-process client turns the KV server's statuses into plain errors).

use proto::etcdserverpb as pb;
use proto::etcdserverpb::range_request::SortOrder;
use proto::etcdserverpb::request_op::Request as Op;
use proto::v3lockpb;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::local_client::{
    as_client_error, created_at, first_by_create, first_kv, lease_key, op, Cleanup, LocalClient,
};
use crate::consensus::Consensus;
use crate::error::Error;

pub struct LockService<C> {
    client: LocalClient<C>,
}

impl<C: Consensus> LockService<C> {
    pub fn new(client: LocalClient<C>) -> Self {
        Self { client }
    }

    async fn lock(&self, metadata: &MetadataMap, req: v3lockpb::LockRequest) -> Result<v3lockpb::LockResponse, Status> {
        let client = &self.client;
        let lease = client.session_lease(metadata, req.lease).await?;
        let mut prefix = req.name;
        prefix.push(b'/');
        let key = lease_key(&prefix, lease);
        // One round trip: join the waiters (or find our key, when this lease asked before) and read the
        // holder.
        let owner = || op(Op::RequestRange(first_by_create(&prefix, SortOrder::Ascend)));
        let get = op(Op::RequestRange(pb::RangeRequest { key: key.clone(), ..Default::default() }));
        let put = op(Op::RequestPut(pb::PutRequest { key: key.clone(), lease, ..Default::default() }));
        let txn = pb::TxnRequest {
            compare: vec![created_at(&key, 0)],
            success: vec![put, owner()],
            failure: vec![get, owner()],
        };
        let resp = client.txn(metadata, txn).await?;
        let header_revision = resp.header.as_ref().map_or(0, |h| h.revision);
        let my_revision = if resp.succeeded { header_revision } else { first_kv(&resp, 0)?.create_revision };
        if first_kv(&resp, 1).map_or(true, |holder| holder.create_revision == my_revision) {
            return Ok(v3lockpb::LockResponse { header: resp.header, key });
        }

        // Our turn comes when every earlier waiter is gone. Leaving early (an error, or the client giving
        // up) takes our key out of the queue, as etcd's Mutex does.
        let mut release = {
            let (client, metadata, key) = (client.clone(), metadata.clone(), key.clone());
            Cleanup::new(async move {
                if let Err(err) = client.delete(&metadata, key).await {
                    tracing::warn!(%err, "could not take a waiter out of a lock's queue");
                }
            })
        };
        client.wait_deletes(metadata, &prefix, my_revision - 1).await?;
        // etcd 3.5: our own key may have gone with our lease while we waited; then the lock is not ours.
        let own = client.range(metadata, pb::RangeRequest { key: key.clone(), ..Default::default() }).await?;
        release.disarm();
        if own.kvs.is_empty() {
            return Err(Error::SessionExpired.into());
        }
        Ok(v3lockpb::LockResponse { header: own.header, key })
    }

    async fn unlock(
        &self,
        metadata: &MetadataMap,
        req: v3lockpb::UnlockRequest,
    ) -> Result<v3lockpb::UnlockResponse, Status> {
        let resp = self.client.delete(metadata, req.key).await?;
        Ok(v3lockpb::UnlockResponse { header: resp.header })
    }
}

#[tonic::async_trait]
impl<C: Consensus> v3lockpb::lock_server::Lock for LockService<C> {
    async fn lock(&self, request: Request<v3lockpb::LockRequest>) -> Result<Response<v3lockpb::LockResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.lock(&metadata, req).await.map(Response::new).map_err(as_client_error)
    }

    async fn unlock(
        &self,
        request: Request<v3lockpb::UnlockRequest>,
    ) -> Result<Response<v3lockpb::UnlockResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.unlock(&metadata, req).await.map(Response::new).map_err(as_client_error)
    }
}
