//! HTTP on the client port, beside gRPC on the same listener, as etcd serves it: `/health`, `/version`,
//! `/metrics`, and the gRPC gateway's `/v3/...` JSON API ([`crate::gateway`]).
//!
//! [`HttpLayer`] sits outermost around the client gRPC services: a request that is HTTP/2 with a gRPC
//! content type goes on to tonic (etcd's own test for gRPC), anything else (HTTP/1.1, or HTTP/2 without
//! `application/grpc`) is answered here. Answers are etcd 3.4.23's byte for byte: bodies, status codes,
//! content types and the CORS headers etcd adds to every HTTP answer on the client port.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use kv_api::Consensus;
use kv_api::SharedStore;
use openraft::ServerState;
use proto::etcdserverpb as pb;
use tonic::body::Body;
use tracing::warn;

use crate::consensus::RaftConsensus;
use crate::gateway;
use crate::metrics::{metrics, MemberView, ProcessView};
use crate::typ::Raft;

/// etcd's health check gives its quorum read one second.
const HEALTH_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// What the HTTP endpoints read.
pub struct Endpoints {
    pub consensus: Arc<RaftConsensus>,
    pub raft: Raft,
    pub store: SharedStore,
    /// The member's watchers, for their backlog on `/metrics`.
    pub watch_hub: Arc<kv_api::watch::WatchHub>,
    /// The Raft log's in-memory tail, for `/metrics`.
    pub log_tail: crate::storage::TailSize,
    pub member_id: u64,
    /// The emulated etcd version (`--emulated-version`).
    pub version: String,
    /// `--quota-backend-bytes` as it applies (0: no quota).
    pub quota_backend_bytes: u64,
    /// `--cors` and `--host-whitelist`.
    pub access: Access,
    /// `--enable-grpc-gateway`.
    pub gateway: bool,
    /// The feature gates (name, stage, enabled), for `/metrics`.
    pub features: Vec<(&'static str, &'static str, bool)>,
}

/// etcd's access control on the HTTP side of the client port.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// `--cors`: origins allowed to read answers from a browser (empty or `*`: any).
    pub cors: Vec<String>,
    /// `--host-whitelist`: `Host` names a plain-HTTP request may carry (empty or `*`: any), against DNS
    /// rebinding (CVE-2018-5702).
    pub hosts: Vec<String>,
}

impl Access {
    fn any(list: &[String]) -> bool {
        list.iter().all(|item| item.is_empty()) || list.iter().any(|item| item == "*")
    }

    fn allows_host(&self, host: &str) -> bool {
        Access::any(&self.hosts) || self.hosts.iter().any(|allowed| allowed == host)
    }

    /// The `Access-Control-Allow-Origin` for a request from `origin`, if it gets one.
    fn cors_origin<'a>(&self, origin: Option<&'a str>) -> Option<&'a str> {
        if Access::any(&self.cors) {
            return Some("*");
        }
        origin.filter(|origin| self.cors.iter().any(|allowed| allowed == origin))
    }
}

/// Which routes a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routes {
    /// A client URL: everything, gRPC included.
    Client,
    /// A `--listen-metrics-urls` URL: `/metrics`, `/health`, `/livez` and `/readyz` only.
    Metrics,
    /// A client URL while `--listen-client-http-urls` takes the HTTP side: gRPC only.
    GrpcOnly,
    /// A `--listen-client-http-urls` URL: the client URL's HTTP side (endpoints and gateway), no gRPC.
    HttpOnly,
}

