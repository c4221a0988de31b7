//! Authentication and authorization, as etcd 3.4 has them: users with bcrypt password hashes, roles
//! granting READ, WRITE or READWRITE on keys and ranges, the `root` user and role, simple tokens.
//!
//! # Layout
//!
//! - this file: [`AuthStore`], the users, roles and flags every member holds alike. It changes only by
//!   [`AuthCommand`]s applied in log order and lives in the store's `Auth` bucket, so it survives
//!   restarts and travels in snapshots. Its revision counts the changes, as etcd's auth revision.
//! - [`perm`]: one user's permissions merged over their roles, and etcd's coverage test.
//! - [`token`]: simple tokens, member-local and in memory.
//! - [`jwt`]: JSON Web Tokens, signed with keys and checked by any member.
//! - `request`: a request's credential and caller, and the admin check, for the services.
//! - [`service`]: the `etcdserverpb.Auth` tonic service.
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

pub mod jwt;
pub mod perm;
mod request;
pub mod service;
pub mod token;

pub use request::{as_caller, caller, require_admin, token_of, unmapped_status};

use std::collections::{BTreeMap, HashMap};

use base64::Engine;
use prost::Message;
use proto::authpb;
use proto::etcdserverpb as pb;
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, Bucket, WriteBatch};
use crate::error::{Error, Result};
use perm::UserPerms;
use token::TokenTable;

