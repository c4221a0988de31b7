//! Output formats. Each printer turns a response into the exact bytes etcdctl 3.4 writes to stdout.

pub mod fields;
pub mod json;
pub mod simple;
pub mod table;

use proto::etcdserverpb as pb;

use crate::error::CliError;
use crate::global::WriteOut;

#[derive(Debug, Clone, Copy)]
pub struct Printer {
    pub format: WriteOut,
    /// `--hex`: keys and values as `\x..` escapes (simple format only, as in etcdctl).
    pub hex: bool,
    /// `get --print-value-only`.
    pub value_only: bool,
}

impl Printer {
    pub fn get(&self, resp: &pb::RangeResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::get(resp, self.hex, self.value_only)),
            WriteOut::Json => Ok(json::range(resp)),
            WriteOut::Fields => Ok(fields::get(resp)),
            other => Err(unsupported(other)),
        }
    }

    pub fn put(&self, resp: &pb::PutResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::put(resp, self.hex, self.value_only)),
            WriteOut::Json => Ok(json::put(resp)),
            WriteOut::Fields => Ok(fields::put(resp)),
            other => Err(unsupported(other)),
        }
    }

    pub fn del(&self, resp: &pb::DeleteRangeResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::del(resp, self.hex, self.value_only)),
            WriteOut::Json => Ok(json::delete_range(resp)),
            WriteOut::Fields => Ok(fields::del(resp)),
            other => Err(unsupported(other)),
        }
    }

    pub fn member_list(&self, resp: &pb::MemberListResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(table::simple(&table::member_list(resp))),
            WriteOut::Json => Ok(json::member_list(resp)),
            WriteOut::Fields => Ok(fields::member_list(resp)),
            WriteOut::Table => Ok(table::render(&table::member_list(resp))),
        }
    }

    pub fn endpoint_status(&self, statuses: &[(String, pb::StatusResponse)]) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(table::simple(&table::endpoint_status(statuses))),
            WriteOut::Json => Ok(json::endpoint_status(statuses)),
            WriteOut::Fields => Ok(fields::endpoint_status(statuses)),
            WriteOut::Table => Ok(table::render(&table::endpoint_status(statuses))),
        }
    }

    pub fn endpoint_hashkv(&self, hashes: &[(String, pb::HashKvResponse)]) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(table::simple(&table::endpoint_hashkv(hashes))),
            WriteOut::Json => Ok(json::endpoint_hashkv(hashes)),
            WriteOut::Fields => Ok(fields::endpoint_hashkv(hashes)),
            WriteOut::Table => Ok(table::render(&table::endpoint_hashkv(hashes))),
        }
    }
}

fn unsupported(format: WriteOut) -> CliError {
    let name = match format {
        WriteOut::Simple => "simple",
        WriteOut::Json => "json",
        WriteOut::Fields => "fields",
        WriteOut::Table => "table",
    };
    // etcdctl 3.4's table printer has no kv views: it sends the request, then fails like this.
    CliError::bad_feature(format!("{name} not supported as output format"))
}
