//! `auth enable|disable` (and etcdctl 3.5's `auth status`): switching authentication on and off.

use clap::Subcommand;
use proto::etcdserverpb as pb;

use super::auth_client;
use crate::error::CliError;
use crate::global::GlobalFlags;
use crate::printer::{AuthResponse, Printer};

/// etcd's answer to AuthEnable while user root lacks role root; etcdctl then creates the role,
/// grants it and tries again.
const ROOT_ROLE_NOT_EXIST: &str = "etcdserver: root user does not have root role";

#[derive(Debug, Clone, Subcommand)]
pub enum AuthCommand {
    /// Enables authentication
    Enable {
        /// (none: etcdctl refuses arguments with its own message)
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Disables authentication
    Disable {
        /// (none: etcdctl refuses arguments with its own message)
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Returns authentication status
    Status {
        /// (none: etcdctl refuses arguments with its own message)
        #[arg(hide = true)]
        args: Vec<String>,
    },
}

impl AuthCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<Vec<u8>, CliError> {
        let (verb, args) = match self {
            AuthCommand::Enable { args } => ("enable", args),
            AuthCommand::Disable { args } => ("disable", args),
            AuthCommand::Status { args } => ("status", args),
        };
        if !args.is_empty() {
            return Err(CliError::bad_args(format!("auth {verb} command does not accept any arguments")));
        }
        let mut client = auth_client(global).await?;
        match self {
            AuthCommand::Enable { .. } => {
                loop {
                    match client.auth_enable(pb::AuthEnableRequest {}).await {
                        Ok(_) => break,
                        Err(status) if status.message() == ROOT_ROLE_NOT_EXIST => {
                            client.role_add(pb::AuthRoleAddRequest { name: "root".into() }).await?;
                            let grant = pb::AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() };
                            client.user_grant_role(grant).await?;
                        }
                        Err(status) => return Err(status.into()),
                    }
                }
                // Whatever the output format.
                Ok(b"Authentication Enabled\n".to_vec())
            }
            AuthCommand::Disable { .. } => {
                client.auth_disable(pb::AuthDisableRequest {}).await?;
                Ok(b"Authentication Disabled\n".to_vec())
            }
            AuthCommand::Status { .. } => {
                let resp = client.auth_status(pb::AuthStatusRequest {}).await?.into_inner();
                Printer::of(global).auth(&AuthResponse::Status(&resp))
            }
        }
    }
}
