//! `grpc_server_started_total` and `grpc_server_handled_total` as etcd's go-grpc-prometheus counts them:
//! a tower layer around the client gRPC services counts each call when it starts, and again with its
//! status code when it ends (a unary call when it answers, a stream when its trailers go out, a call
//! the client abandons as `Canceled`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tonic::Code;

use crate::exposition::{Exposition, COUNTER};

/// etcd 3.4's gRPC methods with their kind, as its `/metrics` lists them (counted from zero at start).
const METHODS: &[(&str, &str, &str)] = &[
    ("etcdserverpb.Auth", "AuthDisable", UNARY),
    ("etcdserverpb.Auth", "AuthEnable", UNARY),
    ("etcdserverpb.Auth", "Authenticate", UNARY),
    ("etcdserverpb.Auth", "RoleAdd", UNARY),
    ("etcdserverpb.Auth", "RoleDelete", UNARY),
    ("etcdserverpb.Auth", "RoleGet", UNARY),
    ("etcdserverpb.Auth", "RoleGrantPermission", UNARY),
    ("etcdserverpb.Auth", "RoleList", UNARY),
    ("etcdserverpb.Auth", "RoleRevokePermission", UNARY),
    ("etcdserverpb.Auth", "UserAdd", UNARY),
    ("etcdserverpb.Auth", "UserChangePassword", UNARY),
    ("etcdserverpb.Auth", "UserDelete", UNARY),
    ("etcdserverpb.Auth", "UserGet", UNARY),
    ("etcdserverpb.Auth", "UserGrantRole", UNARY),
    ("etcdserverpb.Auth", "UserList", UNARY),
    ("etcdserverpb.Auth", "UserRevokeRole", UNARY),
    ("etcdserverpb.Cluster", "MemberAdd", UNARY),
    ("etcdserverpb.Cluster", "MemberList", UNARY),
    ("etcdserverpb.Cluster", "MemberPromote", UNARY),
    ("etcdserverpb.Cluster", "MemberRemove", UNARY),
    ("etcdserverpb.Cluster", "MemberUpdate", UNARY),
    ("etcdserverpb.KV", "Compact", UNARY),
    ("etcdserverpb.KV", "DeleteRange", UNARY),
    ("etcdserverpb.KV", "Put", UNARY),
    ("etcdserverpb.KV", "Range", UNARY),
    ("etcdserverpb.KV", "Txn", UNARY),
    ("etcdserverpb.Lease", "LeaseGrant", UNARY),
    ("etcdserverpb.Lease", "LeaseKeepAlive", BIDI_STREAM),
    ("etcdserverpb.Lease", "LeaseLeases", UNARY),
    ("etcdserverpb.Lease", "LeaseRevoke", UNARY),
    ("etcdserverpb.Lease", "LeaseTimeToLive", UNARY),
    ("etcdserverpb.Maintenance", "Alarm", UNARY),
    ("etcdserverpb.Maintenance", "Defragment", UNARY),
    ("etcdserverpb.Maintenance", "Hash", UNARY),
    ("etcdserverpb.Maintenance", "HashKV", UNARY),
    ("etcdserverpb.Maintenance", "MoveLeader", UNARY),
    ("etcdserverpb.Maintenance", "Snapshot", SERVER_STREAM),
    ("etcdserverpb.Maintenance", "Status", UNARY),
    ("etcdserverpb.Watch", "Watch", BIDI_STREAM),
    ("grpc.health.v1.Health", "Check", UNARY),
    ("grpc.health.v1.Health", "Watch", SERVER_STREAM),
    ("v3electionpb.Election", "Campaign", UNARY),
    ("v3electionpb.Election", "Leader", UNARY),
    ("v3electionpb.Election", "Observe", SERVER_STREAM),
    ("v3electionpb.Election", "Proclaim", UNARY),
    ("v3electionpb.Election", "Resign", UNARY),
    ("v3lockpb.Lock", "Lock", UNARY),
    ("v3lockpb.Lock", "Unlock", UNARY),
];

const UNARY: &str = "unary";
const SERVER_STREAM: &str = "server_stream";
const BIDI_STREAM: &str = "bidi_stream";

/// gRPC's status codes by number, named as grpc-go names them in the `grpc_code` label.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// Per-method counters, indexed as [`METHODS`].
/// The process' gRPC counters (one member runs per process, as etcd's collectors are process-wide).
pub fn grpc_counters() -> &'static GrpcCounters {
    static COUNTERS: LazyLock<GrpcCounters> = LazyLock::new(GrpcCounters::new);
    &COUNTERS
}

pub struct GrpcCounters {
    started: Vec<AtomicU64>,
    /// `CODES.len()` counters per method.
    handled: Vec<AtomicU64>,
    /// `etcd_network_client_grpc_{received,sent}_bytes_total`: the bytes of the client services' request
    /// and response bodies (etcd counts the messages without gRPC's 5-byte frame header).
    received_bytes: AtomicU64,
    sent_bytes: AtomicU64,
}

impl GrpcCounters {
    pub(crate) fn new() -> Self {
        let counters = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        GrpcCounters {
            started: counters(METHODS.len()),
            handled: counters(METHODS.len() * CODES.len()),
            received_bytes: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
        }
    }

