//! `etcdserverpb.Watch`: each call opens a stream served by its own task (see `watch_stream`).

use std::sync::Arc;
use std::time::Duration;

use proto::etcdserverpb as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::watch_stream::{EndFuture, WatchStream};
use crate::consensus::Consensus;
use crate::error::Error;
use crate::store::SharedStore;
use crate::watch::{WatchConfig, WatchHub};

/// etcd's gRPC metadata asking that the stream fail when the member has no leader.
const REQUIRE_LEADER_KEY: &str = "hasleader";
/// etcd cancels `hasleader` streams after this many leader checks in a row find no leader.
const MAX_NO_LEADER_CHECKS: u32 = 3;
/// Responses queued for a client before its stream waits (and its watchers fall back to the store).
const OUTBOUND_QUEUE: usize = 8;

pub struct WatchService<C> {
    consensus: Arc<C>,
    store: SharedStore,
    hub: Arc<WatchHub>,
    config: WatchConfig,
}

impl<C: Consensus> WatchService<C> {
    pub fn new(consensus: Arc<C>, store: SharedStore, hub: Arc<WatchHub>, config: WatchConfig) -> Self {
        Self { consensus, store, hub, config }
    }

    /// What ends a stream from the server's side: shutdown, and for `hasleader` streams a lost leader.
    fn end_future(&self, require_leader: bool) -> EndFuture {
        let hub = self.hub.clone();
        let consensus = self.consensus.clone();
        let interval = self.config.leader_check_interval;
        Box::pin(async move {
            let leader_lost = async {
                if require_leader {
                    leader_lost(&*consensus, interval).await
                } else {
                    std::future::pending().await
                }
            };
            tokio::select! {
                () = hub.stopped() => Error::Stopped.into(),
                () = leader_lost => Error::NoLeader.into(),
            }
        })
    }
}

/// Resolves once the member has been without a leader for [`MAX_NO_LEADER_CHECKS`] checks in a row.
async fn leader_lost<C: Consensus>(consensus: &C, interval: Duration) {
    let mut misses = 0;
    loop {
        tokio::time::sleep(interval).await;
        if consensus.has_leader() {
            misses = 0;
        } else {
            misses += 1;
            if misses >= MAX_NO_LEADER_CHECKS {
                return;
            }
        }
    }
}

#[tonic::async_trait]
impl<C: Consensus> pb::watch_server::Watch for WatchService<C> {
    type WatchStream = ReceiverStream<Result<pb::WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        // As etcd's stream interceptor: learners serve no streams, and `hasleader` needs a leader now.
        if self.consensus.is_learner() {
            return Err(Error::NotSupportedForLearner.into());
        }
        let require_leader = request.metadata().get(REQUIRE_LEADER_KEY).is_some_and(|v| v == "true");
        if require_leader && !self.consensus.has_leader() {
            return Err(Error::NoLeader.into());
        }
        let token = crate::service::auth_request::token_of(request.metadata());
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        let stream = WatchStream::new(
            self.consensus.clone(),
            self.store.clone(),
            self.hub.clone(),
            self.config.clone(),
            tx,
            self.end_future(require_leader),
            token,
        );
        tokio::spawn(stream.run(request.into_inner()));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
