//! `move-leader <transferee-member-id>`: only the leader can hand its leadership over, so, like
//! etcdctl, ask each `--endpoints` entry in turn for its Status until one says it leads, then send
//! MoveLeader to that one.

use clap::Args;
use proto::etcdserverpb as pb;

use super::endpoint::on_endpoint;
use super::member::parse_hex_id;
use crate::error::CliError;
use crate::global::GlobalFlags;
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct MoveLeaderCommand {
    /// <transferee-member-id>
    pub args: Vec<String>,
}

impl MoveLeaderCommand {
    /// The member to hand leadership to, checked before dialling.
    fn target(&self) -> Result<u64, CliError> {
        let [arg] = self.args.as_slice() else {
            return Err(CliError::bad_args("move-leader command needs 1 argument"));
        };
        parse_hex_id(arg).map_err(CliError::bad_args)
    }

    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let target = self.target()?;
        let (leader_endpoint, leader_id) = find_leader(global).await?;
        let request = pb::MoveLeaderRequest { target_id: target };
        let resp = on_endpoint(global, &leader_endpoint, |conn| async move {
            pb::maintenance_client::MaintenanceClient::new(conn).move_leader(request).await
        })
        .await?;
        Printer { format: global.write_out, hex: global.hex, value_only: false }.move_leader(leader_id, target, &resp)
    }
}

/// The first endpoint whose member says it is the leader, and its id. Any endpoint that fails to
/// answer ends the command, as in etcdctl.
async fn find_leader(global: &GlobalFlags) -> Result<(String, u64), CliError> {
    for endpoint in &global.endpoints {
        let status = on_endpoint(global, endpoint, |conn| async move {
            pb::maintenance_client::MaintenanceClient::new(conn).status(pb::StatusRequest {}).await
        })
        .await?;
        let member_id = status.header.as_ref().map_or(0, |h| h.member_id);
        if member_id == status.leader {
            return Ok((endpoint.clone(), status.leader));
        }
    }
    // Go's `%v` of a string slice.
    Err(CliError::bad_args(format!("no leader endpoint given at [{}]", global.endpoints.join(" "))))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::command::{Cli, Command};

    fn target(args: &[&str]) -> Result<u64, (u8, String)> {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::MoveLeader(cmd) = cli.command else { panic!("not move-leader: {:?}", cli.command) };
        cmd.target().map_err(|e| (e.code, e.message))
    }

    #[test]
    fn arguments_checked_like_etcdctl() {
        let needs_one = Err((128, "move-leader command needs 1 argument".to_string()));
        assert_eq!(target(&["kvctl", "move-leader", "8e9e05c52164694d"]), Ok(0x8e9e05c52164694d));
        assert_eq!(target(&["kvctl", "-w", "json", "move-leader", "ab"]), Ok(0xab));
        assert_eq!(target(&["kvctl", "move-leader"]), needs_one);
        assert_eq!(target(&["kvctl", "move-leader", "1", "2"]), needs_one);
        assert_eq!(
            target(&["kvctl", "move-leader", "zz"]),
            Err((128, "strconv.ParseUint: parsing \"zz\": invalid syntax".to_string()))
        );
    }
}
