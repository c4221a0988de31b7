//! Changes of the auth state, applied in log order: [`AuthStore::apply`] of each [`AuthCommand`], with etcd's
//! checks in etcd's order, staging what changes in the store's batch.

use base64::Engine;
use prost::Message;
use proto::authpb;

use super::{
    has_root_role, no_password, AuthCommand, AuthOutcome, AuthStore, KEY_ENABLED, KEY_REVISION, ROLE_PREFIX, ROOT,
    USER_PREFIX,
};
use crate::backend::{Bucket, WriteBatch};
use crate::error::{Error, Result};

impl AuthStore {
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
                let user = authpb::User { name: req.name.clone(), password, roles: vec![], options: Some(options) };
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
                self.put_role(authpb::Role { name: req.name.clone(), key_permission: vec![] }, batch);
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
        batch.put(Bucket::Auth, record_key(USER_PREFIX, &user.name), user.encode_to_vec());
        self.users.insert(user.name.clone(), user);
    }

    fn put_role(&mut self, role: authpb::Role, batch: &mut WriteBatch) {
        batch.put(Bucket::Auth, record_key(ROLE_PREFIX, &role.name), role.encode_to_vec());
        self.roles.insert(role.name.clone(), role);
    }
}

/// The password hash a user record keeps, from a proposal's `hashed_password`: base64 of the bcrypt hash
/// (what the proposer sends, as etcd's, and what a client may send itself with an empty `password`), or
/// the bcrypt hash itself (`$2...`, never base64: how entries written before carried it). Text that is
/// neither is refused with etcd's (odd) text for it.
fn stored_password(hashed: &[u8]) -> Result<Vec<u8>> {
    if hashed.starts_with(b"$2") {
        return Ok(hashed.to_vec());
    }
    base64::engine::general_purpose::STANDARD.decode(hashed).map_err(|_| Error::NoPasswordUser)
}

/// etcd 3.6's rule for a granted range: a key, and an end past it (or none, or `\0` for "from the key").
fn is_valid_permission_range(key: &[u8], range_end: &[u8]) -> bool {
    !key.is_empty() && (range_end.is_empty() || key < range_end || range_end == [0])
}

fn record_key(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    [prefix, name].concat()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proto::etcdserverpb as pb;

    use super::*;
    use crate::auth::token::TokenTable;
    use crate::auth::Caller;
    use crate::backend::{Backend, MemBackend};

    fn apply(store: &mut AuthStore, backend: &MemBackend, cmd: AuthCommand) -> Result<AuthOutcome> {
        let mut batch = WriteBatch::default();
        let out = store.apply(&cmd, &mut batch)?;
        backend.write(batch).expect("write");
        Ok(out)
    }

    fn user_add(name: &[u8]) -> AuthCommand {
        AuthCommand::UserAdd(pb::AuthUserAddRequest {
            name: name.into(),
            hashed_password: "$2b$04$hash".into(),
            ..Default::default()
        })
    }

    fn grant(user: &[u8], role: &[u8]) -> AuthCommand {
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
            user_add(b"reader"),
            AuthCommand::RoleAdd(pb::AuthRoleAddRequest { name: "app-ro".into() }),
            AuthCommand::RoleGrantPermission(pb::AuthRoleGrantPermissionRequest {
                name: "app-ro".into(),
                perm: Some(authpb::Permission {
                    perm_type: authpb::permission::Type::Read as i32,
                    key: b"/app/".to_vec(),
                    range_end: b"/app0".to_vec(),
                }),
            }),
            grant(b"reader", b"app-ro"),
            AuthCommand::Enable,
        ] {
            apply(&mut store, &backend, cmd).expect("setup");
        }
        let token = TokenTable::generate();
        let login = AuthCommand::Authenticate { name: "reader".into(), token: token.clone() };
        assert_eq!(apply(&mut store, &backend, login), Ok(AuthOutcome::Token(token.clone())));
        let caller = store.resolve(Some(&token)).expect("token").expect("enabled");
        assert_eq!(caller.user, b"reader");
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
