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
use kv_api::consensus::SharedStore;
use kv_api::Consensus;
use openraft::ServerState;
use proto::etcdserverpb as pb;
use tonic::body::Body;

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
    pub member_id: u64,
    /// The emulated etcd version (`--emulated-version`).
    pub version: String,
    /// `--quota-backend-bytes` as it applies (0: no quota).
    pub quota_backend_bytes: u64,
}

impl Endpoints {
    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let get = request.method() == Method::GET;
        match request.uri().path() {
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

    /// The server version, and the cluster version etcd decides (its major and minor, patch 0).
    fn version_json(&self) -> String {
        let mut parts = self.version.splitn(3, '.');
        let cluster = match (parts.next(), parts.next()) {
            (Some(major), Some(minor)) => format!("{major}.{minor}.0"),
            _ => "not_decided".to_string(),
        };
        // Written by hand: etcd's field order (serde_json's map would sort the keys).
        let quoted = |s: &str| serde_json::Value::from(s).to_string();
        format!(r#"{{"etcdserver":{},"etcdcluster":{}}}"#, quoted(&self.version), quoted(&cluster))
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
            ..MemberView::default()
        };
        // The backend's size and /proc are read from files: not on the runtime.
        let store = self.store.clone();
        let read = tokio::task::spawn_blocking(move || {
            let store = store.read();
            let keys = store.live_keys();
            let sizes = (store.backend().size_bytes(), keys, store.current_revision(), store.compacted_revision());
            drop(store);
            (sizes, ProcessView::read())
        })
        .await;
        if let Ok(((db_size, keys, current, compacted), process)) = read {
            view.db_size = db_size;
            view.keys = keys;
            view.current_revision = current;
            view.compact_revision = compacted;
            view.process = process;
        }
        crate::metrics::render(&view)
    }
}

/// etcd adds these to every HTTP answer on the client port.
fn cors(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    headers.insert("access-control-allow-headers", HeaderValue::from_static("accept, content-type, authorization"));
    headers.insert("access-control-allow-methods", HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"));
    headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    response
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
}

impl HttpLayer {
    pub fn new(endpoints: Endpoints) -> Self {
        Self { endpoints: Arc::new(endpoints) }
    }
}

impl<S> tower_layer::Layer<S> for HttpLayer {
    type Service = HttpRouter<S>;

    fn layer(&self, inner: S) -> HttpRouter<S> {
        HttpRouter { inner, endpoints: self.endpoints.clone() }
    }
}

#[derive(Clone)]
pub struct HttpRouter<S> {
    inner: S,
    endpoints: Arc<Endpoints>,
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

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if is_grpc(&request) {
            let answer = self.inner.call(request);
            return Box::pin(async move { Ok(answer.await?.map(Body::new)) });
        }
        let endpoints = self.endpoints.clone();
        if let Some(method) = gateway::route(request.uri().path()) {
            let grpc = self.inner.clone();
            return Box::pin(async move { Ok(cors(gateway::call(grpc, method, request).await)) });
        }
        Box::pin(async move { Ok(cors(endpoints.answer(request).await)) })
    }
}
