//! `alarm list|disarm`: the cluster's alarms (`NOSPACE`, `CORRUPT`).

use clap::Subcommand;
use proto::etcdserverpb as pb;
use proto::etcdserverpb::alarm_request::AlarmAction;

use crate::error::CliError;
use crate::global::{Conn, GlobalFlags};
use crate::printer::Printer;

type MaintenanceClient = pb::maintenance_client::MaintenanceClient<Conn>;

#[derive(Debug, Clone, Subcommand)]
pub enum AlarmCommand {
    /// Disarms all alarms
    Disarm {
        /// (none: etcdctl refuses arguments with its own message)
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Lists all alarms
    List {
        /// (none: etcdctl refuses arguments with its own message)
        #[arg(hide = true)]
        args: Vec<String>,
    },
}

impl AlarmCommand {
    /// Arguments are refused before dialling.
    fn check_args(&self) -> Result<(), CliError> {
        match self {
            AlarmCommand::Disarm { args } if !args.is_empty() => {
                Err(CliError::bad_args("alarm disarm command accepts no arguments"))
            }
            AlarmCommand::List { args } if !args.is_empty() => {
                Err(CliError::bad_args("alarm list command accepts no arguments"))
            }
            _ => Ok(()),
        }
    }

    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        self.check_args()?;
        let mut client = MaintenanceClient::new(global.connect().await?);
        let resp = match self {
            AlarmCommand::List { .. } => list(&mut client).await?,
            AlarmCommand::Disarm { .. } => disarm_all(&mut client).await?,
        };
        Printer { format: global.write_out, hex: global.hex, value_only: false }.alarm(&resp)
    }
}

async fn list(client: &mut MaintenanceClient) -> Result<pb::AlarmResponse, CliError> {
    let request = pb::AlarmRequest { action: AlarmAction::Get as i32, member_id: 0, alarm: pb::AlarmType::None as i32 };
    Ok(client.alarm(request).await?.into_inner())
}

/// clientv3's `AlarmDisarm` of "every member, every type": list the alarms and deactivate each
/// one. The response is assembled on the client, so it has no header.
async fn disarm_all(client: &mut MaintenanceClient) -> Result<pb::AlarmResponse, CliError> {
    let mut disarmed = pb::AlarmResponse::default();
    for alarm in list(client).await?.alarms {
        let request =
            pb::AlarmRequest { action: AlarmAction::Deactivate as i32, member_id: alarm.member_id, alarm: alarm.alarm };
        disarmed.alarms.extend(client.alarm(request).await?.into_inner().alarms);
    }
    Ok(disarmed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::command::{Cli, Command};

    fn check(args: &[&str]) -> Result<(), (u8, String)> {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Alarm(cmd) = cli.command else { panic!("not alarm: {:?}", cli.command) };
        cmd.check_args().map_err(|e| (e.code, e.message))
    }

    #[test]
    fn arguments_checked_like_etcdctl() {
        assert_eq!(check(&["kvctl", "alarm", "list"]), Ok(()));
        assert_eq!(check(&["kvctl", "-w", "json", "alarm", "disarm"]), Ok(()));
        assert_eq!(
            check(&["kvctl", "alarm", "list", "x"]),
            Err((128, "alarm list command accepts no arguments".into()))
        );
        assert_eq!(
            check(&["kvctl", "alarm", "disarm", "x", "y"]),
            Err((128, "alarm disarm command accepts no arguments".into()))
        );
        assert!(Cli::try_parse_from(["kvctl", "alarm", "activate"]).is_err());
    }
}