impl Endpoints {
    async fn answer(&self, request: Request<Body>, routes: Routes) -> Response<Body> {
        let get = request.method() == Method::GET;
        let path = request.uri().path();
        if let Some(health) = crate::health::Request::parse(path, request.uri().query()) {
            return if get { self.health_checks(&health).await } else { method_not_allowed() };
        }
        if routes == Routes::Metrics && !matches!(path, "/metrics" | "/health") {
            return plain_error(StatusCode::NOT_FOUND, "404 page not found");
        }
        match path {
            "/health" if !get => method_not_allowed(),
            "/health" => self.health().await,
            "/version" if !get => method_not_allowed(),
            "/version" => with_type(StatusCode::OK, "application/json", self.version_json()),
            // Go's promhttp handler answers any method.
            "/metrics" => with_type(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", self.metrics().await),
            _ => plain_error(StatusCode::NOT_FOUND, "404 page not found"),
        }
    }

    /// etcd 3.4.23's `checkHealth`: unhealthy with an active alarm, without a leader, or when a read
    /// through Raft (a quorum round) does not complete within a second. The answer carries no reason.
    async fn health(&self) -> Response<Body> {
        let alarmed = !self.store.read().alarms().get(pb::AlarmType::None as i32).is_empty();
        let healthy = !alarmed
            && self.consensus.raft_status().leader != 0
            && matches!(tokio::time::timeout(HEALTH_READ_TIMEOUT, self.consensus.read_barrier()).await, Ok(Ok(())));
        if healthy {
            metrics().health_success.fetch_add(1, Ordering::Relaxed);
            // Go sniffs the content type of a body written without one.
            with_type(StatusCode::OK, "text/plain; charset=utf-8", r#"{"health":"true"}"#.to_string())
        } else {
            metrics().health_failures.fetch_add(1, Ordering::Relaxed);
            plain_error(StatusCode::SERVICE_UNAVAILABLE, r#"{"health":"false"}"#)
        }
    }

    /// `/livez` and `/readyz` as etcd 3.6 answers them.
    async fn health_checks(&self, request: &crate::health::Request) -> Response<Body> {
        let (healthy, lines) = request.run(&self.consensus, &self.store).await;
        if !healthy {
            warn!(path = request.kind.name(), reason = lines.as_str(), "Health check error");
            return plain_error(StatusCode::SERVICE_UNAVAILABLE, &lines);
        }
        let body = if request.verbose { format!("{lines}ok\n") } else { "ok\n".to_string() };
        let mut response = with_type(StatusCode::OK, "text/plain; charset=utf-8", body);
        response.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        response
    }

    /// The server version, the cluster version (its major.minor, or the target of an enabled
    /// downgrade) and the storage version, as etcd 3.6 answers `/version`.
    fn version_json(&self) -> String {
        use kv_api::downgrade;
        let cluster = self.cluster_version();
        let storage = downgrade::version_string(downgrade::storage_version(self.store.read().downgrade_target()));
        // Written by hand: etcd's field order (serde_json's map would sort the keys).
        let quoted = |s: &str| serde_json::Value::from(s).to_string();
        format!(
            r#"{{"etcdserver":{},"etcdcluster":{},"storage":{}}}"#,
            quoted(&self.version),
            quoted(&cluster),
            quoted(&storage)
        )
    }

    /// etcd's cluster version: the server's major.minor, or the target of an enabled downgrade.
    fn cluster_version(&self) -> String {
        use kv_api::downgrade;
        let target = self.store.read().downgrade_target();
        downgrade::version_string(target.unwrap_or_else(|| downgrade::minor_of(&self.version)))
    }

    async fn metrics(&self) -> String {
        let status = self.consensus.raft_status();
        let mut view = MemberView {
            member_id: self.member_id,
            has_leader: self.consensus.has_leader(),
            is_leader: self.raft.metrics().borrow().state == ServerState::Leader,
            is_learner: status.is_learner,
            applied_index: status.raft_applied_index,
            server_version: self.version.clone(),
            quota_backend_bytes: self.quota_backend_bytes,
            features: self.features.clone(),
            cluster_version: self.cluster_version(),
            watch_backlog: self.watch_hub.backlog(),
            log_tail: self.log_tail.read(),
            ..MemberView::default()
        };
        // The backend's size and /proc are read from files: not on the runtime.
        let store = self.store.clone();
        let read = tokio::task::spawn_blocking(move || {
            let store = store.read();
            let keys = store.live_keys();
            let sizes = (store.backend().size_bytes(), keys, store.current_revision(), store.compacted_revision());
            let index = store.index_size();
            drop(store);
            (sizes, index, ProcessView::read())
        })
        .await;
        if let Ok(((db_size, keys, current, compacted), index, process)) = read {
            view.db_size = db_size;
            view.index = index;
            view.keys = keys;
            view.current_revision = current;
            view.compact_revision = compacted;
            view.process = process;
        }
        crate::metrics::render(&view)
    }
}

/// etcd adds these to every HTTP answer on the client port whose origin `--cors` allows.
fn cors(mut response: Response<Body>, origin: Option<HeaderValue>) -> Response<Body> {
    let Some(origin) = origin else {
        return response;
    };
    let headers = response.headers_mut();
    headers.insert("access-control-allow-headers", HeaderValue::from_static("accept, content-type, authorization"));
    headers.insert("access-control-allow-methods", HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"));
    headers.insert("access-control-allow-origin", origin);
    response
}

/// etcd's answer to a plain-HTTP request whose `Host` is not in `--host-whitelist`.
fn misdirected(host: &str) -> Response<Body> {
    let text = format!(
        "\netcd received your request, but the Host header was unrecognized.\n\nTo fix this, choose one of the \
         following options:\n- Enable TLS, then any HTTPS request will be allowed.\n- Add the hostname you want to \
         use to the whitelist in settings.\n  - e.g. etcd --host-whitelist {host:?}\n\nThis requirement has been \
         added to help prevent \"DNS Rebinding\" attacks (CVE-2018-5702).\n"
    );
    plain_error(StatusCode::MISDIRECTED_REQUEST, &text)
}

/// The host a request names (its `Host` header or URI authority), without the port.
fn request_host<B>(request: &Request<B>) -> String {
    let authority = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .unwrap_or_default();
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.ends_with(':') => {
            host.trim_start_matches('[').trim_end_matches(']').to_string()
        }
        _ => authority.to_string(),
    }
}

fn with_type(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Body::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Go's `http.Error`: the text and a newline, as plain text that browsers must not sniff.
fn plain_error(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = with_type(status, "text/plain; charset=utf-8", format!("{text}\n"));
    response.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

fn method_not_allowed() -> Response<Body> {
    let mut response = plain_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
    response
}

/// Whether a request is gRPC (etcd: HTTP/2 with `application/grpc` in its content type).
fn is_grpc<B>(request: &Request<B>) -> bool {
    request.version() == http::Version::HTTP_2
        && request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/grpc"))
}

/// Answers HTTP requests with [`Endpoints`] and passes gRPC on.
#[derive(Clone)]
pub struct HttpLayer {
    endpoints: Arc<Endpoints>,
    routes: Routes,
    /// Whether the listener is `https://` (`--host-whitelist` only guards plain HTTP, as in etcd).
    secure: bool,
}

impl HttpLayer {
    pub fn new(endpoints: Endpoints) -> Self {
        Self { endpoints: Arc::new(endpoints), routes: Routes::Client, secure: false }
    }

    /// The same endpoints for a listener of another kind.
    pub fn for_listener(&self, routes: Routes, secure: bool) -> Self {
        Self { endpoints: self.endpoints.clone(), routes, secure }
    }
}

impl<S> tower_layer::Layer<S> for HttpLayer {
    type Service = HttpRouter<S>;

    fn layer(&self, inner: S) -> HttpRouter<S> {
        HttpRouter { inner, layer: self.clone() }
    }
}

#[derive(Clone)]
pub struct HttpRouter<S> {
    inner: S,
    layer: HttpLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<Request<Body>> for HttpRouter<S>
where
    S: tower_service::Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let layer = self.layer.clone();
        let grpc = is_grpc(&request);
        if grpc && matches!(layer.routes, Routes::Client | Routes::GrpcOnly) {
            let answer = self.inner.call(request);
            return Box::pin(async move { Ok(answer.await?.map(Body::new)) });
        }
        if (grpc && layer.routes == Routes::HttpOnly) || layer.routes == Routes::GrpcOnly {
            return Box::pin(async move { Ok(plain_error(StatusCode::NOT_FOUND, "404 page not found")) });
        }
        let endpoints = layer.endpoints.clone();
        if !layer.secure {
            let host = request_host(&request);
            if !endpoints.access.allows_host(&host) {
                warn!(host, "rejecting HTTP request to prevent DNS rebinding attacks");
                return Box::pin(async move { Ok(misdirected(&host)) });
            }
        }
        let origin = request.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok());
        let origin = endpoints.access.cors_origin(origin).and_then(|o| HeaderValue::from_str(o).ok());
        let client_http = matches!(layer.routes, Routes::Client | Routes::HttpOnly);
        if request.method() == Method::OPTIONS && client_http {
            return Box::pin(async move { Ok(cors(Response::new(Body::empty()), origin)) });
        }
        // etcd 3.4's clients use the gateway under /v3beta/ (and /v3alpha/ before it): the same API.
        if let Some(rest) = request.uri().path().strip_prefix("/v3beta/") {
            let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
            if let Ok(uri) = format!("/v3/{rest}{query}").parse() {
                *request.uri_mut() = uri;
            }
        }
        let gateway = client_http && endpoints.gateway;
        if let Some(method) = gateway.then(|| gateway::route(request.uri().path())).flatten() {
            let grpc = self.inner.clone();
            return Box::pin(async move { Ok(cors(gateway::call(grpc, method, request).await, origin)) });
        }
        Box::pin(async move { Ok(cors(endpoints.answer(request, layer.routes).await, origin)) })
    }
}
