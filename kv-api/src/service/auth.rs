//! `etcdserverpb.Auth`: changes go through the log as [`AuthCommand`]s (apply checks the caller holds the
//! root role); the listings are answered from this member's copy after a read barrier, with etcd's
//! permission rules (a user may read itself, and the roles it holds).

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use prost::Message;
use proto::etcdserverpb as pb;
use tonic::{Request, Response, Status};

use super::auth_request::{as_caller, caller, token_of};
use crate::auth::token::TokenTable;
use crate::auth::{no_password, AuthCommand, AuthOutcome, Caller};
use crate::command::{Command, CommandResponse};
use crate::consensus::Consensus;
use crate::error::{Error, Result};
use crate::service::{current_header, ApiConfig};
use crate::store::SharedStore;
use crate::validate;

/// Stands for a client's `hashed_password` that is not base64 (see `user_change_password`).
const NOT_BASE64: &[u8] = b"!";

/// Logins retried when the auth state changed between the password check and the login's apply.
const LOGIN_ATTEMPTS: usize = 3;
/// The longest password bcrypt hashes; etcd 3.6's refuses longer ones (and so never matches them).
const BCRYPT_MAX_PASSWORD: usize = 72;

pub struct AuthService<C> {
    consensus: Arc<C>,
    store: SharedStore,
    config: ApiConfig,
}

type Header = Option<pb::ResponseHeader>;

impl<C: Consensus> AuthService<C> {
    pub fn new(consensus: Arc<C>, store: SharedStore, config: ApiConfig) -> Self {
        Self { consensus, store, config }
    }

    fn header(&self) -> Header {
        current_header(&*self.consensus, &self.store)
    }

    /// Proposes a change for the caller `token` names; answers apply's outcome and a header. As etcd, the
    /// token is checked first, then the request's size (before any check of what it asks).
    async fn change<T>(&self, request: &Request<T>, cmd: AuthCommand) -> Result<(AuthOutcome, Header)> {
        let size = proposal_len(&cmd);
        self.change_sized(request, cmd, size).await
    }

    /// [`Self::change`] where etcd's proposal is not ours: `size` is the length of what etcd proposes.
    async fn change_sized<T>(
        &self,
        request: &Request<T>,
        cmd: AuthCommand,
        size: usize,
    ) -> Result<(AuthOutcome, Header)> {
        if self.consensus.is_learner() {
            return Err(Error::NotSupportedForLearner);
        }
        let token = token_of(request.metadata());
        let caller = caller(&*self.consensus, &self.store, token.as_deref()).await?;
        // As etcd: the limit holds for what is proposed (a password replaced by its hash).
        validate::check_size(size, &self.config.limits)?;
        match self.consensus.propose(as_caller(caller, Command::Auth(cmd))).await? {
            CommandResponse::Auth(outcome) => Ok((outcome, self.header())),
            other => Err(Error::Internal(format!("apply answered an auth change with {other:?}"))),
        }
    }

    /// The caller of a read-only request, once this member has applied everything committed; `None`
    /// while auth is disabled.
    /// etcd sends these reads through its log too, so the request size limit holds for them.
    async fn reader<T: prost::Message>(&self, request: &Request<T>) -> Result<Option<Caller>> {
        self.consensus.read_barrier().await?;
        let token = token_of(request.metadata());
        let caller = caller(&*self.consensus, &self.store, token.as_deref()).await?;
        validate::check_size(request.get_ref().encoded_len(), &self.config.limits)?;
        Ok(caller)
    }

    /// A bcrypt hash at `--bcrypt-cost`, made off the runtime (cost 10 takes tens of milliseconds), in
    /// base64 as etcd's proposals carry it.
    async fn hash(&self, password: Vec<u8>) -> Result<Vec<u8>> {
        if password.len() > BCRYPT_MAX_PASSWORD {
            return Err(Error::PasswordTooLong);
        }
        let cost = self.config.bcrypt_cost;
        tokio::task::spawn_blocking(move || bcrypt::hash(password, cost))
            .await
            .map_err(|e| Error::Internal(format!("hash task failed: {e}")))?
            .map_err(|e| Error::Internal(format!("bcrypt: {e}")))
            .map(|hash| BASE64.encode(hash).into_bytes())
    }

