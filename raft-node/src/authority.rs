//! Accepting the `:authority` etcdctl sends when it dials a member by URL.
//!
//! etcd's Go client dials a single endpoint (`endpoint status --cluster`, `defrag --cluster`, ...) as
//! `passthrough:///http://host:port`, so its HTTP/2 requests carry `:authority: http://host:port` (and a
//! socket path for `unix:///path` endpoints). grpc-go
//! servers accept that; the `h2` crate under tonic resets such streams as malformed. This wrapper sits
//! between the TCP socket and the HTTP/2 server and rewrites the inbound header blocks: every block is
//! decoded (HPACK state must stay in step with the client), and once a block carries an authority with a
//! scheme, that block and all later ones are re-encoded without the dynamic table, with the scheme
//! stripped. Connections that never send such an authority pass through byte for byte, and a connection
//! whose first authority has no scheme is not parsed any further (a gRPC client keeps one authority per
//! connection; decoding every block would cost every request).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// HTTP/2's connection preface.
const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// The largest frame payload we emit: HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which the server keeps.
const MAX_FRAME: usize = 16_384;

/// A header block being collected from a HEADERS frame and its CONTINUATIONs.
struct PendingBlock {
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The frames as received, to pass through untouched when no rewrite is needed.
    raw: Vec<u8>,
}

/// Rewrites the client-to-server direction of one HTTP/2 connection.
struct Rewriter {
    decoder: loona_hpack::Decoder<'static>,
    preface_left: usize,
    /// Once true, every header block is re-encoded (the server's HPACK table no longer follows the client's).
    rewriting: bool,
    /// Once true, everything passes through unparsed: the connection's authority needs no rewrite.
    passthrough: bool,
    pending: Option<PendingBlock>,
}

impl Rewriter {
    fn new() -> Self {
        Self {
            decoder: loona_hpack::Decoder::new(),
            preface_left: PREFACE_LEN,
            rewriting: false,
            passthrough: false,
            pending: None,
        }
    }

    /// Moves every complete unit of `input` (preface bytes, whole frames) to `output`, rewritten as needed.
    fn process(&mut self, input: &mut BytesMut, output: &mut BytesMut) -> io::Result<()> {
        if self.passthrough {
            output.extend_from_slice(&input.split());
            return Ok(());
        }
        if self.preface_left > 0 {
            let n = self.preface_left.min(input.len());
            let seen = PREFACE_LEN - self.preface_left;
            if input[..n] != PREFACE[seen..seen + n] {
                // Not HTTP/2 (an HTTP/1.1 request for /health, /metrics, ...): nothing to rewrite.
                self.passthrough = true;
                output.extend_from_slice(&input.split());
                return Ok(());
            }
            output.extend_from_slice(&input.split_to(n));
            self.preface_left -= n;
            if self.preface_left > 0 {
                return Ok(());
            }
        }
        while input.len() >= FRAME_HEADER_LEN {
            if self.passthrough {
                output.extend_from_slice(&input.split());
                return Ok(());
            }
            let len = (usize::from(input[0]) << 16) | (usize::from(input[1]) << 8) | usize::from(input[2]);
            if input.len() < FRAME_HEADER_LEN + len {
                break;
            }
            let frame = input.split_to(FRAME_HEADER_LEN + len);
            let (kind, flags) = (frame[3], frame[4]);
            let stream_id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
            match kind {
                TYPE_HEADERS => self.headers(&frame, flags, stream_id, output)?,
                TYPE_CONTINUATION => self.continuation(&frame, flags, output)?,
                _ => output.extend_from_slice(&frame),
            }
        }
        Ok(())
    }

    fn headers(&mut self, frame: &[u8], flags: u8, stream_id: u32, output: &mut BytesMut) -> io::Result<()> {
        let mut payload = &frame[FRAME_HEADER_LEN..];
        let mut pad = 0;
        if flags & FLAG_PADDED != 0 {
            pad = usize::from(*payload.first().ok_or_else(|| malformed("HEADERS without its pad length"))?);
            payload = &payload[1..];
        }
        let mut priority = None;
        if flags & FLAG_PRIORITY != 0 {
            let bytes: [u8; 5] =
                payload.get(..5).and_then(|p| p.try_into().ok()).ok_or_else(|| malformed("short HEADERS"))?;
            priority = Some(bytes);
            payload = &payload[5..];
        }
        let fragment = payload.get(..payload.len().checked_sub(pad).ok_or_else(|| malformed("HEADERS padding"))?);
        let fragment = fragment.ok_or_else(|| malformed("HEADERS padding"))?;
        self.pending = Some(PendingBlock {
            stream_id,
            end_stream: flags & FLAG_END_STREAM != 0,
            priority,
            fragment: fragment.to_vec(),
            raw: frame.to_vec(),
        });
        if flags & FLAG_END_HEADERS != 0 {
            self.finish(output)?;
        }
        Ok(())
    }

