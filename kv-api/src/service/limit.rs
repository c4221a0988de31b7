//! gRPC's receive limit with grpc-go's answer: etcd's server refuses a message larger than
//! `--max-request-bytes` + 512 KiB with ResourceExhausted "grpc: received message larger than max (N vs. M)",
//! and clients match on that. tonic's own limit answers differently, so this wrapper reads the 5-byte gRPC
//! frame headers as the request body streams in and fails the body with grpc-go's status before the
//! oversized message is buffered.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tonic::Status;

/// Wraps a service so every message of its request bodies is checked against `limit` bytes.
#[derive(Clone, Debug)]
pub struct MessageLimit<S> {
    inner: S,
    limit: usize,
}

impl<S> MessageLimit<S> {
    pub fn new(inner: S, limit: usize) -> Self {
        Self { inner, limit }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for MessageLimit<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<tonic::body::Body>> for MessageLimit<S>
where
    S: tower_service::Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let limit = self.limit;
        self.inner.call(request.map(|body| tonic::body::Body::new(LimitedBody::new(body, limit))))
    }
}

/// Where the reader stands in the stream of length-prefixed gRPC messages.
#[derive(Debug, Default)]
struct FrameReader {
    header: [u8; 5],
    header_len: usize,
    /// Bytes of the current message still to come.
    remaining: u64,
}

impl FrameReader {
    /// Walks `chunk`; returns the length of the first message announced larger than `limit`.
    fn feed(&mut self, mut chunk: &[u8], limit: usize) -> Option<u64> {
        while !chunk.is_empty() {
            if self.remaining > 0 {
                let skip = chunk.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                chunk = &chunk[skip..];
                self.remaining -= skip as u64;
                continue;
            }
            let take = (5 - self.header_len).min(chunk.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&chunk[..take]);
            self.header_len += take;
            chunk = &chunk[take..];
            if self.header_len == 5 {
                let len =
                    u64::from(u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]));
                if len > limit as u64 {
                    return Some(len);
                }
                self.header_len = 0;
                self.remaining = len;
            }
        }
        None
    }
}

struct LimitedBody {
    inner: tonic::body::Body,
    limit: usize,
    reader: FrameReader,
}

impl LimitedBody {
    fn new(inner: tonic::body::Body, limit: usize) -> Self {
        Self { inner, limit, reader: FrameReader::default() }
    }
}

impl Body for LimitedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            if let Some(len) = this.reader.feed(data, this.limit) {
                let message = format!("grpc: received message larger than max ({len} vs. {})", this.limit);
                return Poll::Ready(Some(Err(Status::resource_exhausted(message))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: u32) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&len.to_be_bytes());
        out.extend(std::iter::repeat_n(7u8, len as usize));
        out
    }

    #[test]
    fn finds_oversized_messages_across_chunk_boundaries() {
        let mut stream = frame(10);
        stream.extend(frame(3));
        stream.extend(frame(40));
        for split in [1, 2, 3, 5, 7, 16] {
            let mut reader = FrameReader::default();
            let found = stream.chunks(split).find_map(|chunk| reader.feed(chunk, 20));
            assert_eq!(found, Some(40), "chunks of {split}");
            let mut reader = FrameReader::default();
            assert_eq!(stream.chunks(split).find_map(|chunk| reader.feed(chunk, 40)), None, "chunks of {split}");
        }
    }
}
