//! Starting a member: storage, Raft, bootstrap, and the client-facing gRPC services.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kv_api::service::cluster::ClusterService;
use kv_api::service::kv::KvService;
use kv_api::service::limit::MessageLimit;
use kv_api::service::maintenance::MaintenanceService;
use kv_api::service::ApiConfig;
use kv_api::validate::Limits;
use proto::etcdserverpb as pb;
use proto::raftpb;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;
use tracing::info;

use crate::config::{socket_addr, Config};
use crate::consensus::{request_timeout, RaftConsensus};
use crate::identity::Identity;
use crate::member_id::{cluster_id, member_id};
use crate::network::PeerNetwork;
use crate::peer_service::PeerService;
use crate::storage;
use crate::typ::{MemberNode, NodeId, Raft};

/// gRPC accepts messages this much beyond `--max-request-bytes`, as etcd does, so that a request slightly
/// over the limit reaches our own check and gets etcd's "request is too large"; beyond that the
/// [`MessageLimit`] wrapper refuses it as grpc-go does (tonic's own limit is lifted: the layer replaces it).
const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// Runs a member until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let initial_cluster = config.initial_cluster()?;
    let client_addrs = config
        .listen_client_urls
        .iter()
        .map(|u| socket_addr(u))
        .collect::<Result<Vec<_>, _>>()?;
    let peer_addrs = config
        .listen_peer_urls
        .iter()
        .map(|u| socket_addr(u))
        .collect::<Result<Vec<_>, _>>()?;

    let member_dir = config.data_dir().join("member");
    std::fs::create_dir_all(&member_dir).with_context(|| format!("creating {}", member_dir.display()))?;
    let (log_store, state_machine, store) = storage::open(&member_dir.join("db")).context("opening storage")?;

    let bootstrap = bootstrap_members(&config, &initial_cluster);
    let identity = match Identity::load(&member_dir)? {
        Some(identity) => identity,
        None => {
            let own = member_id(&config.initial_advertise_peer_urls, &config.initial_cluster_token);
            let identity = Identity {
                member_id: own,
                cluster_id: cluster_id(bootstrap.keys().copied()),
            };
            identity.save(&member_dir)?;
            identity
        }
    };
    info!(
        member_id = format!("{:x}", identity.member_id),
        cluster_id = format!("{:x}", identity.cluster_id),
        "starting member"
    );

    let election = Duration::from_millis(config.election_timeout);
    let raft_config = openraft::Config {
        cluster_name: config.initial_cluster_token.clone(),
        heartbeat_interval: config.heartbeat_interval,
        election_timeout_min: config.election_timeout,
        election_timeout_max: config.election_timeout * 2,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_count),
        ..Default::default()
    }
    .validate()
    .context("invalid Raft timing (heartbeat interval must be below the election timeout)")?;
    let network = PeerNetwork {
        local_ip: peer_addrs.first().map(|a| a.ip()),
    };
    let raft = Raft::new(
        identity.member_id,
        Arc::new(raft_config),
        network,
        log_store,
        state_machine,
    )
    .await
    .context("starting Raft")?;

    if !raft.is_initialized().await? && config.initial_cluster_state == "new" {
        info!(members = bootstrap.len(), "bootstrapping a new cluster");
        raft.initialize(bootstrap).await.context("bootstrapping the cluster")?;
    }

    let consensus = Arc::new(RaftConsensus::new(
        raft.clone(),
        identity.member_id,
        identity.cluster_id,
        request_timeout(election),
    ));
    let api = ApiConfig {
        limits: Limits {
            max_txn_ops: config.max_txn_ops,
            max_request_bytes: config.max_request_bytes,
        },
        version: config.emulated_version.clone(),
    };
    let max_message = config.max_request_bytes + GRPC_OVERHEAD_BYTES;
    let kv = pb::kv_server::KvServer::new(KvService::new(consensus.clone(), store.clone(), api.clone()))
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let maintenance =
        pb::maintenance_server::MaintenanceServer::new(MaintenanceService::new(consensus.clone(), store.clone(), api))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
    let cluster = pb::cluster_server::ClusterServer::new(ClusterService::new(consensus.clone()))
        .max_decoding_message_size(usize::MAX);
    let (_health_reporter, health) = tonic_health::server::health_reporter();

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    for addr in client_addrs {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        info!(%addr, "serving client requests");
        let router = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(MessageLimit::new(kv.clone(), max_message))
            .add_service(MessageLimit::new(maintenance.clone(), max_message))
            .add_service(MessageLimit::new(cluster.clone(), max_message))
            .add_service(health.clone());
        servers.spawn(serve(router, listener, stop_rx.clone()));
    }

    let peer = raftpb::raft_peer_server::RaftPeerServer::new(PeerService::new(raft.clone()))
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    for addr in peer_addrs {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        info!(%addr, "serving peer requests");
        let router = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(peer.clone());
        servers.spawn(serve(router, listener, stop_rx.clone()));
    }

    tokio::select! {
        () = shutdown => info!("shutting down"),
        Some(result) = servers.join_next() => {
            result.context("client server task")?.context("client server")?;
        }
    }
    let _ = stop_tx.send(true);
    while servers.join_next().await.is_some() {}
    raft.shutdown().await.context("stopping Raft")?;
    Ok(())
}

/// Serves `router` on `listener` until `stop` turns true.
async fn serve(
    router: tonic::transport::server::Router,
    listener: tokio::net::TcpListener,
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    router
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stopped)
        .await
}

/// The voters a new cluster starts with, from `--initial-cluster`; this member also publishes its client
/// URLs.
fn bootstrap_members(config: &Config, initial_cluster: &BTreeMap<String, Vec<String>>) -> BTreeMap<NodeId, MemberNode> {
    initial_cluster
        .iter()
        .map(|(name, peer_urls)| {
            let client_urls = if *name == config.name {
                config.advertise_client_urls.clone()
            } else {
                Vec::new()
            };
            let node = MemberNode {
                name: name.clone(),
                peer_urls: peer_urls.clone(),
                client_urls,
            };
            (member_id(peer_urls, &config.initial_cluster_token), node)
        })
        .collect()
}
