//! `etcdserverpb.KV`: Range, Put, DeleteRange, Txn, Compact.

use std::sync::Arc;

use prost::Message;
use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status};

use super::{fill_header, ApiConfig};
use crate::auth::Caller;
use crate::command::{Command, CommandResponse};
use crate::consensus::Consensus;
use crate::error::{Error, Result};
use crate::store::{EncodedRange, MvccStore, RangeRead, SharedStore};
use crate::validate;

/// A Range reading at least this many values from the backend does it on a blocking thread.
const BLOCKING_FETCH_KEYS: usize = 4096;

pub struct KvService<C> {
    consensus: Arc<C>,
    store: SharedStore,
    config: ApiConfig,
}

impl<C: Consensus> KvService<C> {
    pub fn new(consensus: Arc<C>, store: SharedStore, config: ApiConfig) -> Self {
        Self { consensus, store, config }
    }

    /// A learner serves serializable reads only.
    fn refuse_learner(&self) -> Result<()> {
        if self.consensus.is_learner() {
            return Err(Error::NotSupportedForLearner);
        }
        Ok(())
    }

    /// Proposes a client's write, with its caller while auth is enabled. etcd's order: the space quota
    /// (its gRPC layer), the token, then the size of what would enter the log.
    async fn propose(&self, token: Option<&str>, cmd: Command, encoded_len: usize) -> Result<CommandResponse> {
        self.refuse_learner()?;
        super::quota::check(&*self.consensus, &self.store, self.config.quota_backend_bytes, &cmd).await?;
        let caller = self.caller(token).await?;
        validate::check_size(encoded_len, &self.config.limits)?;
        self.consensus.propose(crate::service::auth_request::as_caller(caller, cmd)).await
    }

    async fn caller(&self, token: Option<&str>) -> Result<Option<Caller>> {
        crate::service::auth_request::caller(&*self.consensus, &self.store, token).await
    }

    async fn range(&self, token: Option<&str>, req: pb::RangeRequest) -> Result<pb::RangeResponse> {
        let mut resp = self.read_range(token, &req, MvccStore::range).await?;
        fill_header(&*self.consensus, &self.store, &mut resp.header);
        Ok(resp)
    }

    /// A Range answered in wire form ([`MvccStore::range_encoded`]), with its header.
    pub async fn range_encoded(
        &self,
        token: Option<&str>,
        req: &pb::RangeRequest,
    ) -> Result<(pb::ResponseHeader, EncodedRange)> {
        let answer = match self.read_range(token, req, MvccStore::range_encoded).await? {
            RangeRead::Done(answer) => answer,
            // Thousands of values: off the async runtime's threads.
            RangeRead::Fetch(fetch) if fetch.values() >= BLOCKING_FETCH_KEYS => {
                tokio::task::spawn_blocking(move || fetch.run())
                    .await
                    .map_err(|e| Error::Internal(format!("range read: {e}")))??
            }
            RangeRead::Fetch(fetch) => fetch.run()?,
        };
        let mut header = Some(pb::ResponseHeader { revision: answer.revision, ..Default::default() });
        fill_header(&*self.consensus, &self.store, &mut header);
        Ok((header.unwrap_or_default(), answer))
    }

    /// A Range's checks (request, learner, read barrier, permission), then `read` under the store's lock.
    async fn read_range<T>(
        &self,
        token: Option<&str>,
        req: &pb::RangeRequest,
        read: impl FnOnce(&MvccStore, &pb::RangeRequest) -> Result<T>,
    ) -> Result<T> {
        validate::check_range(req)?;
        if !req.serializable {
            self.refuse_learner()?;
            self.consensus.read_barrier().await?;
        }
        let caller = self.caller(token).await?;
        let store = self.store.read();
        if let Some(caller) = &caller {
            store.auth().check_read(caller, &req.key, &req.range_end)?;
        }
        read(&store, req)
    }

    async fn put(&self, token: Option<&str>, req: pb::PutRequest) -> Result<pb::PutResponse> {
        validate::check_put(&req)?;
        let len = req.encoded_len();
        match self.propose(token, Command::Put(req), len).await? {
            CommandResponse::Put(mut resp) => {
                fill_header(&*self.consensus, &self.store, &mut resp.header);
                Ok(resp)
            }
            other => Err(mismatch(&other)),
        }
    }