    async fn authenticate(&self, req: pb::AuthenticateRequest) -> Result<pb::AuthenticateResponse> {
        for _ in 0..LOGIN_ATTEMPTS {
            self.consensus.read_barrier().await?;
            let (hash, checked_at, jwt) = {
                let store = self.store.read();
                let auth = store.auth();
                if !auth.is_enabled() {
                    return Err(Error::AuthNotEnabled);
                }
                let user = auth.user(&req.name).ok_or(Error::AuthFailed)?;
                if no_password(user) {
                    return Err(Error::NoPasswordUser);
                }
                (String::from_utf8_lossy(&user.password).into_owned(), auth.revision(), auth.jwt().cloned())
            };
            let password = req.password.clone();
            let matches = password.len() <= BCRYPT_MAX_PASSWORD
                && tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
                    .await
                    .map_err(|e| Error::Internal(format!("hash task failed: {e}")))?;
            if !matches {
                return Err(Error::AuthFailed);
            }
            let token = match &jwt {
                Some(jwt) => jwt.sign(&req.name, checked_at).map_err(Error::Internal)?,
                None => TokenTable::generate(),
            };
            let login = AuthCommand::Authenticate { name: req.name.clone(), token };
            let token = match self.consensus.propose(Command::Auth(login)).await? {
                CommandResponse::Auth(AuthOutcome::Token(token)) => token,
                other => return Err(Error::Internal(format!("apply answered a login with {other:?}"))),
            };
            // As etcd: a password checked against an auth state that changed since is checked again.
            if self.store.read().auth().revision() == checked_at {
                return Ok(pb::AuthenticateResponse { header: self.header(), token });
            }
        }
        Err(Error::AuthOldRevision)
    }
}

#[tonic::async_trait]
impl<C: Consensus> pb::auth_server::Auth for AuthService<C> {
    async fn auth_enable(
        &self,
        request: Request<pb::AuthEnableRequest>,
    ) -> Result<Response<pb::AuthEnableResponse>, Status> {
        let (_, header) = self.change(&request, AuthCommand::Enable).await?;
        Ok(Response::new(pb::AuthEnableResponse { header }))
    }

    async fn auth_disable(
        &self,
        request: Request<pb::AuthDisableRequest>,
    ) -> Result<Response<pb::AuthDisableResponse>, Status> {
        let (_, header) = self.change(&request, AuthCommand::Disable).await?;
        Ok(Response::new(pb::AuthDisableResponse { header }))
    }

    async fn auth_status(
        &self,
        request: Request<pb::AuthStatusRequest>,
    ) -> Result<Response<pb::AuthStatusResponse>, Status> {
        // As etcd (3.5 and 3.6): AuthStatus needs the root role while auth is enabled.
        let caller = self.reader(&request).await?;
        let (enabled, auth_revision) = {
            let store = self.store.read();
            if let Some(caller) = &caller {
                store.auth().check_admin(caller)?;
            }
            (store.auth().is_enabled(), store.auth().revision())
        };
        Ok(Response::new(pb::AuthStatusResponse { header: self.header(), enabled, auth_revision }))
    }

    async fn authenticate(
        &self,
        request: Request<pb::AuthenticateRequest>,
    ) -> Result<Response<pb::AuthenticateResponse>, Status> {
        Ok(Response::new(self.authenticate(request.into_inner()).await?))
    }