/// The user that may enable auth, and the role that grants everything.
pub const ROOT: &str = "root";

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
    pub user: String,
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
        name: String,
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
    users: BTreeMap<String, authpb::User>,
    roles: BTreeMap<String, authpb::Role>,
    /// Each user's merged permissions, rebuilt on every change.
    perms: HashMap<String, UserPerms>,
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
                self.users.insert(String::from_utf8_lossy(name).into_owned(), user);
            } else if let Some(name) = key.strip_prefix(ROLE_PREFIX) {
                let role = authpb::Role::decode(value).map_err(|_| corrupt("role"))?;
                self.roles.insert(String::from_utf8_lossy(name).into_owned(), role);
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

    pub fn user(&self, name: &str) -> Option<&authpb::User> {
        self.users.get(name)
    }

    pub fn role(&self, name: &str) -> Option<&authpb::Role> {
        self.roles.get(name)
    }

    /// User names in byte order (etcd lists its bucket in key order).
    pub fn user_names(&self) -> Vec<String> {
        self.users.keys().cloned().collect()
    }

    pub fn role_names(&self) -> Vec<String> {
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
            return Ok(Some(Caller { user: common_name.to_string(), auth_revision: self.revision }));
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

    /// Applies a change, staging what it writes in `batch`. Errors leave the state unchanged.
    pub fn apply(&mut self, cmd: &AuthCommand, batch: &mut WriteBatch) -> Result<AuthOutcome> {
        match cmd {
            AuthCommand::Enable => {
                if !self.enabled {
                    let root = self.users.get(ROOT).ok_or(Error::RootUserNotExist)?;
                    if !has_root_role(root) {
                        return Err(Error::RootRoleNotExist);
                    }
                    self.enabled = true;
                    batch.put(Bucket::Auth, KEY_ENABLED.to_vec(), vec![1]);
                }
                // As etcd: enabling does not move the revision.
                return Ok(AuthOutcome::Done);
            }
            AuthCommand::Disable => {
                if !self.enabled {
                    return Ok(AuthOutcome::Done);
                }
                self.enabled = false;
                self.tokens.clear();
                batch.put(Bucket::Auth, KEY_ENABLED.to_vec(), vec![0]);
            }
            AuthCommand::Authenticate { name, token } => {
                if !self.enabled {
                    return Err(Error::AuthNotEnabled);
                }
                let user = self.users.get(name).ok_or(Error::AuthFailed)?;
                if no_password(user) {
                    return Err(Error::AuthFailed);
                }
                // A JWT stands on its own: nothing to remember.
                if self.jwt.is_none() {
                    self.tokens.insert(token.clone(), name.clone());
                }
                return Ok(AuthOutcome::Token(token.clone()));
            }
            AuthCommand::UserAdd(req) => {
                if req.name.is_empty() {
                    return Err(Error::UserEmpty);
                }
                if self.users.contains_key(&req.name) {
                    return Err(Error::UserExists);
                }
                let options = req.options.unwrap_or_default();
                let password = if options.no_password { Vec::new() } else { stored_password(&req.hashed_password)? };
                let user = authpb::User {
                    name: req.name.clone().into_bytes(),
                    password,
                    roles: vec![],
                    options: Some(options),
                };
                self.put_user(user, batch);
            }
            AuthCommand::UserDelete(req) => {
                if self.enabled && req.name == ROOT {
                    return Err(Error::InvalidAuthMgmt);
                }
                if self.users.remove(&req.name).is_none() {
                    return Err(Error::UserNotFound);
                }
                batch.delete(Bucket::Auth, record_key(USER_PREFIX, &req.name));
                self.tokens.forget_user(&req.name);
            }
            AuthCommand::UserChangePassword(req) => {
                let mut user = self.users.get(&req.name).cloned().ok_or(Error::UserNotFound)?;
                // As etcd: a user without a password keeps none, whatever the request says.
                user.password = if no_password(&user) { Vec::new() } else { stored_password(&req.hashed_password)? };
                self.put_user(user, batch);
                self.tokens.forget_user(&req.name);
            }
            AuthCommand::UserGrantRole(req) => {
                let mut user = self.users.get(&req.user).cloned().ok_or(Error::UserNotFound)?;
                if req.role != ROOT && !self.roles.contains_key(&req.role) {
                    return Err(Error::RoleNotFound);
                }
                match user.roles.binary_search(&req.role) {
                    // Already granted: nothing changes, not even the revision.
                    Ok(_) => return Ok(AuthOutcome::Done),
                    Err(at) => user.roles.insert(at, req.role.clone()),
                }
                self.put_user(user, batch);
            }
            AuthCommand::UserRevokeRole(req) => {
                if self.enabled && req.name == ROOT && req.role == ROOT {
                    return Err(Error::InvalidAuthMgmt);
                }
                let mut user = self.users.get(&req.name).cloned().ok_or(Error::UserNotFound)?;
                let before = user.roles.len();
                user.roles.retain(|role| *role != req.role);
                if user.roles.len() == before {
                    return Err(Error::RoleNotGranted);
                }
                self.put_user(user, batch);
            }
            AuthCommand::RoleAdd(req) => {
                if req.name.is_empty() {
                    return Err(Error::RoleEmpty);
                }
                if self.roles.contains_key(&req.name) {
                    return Err(Error::RoleExists);
                }
                self.put_role(authpb::Role { name: req.name.clone().into_bytes(), key_permission: vec![] }, batch);
            }
            AuthCommand::RoleDelete(req) => {
                if self.enabled && req.role == ROOT {
                    return Err(Error::InvalidAuthMgmt);
                }
                if self.roles.remove(&req.role).is_none() {
                    return Err(Error::RoleNotFound);
                }
                batch.delete(Bucket::Auth, record_key(ROLE_PREFIX, &req.role));
                let holders: Vec<authpb::User> =
                    self.users.values().filter(|user| user.roles.contains(&req.role)).cloned().collect();
                for mut user in holders {
                    user.roles.retain(|role| *role != req.role);
                    self.put_user(user, batch);
                }
            }
            AuthCommand::RoleGrantPermission(req) => {
                // etcd 3.6's order: the permission, its range, then the role.
                let perm = req.perm.clone().ok_or(Error::PermissionNotGiven)?;
                if !is_valid_permission_range(&perm.key, &perm.range_end) {
                    return Err(Error::InvalidAuthMgmt);
                }
                let mut role = self.roles.get(&req.name).cloned().ok_or(Error::RoleNotFound)?;
                let same = |p: &authpb::Permission| p.key == perm.key && p.range_end == perm.range_end;
                match role.key_permission.iter_mut().find(|p| same(p)) {
                    Some(existing) => existing.perm_type = perm.perm_type,
                    None => {
                        role.key_permission.push(perm);
                        role.key_permission.sort_by(|a, b| a.key.cmp(&b.key));
                    }
                }
                self.put_role(role, batch);
            }
            AuthCommand::RoleRevokePermission(req) => {
                let mut role = self.roles.get(&req.role).cloned().ok_or(Error::RoleNotFound)?;
                let before = role.key_permission.len();
                role.key_permission.retain(|p| p.key != req.key || p.range_end != req.range_end);
                if role.key_permission.len() == before {
                    return Err(Error::PermissionNotGranted);
                }
                self.put_role(role, batch);
            }
        }
        self.revision += 1;
        batch.put(Bucket::Auth, KEY_REVISION.to_vec(), self.revision.to_be_bytes().to_vec());
        self.refresh_perms();
        Ok(AuthOutcome::Done)
    }

    fn put_user(&mut self, user: authpb::User, batch: &mut WriteBatch) {
        let name = String::from_utf8_lossy(&user.name).into_owned();
        batch.put(Bucket::Auth, record_key(USER_PREFIX, &name), user.encode_to_vec());
        self.users.insert(name, user);
    }

    fn put_role(&mut self, role: authpb::Role, batch: &mut WriteBatch) {
        let name = String::from_utf8_lossy(&role.name).into_owned();
        batch.put(Bucket::Auth, record_key(ROLE_PREFIX, &name), role.encode_to_vec());
        self.roles.insert(name, role);
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

/// The password hash a user record keeps, from a proposal's `hashed_password`: base64 of the bcrypt hash
/// (what the proposer sends, as etcd's, and what a client may send itself with an empty `password`), or
/// the bcrypt hash itself (`$2...`, never base64: how entries written before carried it). Text that is
/// neither is refused with etcd's (odd) text for it.
fn stored_password(hashed: &str) -> Result<Vec<u8>> {
    if hashed.starts_with("$2") {
        return Ok(hashed.as_bytes().to_vec());
    }
    base64::engine::general_purpose::STANDARD.decode(hashed).map_err(|_| Error::NoPasswordUser)
}

/// etcd 3.6's rule for a granted range: a key, and an end past it (or none, or `\0` for "from the key").
fn is_valid_permission_range(key: &[u8], range_end: &[u8]) -> bool {
    !key.is_empty() && (range_end.is_empty() || key < range_end || range_end == [0])
}

fn record_key(prefix: &[u8], name: &str) -> Vec<u8> {
    [prefix, name.as_bytes()].concat()
}

fn has_root_role(user: &authpb::User) -> bool {
    user.roles.iter().any(|role| role == ROOT)
}

pub fn no_password(user: &authpb::User) -> bool {
    user.options.as_ref().is_some_and(|o| o.no_password)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::MemBackend;

    fn apply(store: &mut AuthStore, backend: &MemBackend, cmd: AuthCommand) -> Result<AuthOutcome> {
        let mut batch = WriteBatch::default();
        let out = store.apply(&cmd, &mut batch)?;
        backend.write(batch).expect("write");
        Ok(out)
    }

    fn user_add(name: &str) -> AuthCommand {
        AuthCommand::UserAdd(pb::AuthUserAddRequest {
            name: name.into(),
            hashed_password: "$2b$04$hash".into(),
            ..Default::default()
        })
    }

    fn grant(user: &str, role: &str) -> AuthCommand {
        AuthCommand::UserGrantRole(pb::AuthUserGrantRoleRequest { user: user.into(), role: role.into() })
    }

    #[test]
    fn role_grant_permission_checks_the_permission_before_the_role_as_etcd_36() {
        let backend = Arc::new(MemBackend::default());
        let mut store = AuthStore::default();
        let grant_perm = |role: &str, perm: Option<(&[u8], &[u8])>| -> AuthCommand {
            AuthCommand::RoleGrantPermission(pb::AuthRoleGrantPermissionRequest {
                name: role.into(),
                perm: perm.map(|(key, range_end)| authpb::Permission {
                    perm_type: 0,
                    key: key.to_vec(),
                    range_end: range_end.to_vec(),
                }),
            })
        };
        type Grant<'a> = Option<(&'a [u8], &'a [u8])>;
        let cases: [(Grant, Error); 4] = [
            (None, Error::PermissionNotGiven),
            (Some((b"", b"")), Error::InvalidAuthMgmt),
            (Some((b"b", b"a")), Error::InvalidAuthMgmt),
            (Some((b"a", b"a")), Error::InvalidAuthMgmt),
        ];
        for (perm, want) in cases {
            assert_eq!(apply(&mut store, &backend, grant_perm("missing", perm)), Err(want), "{perm:?}");
        }
        assert_eq!(apply(&mut store, &backend, grant_perm("missing", Some((b"a", b"b")))), Err(Error::RoleNotFound));
        apply(&mut store, &backend, AuthCommand::RoleAdd(pb::AuthRoleAddRequest { name: "r".into() })).expect("role");
        for perm in [(&b"a"[..], &b""[..]), (b"a", b"b"), (b"a", &[0][..])] {
            apply(&mut store, &backend, grant_perm("r", Some(perm))).expect("a valid range");
        }
        assert_eq!(store.role("r").map(|r| r.key_permission.len()), Some(3));
    }

    #[test]
    fn passwords_arrive_as_base64_and_a_user_without_one_keeps_none() {
        let backend = Arc::new(MemBackend::default());
        let mut store = AuthStore::default();
        let hash = "$2b$04$abcdefghijklmnopqrstuv";
        let encoded = base64::engine::general_purpose::STANDARD.encode(hash);
        let add = |name: &str, hashed: &str, no_password: bool| {
            AuthCommand::UserAdd(pb::AuthUserAddRequest {
                name: name.into(),
                hashed_password: hashed.into(),
                options: Some(authpb::UserAddOptions { no_password }),
                ..Default::default()
            })
        };
        apply(&mut store, &backend, add("new", &encoded, false)).expect("base64");
        apply(&mut store, &backend, add("old", hash, false)).expect("a bcrypt hash, as entries carried before");
        apply(&mut store, &backend, add("none", &encoded, true)).expect("no password");
        assert_eq!(store.user("new").map(|u| u.password.clone()), Some(hash.as_bytes().to_vec()));
        assert_eq!(store.user("old").map(|u| u.password.clone()), Some(hash.as_bytes().to_vec()));
        assert_eq!(store.user("none").map(|u| u.password.is_empty()), Some(true));

        let change = |name: &str, hashed: &str| {
            AuthCommand::UserChangePassword(pb::AuthUserChangePasswordRequest {
                name: name.into(),
                hashed_password: hashed.into(),
                ..Default::default()
            })
        };
        assert_eq!(apply(&mut store, &backend, change("ghost", "!")), Err(Error::UserNotFound));
        assert_eq!(apply(&mut store, &backend, change("new", "!")), Err(Error::NoPasswordUser));
        apply(&mut store, &backend, change("none", "!")).expect("etcd ignores it for a user without a password");
        assert_eq!(store.user("none").map(|u| u.password.is_empty()), Some(true));
        apply(&mut store, &backend, change("new", "")).expect("an empty hash: no password will match");
        assert_eq!(store.user("new").map(|u| u.password.is_empty()), Some(true));
    }

    #[test]
    fn enable_needs_root_with_the_root_role_and_then_root_cannot_be_removed() {
        let backend = Arc::new(MemBackend::default());
        let mut store = AuthStore::default();
        assert_eq!(apply(&mut store, &backend, AuthCommand::Enable), Err(Error::RootUserNotExist));
        apply(&mut store, &backend, user_add(ROOT)).expect("add root");
        assert_eq!(apply(&mut store, &backend, AuthCommand::Enable), Err(Error::RootRoleNotExist));
        apply(&mut store, &backend, grant(ROOT, ROOT)).expect("root role needs no role record");
        let revision = store.revision();
        apply(&mut store, &backend, AuthCommand::Enable).expect("enable");
        assert!(store.is_enabled());
        assert_eq!(store.revision(), revision, "enabling keeps the revision");
        let delete = AuthCommand::UserDelete(pb::AuthUserDeleteRequest { name: ROOT.into() });
        assert_eq!(apply(&mut store, &backend, delete), Err(Error::InvalidAuthMgmt));
        let revoke =
            AuthCommand::UserRevokeRole(pb::AuthUserRevokeRoleRequest { name: ROOT.into(), role: ROOT.into() });
        assert_eq!(apply(&mut store, &backend, revoke), Err(Error::InvalidAuthMgmt));

        let mut reloaded = AuthStore::default();
        reloaded.load(&*backend).expect("load");
        assert!(reloaded.is_enabled());
        assert_eq!(reloaded.revision(), store.revision());
        assert_eq!(reloaded.user(ROOT), store.user(ROOT));
    }

    #[test]
    fn a_read_only_user_reads_its_prefix_only_and_old_revisions_are_refused() {
        let backend = Arc::new(MemBackend::default());
        let mut store = AuthStore::default();
        for cmd in [
            user_add(ROOT),
            grant(ROOT, ROOT),
            user_add("reader"),
            AuthCommand::RoleAdd(pb::AuthRoleAddRequest { name: "app-ro".into() }),
            AuthCommand::RoleGrantPermission(pb::AuthRoleGrantPermissionRequest {
                name: "app-ro".into(),
                perm: Some(authpb::Permission {
                    perm_type: authpb::permission::Type::Read as i32,
                    key: b"/app/".to_vec(),
                    range_end: b"/app0".to_vec(),
                }),
            }),
            grant("reader", "app-ro"),
            AuthCommand::Enable,
        ] {
            apply(&mut store, &backend, cmd).expect("setup");
        }
        let token = TokenTable::generate();
        let login = AuthCommand::Authenticate { name: "reader".into(), token: token.clone() };
        assert_eq!(apply(&mut store, &backend, login), Ok(AuthOutcome::Token(token.clone())));
        let caller = store.resolve(Some(&token)).expect("token").expect("enabled");
        assert_eq!(caller.user, "reader");
        assert_eq!(store.check_read(&caller, b"/app/x", b""), Ok(()));
        assert_eq!(store.check_read(&caller, b"/other", b""), Err(Error::PermissionDenied));
        assert_eq!(store.check_write(&caller, b"/app/x", b""), Err(Error::PermissionDenied));
        assert_eq!(store.check_admin(&caller), Err(Error::PermissionDenied));
        assert_eq!(store.check_read(&Caller::default(), b"/app/x", b""), Err(Error::UserEmpty));
        assert_eq!(store.resolve(Some("nope")), Err(Error::InvalidAuthToken));

        apply(&mut store, &backend, AuthCommand::RoleAdd(pb::AuthRoleAddRequest { name: "other".into() }))
            .expect("role add");
        assert_eq!(store.check_read(&caller, b"/app/x", b""), Err(Error::AuthOldRevision));

        let revoke = AuthCommand::RoleRevokePermission(pb::AuthRoleRevokePermissionRequest {
            role: "app-ro".into(),
            key: b"/app/".to_vec(),
            range_end: b"/app0".to_vec(),
        });
        apply(&mut store, &backend, revoke.clone()).expect("revoke");
        assert_eq!(apply(&mut store, &backend, revoke), Err(Error::PermissionNotGranted));
        let fresh = store.resolve(Some(&token)).expect("token").expect("enabled");
        assert_eq!(store.check_read(&fresh, b"/app/x", b""), Err(Error::PermissionDenied));

        let delete = AuthCommand::UserDelete(pb::AuthUserDeleteRequest { name: "reader".into() });
        apply(&mut store, &backend, delete).expect("delete");
        assert_eq!(store.resolve(Some(&token)), Err(Error::InvalidAuthToken), "a deleted user's tokens die");
    }
}
