//! `v3electionpb.Election`: Campaign, Proclaim, Leader, Observe and Resign, etcd's
//! `concurrency.Election` run inside the member.
//!
//! An election named `n` is the set of keys `n/<lease id in hex>`, one per candidate, each bound to its
//! candidate's lease and holding the value it proposes; the key created first is the leader. Campaign
//! waits until every key created before the caller's is deleted (a Resign, or a lease running out).
//! Proclaim and Resign act only while the caller's key is the one it created (a compare on its create
//! revision), so a candidate whose lease ran out cannot act as leader any more.
//!
//! Failures reach the client with code Unknown and etcd's text, as in etcd.

use std::pin::Pin;

use futures::Stream;
use proto::etcdserverpb as pb;
use proto::etcdserverpb::range_request::SortOrder;
use proto::etcdserverpb::request_op::Request as Op;
use proto::mvccpb::event::EventType;
use proto::mvccpb::KeyValue;
use proto::v3electionpb as epb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::local_client::{
    as_client_error, created_at, first_by_create, first_kv, lease_key, op, prefix_end, Cleanup, LocalClient,
};
use crate::consensus::Consensus;
use crate::error::Error;
use crate::watch::WatchRange;

/// Leader changes an Observe stream holds for a slow client before it waits for it.
const OBSERVE_QUEUE: usize = 16;

pub struct ElectionService<C> {
    client: LocalClient<C>,
}

impl<C: Consensus> ElectionService<C> {
    pub fn new(client: LocalClient<C>) -> Self {
        Self { client }
    }

    async fn campaign(
        &self,
        metadata: &MetadataMap,
        req: epb::CampaignRequest,
    ) -> Result<epb::CampaignResponse, Status> {
        let client = &self.client;
        let lease = client.session_lease(metadata, req.lease).await?;
        let prefix = [req.name.as_slice(), b"/"].concat();
        let key = lease_key(&prefix, lease);
        let put = op(Op::RequestPut(pb::PutRequest {
            key: key.clone(),
            value: req.value.clone(),
            lease,
            ..Default::default()
        }));
        let get = op(Op::RequestRange(pb::RangeRequest { key: key.clone(), ..Default::default() }));
        let txn = pb::TxnRequest { compare: vec![created_at(&key, 0)], success: vec![put], failure: vec![get] };
        let resp = client.txn(metadata, txn).await?;
        let mut leader =
            epb::LeaderKey { name: req.name, key, rev: resp.header.as_ref().map_or(0, |h| h.revision), lease };
        if !resp.succeeded {
            // This lease campaigned before: keep its place, with the new value.
            let kv = first_kv(&resp, 0)?;
            leader.rev = kv.create_revision;
            if kv.value != req.value {
                if let Err(err) = self.proclaim_as(metadata, &leader, req.value).await {
                    let _ = resign(client, metadata, &leader).await;
                    return Err(err);
                }
            }
        }

        // A client that gives up while waiting leaves the election, as etcd's Election does; other
        // failures leave the key to its lease.
        let mut leave = {
            let (client, metadata, leader) = (client.clone(), metadata.clone(), leader.clone());
            Cleanup::new(async move {
                if let Err(err) = resign(&client, &metadata, &leader).await {
                    tracing::warn!(%err, "could not take a cancelled candidate out of an election");
                }
            })
        };
        let waited = client.wait_deletes(metadata, &prefix, leader.rev - 1).await;
        leave.disarm();
        waited?;
        Ok(epb::CampaignResponse { header: resp.header, leader: Some(leader) })
    }

    async fn proclaim_as(
        &self,
        metadata: &MetadataMap,
        leader: &epb::LeaderKey,
        value: Vec<u8>,
    ) -> Result<Option<pb::ResponseHeader>, Status> {
        let put = op(Op::RequestPut(pb::PutRequest {
            key: leader.key.clone(),
            value,
            lease: leader.lease,
            ..Default::default()
        }));
        let txn =
            pb::TxnRequest { compare: vec![created_at(&leader.key, leader.rev)], success: vec![put], failure: vec![] };
        let resp = self.client.txn(metadata, txn).await?;
        if !resp.succeeded {
            return Err(Error::ElectionNotLeader.into());
        }
        Ok(resp.header)
    }

    async fn proclaim(
        &self,
        metadata: &MetadataMap,
        req: epb::ProclaimRequest,
    ) -> Result<epb::ProclaimResponse, Status> {
        let mut leader = req.leader.ok_or(Error::MissingLeaderKey)?;
        // etcd opens a session on the given lease, granting a new one when it is 0.
        leader.lease = self.client.session_lease(metadata, leader.lease).await?;
        let header = self.proclaim_as(metadata, &leader, req.value).await?;
        Ok(epb::ProclaimResponse { header })
    }

    async fn resign(&self, metadata: &MetadataMap, req: epb::ResignRequest) -> Result<epb::ResignResponse, Status> {
        let leader = req.leader.ok_or(Error::MissingLeaderKey)?;
        // etcd opens a session here too (a lease granted for nothing when the key names none).
        self.client.session_lease(metadata, leader.lease).await?;
        let header = resign(&self.client, metadata, &leader).await?;
        Ok(epb::ResignResponse { header })
    }

