//! Authentication and authorization, as etcd 3.4 has them: users with bcrypt password hashes, roles
//! granting READ, WRITE or READWRITE on keys and ranges, the `root` user and role, simple tokens.
//!
//! # Layout
//!
//! - this file: [`AuthStore`], the users, roles and flags every member holds alike. It changes only by
//!   [`AuthCommand`]s applied in log order and lives in the store's `Auth` bucket, so it survives
//!   restarts and travels in snapshots. Its revision counts the changes, as etcd's auth revision.
//! - `apply`: [`AuthStore::apply`], the changes in log order with etcd's checks.
//! - [`perm`]: one user's permissions merged over their roles, and etcd's coverage test.
//! - `interval_tree`: etcd's permission tree, whose shape decides empty and inverted ranges.
//! - [`token`]: simple tokens, member-local and in memory.
//! - [`jwt`]: JSON Web Tokens, signed with keys and checked by any member.
//!
//! The `etcdserverpb.Auth` service and the request-side helpers (a request's credential and caller, the
//! admin check) are in [`crate::service`].
//!
//! # Where requests are checked
//!
//! The serving member resolves the `token` metadata to a [`Caller`] (user and the auth revision it was
//! checked at). Reads are checked there, after the read barrier. Writes travel as
//! [`crate::Command::AsUser`] and are checked when applied, against the auth state at their place in the
//! log, so every member decides the same; a write checked at an older auth revision than the one it
//! meets fails with "revision of auth store is old" and the client authenticates again, as with etcd.
//! A member wraps writes only while auth is enabled: a write proposed just before `auth enable` applies
//! is not checked (etcd would refuse it for its empty user name).

mod apply;
mod interval_tree;
pub mod jwt;
pub mod perm;
pub mod token;

use std::collections::{BTreeMap, HashMap};

use prost::Message;
use proto::authpb;
use proto::etcdserverpb as pb;
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, Bucket};
use crate::error::{Error, Result};
use perm::UserPerms;
use token::TokenTable;

/// The user that may enable auth, and the role that grants everything.
pub const ROOT: &[u8] = b"root";

/// The metadata key clients send their token under, and the gateway's (swagger) one.
pub const TOKEN_METADATA: &str = "token";
pub const TOKEN_METADATA_GATEWAY: &str = "authorization";
/// The Common Name of the request's verified client certificate, set by the member's TLS listener (which
/// drops any value a client sends) when `--client-cert-auth` is on: etcd's user for requests without a
/// token.
pub const CERT_COMMON_NAME_METADATA: &str = "kv-cert-common-name";
/// How a certificate's Common Name travels as a credential inside this member. A control character, so
/// no token a client sends (gRPC metadata is printable ASCII) can look like one.
pub(crate) const CERT_USER_PREFIX: &str = "\u{1}cn:";

pub(crate) const KEY_ENABLED: &[u8] = b"enabled";
pub(crate) const KEY_REVISION: &[u8] = b"revision";
pub(crate) const USER_PREFIX: &[u8] = b"user/";
pub(crate) const ROLE_PREFIX: &[u8] = b"role/";

/// Who sent a request: the user its token names and the auth revision it was resolved at (etcd's
/// request header fields `username` and `auth_revision`). The empty caller has no token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// The user's name as the client wrote it: any bytes (etcd takes names that are not UTF-8).
    pub user: Vec<u8>,
    pub auth_revision: u64,
}

/// A change of the auth state, proposed by the serving member and applied by every member.
#[derive(Clone, Debug, PartialEq)]
pub enum AuthCommand {
    Enable,
    Disable,
    /// A login whose password the proposer already checked: apply registers `token` for `name`. The
    /// password never enters the log.
    Authenticate {
        name: Vec<u8>,
        token: String,
    },
    /// `password` is cleared and `hashed_password` set by the proposer (bcrypt is too slow for apply).
    UserAdd(pb::AuthUserAddRequest),
    UserDelete(pb::AuthUserDeleteRequest),
    /// As `UserAdd`: only the hash travels.
    UserChangePassword(pb::AuthUserChangePasswordRequest),
    UserGrantRole(pb::AuthUserGrantRoleRequest),
    UserRevokeRole(pb::AuthUserRevokeRoleRequest),
    RoleAdd(pb::AuthRoleAddRequest),
    RoleDelete(pb::AuthRoleDeleteRequest),
    RoleGrantPermission(pb::AuthRoleGrantPermissionRequest),
    RoleRevokePermission(pb::AuthRoleRevokePermissionRequest),
}

