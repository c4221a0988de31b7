//! How this member dials its peers: from its own peer IP (so that a test harness can cut the link between
//! two members by address without touching clients), and over TLS for `https://` peer URLs.

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
            let endpoint = Endpoint::from_shared(url.to_string()).ok()?.tcp_nodelay(true).local_address(self.local_ip);
            return Some(endpoint.connect_lazy());
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

/// Dials `https://` peers for tonic: TCP from this member's own peer IP (so that a harness can cut a link by
/// address), then TLS with the URL's host as the server name.
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
            let host = uri.host().ok_or_else(|| io::Error::other("peer URL has no host"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
            let port = uri.port_u16().unwrap_or(443);
            let remote = tokio::net::lookup_host((host.as_str(), port))
                .await?
                .next()
                .ok_or_else(|| io::Error::other(format!("{host} resolves to no address")))?;
            let socket = if remote.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
            if let Some(ip) = local_ip {
                socket.bind(SocketAddr::new(ip, 0))?;
            }
            let tcp = socket.connect(remote).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(host)?;
            let stream = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        })
    }
}