    fn continuation(&mut self, frame: &[u8], flags: u8, output: &mut BytesMut) -> io::Result<()> {
        let Some(pending) = self.pending.as_mut() else {
            // Not ours to judge: let the server reject it.
            output.extend_from_slice(frame);
            return Ok(());
        };
        pending.fragment.extend_from_slice(&frame[FRAME_HEADER_LEN..]);
        pending.raw.extend_from_slice(frame);
        if flags & FLAG_END_HEADERS != 0 {
            self.finish(output)?;
        }
        Ok(())
    }

    /// A whole header block arrived: decode it, and pass it on as received or re-encoded.
    fn finish(&mut self, output: &mut BytesMut) -> io::Result<()> {
        let Some(block) = self.pending.take() else {
            return Ok(());
        };
        let mut headers = self.decoder.decode(&block.fragment).map_err(|e| malformed(&format!("HPACK: {e:?}")))?;
        for (name, value) in &mut headers {
            if name.as_slice() == b":authority" {
                if let Some(stripped) = strip_scheme(value) {
                    *value = stripped;
                    self.rewriting = true;
                } else if !self.rewriting {
                    self.passthrough = true;
                }
            }
        }
        if !self.rewriting {
            output.extend_from_slice(&block.raw);
            return Ok(());
        }
        let encoded = encode_literals(&headers);
        let mut chunks = encoded.chunks(MAX_FRAME - 5).peekable();
        let mut first = true;
        while let Some(chunk) = chunks.next().or(if first { Some(&[][..]) } else { None }) {
            let last = chunks.peek().is_none();
            let mut flags = if last { FLAG_END_HEADERS } else { 0 };
            let kind = if first { TYPE_HEADERS } else { TYPE_CONTINUATION };
            let priority = if first { block.priority } else { None };
            if first && block.end_stream {
                flags |= FLAG_END_STREAM;
            }
            if priority.is_some() {
                flags |= FLAG_PRIORITY;
            }
            let len = chunk.len() + priority.map_or(0, |p| p.len());
            output.put_uint(len as u64, 3);
            output.put_u8(kind);
            output.put_u8(flags);
            output.put_u32(block.stream_id);
            if let Some(priority) = priority {
                output.extend_from_slice(&priority);
            }
            output.extend_from_slice(chunk);
            first = false;
            if last {
                break;
            }
        }
        Ok(())
    }
}

/// `http://host:port` (or `https://…`, with an optional trailing `/`) → `host:port`; a socket path (what
/// the Go client sends when it dials `unix:///path`) → `localhost`; `None` when the value is a plain
/// authority already.
fn strip_scheme(value: &[u8]) -> Option<Vec<u8>> {
    let Some(at) = value.windows(3).position(|w| w == b"://") else {
        return value.contains(&b'/').then(|| b"localhost".to_vec());
    };
    let rest = &value[at + 3..];
    let rest = rest.strip_suffix(b"/").unwrap_or(rest);
    if rest.contains(&b'/') {
        return Some(b"localhost".to_vec());
    }
    Some(rest.to_vec())
}

/// HPACK "literal header field without indexing, new name", no Huffman coding: needs no table on either
/// side.
fn encode_literals(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0);
        encode_string(name, &mut out);
        encode_string(value, &mut out);
    }
    out
}

fn encode_string(bytes: &[u8], out: &mut Vec<u8>) {
    encode_integer(bytes.len(), 7, 0, out);
    out.extend_from_slice(bytes);
}

/// HPACK's prefixed integer (RFC 7541 §5.1) with `prefix` bits in the first byte, whose other bits are
/// `first`.
fn encode_integer(mut value: usize, prefix: u8, first: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value % 0x80) as u8 | 0x80);
        value /= 0x80;
    }
    out.push(value as u8);
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed HTTP/2 from client: {what}"))
}

/// A client connection whose inbound HTTP/2 is passed through [`Rewriter`].
pub struct AuthorityFix<T> {
    inner: T,
    rewriter: Rewriter,
    raw: BytesMut,
    ready: BytesMut,
}

