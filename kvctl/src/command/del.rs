//! `del [options] <key> [range_end]`

use clap::Args;
use proto::etcdserverpb as pb;

use super::{key_range, kv_client, ExtraArgs};
use crate::error::CliError;
use crate::global::GlobalFlags;
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct DelCommand {
    /// delete keys with matching prefix
    #[arg(long)]
    pub prefix: bool,
    /// return deleted key-value pairs
    #[arg(long)]
    pub prev_kv: bool,
    /// delete keys that are greater than or equal to the given key using byte compare
    #[arg(long)]
    pub from_key: bool,

    pub args: Vec<String>,
}

impl DelCommand {
    pub fn request(&self) -> Result<pb::DeleteRangeRequest, CliError> {
        let (key, range_end) = key_range("del", &self.args, ExtraArgs::Refused, self.prefix, self.from_key)?;
        Ok(pb::DeleteRangeRequest { key, range_end, prev_kv: self.prev_kv })
    }

    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let request = self.request()?;
        let mut client = kv_client(global).await?;
        let resp = client.delete_range(request).await?.into_inner();
        Printer { format: global.write_out, hex: global.hex, value_only: false }.del(&resp)
    }
}
