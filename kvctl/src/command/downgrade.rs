//! `downgrade validate|enable|cancel <TARGET_VERSION>` (etcdctl 3.6): the cluster downgrade.

use clap::Subcommand;
use proto::etcdserverpb as pb;
use proto::etcdserverpb::downgrade_request::DowngradeAction;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Subcommand)]
pub enum DowngradeCommand {
    /// Validate downgrade capability before starting downgrade
    Validate {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Start a downgrade action to cluster
    Enable {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Cancel the ongoing downgrade action to cluster
    Cancel {
        #[arg(hide = true)]
        args: Vec<String>,
    },
}

impl DowngradeCommand {
    /// The request, or etcdctl's refusal of the arguments (before dialling).
    fn request(&self) -> Result<(&'static str, pb::DowngradeRequest), CliError> {
        let target = |args: &[String]| match args {
            [] => Err(CliError::bad_args("TARGET_VERSION not provided")),
            [_, _, ..] => Err(CliError::bad_args("too many arguments")),
            [version] if version.is_empty() => Err(CliError::bad_args("target version not provided")),
            [version] => Ok(version.clone()),
        };
        let (verb, action, version) = match self {
            DowngradeCommand::Validate { args } => ("validate", DowngradeAction::Validate, target(args)?),
            DowngradeCommand::Enable { args } => ("enable", DowngradeAction::Enable, target(args)?),
            DowngradeCommand::Cancel { .. } => ("cancel", DowngradeAction::Cancel, String::new()),
        };
        Ok((verb, pb::DowngradeRequest { action: action as i32, version }))
    }

    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let (verb, request) = self.request()?;
        let mut client = pb::maintenance_client::MaintenanceClient::new(global.connect().await?);
        let resp = client.downgrade(request).await?.into_inner();
        Ok(format!("Downgrade {verb} success, cluster version {}\n", resp.version))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::command::{Cli, Command};

    fn request(args: &[&str]) -> Result<(String, i32, String), String> {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Downgrade(cmd) = cli.command else { panic!("not downgrade: {:?}", cli.command) };
        cmd.request().map(|(verb, req)| (verb.to_string(), req.action, req.version)).map_err(|e| e.message)
    }

    #[test]
    fn arguments_are_checked_as_etcdctl_checks_them() {
        assert_eq!(request(&["kvctl", "downgrade", "validate", "3.5"]), Ok(("validate".into(), 0, "3.5".into())));
        assert_eq!(request(&["kvctl", "downgrade", "enable", "3.5"]), Ok(("enable".into(), 1, "3.5".into())));
        assert_eq!(request(&["kvctl", "downgrade", "cancel"]), Ok(("cancel".into(), 2, String::new())));
        assert_eq!(request(&["kvctl", "downgrade", "enable"]), Err("TARGET_VERSION not provided".into()));
        assert_eq!(request(&["kvctl", "downgrade", "enable", "3.5", "3.4"]), Err("too many arguments".into()));
    }
}