    async fn user_add(
        &self,
        request: Request<pb::AuthUserAddRequest>,
    ) -> Result<Response<pb::AuthUserAddResponse>, Status> {
        let mut req = request.get_ref().clone();
        let no_password = req.options.as_ref().is_some_and(|o| o.no_password);
        // As etcd: the server hashes the password (an empty one too); a hash the client sent is dropped.
        req.hashed_password =
            if no_password { Vec::new() } else { self.hash(std::mem::take(&mut req.password)).await? };
        req.password.clear();
        // etcd proposes a user without a password as the client sent it, password and hash included.
        let size = if no_password { request.get_ref().encoded_len() } else { req.encoded_len() };
        let (_, header) = self.change_sized(&request, AuthCommand::UserAdd(req), size).await?;
        Ok(Response::new(pb::AuthUserAddResponse { header }))
    }

    async fn user_get(
        &self,
        request: Request<pb::AuthUserGetRequest>,
    ) -> Result<Response<pb::AuthUserGetResponse>, Status> {
        let caller = self.reader(&request).await?;
        let name = &request.get_ref().name;
        let store = self.store.read();
        let auth = store.auth();
        if let Some(caller) = &caller {
            // A user may always read itself.
            if caller.user != *name {
                auth.check_admin(caller)?;
            }
        }
        let roles = auth.user(name).ok_or(Error::UserNotFound)?.roles.clone();
        drop(store);
        Ok(Response::new(pb::AuthUserGetResponse { header: self.header(), roles }))
    }

    async fn user_list(
        &self,
        request: Request<pb::AuthUserListRequest>,
    ) -> Result<Response<pb::AuthUserListResponse>, Status> {
        let caller = self.reader(&request).await?;
        let store = self.store.read();
        if let Some(caller) = &caller {
            store.auth().check_admin(caller)?;
        }
        let users = store.auth().user_names();
        drop(store);
        Ok(Response::new(pb::AuthUserListResponse { header: self.header(), users }))
    }

    async fn user_delete(
        &self,
        request: Request<pb::AuthUserDeleteRequest>,
    ) -> Result<Response<pb::AuthUserDeleteResponse>, Status> {
        let req = request.get_ref().clone();
        let (_, header) = self.change(&request, AuthCommand::UserDelete(req)).await?;
        Ok(Response::new(pb::AuthUserDeleteResponse { header }))
    }

    async fn user_change_password(
        &self,
        request: Request<pb::AuthUserChangePasswordRequest>,
    ) -> Result<Response<pb::AuthUserChangePasswordResponse>, Status> {
        let mut req = request.get_ref().clone();
        if !req.password.is_empty() {
            req.hashed_password = self.hash(std::mem::take(&mut req.password)).await?;
        } else if BASE64.decode(&req.hashed_password).is_err() {
            // A client's own hash must be base64, as etcd's apply decodes it; apply refuses this marker
            // (not base64 either) after looking the user up, where etcd refuses the client's text.
            req.hashed_password = NOT_BASE64.to_vec();
        }
        // Without a password, etcd proposes the client's hash as sent.
        let size =
            if request.get_ref().password.is_empty() { request.get_ref().encoded_len() } else { req.encoded_len() };
        let (_, header) = self.change_sized(&request, AuthCommand::UserChangePassword(req), size).await?;
        Ok(Response::new(pb::AuthUserChangePasswordResponse { header }))
    }

    async fn user_grant_role(
        &self,
        request: Request<pb::AuthUserGrantRoleRequest>,
    ) -> Result<Response<pb::AuthUserGrantRoleResponse>, Status> {
        let req = request.get_ref().clone();
        let (_, header) = self.change(&request, AuthCommand::UserGrantRole(req)).await?;
        Ok(Response::new(pb::AuthUserGrantRoleResponse { header }))
    }

    async fn user_revoke_role(
        &self,
        request: Request<pb::AuthUserRevokeRoleRequest>,
    ) -> Result<Response<pb::AuthUserRevokeRoleResponse>, Status> {
        let req = request.get_ref().clone();
        let (_, header) = self.change(&request, AuthCommand::UserRevokeRole(req)).await?;
        Ok(Response::new(pb::AuthUserRevokeRoleResponse { header }))
    }