    async fn leader(&self, metadata: &MetadataMap, req: epb::LeaderRequest) -> Result<epb::LeaderResponse, Status> {
        let prefix = [req.name.as_slice(), b"/"].concat();
        let resp = self.client.range(metadata, first_by_create(&prefix, SortOrder::Ascend)).await?;
        let kv = resp.kvs.into_iter().next().ok_or(Error::ElectionNoLeader)?;
        Ok(epb::LeaderResponse { header: resp.header, kv: Some(kv) })
    }
}

/// Deletes the leader key if it is still the one created at `leader.rev` (etcd's `Election.Resign`).
async fn resign<C: Consensus>(
    client: &LocalClient<C>,
    metadata: &MetadataMap,
    leader: &epb::LeaderKey,
) -> Result<Option<pb::ResponseHeader>, Status> {
    let delete = op(Op::RequestDeleteRange(pb::DeleteRangeRequest { key: leader.key.clone(), ..Default::default() }));
    let txn =
        pb::TxnRequest { compare: vec![created_at(&leader.key, leader.rev)], success: vec![delete], failure: vec![] };
    Ok(client.txn(metadata, txn).await?.header)
}

/// The task behind an Observe stream (etcd's `Election.observe`): the current leader, each value it
/// proclaims, and on its deletion the next leader. It ends quietly when a read or a watch fails, as etcd's
/// does, and when the client goes away.
async fn observe<C: Consensus>(
    client: LocalClient<C>,
    metadata: MetadataMap,
    name: Vec<u8>,
    out: mpsc::Sender<Result<epb::LeaderResponse, Status>>,
) {
    let prefix = [name.as_slice(), b"/"].concat();
    let send = |header: pb::ResponseHeader, kv: KeyValue| {
        let out = out.clone();
        async move { out.send(Ok(epb::LeaderResponse { header: Some(header), kv: Some(kv) })).await.is_ok() }
    };
    loop {
        let Ok(resp) = client.range(&metadata, first_by_create(&prefix, SortOrder::Ascend)).await else {
            return;
        };
        let read_at = resp.header.as_ref().map_or(0, |h| h.revision);
        let (header, kv) = match resp.kvs.into_iter().next() {
            Some(kv) => (resp.header.unwrap_or_default(), kv),
            None => {
                // No leader yet: the first key put under the prefix after the read is.
                let mut watch = client.watch(WatchRange::new(prefix.clone(), prefix_end(&prefix)), read_at);
                let first_put = loop {
                    let events = tokio::select! {
                        events = watch.next() => events,
                        () = out.closed() => return,
                    };
                    let Ok(events) = events else { return };
                    if let Some(kv) = events.into_iter().find(|e| e.r#type() == EventType::Put).and_then(|e| e.kv) {
                        break kv;
                    }
                };
                (client.header(first_put.mod_revision), first_put)
            }
        };
        let key = kv.key.clone();
        let from = header.revision + 1;
        if !send(header, kv).await {
            return;
        }
        // Every change of the leader's value, until its key is deleted.
        let mut watch = client.watch(WatchRange::new(key, Vec::new()), from);
        'leader: loop {
            let events = tokio::select! {
                events = watch.next() => events,
                () = out.closed() => return,
            };
            let Ok(events) = events else { return };
            for event in events {
                if event.r#type() == EventType::Delete {
                    break 'leader;
                }
                if let Some(kv) = event.kv {
                    if !send(client.header(kv.mod_revision), kv).await {
                        return;
                    }
                }
            }
        }
    }
}

type ObserveStream = Pin<Box<dyn Stream<Item = Result<epb::LeaderResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<C: Consensus> epb::election_server::Election for ElectionService<C> {
    async fn campaign(
        &self,
        request: Request<epb::CampaignRequest>,
    ) -> Result<Response<epb::CampaignResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.campaign(&metadata, req).await.map(Response::new).map_err(as_client_error)
    }

    async fn proclaim(
        &self,
        request: Request<epb::ProclaimRequest>,
    ) -> Result<Response<epb::ProclaimResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.proclaim(&metadata, req).await.map(Response::new).map_err(as_client_error)
    }

    async fn leader(&self, request: Request<epb::LeaderRequest>) -> Result<Response<epb::LeaderResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.leader(&metadata, req).await.map(Response::new).map_err(as_client_error)
    }

    type ObserveStream = ObserveStream;

    async fn observe(&self, request: Request<epb::LeaderRequest>) -> Result<Response<ObserveStream>, Status> {
        let (metadata, _, req) = request.into_parts();
        let (tx, rx) = mpsc::channel(OBSERVE_QUEUE);
        tokio::spawn(observe(self.client.clone(), metadata, req.name, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn resign(&self, request: Request<epb::ResignRequest>) -> Result<Response<epb::ResignResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        self.resign(&metadata, req).await.map(Response::new).map_err(as_client_error)
    }
}
