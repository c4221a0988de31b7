//! The KV service's routes, with `Range` answered outside tonic's codec.
//!
//! tonic encodes a unary answer into one buffer grown by doubling, after the handler built the whole
//! `RangeResponse`: a large Range held its values twice or more at the peak. Here the answer's `kvs`
//! come from the store already encoded ([`MvccStore::range_encoded`](crate::MvccStore::range_encoded)),
//! in pieces that go out as HTTP/2 data frames as they are: the gRPC length prefix and the header first,
//! then the pieces, then `grpc-status: 0` in the trailers. The request is read as tonic reads it, with
//! tonic's answers to malformed frames. Every other method goes to the generated server.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::{Body, Frame};
use prost::Message;
use proto::etcdserverpb as pb;
use proto::etcdserverpb::kv_server::KvServer;
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tonic::Status;

use super::auth_request::token_of;
use super::kv::KvService;
use crate::consensus::Consensus;
use crate::store::EncodedRange;

const RANGE_PATH: &str = "/etcdserverpb.KV/Range";
/// gRPC's frame prefix: a compression flag and a 4-byte big-endian length.
const PREFIX_LEN: usize = 5;
/// grpc-go's default (and etcd's) largest message a server sends: `math.MaxInt32`.
const MAX_SEND_BYTES: usize = i32::MAX as usize;

/// `etcdserverpb.KV`, as the generated [`KvServer`] but for `Range` (see the module doc).
pub struct KvRoutes<C: Consensus> {
    generated: KvServer<KvService<C>>,
    service: Arc<KvService<C>>,
}

impl<C: Consensus> KvRoutes<C> {
    pub fn new(service: KvService<C>) -> Self {
        let service = Arc::new(service);
        let generated = KvServer::from_arc(service.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Self { generated, service }
    }
}

impl<C: Consensus> Clone for KvRoutes<C> {
    fn clone(&self) -> Self {
        Self { generated: self.generated.clone(), service: self.service.clone() }
    }
}

impl<C: Consensus> NamedService for KvRoutes<C> {
    const NAME: &'static str = <KvServer<KvService<C>> as NamedService>::NAME;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<C: Consensus> tower_service::Service<http::Request<tonic::body::Body>> for KvRoutes<C> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower_service::Service::<http::Request<tonic::body::Body>>::poll_ready(&mut self.generated, cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if request.uri().path() != RANGE_PATH {
            return Box::pin(self.generated.call(request));
        }
        let service = self.service.clone();
        Box::pin(async move { Ok(range(&service, request).await.unwrap_or_else(Status::into_http)) })
    }
}

async fn range<C: Consensus>(
    service: &KvService<C>,
    request: http::Request<tonic::body::Body>,
) -> Result<http::Response<tonic::body::Body>, Status> {
    let (parts, body) = request.into_parts();
    refuse_compressed(&parts.headers)?;
    let message = read_message(body).await?;
    let req = pb::RangeRequest::decode(message).map_err(|err| Status::internal(err.to_string()))?;
    let token = token_of(&MetadataMap::from_headers(parts.headers));
    let (header, answer) = service.range_encoded(token.as_deref(), &req).await?;
    let body = AnswerBody::new(&header, answer)?;
    let mut response = http::Response::new(tonic::body::Body::new(body));
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    Ok(response)
}

/// This server accepts no compressed requests; tonic's answer to one.
fn refuse_compressed(headers: &http::HeaderMap) -> Result<(), Status> {
    match headers.get("grpc-encoding").map(http::HeaderValue::as_bytes) {
        None | Some(b"identity") => Ok(()),
        Some(other) => {
            let name = String::from_utf8_lossy(other);
            let mut status =
                Status::unimplemented(format!("Content is compressed with `{name}` which isn't supported"));
            status
                .metadata_mut()
                .insert("grpc-accept-encoding", tonic::metadata::MetadataValue::from_static("identity"));
            Err(status)
        }
    }
}

/// The request's one message, from its frames (tonic's answers when they are malformed).
async fn read_message(mut body: tonic::body::Body) -> Result<Bytes, Status> {
    let mut buf = BytesMut::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if let Ok(data) = frame?.into_data() {
            buf.put(data);
        }
    }
    if buf.is_empty() {
        return Err(Status::internal("Missing request message."));
    }
    if buf.len() < PREFIX_LEN {
        return Err(Status::internal("Unexpected EOF decoding stream."));
    }
    match buf.get_u8() {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ))
        }
        flag => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {flag} (valid flags are 0 and 1), while sending request"
            )))
        }
    }
    let len = buf.get_u32() as usize;
    if buf.len() < len {
        return Err(Status::internal("Unexpected EOF decoding stream."));
    }
    Ok(buf.split_to(len).freeze())
}

/// A Range answer's frames: the gRPC prefix with the header field, the `kvs` pieces, `more` and
/// `count`, then the trailers.
struct AnswerBody {
    frames: VecDeque<Bytes>,
    trailers: Option<http::HeaderMap>,
}

