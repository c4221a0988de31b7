//! Starting a member: storage, identity, Raft, bootstrap or join, and the client and peer gRPC services.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kv_api::lease::expiry::LeaseDeadlines;
use kv_api::service::auth::AuthService;
use kv_api::service::cluster::ClusterService;
use kv_api::service::election::ElectionService;
use kv_api::service::kv::KvService;
use kv_api::service::lease::LeaseService;
use kv_api::service::limit::MessageLimit;
use kv_api::service::local_client::LocalClient;
use kv_api::service::lock::LockService;
use kv_api::service::maintenance::MaintenanceService;
use kv_api::service::range_route::KvRoutes;
use kv_api::service::watch::WatchService;
use kv_api::service::ApiConfig;
use kv_api::validate::Limits;
use kv_api::watch::WatchConfig;
use kv_api::Consensus;
use proto::etcdserverpb as pb;
use proto::raftpb;
use proto::v3electionpb::election_server::ElectionServer;
use proto::v3lockpb::lock_server::LockServer;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tokio_stream::StreamExt;
use tracing::{info, warn};

use crate::authority::AuthorityFix;
use crate::cert_identity::CertIdentityLayer;
use crate::config::auth_token::{self, AuthToken};
use crate::config::{address, socket_addr, Address, Config};
use crate::consensus::{raft_config, request_timeout, RaftConsensus};
use crate::dial::PeerDialer;
use crate::early_append::EarlyAppends;
use crate::election::ElectionClock;
use crate::forward::Forwarder;
use crate::group_commit::GroupCommit;
use crate::grpc_metrics::GrpcMetricsLayer;
use crate::http::{Access, Endpoints, HttpLayer, Routes};
use crate::leader::Leader;
use crate::leader_wire::LeaderRequest;
use crate::network::PeerNetwork;
use crate::peer_service::PeerService;
use crate::storage;
use crate::typ::{NodeId, Raft};
use crate::{auto_compaction, bootstrap, lease_expiry, metrics, probe, tls};

/// gRPC accepts messages this much beyond `--max-request-bytes`, as etcd does, so that a request slightly
/// over the limit reaches our own check and gets etcd's "request is too large"; beyond that the
/// [`MessageLimit`] wrapper refuses it as grpc-go does (tonic's own limit is lifted: the wrapper replaces it).
const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// etcd's gRPC metadata asking that the request fail at once when the member has no leader.
const REQUIRE_LEADER_KEY: &str = "hasleader";

/// Serves `$router` on `$listener` (through TLS when `$tls` holds an acceptor) until `$stop`, as a task of
/// `$servers`; every accepted connection goes through `$wrap` (a generic function, instantiated per kind
/// of connection).
macro_rules! serve {
    ($servers:expr, $router:expr, $listener:expr, $tls:expr, $stop:expr, $wrap:path) => {{
        let (router, stop) = ($router, $stop);
        match ($listener, $tls) {
            (Listener::Tcp(listener), None) => {
                let incoming = TcpListenerStream::new(listener).map(|conn| conn.and_then(tuned).map($wrap));
                $servers.spawn(async move { router.serve_with_incoming_shutdown(incoming, stop).await });
            }
            (Listener::Tcp(listener), Some(acceptor)) => {
                let incoming = tls::accept(listener, acceptor).map(|conn| conn.map($wrap));
                $servers.spawn(async move { router.serve_with_incoming_shutdown(incoming, stop).await });
            }
            // `unixs://` is refused with the flags: a unix socket is plain.
            (Listener::Unix(listener), _) => {
                let incoming = UnixListenerStream::new(listener).map(|conn| conn.map($wrap));
                $servers.spawn(async move { router.serve_with_incoming_shutdown(incoming, stop).await });
            }
        }
    }};
}

