//! The request side of auth, for the services: a request's credential (token, or client certificate
//! name), its caller, the admin check, and commands wrapped for apply's check.

use crate::auth::{Caller, CERT_COMMON_NAME_METADATA, CERT_USER_PREFIX, TOKEN_METADATA, TOKEN_METADATA_GATEWAY};
use crate::command::Command;
use crate::consensus::Consensus;
use crate::error::{Error, Result};
use crate::store::SharedStore;

/// The credential a request carries: the `token` metadata, or the gateway's `authorization` header, or,
/// without either, the Common Name of its verified client certificate (as etcd's `AuthInfoFromTLS`).
pub fn token_of(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    // etcd 3.6 takes `Bearer <token>` as `<token>`.
    let text = |key: &str| {
        let value = metadata.get(key).and_then(|value| value.to_str().ok())?;
        Some(value.strip_prefix("Bearer ").unwrap_or(value).to_string())
    };
    text(TOKEN_METADATA).or_else(|| text(TOKEN_METADATA_GATEWAY)).or_else(|| {
        text(CERT_COMMON_NAME_METADATA).filter(|cn| !cn.is_empty()).map(|cn| format!("{CERT_USER_PREFIX}{cn}"))
    })
}

/// Resolves a request's token to its caller (`None` while auth is disabled). A token this member does not
/// know gets one read barrier first: a login answered by another member may not be applied here yet
/// (etcd waits for the index its simple tokens carry).
pub async fn caller<C: Consensus>(consensus: &C, store: &SharedStore, token: Option<&str>) -> Result<Option<Caller>> {
    match store.read().auth().resolve(token) {
        Err(Error::InvalidAuthToken) => {}
        resolved => return resolved,
    }
    consensus.read_barrier().await?;
    store.read().auth().resolve(token)
}

/// etcd 3.6's `requireAuthInfo`: while auth is enabled, the request must name a user (a valid token, or
/// a client certificate's name): `etcdserver: user name is empty` without one. The caller, for the checks
/// that follow.
pub async fn require_user<C: Consensus>(
    consensus: &C,
    store: &SharedStore,
    token: Option<&str>,
) -> Result<Option<Caller>> {
    let caller = caller(consensus, store, token).await?;
    if caller.as_ref().is_some_and(|caller| caller.user.is_empty()) {
        return Err(Error::UserEmpty);
    }
    Ok(caller)
}

/// etcd's admin check for a request: nothing while auth is disabled; otherwise its token's user must hold
/// the root role (`etcdserver: user name is empty` without a token, `permission denied` without root).
pub async fn require_admin<C: Consensus>(
    consensus: &C,
    store: &SharedStore,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<()> {
    let token = token_of(metadata);
    match caller(consensus, store, token.as_deref()).await? {
        Some(caller) => store.read().auth().check_admin(&caller),
        None => Ok(()),
    }
}

/// `cmd` as proposed for `caller`: wrapped while auth is enabled, so that apply checks it.
pub fn as_caller(caller: Option<Caller>, cmd: Command) -> Command {
    match caller {
        Some(caller) => Command::AsUser(caller, Box::new(cmd)),
        None => cmd,
    }
}