impl AnswerBody {
    fn new(header: &pb::ResponseHeader, answer: EncodedRange) -> Result<Self, Status> {
        let tail = answer.tail();
        let len = prost::encoding::message::encoded_len(1, header) + answer.kvs_len + tail.len();
        let len32 = u32::try_from(len).ok().filter(|_| len <= MAX_SEND_BYTES).ok_or_else(|| {
            Status::resource_exhausted(format!(
                "grpc: trying to send message larger than max ({len} vs. {MAX_SEND_BYTES})"
            ))
        })?;
        let mut head = BytesMut::with_capacity(PREFIX_LEN + header.encoded_len() + 2);
        head.put_u8(0);
        head.put_u32(len32);
        prost::encoding::message::encode(1, header, &mut head);
        let mut frames = VecDeque::with_capacity(answer.kvs.len() + 2);
        frames.push_back(head.freeze());
        frames.extend(answer.kvs);
        if !tail.is_empty() {
            frames.push_back(Bytes::from(tail));
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        Ok(Self { frames, trailers: Some(trailers) })
    }
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(data) = self.frames.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(self.trailers.take().map(|trailers| Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.trailers.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut out = vec![flag];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    async fn read(bytes: Vec<u8>) -> Result<Bytes, Status> {
        read_message(tonic::body::Body::new(one_frame(bytes))).await
    }

    /// A body of one data frame.
    fn one_frame(bytes: Vec<u8>) -> AnswerBody {
        AnswerBody { frames: VecDeque::from([Bytes::from(bytes)]), trailers: None }
    }

    #[tokio::test]
    async fn requests_are_read_as_tonic_reads_them() {
        let req = pb::RangeRequest { key: b"a".to_vec(), limit: 3, ..Default::default() };
        let message = read(framed(0, &req.encode_to_vec())).await.expect("a message");
        assert_eq!(pb::RangeRequest::decode(message).expect("decodes"), req);
        let cases: [(Vec<u8>, &str); 4] = [
            (Vec::new(), "Missing request message."),
            (vec![0, 0, 0], "Unexpected EOF decoding stream."),
            (framed(1, b"x"), "compressed-flag but no grpc-encoding"),
            (framed(7, b"x"), "invalid compression flag: 7"),
        ];
        for (bytes, text) in cases {
            let status = read(bytes).await.expect_err("refused");
            assert_eq!(status.code(), tonic::Code::Internal);
            assert!(status.message().contains(text), "{:?} does not say {text:?}", status.message());
        }
        let mut cut = framed(0, b"0123456789");
        cut.truncate(9);
        assert_eq!(read(cut).await.expect_err("cut short").message(), "Unexpected EOF decoding stream.");
    }

    #[test]
    fn compressed_requests_get_tonics_answer() {
        let mut headers = http::HeaderMap::new();
        assert!(refuse_compressed(&headers).is_ok());
        headers.insert("grpc-encoding", http::HeaderValue::from_static("identity"));
        assert!(refuse_compressed(&headers).is_ok());
        headers.insert("grpc-encoding", http::HeaderValue::from_static("gzip"));
        let status = refuse_compressed(&headers).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Unimplemented);
        assert_eq!(status.message(), "Content is compressed with `gzip` which isn't supported");
    }

    /// The frames carry one gRPC message whose prefix says its length and whose bytes decode to the
    /// answer, with the status in the trailers.
    #[tokio::test]
    async fn answers_are_one_grpc_message_then_an_ok_status() {
        let kv =
            proto::mvccpb::KeyValue { key: b"k".to_vec(), value: b"v".to_vec(), mod_revision: 2, ..Default::default() };
        let mut kvs = Vec::new();
        prost::encoding::message::encode(2, &kv, &mut kvs);
        let answer =
            EncodedRange { kvs_len: kvs.len(), kvs: vec![Bytes::from(kvs)], more: true, count: 4, revision: 2 };
        let header = pb::ResponseHeader { cluster_id: 9, member_id: 8, revision: 2, raft_term: 3 };
        let mut body = AnswerBody::new(&header, answer).expect("fits");
        let mut bytes = Vec::new();
        let mut trailers = None;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            match frame.expect("a frame").into_data() {
                Ok(data) => bytes.extend_from_slice(&data),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        assert!(body.is_end_stream());
        assert_eq!(trailers.expect("trailers").get("grpc-status").expect("a status"), "0");
        assert_eq!(bytes[0], 0, "not compressed");
        let len = u32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes")) as usize;
        assert_eq!(len, bytes.len() - PREFIX_LEN);
        let expected = pb::RangeResponse { header: Some(header), kvs: vec![kv], more: true, count: 4 };
        assert_eq!(pb::RangeResponse::decode(&bytes[PREFIX_LEN..]).expect("decodes"), expected);
    }
}