/// Runs a member until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let initial_cluster = config.initial_cluster()?;
    // A flag this member cannot honour stops it here too (the binaries check first, to say it in one line).
    let settings = crate::config::settings::resolve(&config).map_err(anyhow::Error::msg)?;
    crate::config::effect::check(&config, &settings)?;
    crate::failpoint::serve_http_from_env().await?;
    // --auto-tls and --peer-auto-tls: self-signed certificates in the data dir, made before anything
    // listens.
    let tls = config.tls.with_auto_tls(&config.data_dir(), &config.listen_client_urls, &config.listen_peer_urls)?;
    let tls = tls::TlsFlags { skip_peer_san_check: settings.peer_skip_client_san_verification, ..tls };
    let config = Config { tls, ..config };
    let client_addrs = addrs(&config.listen_client_urls)?;
    let peer_addrs = addrs(&config.listen_peer_urls)?;
    // Certificates are read before anything else starts, so that a bad flag stops the member at once.
    let client_tls =
        config.listen_client_urls.iter().map(|url| config.tls.client_acceptor(url)).collect::<Result<Vec<_>, _>>()?;
    let peer_tls = config
        .listen_peer_urls
        .iter()
        .zip(&peer_addrs)
        .map(|(url, addr)| config.tls.peer_acceptor(url, addr))
        .collect::<Result<Vec<_>, _>>()?;
    let own_peer_ip = config.initial_advertise_peer_urls.first().and_then(|u| socket_addr(u).ok()).map(|a| a.ip());
    let dialer = PeerDialer::new(own_peer_ip, peer_connector(&config)?);
    let forwarder = Forwarder::new(dialer.clone());

    let member_dir = config.data_dir().join("member");
    std::fs::create_dir_all(&member_dir).with_context(|| format!("creating {}", member_dir.display()))?;
    let bootstrap = bootstrap::initial_members(&config, &initial_cluster);
    let identity = bootstrap::identity(&config, &bootstrap, &forwarder, &member_dir).await?;
    info!(
        name = config.name,
        data_dir = %config.data_dir().display(),
        member_id = format!("{:x}", identity.member_id),
        cluster_id = format!("{:x}", identity.cluster_id),
        initial_cluster_state = config.initial_cluster_state,
        // etcd names the CPUs it may use here; ours adds the threads its tasks run on (`runtime.rs`).
        max_cpu_available = std::thread::available_parallelism().map_or(1, usize::from),
        runtime_threads = Handle::current().metrics().num_workers(),
        "starting an etcd server"
    );
    // --wal-dir: the Raft log's database on a path (a disk) of its own, as etcd's WAL.
    let log_dir = config.member.wal_dir.clone().unwrap_or_else(|| member_dir.join("db"));
    let fresh = |dir: &std::path::Path| std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none());
    if log_dir != member_dir.join("db") && fresh(&log_dir) && !fresh(&member_dir.join("db")) {
        anyhow::bail!(
            "--wal-dir {} is empty but this member's log is in {}: move it there, or start without --wal-dir",
            log_dir.display(),
            member_dir.join("db").display()
        );
    }
    let (log_store, state_machine, store) =
        storage::open_split_with(&log_dir, &member_dir.join("db"), config.clustering.experimental_values_apart)
            .context("opening storage")?;
    // A compaction the last run left unfinished may already be resuming: the settings apply from its
    // next batch.
    store.read().compactor().configure(kv_api::compactor::CompactionConfig {
        batch_limit: usize::try_from(settings.compaction_batch_limit).unwrap_or(usize::MAX),
        sleep_interval: settings.compaction_sleep_interval,
    });
    let (raft_config, vote_lease) = raft_config(&config, settings.snapshot_catchup_entries)?;
    let early = EarlyAppends::new(identity.member_id, Duration::from_millis(raft_config.heartbeat_interval));
    let mut log_store = log_store.without_fsync(config.clustering.unsafe_no_fsync).with_early_appends(early.clone());
    let mut state_machine = state_machine;
    if config.clustering.force_new_cluster {
        storage::force_new_cluster::force_new_cluster(&mut log_store, &mut state_machine, identity.member_id)
            .await
            .context("--force-new-cluster")?;
    }
    if config.clustering.unsafe_no_fsync {
        warn!("--unsafe-no-fsync is set: the Raft log is not flushed before writes are acknowledged, and a crash can lose acknowledged writes");
    }
    if settings.memory_mlock {
        use nix::sys::mman::{mlockall, MlockAllFlags};
        mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE)
            .context("--experimental-memory-mlock: locking the process' memory in RAM (raise RLIMIT_MEMLOCK)")?;
        info!("locked the process' memory in RAM");
    }
    let watch_hub = state_machine.watch_hub().clone();

    let election = Duration::from_millis(config.election_timeout);
    let connectivity = crate::connectivity::Connectivity::default();
    let network = PeerNetwork::new(dialer.clone(), connectivity.clone(), early, log_store.clone());
    let appended = log_store.appended_bytes();
    let log_tail = log_store.tail_size();
    let raft = Raft::new(identity.member_id, Arc::new(raft_config), network.clone(), log_store, state_machine)
        .await
        .context("starting Raft")?;
    // Elections run on the logical clock of `election` (openraft's wall-clock timer is switched off).
    let clock = ElectionClock::new(
        raft.clone(),
        identity.member_id,
        Duration::from_millis(config.heartbeat_interval),
        election,
    );
    raft.runtime_config().elect(false);

    if !raft.is_initialized().await? && config.initial_cluster_state == "new" {
        // Every member of a new cluster proposes the same initial membership; openraft accepts the identical
        // proposal from each, so whoever starts first bootstraps it.
        info!(members = bootstrap.len(), "bootstrapping a new cluster");
        if let Err(err) = raft.initialize(bootstrap).await {
            warn!(%err, "the cluster was already bootstrapped by another member");
        }
    }

    let leader = Leader {
        raft: raft.clone(),
        member_id: identity.member_id,
        cluster_id: identity.cluster_id,
        token: config.initial_cluster_token.clone(),
        election_timeout: election,
        vote_lease,
        request_timeout: request_timeout(election),
        forwarder: forwarder.clone(),
        clock: clock.clone(),
        store: store.clone(),
        deadlines: Arc::new(LeaseDeadlines::new(election)),
        writes: GroupCommit::start(raft.clone()),
        confirmations: Leader::confirmation_rounds(&raft, election),
        strict_reconfig_check: config.clustering.strict_reconfig_check,
        connectivity,
        max_learners: config.renamed.max_learners,
    };
    let consensus = Arc::new(RaftConsensus::new(leader.clone()).with_snapshot_dir(member_dir.clone()));
    let api = ApiConfig {
        limits: Limits { max_txn_ops: config.max_txn_ops, max_request_bytes: config.max_request_bytes },
        version: config.emulated_version.clone(),
        // etcd: a lease lives at least 1.5 election timeouts, rounded up to whole seconds.
        min_lease_ttl: (config.election_timeout * 3).div_ceil(2000) as i64,
        quota_backend_bytes: config.quota_backend_bytes(),
        bcrypt_cost: config.bcrypt_cost,
    };
    log_quota(&config);
    store.write().auth_mut().tokens_mut().set_ttl(Duration::from_secs(config.auth_token_ttl));
    if let AuthToken::Jwt(tokens) = auth_token::parse(&config.auth_token).map_err(anyhow::Error::msg)? {
        store.write().auth_mut().set_jwt(tokens);
    }
    let auth = pb::auth_server::AuthServer::new(AuthService::new(consensus.clone(), store.clone(), api.clone()));
    let max_message = config.max_request_bytes + GRPC_OVERHEAD_BYTES;
    let require_leader = {
        let consensus = consensus.clone();
        move |request: tonic::Request<()>| {
            let wants_leader = request.metadata().get(REQUIRE_LEADER_KEY).is_some_and(|v| v == "true");
            if wants_leader && !consensus.has_leader() {
                return Err(kv_api::Error::NoLeader.into());
            }
            Ok(request)
        }
    };
    tokio::spawn(crate::snapshot_policy::run(raft.clone(), store.clone(), appended, config.snapshot_count));
    tokio::spawn(crate::index_compaction::run(store.clone()));
    let lease = pb::lease_server::LeaseServer::new(LeaseService::new(consensus.clone(), store.clone(), api.clone()));
    tokio::spawn(lease_expiry::expire_leases(leader.clone()));
    let compaction = &config.clustering;
    if let Some(policy) =
        auto_compaction::policy(&compaction.auto_compaction_mode, &compaction.auto_compaction_retention)
            .map_err(anyhow::Error::msg)?
    {
        tokio::spawn(auto_compaction::run(leader.clone(), policy));
    }
    if !settings.corrupt_check_time.is_zero() {
        let interval = settings.corrupt_check_time;
        let checks =
            crate::corrupt_check::check_periodically(consensus.clone(), store.clone(), dialer.clone(), interval);
        tokio::spawn(checks);
    }
    let kv = KvRoutes::new(KvService::new(consensus.clone(), store.clone(), api.clone()));
    let watch_config = WatchConfig {
        progress_notify_interval: settings.watch_progress_notify_interval,
        fragment_bytes: max_message,
        leader_check_interval: election,
    };
    let watch = pb::watch_server::WatchServer::new(WatchService::new(
        consensus.clone(),
        store.clone(),
        watch_hub.clone(),
        watch_config,
    ))
    .max_decoding_message_size(usize::MAX)
    .max_encoding_message_size(usize::MAX);
    // Lock and Election are clients of this member's own KV and Lease services, as in etcd.
    let local_client = LocalClient::new(
        consensus.clone(),
        Arc::new(KvService::new(consensus.clone(), store.clone(), api.clone())),
        Arc::new(LeaseService::new(consensus.clone(), store.clone(), api.clone())),
        store.clone(),
        watch_hub.clone(),
    );
    let lock = LockServer::new(LockService::new(local_client.clone()))
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let election = ElectionServer::new(ElectionService::new(local_client))
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let maintenance =
        pb::maintenance_server::MaintenanceServer::new(MaintenanceService::new(consensus.clone(), store.clone(), api))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
    let cluster = pb::cluster_server::ClusterServer::new(ClusterService::new(consensus.clone(), store.clone()))
        .max_decoding_message_size(usize::MAX);
    let (_health_reporter, health) = tonic_health::server::health_reporter();
    let http = HttpLayer::new(Endpoints {
        consensus: consensus.clone(),
        raft: raft.clone(),
        store: store.clone(),
        watch_hub: watch_hub.clone(),
        log_tail,
        member_id: identity.member_id,
        version: config.emulated_version.clone(),
        quota_backend_bytes: config.quota_backend_bytes().unwrap_or(0),
        access: Access { cors: config.member.cors.clone(), hosts: config.member.host_whitelist.clone() },
        gateway: config.member.enable_grpc_gateway,
        features: settings.gates.all(),
    });
    tokio::spawn(metrics::count_leader_changes(raft.clone()));
    tokio::spawn(probe::probe_peers(network, raft.clone(), identity.member_id));

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    // Peers first: Raft needs them to elect a leader and to publish this member.
    let hand_over = leader.clone();
    let peer = raftpb::raft_peer_server::RaftPeerServer::new(PeerService::new(leader, stop_rx.clone()))
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    for (addr, tls) in peer_addrs.into_iter().zip(peer_tls) {
        let listener = bind(&addr, &config).await?;
        info!(address = %addr, tls = tls.is_some(), "serving peer traffic");
        // The health service answers the other members' round-trip probes.
        let router =
            tonic::transport::Server::builder().tcp_nodelay(true).add_service(peer.clone()).add_service(health.clone());
        let stop = stopped(stop_rx.clone());
        serve!(servers, router, listener, tls, stop, std::convert::identity);
    }
    tokio::spawn(clock.clone().run(forwarder));

    // With --listen-client-http-urls, the client URLs serve gRPC only and those URLs the HTTP side.
    let http_urls = &config.member.listen_client_http_urls;
    let client_routes = if http_urls.is_empty() { Routes::Client } else { Routes::GrpcOnly };
    let mut client_listeners = Vec::new();
    for (addr, tls) in client_addrs.into_iter().zip(client_tls) {
        let listener = bind(&addr, &config).await?;
        client_listeners.push((addr, listener, tls, client_routes));
    }
    for (url, addr) in http_urls.iter().zip(addrs(http_urls)?) {
        let tls = config.tls.client_acceptor(url)?;
        let listener = bind(&addr, &config).await?;
        client_listeners.push((addr, listener, tls, Routes::HttpOnly));
    }
    // The metrics URLs serve /metrics and the health endpoints from the start, as etcd: probes see an
    // unready member rather than a refused connection.
    for (url, addr) in config.monitoring.listen_metrics_urls.iter().zip(addrs(&config.monitoring.listen_metrics_urls)?)
    {
        let tls = config.tls.client_acceptor(url)?;
        let listener = bind(&addr, &config).await?;
        info!(address = %url, "serving metrics");
        let router = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .accept_http1(true)
            .layer(http.for_listener(Routes::Metrics, tls.is_some()))
            .add_service(health.clone());
        let stop = stopped(stop_rx.clone());
        serve!(servers, router, listener, tls, stop, std::convert::identity);
    }
    info!(
        local_member_id = format!("{:x}", identity.member_id),
        initial_advertise_peer_urls = ?config.initial_advertise_peer_urls,
        listen_peer_urls = ?config.listen_peer_urls,
        advertise_client_urls = ?config.advertise_client_urls,
        listen_client_urls = ?config.listen_client_urls,
        listen_metrics_urls = ?config.monitoring.listen_metrics_urls,
        "now serving peer/client/metrics"
    );
    let removed = {
        let clock = clock.clone();
        let raft = raft.clone();
        async move {
            tokio::select! {
                () = removed_from_cluster(raft, identity.member_id) => {}
                () = clock.removed() => {}
            }
        }
    };
    tokio::pin!(shutdown, removed);
    // As etcd, clients are served once this member's name and client URLs are in the membership.
    let published = tokio::select! {
        () = &mut shutdown => false,
        () = publish(consensus.clone(), raft.clone(), identity.member_id, config.clone()) => true,
    };
    if published {
        info!(
            local_member_id = format!("{:x}", identity.member_id),
            local_member_attributes = format!("{{Name:{} ClientURLs:{:?}}}", config.name, config.advertise_client_urls),
            "published local member to cluster through raft"
        );
    }
    if published && settings.gates.enabled("InitialCorruptCheck") {
        crate::corrupt_check::check_initially(&consensus, &store, &dialer).await?;
    }
    if published {
        info!("ready to serve client requests");
        let keepalive = |d: Duration| (!d.is_zero()).then_some(d);
        for (addr, listener, tls, routes) in client_listeners {
            let traffic = match routes {
                Routes::GrpcOnly => "grpc",
                Routes::HttpOnly => "http",
                _ => "grpc+http",
            };
            if tls.is_some() {
                info!(traffic, address = %addr, "serving client traffic securely");
            } else {
                warn!(traffic, address = %addr, "serving client traffic insecurely; this is strongly discouraged!");
            }
            let router = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .max_concurrent_streams(config.member.max_concurrent_streams)
                .http2_keepalive_interval(keepalive(config.member.grpc_keepalive_interval))
                .http2_keepalive_timeout(keepalive(config.member.grpc_keepalive_timeout))
                // etcd serves HTTP (health, version, metrics) on the same port as gRPC.
                .accept_http1(true)
                .layer(http.for_listener(routes, tls.is_some()))
                .layer(CertIdentityLayer { enabled: config.tls.client_cert_auth })
                .layer(tonic::service::InterceptorLayer::new(require_leader.clone()))
                .layer(GrpcMetricsLayer)
                .add_service(MessageLimit::new(kv.clone(), max_message))
                .add_service(MessageLimit::new(watch.clone(), max_message))
                .add_service(MessageLimit::new(lease.clone(), max_message))
                .add_service(MessageLimit::new(maintenance.clone(), max_message))
                .add_service(MessageLimit::new(cluster.clone(), max_message))
                .add_service(MessageLimit::new(auth.clone(), max_message))
                .add_service(MessageLimit::new(lock.clone(), max_message))
                .add_service(MessageLimit::new(election.clone(), max_message))
                .add_service(health.clone());
            let stop = stopped(stop_rx.clone());
            serve!(servers, router, listener, tls, stop, AuthorityFix::new);
        }
    }

    let mut outcome = Ok(());
    if published {
        tokio::select! {
            () = &mut shutdown => info!(name = config.name, data_dir = %config.data_dir().display(), "closing etcd server"),
            () = &mut removed => {
                warn!("the member has been permanently removed from the cluster; stopping");
                // As etcd (10 ticks): the request that removed this member, if it came here, gets its
                // answer before the listeners close.
                tokio::time::sleep(Duration::from_millis(10 * config.heartbeat_interval)).await;
                outcome = Err(anyhow::anyhow!("the member has been permanently removed from the cluster"));
            }
            Some(result) = servers.join_next() => {
                result.context("server task")?.context("server")?;
            }
        }
    }
    // As etcd, a stopping leader first hands its leadership over, while it still serves.
    if outcome.is_ok() && published {
        if let Err(err) = hand_over.hand_over_leadership().await {
            warn!(%err, "could not hand leadership over before stopping");
        }
    }
    // Watch streams never end on their own: end them so that the servers can drain.
    watch_hub.stop();
    let _ = stop_tx.send(true);
    while servers.join_next().await.is_some() {}
    raft.shutdown().await.context("stopping Raft")?;
    if outcome.is_ok() {
        crate::storage::save_key_index(store.clone()).await;
    }
    info!(name = config.name, data_dir = %config.data_dir().display(), "closed etcd server");
    outcome
}

