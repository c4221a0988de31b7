//! `endpoint <subcommand>`: per-endpoint queries, asked of every `--endpoints` entry in turn.

use clap::Subcommand;
use proto::etcdserverpb as pb;

use super::maintenance_client_to;
use crate::error::CliError;
use crate::global::GlobalFlags;
use crate::printer::Printer;

#[derive(Debug, Clone, Subcommand)]
pub enum EndpointCommand {
    /// Prints out the status of endpoints specified in `--endpoints` flag
    Status,
    /// Prints the KV history hash for each endpoint in --endpoints
    Hashkv {
        /// maximum revision to hash (default: all revisions)
        #[arg(long, default_value_t = 0)]
        rev: i64,
    },
}

impl EndpointCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let printer = Printer { format: global.write_out, hex: global.hex, value_only: false };
        match self {
            EndpointCommand::Status => {
                let mut statuses = Vec::new();
                for endpoint in &global.endpoints {
                    let mut client = maintenance_client_to(global, endpoint).await?;
                    statuses.push((endpoint.clone(), client.status(pb::StatusRequest {}).await?.into_inner()));
                }
                printer.endpoint_status(&statuses)
            }
            EndpointCommand::Hashkv { rev } => {
                let mut hashes = Vec::new();
                for endpoint in &global.endpoints {
                    let mut client = maintenance_client_to(global, endpoint).await?;
                    let resp = client.hash_kv(pb::HashKvRequest { revision: *rev }).await?.into_inner();
                    hashes.push((endpoint.clone(), resp));
                }
                printer.endpoint_hashkv(&hashes)
            }
        }
    }
}
