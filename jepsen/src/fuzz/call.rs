//! Raw gRPC calls: the request goes out as the bytes the generator encoded (a codec that passes bytes
//! through), and the answer comes back as its gRPC status or, for OK, the little that is compared: the
//! header's revision (unary) or the first response's meaningful fields (streams).

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use futures::StreamExt;
use prost::Message;
use proto::etcdserverpb as pb;
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::catalog::Shape;

/// Responses may be large (a Range over keys holding big values); anything up to this is read.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// What a server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// OK. `revision` is the response header's (unary calls); `detail` the compared fields of a stream's
    /// first response.
    Ok {
        revision: Option<i64>,
        detail: Option<String>,
    },
    Status {
        code: Code,
        message: String,
    },
    /// No answer within the call's timeout.
    Timeout,
    /// A stream that ended without a response or a status.
    Ended,
    /// An OK response that does not decode as the method's response.
    Garbled(String),
}

impl Answer {
    /// Whether this answer may mean the server is gone (the caller then checks the process).
    pub fn may_be_a_crash(&self) -> bool {
        match self {
            // A timeout already waited longer than a dying process takes.
            Answer::Ended => true,
            // etcd's own errors ("etcdserver: request timed out", "auth: permission denied") are answers.
            Answer::Status { code: Code::Unavailable, message } => !message.starts_with("etcdserver:"),
            Answer::Status { code: Code::Unknown | Code::Internal | Code::Cancelled, message } => {
                ["transport", "connect", "h2 protocol", "broken pipe", "reset", "closed"]
                    .iter()
                    .any(|word| message.contains(word))
            }
            _ => false,
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, Answer::Ok { .. })
    }
}

/// A codec whose messages are their encoded bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        *self
    }

    fn decoder(&mut self) -> RawCodec {
        *self
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Where and how to send one request.
pub struct Call<'a> {
    pub channel: &'a Channel,
    /// `/etcdserverpb.KV/Range`.
    pub path: &'a str,
    pub shape: Shape,
    pub body: Bytes,
    pub token: Option<&'a str>,
    pub timeout: Duration,
    /// A watch create's `watch_id`: a response echoing it shows `watch_id=requested`, so that answers to
    /// different ids fall into one class.
    pub requested_watch_id: Option<i64>,
}

/// Sends the request and reads the answer; never fails, every outcome is an [`Answer`].
pub async fn send(call: Call<'_>) -> Answer {
    let result = match call.shape {
        Shape::Unary => tokio::time::timeout(call.timeout, unary(&call)).await,
        Shape::Watch | Shape::KeepAlive => tokio::time::timeout(call.timeout, first_message(&call)).await,
    };
    let bytes = match result {
        Err(_) => return Answer::Timeout,
        Ok(Err(status)) => return Answer::Status { code: status.code(), message: status.message().to_string() },
        Ok(Ok(None)) => return Answer::Ended,
        Ok(Ok(Some(bytes))) => bytes,
    };
    match call.shape {
        Shape::Unary => match HeaderOnly::decode(bytes) {
            Ok(response) => Answer::Ok { revision: response.header.map(|h| h.revision), detail: None },
            Err(err) => Answer::Garbled(err.to_string()),
        },
        Shape::Watch => match pb::WatchResponse::decode(bytes) {
            Ok(response) => {
                Answer::Ok { revision: None, detail: Some(watch_detail(&response, call.requested_watch_id)) }
            }
            Err(err) => Answer::Garbled(err.to_string()),
        },
        Shape::KeepAlive => match pb::LeaseKeepAliveResponse::decode(bytes) {
            // A TTL of 0 or below says the lease does not exist; its exact value ticks down.
            Ok(response) => {
                let detail = if response.ttl > 0 { "lease exists" } else { "lease missing" };
                Answer::Ok { revision: None, detail: Some(detail.to_string()) }
            }
            Err(err) => Answer::Garbled(err.to_string()),
        },
    }
}

