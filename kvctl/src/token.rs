//! The auth token a client attaches to every request once `--user` has authenticated.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;

/// Adds the `token` metadata to every request once the client has authenticated.
#[derive(Debug, Clone, Default)]
pub struct AuthToken(pub Option<MetadataValue<Ascii>>);

impl Interceptor for AuthToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert("token", token.clone());
        }
        Ok(request)
    }
}
