//! The auth-on setup: root (with the root role), three users with passwords, three roles with random key
//! permissions, auth enabled; then every user's token on each server. Tokens differ per server, so each
//! side keeps its own; a request names a [`Caller`] and each server gets that caller's token of its own.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use prost_reflect::DynamicMessage;
use proto::{authpb, etcdserverpb as pb};
use rand::rngs::StdRng;
use rand::Rng;
use tonic::transport::Channel;

use super::call;
use super::catalog::Catalog;
use super::names::{password, KEYS, ROLES, USERS};
use super::request::{Caller, Request};
use super::server::Side;
use crate::client::prefix_end;
use crate::error::{Error, Result};

/// A token no server issued (simple tokens look like `<16 letters>.<n>`).
const GARBAGE_TOKEN: &str = "notAToken0000000.1";

/// The requests that set auth up, in order, ending with AuthEnable. The permissions are drawn from `rng`
/// (the session's generator), so they follow the seed.
pub fn setup_requests(catalog: &Catalog, rng: &mut StdRng) -> Result<Vec<Request>> {
    let mut requests = Vec::new();
    let mut push = |name: &str, body: Vec<u8>| -> Result<()> {
        requests.push(request(catalog, name, &body)?);
        Ok(())
    };
    push("UserAdd", user_add("root").encode_to_vec())?;
    push("UserGrantRole", grant_role("root", "root").encode_to_vec())?;
    for (user, role) in USERS.iter().zip(ROLES).skip(1) {
        push("RoleAdd", pb::AuthRoleAddRequest { name: role.into() }.encode_to_vec())?;
        for _ in 0..rng.gen_range(1..=2) {
            let key = KEYS[rng.gen_range(0..KEYS.len())];
            let range_end = match rng.gen_range(0..3) {
                0 => Vec::new(),
                1 => prefix_end(key),
                _ => b"\0".to_vec(),
            };
            let perm = authpb::Permission { perm_type: rng.gen_range(0..=2), key: key.to_vec(), range_end };
            push(
                "RoleGrantPermission",
                pb::AuthRoleGrantPermissionRequest { name: role.into(), perm: Some(perm) }.encode_to_vec(),
            )?;
        }
        push("UserAdd", user_add(user).encode_to_vec())?;
        push("UserGrantRole", grant_role(user, role).encode_to_vec())?;
    }
    push("AuthEnable", pb::AuthEnableRequest {}.encode_to_vec())?;
    Ok(requests)
}

fn user_add(user: &str) -> pb::AuthUserAddRequest {
    pb::AuthUserAddRequest { name: user.into(), password: password(user).into(), ..Default::default() }
}

fn grant_role(user: &str, role: &str) -> pb::AuthUserGrantRoleRequest {
    pb::AuthUserGrantRoleRequest { user: user.into(), role: role.into() }
}

fn request(catalog: &Catalog, name: &str, body: &[u8]) -> Result<Request> {
    let method = catalog.method("etcdserverpb.Auth", name)?;
    let message = DynamicMessage::decode(method.input.clone(), Bytes::copy_from_slice(body))
        .map_err(|err| Error::Setup(format!("cannot build the {name} setup request: {err}")))?;
    Ok(Request { method, message, caller: Caller::Nobody, invalid_utf8_field: None })
}

/// Each user's token on each server; `None` where authentication failed (or auth is off).
#[derive(Debug, Default)]
pub struct Tokens {
    ours: Vec<Option<String>>,
    etcd: Vec<Option<String>>,
}

impl Tokens {
    /// The token `caller` sends to `side`.
    pub fn token(&self, side: Side, caller: Caller) -> Option<&str> {
        match caller {
            Caller::Nobody => None,
            Caller::Garbage => Some(GARBAGE_TOKEN),
            Caller::User(user) => {
                let tokens = match side {
                    Side::Ours => &self.ours,
                    Side::Etcd => &self.etcd,
                };
                tokens.get(user).and_then(Option::as_deref)
            }
        }
    }

    /// Authenticates every user on `side`'s server, replacing that side's tokens.
    pub async fn authenticate(&mut self, side: Side, channel: &Channel, timeout: Duration) {
        let mut tokens = Vec::new();
        for user in USERS {
            tokens.push(call::authenticate(channel, user, &password(user), timeout).await);
        }
        match side {
            Side::Ours => self.ours = tokens,
            Side::Etcd => self.etcd = tokens,
        }
    }

    /// How many users hold a token on `side`.
    pub fn count(&self, side: Side) -> usize {
        let tokens = match side {
            Side::Ours => &self.ours,
            Side::Etcd => &self.etcd,
        };
        tokens.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn setup_creates_root_users_roles_then_enables_auth_and_follows_the_seed() {
        let catalog = Catalog::load().expect("descriptors");
        let steps = |seed| {
            let requests = setup_requests(&catalog, &mut StdRng::seed_from_u64(seed)).expect("setup");
            requests.iter().map(|r| (r.method.name.clone(), r.encode())).collect::<Vec<_>>()
        };
        let first = steps(1);
        let names: Vec<&str> = first.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names[..2], ["UserAdd", "UserGrantRole"]);
        assert_eq!(names.last(), Some(&"AuthEnable"));
        assert_eq!(names.iter().filter(|n| **n == "UserAdd").count(), USERS.len());
        assert_eq!(names.iter().filter(|n| **n == "RoleAdd").count(), ROLES.len() - 1);
        assert_eq!(first, steps(1));
        let tokens = Tokens { ours: vec![Some("a".into())], etcd: vec![None] };
        assert_eq!(tokens.token(Side::Ours, Caller::User(0)), Some("a"));
        assert_eq!(tokens.token(Side::Etcd, Caller::User(0)), None);
        assert_eq!(tokens.token(Side::Etcd, Caller::Garbage), Some(GARBAGE_TOKEN));
    }
}