impl<T> AuthorityFix<T> {
    pub fn new(inner: T) -> Self {
        Self { inner, rewriter: Rewriter::new(), raw: BytesMut::with_capacity(16 * 1024), ready: BytesMut::new() }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityFix<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready[..n]);
                this.ready.advance(n);
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    // End of stream: whatever is left unparsed goes to the server to judge.
                    let rest = this.raw.split();
                    this.ready.extend_from_slice(&rest);
                    if this.ready.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(Ok(())) => {
                    this.raw.extend_from_slice(read.filled());
                    this.rewriter.process(&mut this.raw, &mut this.ready)?;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for AuthorityFix<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn headers(authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":authority".to_vec(), authority.as_bytes().to_vec()),
            (b":path".to_vec(), b"/etcdserverpb.Maintenance/Status".to_vec()),
        ]
    }

    /// Runs `input` through a rewriter in chunks of `split` bytes; returns the server's view: decoded header
    /// blocks and the other frames, in order.
    fn server_view(input: &[u8], split: usize) -> (Vec<Vec<(Vec<u8>, Vec<u8>)>>, Vec<Vec<u8>>) {
        let mut rewriter = Rewriter::new();
        let (mut raw, mut out) = (BytesMut::new(), BytesMut::new());
        for chunk in input.chunks(split) {
            raw.extend_from_slice(chunk);
            rewriter.process(&mut raw, &mut out).expect("valid input");
        }
        assert!(raw.is_empty());
        assert_eq!(&out[..PREFACE_LEN], PREFACE);
        let mut rest = &out[PREFACE_LEN..];
        let mut server = loona_hpack::Decoder::new();
        let (mut blocks, mut others) = (Vec::new(), Vec::new());
        let mut block = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            let (this, next) = rest.split_at(FRAME_HEADER_LEN + len);
            match this[3] {
                TYPE_HEADERS | TYPE_CONTINUATION => {
                    let skip = if this[4] & FLAG_PRIORITY != 0 { 5 } else { 0 };
                    block.extend_from_slice(&this[FRAME_HEADER_LEN + skip..]);
                    if this[4] & FLAG_END_HEADERS != 0 {
                        blocks.push(server.decode(&std::mem::take(&mut block)).expect("server decodes"));
                    }
                }
                _ => others.push(this.to_vec()),
            }
            rest = next;
        }
        (blocks, others)
    }

    #[test]
    fn authorities_with_a_scheme_are_stripped_and_the_tables_stay_in_step() {
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        let schemed = client.encode(headers("http://127.0.0.1:2379").iter().map(|(n, v)| (&n[..], &v[..])));
        // Split across a HEADERS and a CONTINUATION frame.
        let (a, b) = schemed.split_at(schemed.len() / 2);
        input.extend(frame(TYPE_HEADERS, 0, 1, a));
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b));
        input.extend(frame(0x0, FLAG_END_STREAM, 1, b"data"));
        // The client now refers to its dynamic table; the server must still see the right values.
        for stream in [3, 5] {
            let again = client.encode(headers("http://127.0.0.1:2379").iter().map(|(n, v)| (&n[..], &v[..])));
            input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, stream, &again));
        }

        for split in [1, 7, 64, input.len()] {
            let (blocks, others) = server_view(&input, split);
            assert_eq!(blocks, vec![headers("127.0.0.1:2379"); 3], "chunks of {split}");
            assert_eq!(others, vec![frame(0x0, FLAG_END_STREAM, 1, b"data")]);
        }
    }

    #[test]
    fn clean_connections_pass_through_byte_for_byte() {
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        for stream in [1u32, 3, 5] {
            let block = client.encode(headers("127.0.0.1:2379").iter().map(|(n, v)| (&n[..], &v[..])));
            input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, stream, &block));
            input.extend(frame(0x0, FLAG_END_STREAM, stream, &[0, 0, 0, 0, 0]));
        }
        let mut rewriter = Rewriter::new();
        let (mut raw, mut out) = (BytesMut::from(&input[..]), BytesMut::new());
        rewriter.process(&mut raw, &mut out).expect("valid input");
        assert_eq!(&out[..], &input[..]);
        assert!(rewriter.passthrough, "a connection without a schemed authority is no longer parsed");
    }

    #[test]
    fn http1_requests_pass_through_even_in_small_pieces() {
        let request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut rewriter = Rewriter::new();
        let mut out = BytesMut::new();
        for piece in request.chunks(3) {
            let mut raw = BytesMut::from(piece);
            rewriter.process(&mut raw, &mut out).expect("passed through");
            assert!(raw.is_empty(), "nothing is held back");
        }
        assert_eq!(&out[..], &request[..]);
    }

    #[test]
    fn integers_use_hpack_prefix_coding() {
        let cases: [(usize, u8, &[u8]); 3] = [(10, 5, &[10]), (1337, 5, &[31, 154, 10]), (127, 7, &[127, 0])];
        for (value, prefix, want) in cases {
            let mut out = Vec::new();
            encode_integer(value, prefix, 0, &mut out);
            assert_eq!(out, want, "{value} with a {prefix}-bit prefix");
        }
        assert_eq!(strip_scheme(b"http://10.0.0.1:2379/"), Some(b"10.0.0.1:2379".to_vec()));
        assert_eq!(strip_scheme(b"10.0.0.1:2379"), None);
        assert_eq!(strip_scheme(b"/run/etcd/client.sock"), Some(b"localhost".to_vec()));
        assert_eq!(strip_scheme(b"unix:///run/etcd/client.sock"), Some(b"localhost".to_vec()));
    }
}