    async fn role_add(
        &self,
        request: Request<pb::AuthRoleAddRequest>,
    ) -> Result<Response<pb::AuthRoleAddResponse>, Status> {
        let req = request.get_ref().clone();
        let (_, header) = self.change(&request, AuthCommand::RoleAdd(req)).await?;
        Ok(Response::new(pb::AuthRoleAddResponse { header }))
    }

    async fn role_get(
        &self,
        request: Request<pb::AuthRoleGetRequest>,
    ) -> Result<Response<pb::AuthRoleGetResponse>, Status> {
        let caller = self.reader(&request).await?;
        let role = &request.get_ref().role;
        let store = self.store.read();
        let auth = store.auth();
        if let Some(caller) = &caller {
            // A user may always read the roles it holds.
            let holds = auth.user(&caller.user).is_some_and(|user| user.roles.contains(role));
            if !holds {
                auth.check_admin(caller)?;
            }
        }
        let perm = auth.role(role).ok_or(Error::RoleNotFound)?.key_permission.clone();
        drop(store);
        Ok(Response::new(pb::AuthRoleGetResponse { header: self.header(), perm }))
    }

    async fn role_list(
        &self,
        request: Request<pb::AuthRoleListRequest>,
    ) -> Result<Response<pb::AuthRoleListResponse>, Status> {
        let caller = self.reader(&request).await?;
        let store = self.store.read();
        if let Some(caller) = &caller {
            store.auth().check_admin(caller)?;
        }
        let roles = store.auth().role_names();
        drop(store);
        Ok(Response::new(pb::AuthRoleListResponse { header: self.header(), roles }))
    }

    async fn role_delete(
        &self,
        request: Request<pb::AuthRoleDeleteRequest>,
    ) -> Result<Response<pb::AuthRoleDeleteResponse>, Status> {
        let req = request.get_ref().clone();
        let (_, header) = self.change(&request, AuthCommand::RoleDelete(req)).await?;
        Ok(Response::new(pb::AuthRoleDeleteResponse { header }))
    }

    async fn role_grant_permission(
        &self,
        request: Request<pb::AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<pb::AuthRoleGrantPermissionResponse>, Status> {
        let req = request.get_ref().clone();
        let (_, header) = self.change(&request, AuthCommand::RoleGrantPermission(req)).await?;
        Ok(Response::new(pb::AuthRoleGrantPermissionResponse { header }))
    }

    async fn role_revoke_permission(
        &self,
        request: Request<pb::AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<pb::AuthRoleRevokePermissionResponse>, Status> {
        let req = request.get_ref().clone();
        let (_, header) = self.change(&request, AuthCommand::RoleRevokePermission(req)).await?;
        Ok(Response::new(pb::AuthRoleRevokePermissionResponse { header }))
    }
}

/// The encoded size of what a change proposes, which etcd's request limit applies to.
fn proposal_len(cmd: &AuthCommand) -> usize {
    use prost::Message;
    match cmd {
        AuthCommand::Enable | AuthCommand::Disable => 0,
        AuthCommand::Authenticate { name, token } => name.len() + token.len(),
        AuthCommand::UserAdd(req) => req.encoded_len(),
        AuthCommand::UserDelete(req) => req.encoded_len(),
        AuthCommand::UserChangePassword(req) => req.encoded_len(),
        AuthCommand::UserGrantRole(req) => req.encoded_len(),
        AuthCommand::UserRevokeRole(req) => req.encoded_len(),
        AuthCommand::RoleAdd(req) => req.encoded_len(),
        AuthCommand::RoleDelete(req) => req.encoded_len(),
        AuthCommand::RoleGrantPermission(req) => req.encoded_len(),
        AuthCommand::RoleRevokePermission(req) => req.encoded_len(),
    }
}