/// etcd's startup note on the backend quota, with its warning past the suggested maximum.
fn log_quota(config: &Config) {
    /// Above this etcd warns that the quota may degrade performance.
    const MAX_QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;
    match config.quota_backend_bytes() {
        None => info!(quota_size_bytes = config.quota_backend_bytes, "disabled backend quota"),
        Some(quota) if quota > MAX_QUOTA_BYTES => {
            warn!(
                quota_size_bytes = quota,
                quota_maximum_size_bytes = MAX_QUOTA_BYTES,
                "quota exceeds the maximum value"
            )
        }
        Some(quota) => info!(quota_size_bytes = quota, "enabled backend quota"),
    }
}

/// Resolves once this member, having been part of the membership, is no longer in it (as etcd, a removed
/// member stops). Server metrics, as [`metrics::count_leader_changes`]: they change with the membership,
/// not with every write.
async fn removed_from_cluster(raft: Raft, id: NodeId) {
    let mut metrics = raft.server_metrics();
    let contains = |m: &openraft::metrics::RaftServerMetrics<NodeId, crate::typ::MemberNode>| {
        m.membership_config.membership().get_node(&id).is_some()
    };
    if metrics.wait_for(contains).await.is_err() || metrics.wait_for(|m| !contains(m)).await.is_err() {
        // Raft stopped: the member is shutting down anyway.
        std::future::pending::<()>().await;
    }
}

