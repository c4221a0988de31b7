//! `member <subcommand>`: cluster membership (only `list` so far).

use clap::Subcommand;
use proto::etcdserverpb as pb;

use super::cluster_client;
use crate::error::CliError;
use crate::global::GlobalFlags;
use crate::printer::Printer;

#[derive(Debug, Clone, Subcommand)]
pub enum MemberCommand {
    /// Lists all members in the cluster
    List,
}

impl MemberCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        match self {
            MemberCommand::List => {
                let mut client = cluster_client(global).await?;
                let resp = client.member_list(pb::MemberListRequest { linearizable: false }).await?.into_inner();
                Printer { format: global.write_out, hex: global.hex, value_only: false }.member_list(&resp)
            }
        }
    }
}
