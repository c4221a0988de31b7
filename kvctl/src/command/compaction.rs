//! `compaction [options] <revision>`

use clap::Args;
use proto::etcdserverpb as pb;

use super::kv_client;
use crate::error::{CliError, EXIT_ERROR};
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct CompactionCommand {
    /// 'true' to wait for compaction to physically remove all old revisions
    #[arg(long)]
    pub physical: bool,

    pub args: Vec<String>,
}

impl CompactionCommand {
    pub fn request(&self) -> Result<pb::CompactionRequest, CliError> {
        let [revision] = self.args.as_slice() else {
            return Err(CliError::bad_args("compaction command needs 1 argument"));
        };
        let revision: i64 = revision.parse().map_err(|e: std::num::ParseIntError| {
            let reason = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
                _ => "invalid syntax",
            };
            CliError::new(EXIT_ERROR, format!("strconv.ParseInt: parsing {revision:?}: {reason}"))
        })?;
        Ok(pb::CompactionRequest { revision, physical: self.physical })
    }

    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let request = self.request()?;
        let revision = request.revision;
        let mut client = kv_client(global).await?;
        client.compact(request).await?;
        // etcdctl prints this line in every output format.
        Ok(format!("compacted revision {revision}\n"))
    }
}
