//! `etcdserverpb.Maintenance`: Status, alarms, defragmentation, hashes, Snapshot and leader transfer.

use std::sync::Arc;

use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status};

use super::snapshot::{self, SnapshotStream};
use super::{current_header, fill_header, ApiConfig};
use crate::command::{Command, CommandResponse};
use crate::consensus::Consensus;
use crate::error::{Error, Result};
use crate::store::SharedStore;
use crate::{alarm, downgrade, hash};

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

    /// GET is answered from this member's table once it has applied everything committed (etcd sends it
    /// through Raft); ACTIVATE and DEACTIVATE go through the log. etcd 3.4 answers without a header.
    async fn alarm(&self, req: pb::AlarmRequest) -> Result<pb::AlarmResponse> {
        use pb::alarm_request::AlarmAction;
        match req.action() {
            AlarmAction::Get => {
                self.consensus.read_barrier().await?;
                Ok(pb::AlarmResponse { header: None, alarms: self.store.read().alarms().get(req.alarm) })
            }
            AlarmAction::Activate | AlarmAction::Deactivate => match self.consensus.propose(Command::Alarm(req)).await?
            {
                CommandResponse::Alarm(resp) => Ok(resp),
                other => Err(Error::Internal(format!("apply answered an alarm with {other:?}"))),
            },
        }
    }

    /// etcd 3.6's maintenance auth: while auth is enabled, Defragment, Snapshot, Hash, HashKV, MoveLeader,
    /// Downgrade and alarm changes need root, refused with the mapped errors (`etcdserver: ...`; etcd 3.4
    /// and 3.5 answered code Unknown and their auth package's texts, and let anyone move the leader or
    /// change alarms).
    async fn check_admin(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        Ok(crate::service::auth_request::require_admin(&*self.consensus, &self.store, metadata).await?)
    }

    /// etcd 3.6.14's `requireAuthInfo` (Status, the alarm list): a user, while auth is enabled.
    async fn check_user(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        let token = crate::service::auth_request::token_of(metadata);
        crate::service::auth_request::require_user(&*self.consensus, &self.store, token.as_deref()).await?;
        Ok(())
    }

    /// Runs `f` (a hash: it scans the whole backend) on a blocking thread with the shared store.
    async fn on_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SharedStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Error::Internal(format!("store task failed: {e}")))?
    }
}

#[tonic::async_trait]
impl<C: Consensus> pb::maintenance_server::Maintenance for MaintenanceService<C> {
    async fn alarm(&self, request: Request<pb::AlarmRequest>) -> Result<Response<pb::AlarmResponse>, Status> {
        // The raw action: prost reads an unknown one as GET, which etcd treats as a change (root only).
        if request.get_ref().action == pb::alarm_request::AlarmAction::Get as i32 {
            self.check_user(request.metadata()).await?;
        } else {
            self.check_admin(request.metadata()).await?;
        }
        Ok(Response::new(self.alarm(request.into_inner()).await?))
    }

    async fn status(&self, request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        self.check_user(request.metadata()).await?;
        let raft = self.consensus.raft_status();
        let (db_size, db_size_in_use, alarms) = {
            let store = self.store.read();
            let backend = store.backend();
            (backend.size_bytes() as i64, backend.size_in_use_bytes() as i64, store.alarms().get(0))
        };
        let mut errors = Vec::new();
        if raft.leader == 0 {
            errors.push(Error::NoLeader.to_string());
        }
        // As etcd, the active alarms are reported as errors too.
        errors.extend(alarms.iter().map(alarm::describe));
        let target = self.store.read().downgrade_target();
        Ok(Response::new(pb::StatusResponse {
            header: self.header(),
            version: self.config.version.clone(),
            db_size,
            leader: raft.leader,
            raft_index: raft.raft_index,
            raft_term: raft.raft_term,
            raft_applied_index: raft.raft_applied_index,
            errors,
            db_size_in_use,
            is_learner: raft.is_learner,
            storage_version: downgrade::version_string(downgrade::storage_version(target)),
            db_size_quota: self.config.quota_backend_bytes.map_or(0, |quota| quota as i64),
            downgrade_info: Some(pb::DowngradeInfo {
                enabled: target.is_some(),
                target_version: target.map(downgrade::version_string).unwrap_or_default(),
            }),
        }))
    }

