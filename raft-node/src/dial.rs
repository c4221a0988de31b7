//! How this member dials its peers: from its own peer IP (so that a test harness can cut the link between
//! two members by address without touching clients), and over TLS for `https://` peer URLs; and how every
//! TCP socket it dials or accepts is set up ([`tune`]).
//!
//! # Retransmissions on lossy links
//!
//! Linux doubles a TCP segment's retransmission timeout each time it is lost again (200 ms, 400 ms,
//! 800 ms...), so on a link losing a fifth of its packets one connection in a few hundred losses goes
//! silent for 1.4 s or more: longer than the election timeout, and an etcd client's two-second request
//! timeouts followed (seen in the `loss` nemesis runs: a write forwarded to the leader timed out, and a
//! leader whose two follower links stalled at once lost its quorum). Raft's messages are small and
//! rarely more than a few segments in flight, which is what Linux calls a thin stream, and for thin
//! streams `TCP_THIN_LINEAR_TIMEOUTS` keeps the timeout from doubling for the first six
//! retransmissions. Both ends set it, as each sends: the leader its appends, the follower its answers.
//! It is no cure: Linux counts a stream as thin only while fewer than four segments wait for their
//! acknowledgement, which a busy HTTP/2 connection with retries exceeds, and alone it changed nothing
//! measurable in the `loss` runs (4 of 14 failed, against 5 of 14 without). What does help is not to
//! queue behind the lost segment at all: several connections per peer ([`crate::lanes`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::{TcpSocket, TcpStream};
use tonic::transport::{Channel, Endpoint};
use tracing::warn;

use crate::tls::is_https;

/// Makes channels to peer URLs.
#[derive(Clone, Debug, Default)]
pub struct PeerDialer {
    local_ip: Option<IpAddr>,
    /// For `https://` peers; `None` when this member has no peer TLS configured.
    tls: Option<Arc<ClientConfig>>,
}

impl PeerDialer {
    pub fn new(local_ip: Option<IpAddr>, tls: Option<Arc<ClientConfig>>) -> Self {
        Self { local_ip, tls }
    }

    pub fn local_ip(&self) -> Option<IpAddr> {
        self.local_ip
    }

    /// A channel to `url` that connects on first use and reconnects by itself, or `None` when the URL does
    /// not parse or is `https://` while this member has no peer TLS.
    pub fn channel(&self, url: &str) -> Option<Channel> {
        if let Some(path) = url.trim().strip_prefix("unix://") {
            // tonic wants an http URI; the connector ignores it and dials the socket.
            let endpoint = Endpoint::from_static("http://unix.socket");
            return Some(endpoint.connect_with_connector_lazy(UnixConnector(path.into())));
        }
        if !is_https(url) {
            let endpoint = Endpoint::from_shared(url.to_string()).ok()?;
            return Some(endpoint.connect_with_connector_lazy(PlainConnector { local_ip: self.local_ip }));
        }
        let Some(config) = self.tls.clone() else {
            warn!(url, "cannot dial an https:// peer without peer TLS (--peer-trusted-ca-file, --peer-cert-file)");
            return None;
        };
        // tonic sees plain `http://`: the connector does TLS.
        let endpoint = Endpoint::from_shared(format!("http://{}", url.trim().trim_start_matches("https://"))).ok()?;
        Some(endpoint.connect_with_connector_lazy(PeerConnector { config, local_ip: self.local_ip }))
    }
}

/// Sets up a TCP connection this member dialed or accepted: no Nagle (a small answer would wait for the
/// other end's delayed ACK, about 40 ms on Linux) and linear retransmission timeouts while the stream is
/// thin (see the module doc).
pub fn tune(tcp: &TcpStream) -> io::Result<()> {
    tcp.set_nodelay(true)?;
    socket2::SockRef::from(tcp).set_tcp_thin_linear_timeouts(true)
}

/// TCP to `uri`'s host and port from `local_ip`, set up by [`tune`].
async fn dial_tcp(uri: &http::Uri, default_port: u16, local_ip: Option<IpAddr>) -> io::Result<(String, TcpStream)> {
    let host = uri.host().ok_or_else(|| io::Error::other("peer URL has no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(default_port);
    let remote = tokio::net::lookup_host((host.as_str(), port))
        .await?
        .next()
        .ok_or_else(|| io::Error::other(format!("{host} resolves to no address")))?;
    let socket = if remote.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if let Some(ip) = local_ip {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    let tcp = socket.connect(remote).await?;
    tune(&tcp)?;
    Ok((host, tcp))
}

/// Dials `http://` peers for tonic: TCP from this member's own peer IP (so that a harness can cut a link by
/// address), set up by [`tune`].
#[derive(Clone)]
struct PlainConnector {
    local_ip: Option<IpAddr>,
}

/// Dials `https://` peers for tonic: TCP as [`PlainConnector`], then TLS with the URL's host as the server
/// name.
#[derive(Clone)]
struct PeerConnector {
    config: Arc<ClientConfig>,
    local_ip: Option<IpAddr>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Dials a `unix://` peer's socket, whatever URI tonic asks for.
#[derive(Clone)]
struct UnixConnector(std::path::PathBuf);

impl tower_service::Service<http::Uri> for UnixConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move { Ok(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?)) })
    }
}

impl tower_service::Service<http::Uri> for PlainConnector {
    type Response = hyper_util::rt::TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let local_ip = self.local_ip;
        Box::pin(async move {
            let (_, tcp) = dial_tcp(&uri, 80, local_ip).await?;
            Ok(hyper_util::rt::TokioIo::new(tcp))
        })
    }
}

impl tower_service::Service<http::Uri> for PeerConnector {
    type Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (config, local_ip) = (self.config.clone(), self.local_ip);
        Box::pin(async move {
            let (host, tcp) = dial_tcp(&uri, 443, local_ip).await?;
            let name = ServerName::try_from(host)?;
            let stream = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_service::Service;

    fn thin_and_no_delay(tcp: &TcpStream) -> (bool, bool) {
        let socket = socket2::SockRef::from(tcp);
        (socket.tcp_thin_linear_timeouts().expect("getsockopt"), tcp.nodelay().expect("getsockopt"))
    }

    #[tokio::test]
    async fn peer_connections_retransmit_linearly_without_nagle_at_both_ends() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let uri: http::Uri = format!("http://{}", listener.local_addr().expect("addr")).parse().expect("uri");
        let mut connector = PlainConnector { local_ip: Some("127.0.0.1".parse().expect("ip")) };
        let (dialed, accepted) = tokio::join!(connector.call(uri), listener.accept());
        let dialed = dialed.expect("dial").into_inner();
        assert_eq!(thin_and_no_delay(&dialed), (true, true), "the dialed end");
        let (accepted, _) = accepted.expect("accept");
        assert_eq!(thin_and_no_delay(&accepted), (false, false), "a socket as the kernel hands it over");
        tune(&accepted).expect("tune");
        assert_eq!(thin_and_no_delay(&accepted), (true, true), "the accepted end");
    }
}
