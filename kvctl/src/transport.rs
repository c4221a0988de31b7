//! Client transport security as etcdctl sets it up: `--cacert`, `--cert`, `--key`,
//! `--insecure-transport`, `--insecure-skip-tls-verify`, and `https://` endpoints.
//!
//! The rules are clientv3's: a TLS configuration exists when any of the three files is given, or
//! when `--insecure-transport=false`; an `http://` endpoint is always dialled in plain text, an
//! `https://` endpoint always with TLS (the system roots when nothing else is configured), and an
//! endpoint without a scheme uses TLS exactly when a configuration exists.
//!
//! TLS is done in our own connector (rustls) rather than tonic's, because etcdctl's
//! `--insecure-skip-tls-verify` needs a verifier that accepts any certificate, which tonic's
//! configuration cannot express. tonic then sees a plain `http://` URI over an already encrypted
//! stream; gRPC servers do not look at the `:scheme` header.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::error::{CliError, EXIT_BAD_ARGS};

/// The TLS-related global flags, as given.
#[derive(Debug, Clone, Default)]
pub struct SecureConfig {
    pub cacert: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub insecure_transport: bool,
    pub insecure_skip_verify: bool,
}

impl SecureConfig {
    /// clientv3's "a TLS config exists" rule (see the module doc).
    fn configured(&self) -> bool {
        self.cacert.is_some() || self.cert.is_some() || self.key.is_some() || !self.insecure_transport
    }

    /// The rustls configuration for an endpoint, or `None` when it is dialled in plain text.
    pub fn client_config(&self, endpoint: &str) -> Result<Option<Arc<ClientConfig>>, CliError> {
        let tls = match endpoint.split_once("://").map(|(scheme, _)| scheme) {
            Some("https") | Some("unixs") => true,
            Some(_) => false,
            None => self.configured(),
        };
        if !tls {
            return Ok(None);
        }
        self.build().map(|config| Some(Arc::new(config)))
    }

    fn build(&self) -> Result<ClientConfig, CliError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| CliError::bad_args(e.to_string()))?;
        let builder = if self.insecure_skip_verify {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                builder.with_client_auth_cert(read_certs(cert)?, read_key(key)?).map_err(|e| tls_error(cert, e))?
            }
            (None, None) => builder.with_no_client_auth(),
            // Go's tls.LoadX509KeyPair is never reached with only one of them: etcd's TLSInfo
            // treats a lone cert or key as "no client certificate".
            _ => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }

    /// `--cacert`, or the system's roots when none is given (Go's `x509.SystemCertPool`).
    fn roots(&self) -> Result<RootCertStore, CliError> {
        let mut roots = RootCertStore::empty();
        match &self.cacert {
            Some(path) => {
                for cert in read_certs(path)? {
                    roots.add(cert).map_err(|e| tls_error(path, e))?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    // A malformed system certificate is skipped, as Go skips it.
                    let _ = roots.add(cert);
                }
            }
        }
        Ok(roots)
    }
}

fn read_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, CliError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(Path::new(path))
        .and_then(|iter| iter.collect::<Result<_, _>>())
        .map_err(|e| tls_error(path, e))?;
    if certs.is_empty() {
        return Err(tls_error(path, "no certificate found"));
    }
    Ok(certs)
}

fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, CliError> {
    PrivateKeyDer::from_pem_file(Path::new(path)).map_err(|e| tls_error(path, e))
}

/// A bad TLS file is a bad argument (etcdctl exits with `ExitBadArgs` when the client config
/// cannot be built); a missing one reads as Go's `open` error.
fn tls_error(path: &str, err: impl std::fmt::Display) -> CliError {
    let text = err.to_string();
    let message = if text.contains("No such file or directory") {
        format!("open {path}: no such file or directory")
    } else {
        format!("{path}: {text}")
    };
    CliError::new(EXIT_BAD_ARGS, message)
}

/// `--insecure-skip-tls-verify`: any certificate is accepted, signatures are still checked so the
/// handshake itself stays sound.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Dials TCP, then TLS with the endpoint's host as the server name (clientv3 overrides the name
/// with the host, without the port).
#[derive(Clone)]
pub struct TlsConnector {
    pub config: Arc<ClientConfig>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Uri> for TlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let config = self.config.clone();
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| io::Error::other("endpoint has no host"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
            let port = uri.port_u16().unwrap_or(443);
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(host)?;
            let stream = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