    /// Rewrites this member's backend to give back the space compaction freed. The backend does it
    /// while reads and writes go on (holding writes back only for the switch), so no store lock is
    /// taken here. etcd answers without a header.
    async fn defragment(
        &self,
        request: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        self.check_admin(request.metadata()).await?;
        let backend = self.store.read().backend().clone();
        let (before, after) = tokio::task::spawn_blocking(move || -> Result<(u64, u64)> {
            let before = backend.size_bytes();
            backend.defragment()?;
            Ok((before, backend.size_bytes()))
        })
        .await
        .map_err(|e| Error::Internal(format!("defragmentation task failed: {e}")))??;
        tracing::info!(before, after, "defragmented the backend");
        Ok(Response::new(pb::DefragmentResponse { header: None }))
    }

    async fn hash(&self, request: Request<pb::HashRequest>) -> Result<Response<pb::HashResponse>, Status> {
        self.check_admin(request.metadata()).await?;
        let (hash, revision) = self.on_store(hash::hash_shared).await?;
        let mut header = Some(pb::ResponseHeader { revision, ..Default::default() });
        fill_header(&*self.consensus, &self.store, &mut header);
        Ok(Response::new(pb::HashResponse { header, hash }))
    }

    async fn hash_kv(&self, request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        self.check_admin(request.metadata()).await?;
        let revision = request.into_inner().revision;
        let kv = self.on_store(move |store| hash::hash_kv_shared(store, revision)).await?;
        let mut header = Some(pb::ResponseHeader { revision: kv.current_revision, ..Default::default() });
        fill_header(&*self.consensus, &self.store, &mut header);
        Ok(Response::new(pb::HashKvResponse {
            header,
            hash: kv.hash,
            compact_revision: kv.compact_revision,
            hash_revision: kv.hash_revision,
        }))
    }

    type SnapshotStream = SnapshotStream;

    /// As etcd, a copy of this member's own store, without a round through the leader.
    async fn snapshot(&self, request: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        self.check_admin(request.metadata()).await?;
        let version = downgrade::storage_version_field(self.store.read().downgrade_target()).unwrap_or_default();
        let file = self.consensus.snapshot().await?;
        Ok(Response::new(snapshot::stream(file, version)))
    }

    async fn move_leader(
        &self,
        request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        self.check_admin(request.metadata()).await?;
        self.consensus.move_leader(request.into_inner().target_id).await?;
        // etcd 3.4 answers MoveLeader without a header.
        Ok(Response::new(pb::MoveLeaderResponse { header: None }))
    }

    /// etcd 3.6's downgrade: VALIDATE and ENABLE check the target against the cluster version (after a
    /// read barrier, so the recorded downgrade is current); ENABLE and CANCEL go through the log. Each
    /// answers the cluster version before the change, as etcd (a CANCEL with nothing to cancel succeeds).
    async fn downgrade(
        &self,
        request: Request<pb::DowngradeRequest>,
    ) -> Result<Response<pb::DowngradeResponse>, Status> {
        use pb::downgrade_request::DowngradeAction;
        self.check_admin(request.metadata()).await?;
        let req = request.into_inner();
        if DowngradeAction::try_from(req.action).is_err() {
            // etcd's `ErrUnknownMethod`, which its error table does not map (prost reads it as VALIDATE).
            return Err(Status::unknown("etcdserver: unknown method"));
        }
        self.consensus.read_barrier().await?;
        let enabled = self.store.read().downgrade_target();
        // The version the members run decides the allowed target; the cluster version answered is the
        // enabled downgrade's target once there is one.
        let running = downgrade::minor_of(&self.config.version);
        // etcd answers the cluster version as major.minor (its `version.Cluster`).
        let (major, minor) = enabled.unwrap_or(running);
        let version = format!("{major}.{minor}");
        match req.action() {
            DowngradeAction::Validate | DowngradeAction::Enable => {
                let target = downgrade::parse_target(&req.version)?;
                downgrade::validate(running, target, enabled)?;
                if req.action() == DowngradeAction::Enable {
                    self.consensus.propose(Command::Downgrade(req)).await?;
                }
            }
            DowngradeAction::Cancel => match self.consensus.propose(Command::Downgrade(req)).await {
                Ok(_) | Err(Error::NoInflightDowngrade) => {}
                Err(err) => return Err(err.into()),
            },
        }
        Ok(Response::new(pb::DowngradeResponse { header: self.header(), version }))
    }
}
