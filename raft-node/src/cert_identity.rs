//! etcd's identity from client certificates: with `--client-cert-auth`, a request without a token acts
//! as the user named by its verified certificate's Common Name. The TLS listener records the name for
//! the connection ([`crate::tls::TlsConnectInfo`]); this layer hands it to the services as the
//! [`kv_api::auth::CERT_COMMON_NAME_METADATA`] entry, after dropping any such entry a client sent.

use std::task::{Context, Poll};

use http::{HeaderValue, Request};
use kv_api::auth::CERT_COMMON_NAME_METADATA;

use crate::tls::TlsConnectInfo;

/// Adds [`CertIdentity`] around the client services.
#[derive(Clone, Copy, Debug)]
pub struct CertIdentityLayer {
    /// `--client-cert-auth`: without it etcd never reads the certificate.
    pub enabled: bool,
}

impl<S> tower_layer::Layer<S> for CertIdentityLayer {
    type Service = CertIdentity<S>;

    fn layer(&self, inner: S) -> CertIdentity<S> {
        CertIdentity { inner, enabled: self.enabled }
    }
}

#[derive(Clone, Debug)]
pub struct CertIdentity<S> {
    inner: S,
    enabled: bool,
}

impl<S, B> tower_service::Service<Request<B>> for CertIdentity<S>
where
    S: tower_service::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> S::Future {
        request.headers_mut().remove(CERT_COMMON_NAME_METADATA);
        let common_name = request.extensions().get::<TlsConnectInfo>().and_then(|info| info.common_name.clone());
        if let Some(value) = common_name.filter(|_| self.enabled).and_then(|cn| HeaderValue::from_str(&cn).ok()) {
            request.headers_mut().insert(CERT_COMMON_NAME_METADATA, value);
        }
        self.inner.call(request)
    }
}