/// A unary call's OK response, as its bytes (for probes that read more than the header), or the [`Answer`]
/// that came instead.
pub async fn response(call: Call<'_>) -> Result<Bytes, Answer> {
    match tokio::time::timeout(call.timeout, unary(&call)).await {
        Err(_) => Err(Answer::Timeout),
        Ok(Err(status)) => Err(Answer::Status { code: status.code(), message: status.message().to_string() }),
        Ok(Ok(None)) => Err(Answer::Ended),
        Ok(Ok(Some(bytes))) => Ok(bytes),
    }
}

/// Every etcd response starts with its header (field 1); the rest is skipped while decoding.
#[derive(Clone, PartialEq, Message)]
struct HeaderOnly {
    #[prost(message, optional, tag = "1")]
    header: Option<pb::ResponseHeader>,
}

/// The fields of a watch response that do not depend on timing or ids: created/canceled, the watch id
/// (per stream, so the same on both), why it was canceled and the compaction it hit.
pub fn watch_detail(response: &pb::WatchResponse, requested: Option<i64>) -> String {
    let watch_id = match requested {
        Some(id) if id == response.watch_id => "requested".to_string(),
        _ => response.watch_id.to_string(),
    };
    format!(
        "created={} canceled={} watch_id={watch_id} compact_revision={} cancel_reason={:?}",
        response.created, response.canceled, response.compact_revision, response.cancel_reason
    )
}

fn client(channel: &Channel) -> Grpc<Channel> {
    Grpc::new(channel.clone()).max_decoding_message_size(MAX_RESPONSE_BYTES)
}

fn path(call: &Call<'_>) -> Result<PathAndQuery, Status> {
    PathAndQuery::try_from(call.path).map_err(|err| Status::internal(format!("bad path {}: {err}", call.path)))
}

fn attach_token<T>(request: &mut tonic::Request<T>, token: Option<&str>) {
    // Tokens come from the servers or from the harness: ASCII. One that is not is left off.
    if let Some(value) = token.and_then(|t| MetadataValue::try_from(t).ok()) {
        request.metadata_mut().insert("token", value);
    }
}

async fn unary(call: &Call<'_>) -> Result<Option<Bytes>, Status> {
    let mut grpc = client(call.channel);
    grpc.ready().await.map_err(|err| Status::unavailable(format!("not ready: {err}")))?;
    let mut request = tonic::Request::new(call.body.clone());
    attach_token(&mut request, call.token);
    let response = grpc.unary(request, path(call)?, RawCodec).await?;
    Ok(Some(response.into_inner()))
}

/// Opens the stream, sends the one request and keeps the sending side open (a closed side could end the
/// stream before the server answers), then reads the first response. When the call returns (or its
/// timeout drops it) the sending side ends too, so that the stream is reset at the server.
///
/// Dropping the response alone does not reset the stream: hyper's task that copies the request into the
/// stream holds it open until the request ends. With a request that never ended, every Watch and
/// LeaseKeepAlive stayed open on the one shared HTTP/2 connection for the rest of the session, its
/// watcher still sending; the responses nobody read piled up until h2's budget of small DATA frames
/// (0.4.16+) ran out and the client closed the whole connection (GOAWAY, ENHANCE_YOUR_CALM): requests in
/// flight then failed as `ResourceExhausted: h2 protocol error`, `Cancelled`, on one side only.
async fn first_message(call: &Call<'_>) -> Result<Option<Bytes>, Status> {
    let mut grpc = client(call.channel);
    grpc.ready().await.map_err(|err| Status::unavailable(format!("not ready: {err}")))?;
    // The requests end when `_end_requests` is dropped, with this call.
    let (_end_requests, requests_end) = tokio::sync::oneshot::channel::<()>();
    let end = futures::stream::once(requests_end).filter_map(|_| std::future::ready(None));
    let requests = futures::stream::once(std::future::ready(call.body.clone())).chain(end);
    let mut request = tonic::Request::new(requests);
    attach_token(&mut request, call.token);
    let response = grpc.streaming(request, path(call)?, RawCodec).await?;
    response.into_inner().message().await
}