impl AuthCommand {
    /// Whether etcd requires the root role for it once auth is enabled (every change but a login).
    pub fn needs_admin(&self) -> bool {
        !matches!(self, AuthCommand::Authenticate { .. })
    }
}

/// What applying an [`AuthCommand`] answers: a token for a login, nothing else otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthOutcome {
    Done,
    Token(String),
}

/// The users, roles and flags of the auth system (see the module documentation).
#[derive(Debug)]
pub struct AuthStore {
    enabled: bool,
    revision: u64,
    /// Names are bytes, as etcd keeps them, in byte order.
    users: BTreeMap<Vec<u8>, authpb::User>,
    roles: BTreeMap<Vec<u8>, authpb::Role>,
    /// Each user's merged permissions, rebuilt on every change.
    perms: HashMap<Vec<u8>, UserPerms>,
    tokens: TokenTable,
    /// `--auth-token jwt,...`: tokens signed and checked with keys instead of kept in [`TokenTable`].
    jwt: Option<jwt::JwtTokens>,
}

impl Default for AuthStore {
    fn default() -> Self {
        // etcd's auth revision starts at 1, so that 0 can mean "no user".
        Self {
            enabled: false,
            revision: 1,
            users: BTreeMap::new(),
            roles: BTreeMap::new(),
            perms: HashMap::new(),
            tokens: TokenTable::default(),
            jwt: None,
        }
    }
}

fn corrupt(what: &str) -> Error {
    Error::Internal(format!("corrupt auth record: {what}"))
}

impl AuthStore {
    /// Reads the auth state from the `Auth` bucket; tokens are kept (a snapshot install replaces the
    /// state but not the member's logins).
    pub fn load(&mut self, backend: &dyn Backend) -> Result<()> {
        let tokens = std::mem::take(&mut self.tokens);
        *self = AuthStore { tokens, ..Default::default() };
        crate::backend::try_scan(backend, Bucket::Auth, |key, value| {
            if key == KEY_ENABLED {
                self.enabled = value == [1];
            } else if key == KEY_REVISION {
                self.revision = u64::from_be_bytes(value.try_into().map_err(|_| corrupt("revision"))?);
            } else if let Some(name) = key.strip_prefix(USER_PREFIX) {
                let user = authpb::User::decode(value).map_err(|_| corrupt("user"))?;
                self.users.insert(name.to_vec(), user);
            } else if let Some(name) = key.strip_prefix(ROLE_PREFIX) {
                let role = authpb::Role::decode(value).map_err(|_| corrupt("role"))?;
                self.roles.insert(name.to_vec(), role);
            } else {
                return Err(corrupt("unknown key"));
            }
            Ok(())
        })?;
        self.refresh_perms();
        Ok(())
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn user(&self, name: impl AsRef<[u8]>) -> Option<&authpb::User> {
        self.users.get(name.as_ref())
    }

    pub fn role(&self, name: impl AsRef<[u8]>) -> Option<&authpb::Role> {
        self.roles.get(name.as_ref())
    }

    /// User names in byte order (etcd lists its bucket in key order).
    pub fn user_names(&self) -> Vec<Vec<u8>> {
        self.users.keys().cloned().collect()
    }

    pub fn role_names(&self) -> Vec<Vec<u8>> {
        self.roles.keys().cloned().collect()
    }

    /// Switches this member to JWTs (`--auth-token jwt,...`), before it serves.
    pub fn set_jwt(&mut self, tokens: jwt::JwtTokens) {
        self.jwt = Some(tokens);
    }

    /// The JWT signer, when tokens are JWTs.
    pub fn jwt(&self) -> Option<&jwt::JwtTokens> {
        self.jwt.as_ref()
    }

    pub fn tokens_mut(&mut self) -> &mut TokenTable {
        &mut self.tokens
    }

    /// The caller a request's token names, `None` while auth is disabled (tokens are then ignored).
    /// No token gives the empty caller; an unknown or expired one is "invalid auth token".
    pub fn resolve(&self, token: Option<&str>) -> Result<Option<Caller>> {
        if !self.enabled {
            return Ok(None);
        }
        let Some(token) = token else {
            return Ok(Some(Caller::default()));
        };
        if let Some(common_name) = token.strip_prefix(CERT_USER_PREFIX) {
            return Ok(Some(Caller { user: common_name.as_bytes().to_vec(), auth_revision: self.revision }));
        }
        if let Some(jwt) = &self.jwt {
            let (user, auth_revision) = jwt.verify(token).ok_or(Error::InvalidAuthToken)?;
            return Ok(Some(Caller { user, auth_revision }));
        }
        let user = self.tokens.user(token).ok_or(Error::InvalidAuthToken)?;
        Ok(Some(Caller { user, auth_revision: self.revision }))
    }

    /// etcd's admin check: the caller must hold the root role (anyone passes while auth is disabled).
    pub fn check_admin(&self, caller: &Caller) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if caller.user.is_empty() {
            return Err(Error::UserEmpty);
        }
        let user = self.users.get(&caller.user).ok_or(Error::UserNotFound)?;
        if has_root_role(user) {
            Ok(())
        } else {
            Err(Error::PermissionDenied)
        }
    }

