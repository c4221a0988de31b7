//! The accept loop of an `https://` listener: handshakes in tasks of their own, etcd's checks of the
//! client certificate's names (`--peer-cert-allowed-cn`, `--peer-cert-allowed-hostname`,
//! `--client-cert-allowed-hostname`), and the certificate's Common Name handed to the request (etcd
//! takes it as the user when a request carries no token).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::warn;

use super::names::CertNames;

/// How long a client may take to finish its TLS handshake before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const ACCEPT_QUEUE: usize = 64;

/// The connections of an `https://` listener, each once its handshake is done and its certificate passed
/// `rule`. Every handshake runs in a task of its own, so a slow or silent client never holds up the next
/// one; a failed one is logged (etcd logs "rejected connection") and dropped. The accept loop ends when
/// the stream is dropped.
pub fn accept(listener: TcpListener, tls: super::TlsListen) -> ReceiverStream<io::Result<TlsConn>> {
    let super::TlsListen { acceptor, rule } = tls;
    let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    warn!(%err, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (acceptor, tx, rule) = (acceptor.clone(), tx.clone(), rule.clone());
            tokio::spawn(async move {
                if let Err(err) = crate::dial::tune(&tcp) {
                    warn!(%remote, %err, "setting up the TCP connection");
                }
                let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(err)) => return warn!(%remote, %err, "rejected connection"),
                    Err(_) => return warn!(%remote, "rejected connection: TLS handshake timed out"),
                };
                let names = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()).map(CertNames::of);
                if let Err(err) = rule.check(names.as_ref()) {
                    return warn!(%remote, %err, "rejected connection");
                }
                if let Some(names) = names.as_ref().filter(|_| rule.check_address) {
                    if let Err(err) = names.check_address(remote.ip()).await {
                        return warn!(%remote, %err, "rejected connection");
                    }
                }
                let common_name = names.and_then(|names| names.common_name);
                let _ = tx.send(Ok(TlsConn { stream, common_name })).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

/// An accepted TLS connection, as tonic's server takes it.
pub struct TlsConn {
    stream: TlsStream<TcpStream>,
    common_name: Option<String>,
}

/// What tonic hands every request of a TLS connection (in its extensions): the TCP addresses, and the
/// Common Name of the client's verified certificate.
#[derive(Clone, Debug)]
pub struct TlsConnectInfo {
    pub tcp: TcpConnectInfo,
    pub common_name: Option<String>,
}

impl Connected for TlsConn {
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        TlsConnectInfo { tcp: self.stream.get_ref().0.connect_info(), common_name: self.common_name.clone() }
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
