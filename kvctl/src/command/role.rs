//! `role add|delete|get|list|grant-permission|revoke-permission`.

use clap::{Args, Subcommand};
use proto::authpb::permission::Type as PermType;
use proto::authpb::Permission;
use proto::etcdserverpb as pb;

use super::auth_client;
use super::user::one_name;
use crate::error::CliError;
use crate::global::GlobalFlags;
use crate::prefix::prefix_end;
use crate::printer::{AuthResponse, Printer};

#[derive(Debug, Clone, Subcommand)]
pub enum RoleCommand {
    /// Adds a new role
    Add {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Deletes a role
    Delete {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Gets detailed information of a role
    Get {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Lists all roles
    List {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Grants a key to a role
    GrantPermission(PermArgs),
    /// Revokes a key from a role
    RevokePermission(PermArgs),
}

/// `grant-permission <role> <type> <key> [endkey]` and `revoke-permission <role> <key> [endkey]`.
#[derive(Debug, Clone, Args)]
pub struct PermArgs {
    /// a prefix permission
    #[arg(long)]
    pub prefix: bool,
    /// a permission of keys that are greater than or equal to the given key using byte compare
    #[arg(long)]
    pub from_key: bool,
    #[arg(hide = true)]
    pub args: Vec<String>,
}

impl RoleCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<Vec<u8>, CliError> {
        let printer = Printer::of(global);
        match self {
            RoleCommand::Add { args } => {
                let name = one_name(args, "role add command requires role name as its argument")?;
                let resp =
                    auth_client(global).await?.role_add(pb::AuthRoleAddRequest { name: name.clone().into() }).await?;
                printer.auth(&AuthResponse::RoleAdd(name, resp.get_ref()))
            }
            RoleCommand::Delete { args } => {
                let name = one_name(args, "role delete command requires role name as its argument")?;
                let request = pb::AuthRoleDeleteRequest { role: name.clone().into() };
                let resp = auth_client(global).await?.role_delete(request).await?;
                printer.auth(&AuthResponse::RoleDelete(name, resp.get_ref()))
            }
            RoleCommand::Get { args } => {
                let name = one_name(args, "role get command requires role name as its argument")?;
                let resp =
                    auth_client(global).await?.role_get(pb::AuthRoleGetRequest { role: name.clone().into() }).await?;
                printer.auth(&AuthResponse::RoleGet(name, resp.get_ref()))
            }
            RoleCommand::List { args } => {
                if !args.is_empty() {
                    return Err(CliError::bad_args("role list command requires no arguments"));
                }
                let resp = auth_client(global).await?.role_list(pb::AuthRoleListRequest {}).await?;
                printer.auth(&AuthResponse::RoleList(resp.get_ref()))
            }
            RoleCommand::GrantPermission(perm) => {
                let [role, kind, keys @ ..] = perm.args.as_slice() else {
                    return Err(CliError::bad_args(
                        "role grant command requires role name, permission type, and key [endkey] as its argument",
                    ));
                };
                if keys.is_empty() {
                    return Err(CliError::bad_args(
                        "role grant command requires role name, permission type, and key [endkey] as its argument",
                    ));
                }
                let perm_type = perm_type(kind)?;
                let (key, range_end) = perm.range(keys)?;
                let request = pb::AuthRoleGrantPermissionRequest {
                    name: role.clone().into(),
                    perm: Some(Permission { perm_type: perm_type as i32, key, range_end }),
                };
                let resp = auth_client(global).await?.role_grant_permission(request).await?;
                printer.auth(&AuthResponse::RoleGrantPermission(role, resp.get_ref()))
            }
            RoleCommand::RevokePermission(perm) => {
                let [role, keys @ ..] = perm.args.as_slice() else {
                    return Err(CliError::bad_args(
                        "role revoke-permission command requires role name and key [endkey] as its argument",
                    ));
                };
                let Some(typed_key) = keys.first() else {
                    return Err(CliError::bad_args(
                        "role revoke-permission command requires role name and key [endkey] as its argument",
                    ));
                };
                let (key, range_end) = perm.range(keys)?;
                let request = pb::AuthRoleRevokePermissionRequest {
                    role: role.clone().into(),
                    key,
                    range_end: range_end.clone(),
                };
                let resp = auth_client(global).await?.role_revoke_permission(request).await?;
                printer.auth(&AuthResponse::RoleRevokePermission(role, typed_key, &range_end, resp.get_ref()))
            }
        }
    }
}

/// clientv3's `StrToPermissionType`: the name in any case.
fn perm_type(text: &str) -> Result<PermType, CliError> {
    PermType::from_str_name(&text.to_uppercase())
        .ok_or_else(|| CliError::bad_args(format!("invalid permission type: {text}")))
}

impl PermArgs {
    /// etcdctl's `permRange`: the key and range end of a permission from `key [endkey]` and the
    /// flags. An empty key stands for the whole keyspace (`\0`); with it, an end key is ignored.
    /// Further arguments are ignored, as etcdctl does.
    fn range(&self, keys: &[String]) -> Result<(Vec<u8>, Vec<u8>), CliError> {
        let exclusive = || CliError::bad_args("--from-key and --prefix flags are mutually exclusive");
        let key = keys[0].as_bytes();
        if key.is_empty() {
            if self.prefix && self.from_key {
                return Err(exclusive());
            }
            let range_end = if self.prefix || self.from_key { vec![0] } else { Vec::new() };
            return Ok((vec![0], range_end));
        }
        let range_end = match (keys.get(1), self.prefix, self.from_key) {
            (None, true, true) => return Err(exclusive()),
            (None, true, false) => prefix_end(key),
            (None, false, true) => vec![0],
            (None, false, false) => Vec::new(),
            (Some(_), true, _) => return Err(CliError::bad_args("unexpected endkey argument with --prefix flag")),
            (Some(_), _, true) => return Err(CliError::bad_args("unexpected endkey argument with --from-key flag")),
            (Some(end), false, false) => end.as_bytes().to_vec(),
        };
        Ok((key.to_vec(), range_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(prefix: bool, from_key: bool) -> PermArgs {
        PermArgs { prefix, from_key, args: Vec::new() }
    }

    fn keys(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    /// A permission's key and range end, or the exit code.
    type Range = Result<(&'static [u8], &'static [u8]), u8>;

    #[test]
    fn ranges_like_etcdctl() {
        let cases: [(PermArgs, &[&str], Range); 11] = [
            (perm(false, false), &["a"], Ok((b"a", b""))),
            (perm(false, false), &["a", "c"], Ok((b"a", b"c"))),
            (perm(false, false), &["a", "c", "ignored"], Ok((b"a", b"c"))),
            (perm(true, false), &["p/"], Ok((b"p/", b"p0"))),
            (perm(false, true), &["z"], Ok((b"z", b"\0"))),
            (perm(true, false), &[""], Ok((b"\0", b"\0"))),
            (perm(false, false), &["", "c"], Ok((b"\0", b""))),
            (perm(true, true), &[""], Err(128)),
            (perm(true, true), &["a"], Err(128)),
            (perm(true, false), &["a", "b"], Err(128)),
            (perm(false, true), &["a", "b"], Err(128)),
        ];
        for (flags, words, want) in cases {
            let got = flags.range(&keys(words));
            let got = got.as_ref().map(|(k, e)| (k.as_slice(), e.as_slice())).map_err(|e| e.code);
            assert_eq!(got, want, "{words:?} prefix={} from_key={}", flags.prefix, flags.from_key);
        }
        assert_eq!(perm_type("ReadWrite").ok(), Some(PermType::Readwrite));
        assert_eq!(perm_type("foo").map_err(|e| e.message), Err("invalid permission type: foo".to_string()));
    }
}
