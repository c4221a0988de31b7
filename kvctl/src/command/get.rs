//! `get [options] <key> [range_end]`

use clap::Args;
use proto::etcdserverpb as pb;

use super::{key_range, kv_client, ExtraArgs};
use crate::error::CliError;
use crate::global::{GlobalFlags, WriteOut};
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct GetCommand {
    /// Linearizable(l) or Serializable(s)
    #[arg(long, default_value = "l")]
    pub consistency: String,
    /// Order of results; ASCEND or DESCEND (ASCEND by default)
    #[arg(long, default_value = "")]
    pub order: String,
    /// Sort target; CREATE, KEY, MODIFY, VALUE, or VERSION
    #[arg(long, default_value = "")]
    pub sort_by: String,
    /// Maximum number of results
    #[arg(long, default_value_t = 0)]
    pub limit: i64,
    /// Get keys with matching prefix
    #[arg(long)]
    pub prefix: bool,
    /// Get keys that are greater than or equal to the given key using byte compare
    #[arg(long)]
    pub from_key: bool,
    /// Specify the kv revision
    #[arg(long, default_value_t = 0)]
    pub rev: i64,
    /// Get only the keys
    #[arg(long)]
    pub keys_only: bool,
    /// Only write values when using the "simple" output format
    #[arg(long)]
    pub print_value_only: bool,

    pub args: Vec<String>,
}

impl GetCommand {
    /// Builds the request the way etcdctl's `getGetOp` and clientv3's `OpGet` do.
    pub fn request(&self) -> Result<pb::RangeRequest, CliError> {
        if self.args.is_empty() {
            return Err(CliError::bad_args(
                "get command needs one argument as key and an optional argument as range_end",
            ));
        }
        if self.prefix && self.from_key {
            return Err(CliError::bad_args("`--prefix` and `--from-key` cannot be set at the same time, choose one"));
        }
        let serializable = match self.consistency.as_str() {
            "s" => true,
            "l" => false,
            other => return Err(CliError::bad_feature(format!("unknown consistency flag {other:?}"))),
        };
        // etcdctl checks the arguments' count before the sort flags.
        let (key, range_end) = key_range("get", &self.args, ExtraArgs::Ignored, self.prefix, self.from_key)?;
        use pb::range_request::{SortOrder, SortTarget};
        let mut sort_order = match self.order.to_uppercase().as_str() {
            "ASCEND" => SortOrder::Ascend,
            "DESCEND" => SortOrder::Descend,
            "" => SortOrder::None,
            _ => return Err(CliError::bad_feature(format!("bad sort order {}", self.order))),
        };
        let sort_target = match self.sort_by.to_uppercase().as_str() {
            "CREATE" => SortTarget::Create,
            "KEY" | "" => SortTarget::Key,
            "MODIFY" => SortTarget::Mod,
            "VALUE" => SortTarget::Value,
            "VERSION" => SortTarget::Version,
            _ => return Err(CliError::bad_feature(format!("bad sort target {}", self.sort_by))),
        };
        // clientv3's WithSort: keys already come back ascending, so asking for it is dropped.
        if sort_target == SortTarget::Key && sort_order == SortOrder::Ascend {
            sort_order = SortOrder::None;
        }
        Ok(pb::RangeRequest {
            key,
            range_end,
            limit: self.limit,
            revision: self.rev.max(0),
            sort_order: sort_order as i32,
            sort_target: sort_target as i32,
            serializable,
            keys_only: self.keys_only,
            ..Default::default()
        })
    }

    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let request = self.request()?;
        if self.print_value_only && global.write_out != WriteOut::Simple {
            return Err(CliError::bad_args("print-value-only is only for `--write-out=simple`"));
        }
        let mut client = kv_client(global).await?;
        let resp = client.range(request).await?.into_inner();
        Printer { format: global.write_out, hex: global.hex, value_only: self.print_value_only }.get(&resp)
    }
}