    async fn delete_range(&self, token: Option<&str>, req: pb::DeleteRangeRequest) -> Result<pb::DeleteRangeResponse> {
        validate::check_delete(&req)?;
        let len = req.encoded_len();
        match self.propose(token, Command::DeleteRange(req), len).await? {
            CommandResponse::DeleteRange(mut resp) => {
                fill_header(&*self.consensus, &self.store, &mut resp.header);
                Ok(resp)
            }
            other => Err(mismatch(&other)),
        }
    }

    async fn txn(&self, token: Option<&str>, req: pb::TxnRequest) -> Result<pb::TxnResponse> {
        validate::check_txn(&req, &self.config.limits)?;
        let mut resp = if crate::command::is_read_only(&req) {
            // Reads need no log entry: a read barrier makes them linearizable.
            if !is_serializable(&req) {
                self.refuse_learner()?;
                self.consensus.read_barrier().await?;
            }
            let caller = self.caller(token).await?;
            let store = self.store.read();
            if let Some(caller) = &caller {
                store.auth().check_txn(caller, &req)?;
            }
            store.txn_read_only(&req)?
        } else {
            let len = req.encoded_len();
            match self.propose(token, Command::Txn(req), len).await? {
                CommandResponse::Txn(resp) => resp,
                other => return Err(mismatch(&other)),
            }
        };
        fill_header(&*self.consensus, &self.store, &mut resp.header);
        Ok(resp)
    }

    /// Answers once the compaction is applied (reads below it fail from then on); with `physical`, as
    /// etcd, only once this member's compactor has deleted what it freed.
    async fn compact(&self, token: Option<&str>, req: pb::CompactionRequest) -> Result<pb::CompactionResponse> {
        let len = req.encoded_len();
        let (revision, physical) = (req.revision, req.physical);
        match self.propose(token, Command::Compact(req), len).await? {
            CommandResponse::Compact(mut resp) => {
                if physical {
                    let mut finished = self.store.read().compaction_finished();
                    let stopped = |_| Error::Internal("the store's compactor stopped".into());
                    finished.wait_for(|done| *done >= revision).await.map_err(stopped)?;
                }
                fill_header(&*self.consensus, &self.store, &mut resp.header);
                Ok(resp)
            }
            other => Err(mismatch(&other)),
        }
    }
}

/// A read-only txn is served without a read barrier only when every range in it asks to be serializable,
/// as etcd does.
fn is_serializable(req: &pb::TxnRequest) -> bool {
    use pb::request_op::Request as Op;
    req.success.iter().chain(&req.failure).all(|op| match &op.request {
        Some(Op::RequestRange(r)) => r.serializable,
        Some(Op::RequestTxn(inner)) => is_serializable(inner),
        _ => true,
    })
}

fn mismatch(resp: &CommandResponse) -> Error {
    Error::Internal(format!("apply answered with the wrong kind of response: {resp:?}"))
}

#[tonic::async_trait]
impl<C: Consensus> pb::kv_server::Kv for KvService<C> {
    async fn range(&self, request: Request<pb::RangeRequest>) -> Result<Response<pb::RangeResponse>, Status> {
        Ok(Response::new(
            self.range(crate::service::auth_request::token_of(request.metadata()).as_deref(), request.into_inner())
                .await?,
        ))
    }

    async fn put(&self, request: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        Ok(Response::new(
            self.put(crate::service::auth_request::token_of(request.metadata()).as_deref(), request.into_inner())
                .await?,
        ))
    }

    async fn delete_range(
        &self,
        request: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        Ok(Response::new(
            self.delete_range(
                crate::service::auth_request::token_of(request.metadata()).as_deref(),
                request.into_inner(),
            )
            .await?,
        ))
    }

    async fn txn(&self, request: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        Ok(Response::new(
            self.txn(crate::service::auth_request::token_of(request.metadata()).as_deref(), request.into_inner())
                .await?,
        ))
    }

    /// As etcd 3.6.14, compaction needs the root role while auth is enabled (before 3.6.9 anyone could).
    async fn compact(
        &self,
        request: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        crate::service::auth_request::require_admin(&*self.consensus, &self.store, request.metadata()).await?;
        Ok(Response::new(
            self.compact(crate::service::auth_request::token_of(request.metadata()).as_deref(), request.into_inner())
                .await?,
        ))
    }
}