    /// The method a request path (`/etcdserverpb.KV/Put`) names, if etcd counts it.
    fn method(path: &str) -> Option<usize> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        METHODS.iter().position(|(s, m, _)| *s == service && *m == method)
    }

    fn handled(&self, method: usize, code: Code) {
        let code = (code as usize).min(CODES.len() - 1);
        self.handled[method * CODES.len() + code].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn render(&self, out: &mut Exposition) {
        let bytes = [
            ("etcd_network_client_grpc_received_bytes_total", "received from", &self.received_bytes),
            ("etcd_network_client_grpc_sent_bytes_total", "sent to", &self.sent_bytes),
        ];
        for (name, direction, counter) in bytes {
            let help = format!("The total number of bytes {direction} grpc clients.");
            out.labelled(name, &help, COUNTER, &[(&[], counter.load(Ordering::Relaxed) as f64)]);
        }
        // Go's client orders series by their label values, labels being sorted by name.
        let mut handled: Vec<([&str; 4], f64)> = Vec::with_capacity(self.handled.len());
        for (m, (service, method, kind)) in METHODS.iter().enumerate() {
            for (c, code) in CODES.iter().enumerate() {
                let value = self.handled[m * CODES.len() + c].load(Ordering::Relaxed) as f64;
                handled.push(([code, method, service, kind], value));
            }
        }
        handled.sort_by(|a, b| a.0.cmp(&b.0));
        let labels: Vec<[(&str, &str); 4]> = handled
            .iter()
            .map(|([code, method, service, kind], _)| {
                [("grpc_code", *code), ("grpc_method", *method), ("grpc_service", *service), ("grpc_type", *kind)]
            })
            .collect();
        let series: Vec<_> = labels.iter().zip(&handled).map(|(l, (_, v))| (&l[..], *v)).collect();
        out.labelled(
            "grpc_server_handled_total",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            COUNTER,
            &series,
        );

        let mut started: Vec<(usize, [(&str, &str); 3])> = METHODS
            .iter()
            .enumerate()
            .map(|(m, (service, method, kind))| {
                (m, [("grpc_method", *method), ("grpc_service", *service), ("grpc_type", *kind)])
            })
            .collect();
        started.sort_by(|a, b| (a.1[0].1, a.1[1].1).cmp(&(b.1[0].1, b.1[1].1)));
        let series: Vec<_> =
            started.iter().map(|(m, labels)| (&labels[..], self.started[*m].load(Ordering::Relaxed) as f64)).collect();
        out.labelled("grpc_server_started_total", "Total number of RPCs started on the server.", COUNTER, &series);
    }
}

/// Adds [`GrpcMetrics`] around the client services.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcMetricsLayer;

impl<S> tower_layer::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner }
    }
}

#[derive(Clone, Debug)]
pub struct GrpcMetrics<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower_service::Service<http::Request<tonic::body::Body>> for GrpcMetrics<S>
where
    S: tower_service::Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let method = GrpcCounters::method(request.uri().path());
        let counters = grpc_counters();
        if let Some(m) = method {
            counters.started[m].fetch_add(1, Ordering::Relaxed);
        }
        let request = match method {
            Some(_) => request.map(|body| tonic::body::Body::new(Received { inner: body })),
            None => request,
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            let Some(method) = method else { return Ok(response) };
            // A call that fails at once answers with its status in the headers ("trailers only").
            if let Some(code) = status_code(response.headers()) {
                counters.handled(method, code);
                return Ok(response);
            }
            Ok(response.map(|body| tonic::body::Body::new(Handled { inner: body, method, counted: false })))
        })
    }
}

fn status_code(headers: &http::HeaderMap) -> Option<Code> {
    let status = headers.get("grpc-status")?.to_str().ok()?.parse::<i32>().ok()?;
    Some(Code::from_i32(status))
}

/// A response body that counts its call as handled once the trailers carry the status.
struct Handled {
    inner: tonic::body::Body,
    method: usize,
    counted: bool,
}

impl Handled {
    fn count(&mut self, code: Code) {
        if !self.counted {
            self.counted = true;
            grpc_counters().handled(self.method, code);
        }
    }
}

impl Body for Handled {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    grpc_counters().sent_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                if let Some(code) = frame.trailers_ref().and_then(status_code) {
                    this.count(code);
                }
            }
            Poll::Ready(Some(Err(status))) => this.count(status.code()),
            Poll::Ready(None) => this.count(Code::Unknown),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that counts the bytes it brings.
struct Received {
    inner: tonic::body::Body,
}

impl Body for Received {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                grpc_counters().received_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Handled {
    /// The client went away before the call ended: grpc-go's handler sees its context canceled.
    fn drop(&mut self) {
        self.count(Code::Cancelled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_etcds_methods() {
        let put = GrpcCounters::method("/etcdserverpb.KV/Put").map(|m| METHODS[m]);
        assert_eq!(put, Some(("etcdserverpb.KV", "Put", UNARY)));
        let watch = GrpcCounters::method("/etcdserverpb.Watch/Watch").map(|m| METHODS[m].2);
        assert_eq!(watch, Some(BIDI_STREAM));
        assert_eq!(GrpcCounters::method("/metrics"), None);
        assert_eq!(GrpcCounters::method("/raftpb.RaftPeer/Vote"), None);
    }

    #[test]
    fn codes_are_named_as_grpc_go_names_them() {
        assert_eq!(CODES[Code::Cancelled as usize], "Canceled");
        assert_eq!(CODES[Code::Unauthenticated as usize], "Unauthenticated");
        assert_eq!(CODES[Code::ResourceExhausted as usize], "ResourceExhausted");
    }
}