/// A bound listener: TCP, or a unix socket.
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// A listener on `addr`, with `--socket-reuse-address` and `--socket-reuse-port` as etcd sets them. A unix
/// socket file left by an earlier run is replaced; one that a live process answers on is not.
async fn bind(addr: &Address, config: &Config) -> anyhow::Result<Listener> {
    let path = match addr {
        Address::Tcp(addr) => return bind_tcp(*addr, config).map(Listener::Tcp),
        Address::Unix(path) => path,
    };
    if path.exists() && tokio::net::UnixStream::connect(path).await.is_err() {
        std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(path).with_context(|| format!("listening on {addr}"))?;
    Ok(Listener::Unix(listener))
}

fn bind_tcp(addr: SocketAddr, config: &Config) -> anyhow::Result<tokio::net::TcpListener> {
    let listen = || -> std::io::Result<tokio::net::TcpListener> {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        // Go sets SO_REUSEADDR on every listener (a restarted member rebinds a port in TIME_WAIT), so
        // etcd's --socket-reuse-address only ever turns on what is on already; so here.
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(config.member.socket_reuse_port)?;
        socket.bind(addr)?;
        // Go's listen backlog: the kernel's somaxconn.
        socket.listen(4096)
    };
    listen().with_context(|| format!("listening on {addr}"))
}

/// The TLS configuration this member dials peers with: needed when any peer URL it knows of is `https://`
/// or peer certificates are given; `None` otherwise (reading the system's roots costs a few milliseconds).
fn peer_connector(config: &Config) -> anyhow::Result<Option<Arc<rustls::ClientConfig>>> {
    let tls = &config.tls;
    let https_peers =
        config.initial_cluster.split(',').any(|entry| entry.split_once('=').is_some_and(|(_, url)| tls::is_https(url)))
            || config.initial_advertise_peer_urls.iter().any(|url| tls::is_https(url));
    if https_peers || tls.peer_cert_file.is_some() || tls.peer_trusted_ca_file.is_some() {
        return tls.peer_connector().map(Some);
    }
    Ok(None)
}

fn addrs(urls: &[String]) -> anyhow::Result<Vec<Address>> {
    Ok(urls.iter().map(|u| address(u)).collect::<Result<Vec<_>, _>>()?)
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM: the trigger the binaries give [`run`].
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Resolves once `stop` turns true.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Once the cluster has a leader, makes sure the membership carries this member's name and client URLs
/// (a member added at run time is unnamed until it starts, as in etcd).
async fn publish(consensus: Arc<RaftConsensus>, raft: Raft, id: NodeId, config: Config) {
    loop {
        let current = raft.metrics().borrow().membership_config.membership().get_node(&id).cloned();
        let published =
            current.is_some_and(|node| node.name == config.name && node.client_urls == config.advertise_client_urls);
        if published {
            return;
        }
        let request =
            LeaderRequest::Publish { id, name: config.name.clone(), client_urls: config.advertise_client_urls.clone() };
        if let Err(err) = consensus.publish(request).await {
            info!(%err, "cannot publish this member's name and client URLs yet; retrying");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Sets up an accepted connection ([`crate::dial::tune`]: no Nagle, linear retransmission timeouts).
/// tonic's `tcp_nodelay` only reaches the sockets it accepts itself, not those of `serve_with_incoming`;
/// left on, a small answer waits for the client's delayed ACK, about 40 ms on Linux (every read showed
/// it).
fn tuned(stream: tokio::net::TcpStream) -> std::io::Result<tokio::net::TcpStream> {
    crate::dial::tune(&stream)?;
    Ok(stream)
}