    /// Whether `caller` may read `[key, range_end)` (etcd's `IsRangePermitted`).
    pub fn check_read(&self, caller: &Caller, key: &[u8], range_end: &[u8]) -> Result<()> {
        self.check_op(caller, |perms| perms.can_read(key, range_end))
    }

    /// Whether `caller` may write (put or delete) `[key, range_end)`.
    pub fn check_write(&self, caller: &Caller, key: &[u8], range_end: &[u8]) -> Result<()> {
        self.check_op(caller, |perms| perms.can_write(key, range_end))
    }

    fn check_op(&self, caller: &Caller, permitted: impl FnOnce(&UserPerms) -> bool) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if caller.auth_revision == 0 {
            return Err(Error::UserEmpty);
        }
        if caller.auth_revision < self.revision {
            return Err(Error::AuthOldRevision);
        }
        let user = self.users.get(&caller.user).ok_or(Error::PermissionDenied)?;
        if has_root_role(user) {
            return Ok(());
        }
        match self.perms.get(&caller.user) {
            Some(perms) if permitted(perms) => Ok(()),
            _ => Err(Error::PermissionDenied),
        }
    }

    /// Whether `caller` may read every key a txn compares or ranges over, and write every key it puts or
    /// deletes (nested txns included, which etcd 3.4 leaves unchecked).
    pub fn check_txn(&self, caller: &Caller, txn: &pb::TxnRequest) -> Result<()> {
        use pb::request_op::Request as Op;
        for compare in &txn.compare {
            self.check_read(caller, &compare.key, &compare.range_end)?;
        }
        for op in txn.success.iter().chain(&txn.failure) {
            match &op.request {
                Some(Op::RequestRange(r)) => self.check_read(caller, &r.key, &r.range_end)?,
                Some(Op::RequestPut(p)) => self.check_write(caller, &p.key, &[])?,
                Some(Op::RequestDeleteRange(d)) => {
                    if d.prev_kv {
                        self.check_read(caller, &d.key, &d.range_end)?;
                    }
                    self.check_write(caller, &d.key, &d.range_end)?;
                }
                Some(Op::RequestTxn(inner)) => self.check_txn(caller, inner)?,
                None => {}
            }
        }
        Ok(())
    }

    fn refresh_perms(&mut self) {
        let roles = &self.roles;
        self.perms = self
            .users
            .iter()
            .map(|(name, user)| (name.clone(), UserPerms::merge(user.roles.iter().filter_map(|r| roles.get(r)))))
            .collect();
    }
}

fn has_root_role(user: &authpb::User) -> bool {
    user.roles.iter().any(|role| role == ROOT)
}

pub fn no_password(user: &authpb::User) -> bool {
    user.options.as_ref().is_some_and(|o| o.no_password)
}
