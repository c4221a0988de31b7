//! `user add|delete|get|list|passwd|grant-role|revoke-role`.

use clap::{ArgAction, Args, Subcommand};
use proto::authpb;
use proto::etcdserverpb as pb;

use super::auth_client;
use crate::auth::{ask, scan_word};
use crate::error::CliError;
use crate::global::{parse_go_bool, GlobalFlags};
use crate::printer::{AuthResponse, Printer};

#[derive(Debug, Clone, Subcommand)]
pub enum UserCommand {
    /// Adds a new user
    Add(AddArgs),
    /// Deletes a user
    Delete {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Gets detailed information of a user
    Get {
        /// Show permissions of roles granted to the user
        #[arg(long)]
        detail: bool,
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Lists all users
    List {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Changes password of user
    Passwd {
        /// If true, read password from stdin instead of interactive terminal
        #[arg(
            long,
            num_args = 0..=1,
            require_equals = true,
            default_value = "true",
            default_missing_value = "true",
            value_parser = parse_go_bool,
            action = ArgAction::Set
        )]
        interactive: bool,
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Grants a role to a user
    GrantRole {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Revokes a role from a user
    RevokeRole {
        #[arg(hide = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Clone, Args)]
pub struct AddArgs {
    /// Read password from stdin instead of interactive terminal
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool,
        action = ArgAction::Set
    )]
    pub interactive: bool,
    /// Supply password from the command line flag
    #[arg(long, default_value = "")]
    pub new_user_password: String,
    /// Create a user without password (CN based auth only)
    #[arg(long)]
    pub no_password: bool,
    #[arg(hide = true)]
    pub args: Vec<String>,
}

impl UserCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<Vec<u8>, CliError> {
        let printer = Printer::of(global);
        match self {
            UserCommand::Add(add) => {
                let request = add.request()?;
                let resp = auth_client(global).await?.user_add(request.clone()).await?.into_inner();
                printer.auth(&AuthResponse::UserAdd(&String::from_utf8_lossy(&request.name), &resp))
            }
            UserCommand::Delete { args } => {
                let name = one_name(args, "user delete command requires user name as its argument")?;
                let request = pb::AuthUserDeleteRequest { name: name.clone().into() };
                let resp = auth_client(global).await?.user_delete(request).await?.into_inner();
                printer.auth(&AuthResponse::UserDelete(name, &resp))
            }
            UserCommand::Get { detail, args } => {
                let name = one_name(args, "user get command requires user name as its argument")?;
                let mut client = auth_client(global).await?;
                let resp = client.user_get(pb::AuthUserGetRequest { name: name.clone().into() }).await?.into_inner();
                if !detail {
                    return printer.auth(&AuthResponse::UserGet(name, &resp));
                }
                // Each role as `role get` prints it; what was printed stays printed when one fails.
                let mut out = format!("User: {name}\n").into_bytes();
                for role in &resp.roles {
                    out.push(b'\n');
                    let shown = match client.role_get(pb::AuthRoleGetRequest { role: role.clone() }).await {
                        Ok(role_resp) => {
                            printer.auth(&AuthResponse::RoleGet(&String::from_utf8_lossy(role), role_resp.get_ref()))
                        }
                        Err(status) => Err(status.into()),
                    };
                    match shown {
                        Ok(text) => out.extend(text),
                        Err(err) => return Err(print_before(out, err)),
                    }
                }
                Ok(out)
            }
            UserCommand::List { args } => {
                if !args.is_empty() {
                    return Err(CliError::bad_args("user list command requires no arguments"));
                }
                let resp = auth_client(global).await?.user_list(pb::AuthUserListRequest {}).await?.into_inner();
                printer.auth(&AuthResponse::UserList(&resp))
            }
            UserCommand::Passwd { interactive, args } => {
                let name = one_name(args, "user passwd command requires user name as its argument")?;
                let password = read_password(name, *interactive)?;
                let request = pb::AuthUserChangePasswordRequest {
                    name: name.clone().into(),
                    password: password.into(),
                    ..Default::default()
                };
                let resp = auth_client(global).await?.user_change_password(request).await?.into_inner();
                printer.auth(&AuthResponse::UserChangePassword(&resp))
            }
            UserCommand::GrantRole { args } => {
                let [user, role] =
                    two_names(args, "user grant command requires user name and role name as its argument")?;
                let request = pb::AuthUserGrantRoleRequest { user: user.clone().into(), role: role.clone().into() };
                let resp = auth_client(global).await?.user_grant_role(request).await?.into_inner();
                printer.auth(&AuthResponse::UserGrantRole(user, role, &resp))
            }
            UserCommand::RevokeRole { args } => {
                let [user, role] =
                    two_names(args, "user revoke-role requires user name and role name as its argument")?;
                let request = pb::AuthUserRevokeRoleRequest { name: user.clone().into(), role: role.clone().into() };
                let resp = auth_client(global).await?.user_revoke_role(request).await?.into_inner();
                printer.auth(&AuthResponse::UserRevokeRole(user, role, &resp))
            }
        }
    }
}

impl AddArgs {
    /// The name and password as etcdctl takes them, in its order: `--no-password`, then
    /// `--new-user-password`, then `name:password`, then a prompt (or one word from stdin with
    /// `--interactive=false`).
    fn request(&self) -> Result<pb::AuthUserAddRequest, CliError> {
        let [arg] = self.args.as_slice() else {
            return Err(CliError::bad_args("user add command requires user name as its argument"));
        };
        let (name, password) = if self.no_password {
            (arg.clone(), String::new())
        } else if !self.new_user_password.is_empty() {
            (arg.clone(), self.new_user_password.clone())
        } else if let Some((name, password)) = arg.split_once(':') {
            if name.is_empty() {
                return Err(CliError::bad_args("empty user name is not allowed"));
            }
            (name.to_string(), password.to_string())
        } else {
            (arg.clone(), read_password(arg, self.interactive)?)
        };
        let options = Some(authpb::UserAddOptions { no_password: self.no_password });
        Ok(pb::AuthUserAddRequest { name: name.into(), password: password.into(), options, ..Default::default() })
    }
}

/// A new password for `name`: asked twice on the terminal (etcdctl's `readPasswordInteractive`),
/// or the first word of stdin with `--interactive=false`.
fn read_password(name: &str, interactive: bool) -> Result<String, CliError> {
    if !interactive {
        // etcdctl ignores a failed read and goes on with an empty password.
        return Ok(scan_word(&mut std::io::stdin().lock()).unwrap_or_default());
    }
    let failed = |e: std::io::Error| CliError::bad_args(format!("failed to ask password: {e}"));
    let first = ask(&format!("Password of {name}: ")).map_err(failed)?;
    if first.is_empty() {
        return Err(CliError::bad_args("empty password"));
    }
    let second = ask(&format!("Type password of {name} again for confirmation: ")).map_err(failed)?;
    if first != second {
        return Err(CliError::bad_args("given passwords are different"));
    }
    Ok(first)
}

pub(crate) fn one_name<'a>(args: &'a [String], usage: &str) -> Result<&'a String, CliError> {
    match args {
        [name] => Ok(name),
        _ => Err(CliError::bad_args(usage)),
    }
}

fn two_names<'a>(args: &'a [String], usage: &str) -> Result<[&'a String; 2], CliError> {
    match args {
        [first, second] => Ok([first, second]),
        _ => Err(CliError::bad_args(usage)),
    }
}

/// Writes what a command printed before it failed (etcdctl prints as it goes), then hands back the
/// error for `main` to report.
pub(crate) fn print_before(out: Vec<u8>, err: CliError) -> CliError {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&out);
    let _ = stdout.flush();
    err
}