/// Authenticates `user` and returns the token, if the server gives one.
pub async fn authenticate(channel: &Channel, user: &str, password: &str, timeout: Duration) -> Option<String> {
    let body = pb::AuthenticateRequest { name: user.into(), password: password.into() }.encode_to_vec();
    let call = Call {
        channel,
        path: "/etcdserverpb.Auth/Authenticate",
        shape: Shape::Unary,
        body: Bytes::from(body),
        token: None,
        timeout,
        requested_watch_id: None,
    };
    let bytes = match tokio::time::timeout(timeout, unary(&call)).await {
        Ok(Ok(Some(bytes))) => bytes,
        _ => return None,
    };
    pb::AuthenticateResponse::decode(bytes).ok().map(|r| r.token).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use futures::Stream;
    use tonic::{Request, Response, Streaming};

    use super::*;

    /// A Watch service that answers each stream once and keeps it open, as a watch does; it counts the
    /// streams the client has reset (the server then drops the response).
    #[derive(Clone, Default)]
    struct OpenWatch {
        closed: Arc<AtomicUsize>,
    }

    /// Counts a response stream dropped.
    struct Closed(Arc<AtomicUsize>);

    impl Drop for Closed {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    type WatchResponses = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;

    #[tonic::async_trait]
    impl pb::watch_server::Watch for OpenWatch {
        type WatchStream = WatchResponses;

        async fn watch(&self, _: Request<Streaming<pb::WatchRequest>>) -> Result<Response<WatchResponses>, Status> {
            let closed = Closed(self.closed.clone());
            let first = pb::WatchResponse { created: true, watch_id: 1, ..Default::default() };
            let responses =
                futures::stream::once(std::future::ready(Ok(first))).chain(futures::stream::once(async move {
                    let _closed = closed;
                    std::future::pending::<Result<pb::WatchResponse, Status>>().await
                }));
            Ok(Response::new(Box::pin(responses)))
        }
    }

    #[tokio::test]
    async fn a_stream_is_reset_once_its_first_response_is_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let incoming = futures::stream::unfold(listener, |listener| async move {
            Some((listener.accept().await.map(|(stream, _)| stream), listener))
        });
        let service = OpenWatch::default();
        let server = tonic::transport::Server::builder()
            .add_service(pb::watch_server::WatchServer::new(service.clone()))
            .serve_with_incoming(incoming);
        let server = tokio::spawn(server);
        let channel = crate::client::channel(&url).expect("channel");
        let body = Bytes::from(pb::WatchRequest::default().encode_to_vec());
        const CALLS: usize = 5;
        for _ in 0..CALLS {
            let call = Call {
                channel: &channel,
                path: "/etcdserverpb.Watch/Watch",
                shape: Shape::Watch,
                body: body.clone(),
                token: None,
                timeout: Duration::from_secs(5),
                requested_watch_id: Some(1),
            };
            let answer = send(call).await;
            assert!(answer.is_ok(), "{answer:?}");
        }
        // The resets travel after the answers: a generous bound, not a race.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while service.closed.load(Ordering::SeqCst) < CALLS && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(service.closed.load(Ordering::SeqCst), CALLS, "streams still open at the server");
        server.abort();
    }

    #[test]
    fn a_watch_response_echoing_the_requested_id_says_so() {
        let response = pb::WatchResponse { created: true, watch_id: 42, ..Default::default() };
        assert_eq!(
            watch_detail(&response, Some(42)),
            "created=true canceled=false watch_id=requested compact_revision=0 cancel_reason=\"\""
        );
        assert!(watch_detail(&response, Some(0)).contains("watch_id=42"));
        assert!(watch_detail(&response, None).contains("watch_id=42"));
    }
}
