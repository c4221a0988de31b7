//! Output formats. Each printer turns a response into the exact bytes etcdctl writes to stdout (3.6's,
//! or 3.4's in that dialect: see `crate::dialect`).

pub mod fields;
pub mod json;
pub mod protobuf;
pub mod simple;
pub mod table;

use proto::etcdserverpb as pb;

use crate::dialect::Dialect;
use crate::error::CliError;
use crate::global::WriteOut;

/// One endpoint's answer to `endpoint health` (etcdctl's `epHealth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointHealth {
    pub endpoint: String,
    pub health: bool,
    /// How long the probe took, as Go prints a `time.Duration`.
    pub took: String,
    /// Empty when healthy.
    pub error: String,
}

/// An Auth service response with what etcdctl's printers get besides it (the names the user typed).
#[derive(Debug, Clone, Copy)]
pub enum AuthResponse<'a> {
    /// etcdctl 3.5's `auth status` (3.4 has no such verb).
    Status(&'a pb::AuthStatusResponse),
    UserAdd(&'a str, &'a pb::AuthUserAddResponse),
    UserGet(&'a str, &'a pb::AuthUserGetResponse),
    UserList(&'a pb::AuthUserListResponse),
    UserDelete(&'a str, &'a pb::AuthUserDeleteResponse),
    UserChangePassword(&'a pb::AuthUserChangePasswordResponse),
    /// User, role.
    UserGrantRole(&'a str, &'a str, &'a pb::AuthUserGrantRoleResponse),
    /// User, role.
    UserRevokeRole(&'a str, &'a str, &'a pb::AuthUserRevokeRoleResponse),
    RoleAdd(&'a str, &'a pb::AuthRoleAddResponse),
    RoleGet(&'a str, &'a pb::AuthRoleGetResponse),
    RoleList(&'a pb::AuthRoleListResponse),
    RoleDelete(&'a str, &'a pb::AuthRoleDeleteResponse),
    RoleGrantPermission(&'a str, &'a pb::AuthRoleGrantPermissionResponse),
    /// Role, the key as typed and the range end sent.
    RoleRevokePermission(&'a str, &'a str, &'a [u8], &'a pb::AuthRoleRevokePermissionResponse),
}

impl AuthResponse<'_> {
    /// The response header, present in every Auth response.
    pub fn header(&self) -> Option<&pb::ResponseHeader> {
        match self {
            AuthResponse::Status(r) => r.header.as_ref(),
            AuthResponse::UserAdd(_, r) => r.header.as_ref(),
            AuthResponse::UserGet(_, r) => r.header.as_ref(),
            AuthResponse::UserList(r) => r.header.as_ref(),
            AuthResponse::UserDelete(_, r) => r.header.as_ref(),
            AuthResponse::UserChangePassword(r) => r.header.as_ref(),
            AuthResponse::UserGrantRole(_, _, r) => r.header.as_ref(),
            AuthResponse::UserRevokeRole(_, _, r) => r.header.as_ref(),
            AuthResponse::RoleAdd(_, r) => r.header.as_ref(),
            AuthResponse::RoleGet(_, r) => r.header.as_ref(),
            AuthResponse::RoleList(r) => r.header.as_ref(),
            AuthResponse::RoleDelete(_, r) => r.header.as_ref(),
            AuthResponse::RoleGrantPermission(_, r) => r.header.as_ref(),
            AuthResponse::RoleRevokePermission(_, _, _, r) => r.header.as_ref(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Printer {
    pub format: WriteOut,
    /// `--hex`: keys and values as `\x..` escapes in the simple format; in etcdctl 3.6's fields
    /// format member, cluster and lease IDs in hex, and in its json format `member list` in hex.
    pub hex: bool,
    /// `get --print-value-only`.
    pub value_only: bool,
}

impl Printer {
    /// The printer the global flags ask for (`-w`, `--hex`).
    pub fn of(global: &crate::global::GlobalFlags) -> Self {
        Printer { format: global.write_out, hex: global.hex, value_only: false }
    }

    /// How the fields format prints here: the process' dialect and `--hex`.
    fn fields_style(&self) -> fields::Style {
        fields::Style::new(Dialect::current(), self.hex)
    }

    pub fn get(&self, resp: &pb::RangeResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::get(resp, self.hex, self.value_only)),
            WriteOut::Json => Ok(json::range(resp)),
            WriteOut::Fields => Ok(fields::get(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    pub fn put(&self, resp: &pb::PutResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::put(resp, self.hex, self.value_only)),
            WriteOut::Json => Ok(json::put(resp)),
            WriteOut::Fields => Ok(fields::put(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    pub fn del(&self, resp: &pb::DeleteRangeResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::del(resp, self.hex, self.value_only)),
            WriteOut::Json => Ok(json::delete_range(resp)),
            WriteOut::Fields => Ok(fields::del(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    pub fn txn(&self, resp: &pb::TxnResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::txn(resp, self.hex)),
            WriteOut::Json => Ok(json::txn(resp)),
            WriteOut::Fields => Ok(fields::txn(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    pub fn lease_grant(&self, resp: &pb::LeaseGrantResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::lease_grant(resp)),
            WriteOut::Json => Ok(json::lease_grant(resp)),
            WriteOut::Fields => Ok(fields::lease_grant(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    /// `id` is the lease the user asked to revoke; the simple format prints it.
    pub fn lease_revoke(&self, id: i64, resp: &pb::LeaseRevokeResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::lease_revoke(id)),
            WriteOut::Json => Ok(json::lease_revoke(resp)),
            WriteOut::Fields => Ok(fields::lease_revoke(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    pub fn lease_keep_alive(&self, resp: &pb::LeaseKeepAliveResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::lease_keep_alive(resp)),
            WriteOut::Json => Ok(json::lease_keep_alive(resp)),
            WriteOut::Fields => Ok(fields::lease_keep_alive(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    /// `keys`: whether `--keys` was given (the simple format then lists them, even when none).
    pub fn lease_time_to_live(&self, resp: &pb::LeaseTimeToLiveResponse, keys: bool) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::lease_time_to_live(resp, keys)),
            WriteOut::Json => Ok(json::lease_time_to_live(resp)),
            WriteOut::Fields => Ok(fields::lease_time_to_live(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    pub fn lease_leases(&self, resp: &pb::LeaseLeasesResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::lease_leases(resp)),
            WriteOut::Json => Ok(json::lease_leases(resp)),
            WriteOut::Fields => Ok(fields::lease_leases(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    pub fn member_list(&self, resp: &pb::MemberListResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(table::simple(&table::member_list(resp))),
            WriteOut::Json => Ok(json::member_list(resp, Dialect::current(), self.hex)),
            WriteOut::Fields => Ok(fields::member_list(resp, self.fields_style())),
            WriteOut::Table => Ok(table::render(&table::member_list(resp))),
            WriteOut::Protobuf => Err(unsupported(self.format)),
        }
    }

    pub fn endpoint_status(&self, statuses: &[(String, pb::StatusResponse)]) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(table::simple(&table::endpoint_status(statuses, Dialect::current()))),
            WriteOut::Json => Ok(json::endpoint_status(statuses, Dialect::current())),
            WriteOut::Fields => Ok(fields::endpoint_status(statuses, self.fields_style())),
            WriteOut::Table => Ok(table::render(&table::endpoint_status(statuses, Dialect::current()))),
            WriteOut::Protobuf => Err(unsupported(self.format)),
        }
    }

    pub fn endpoint_hashkv(&self, hashes: &[(String, pb::HashKvResponse)]) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(table::simple(&table::endpoint_hashkv(hashes, Dialect::current()))),
            WriteOut::Json => Ok(json::endpoint_hashkv(hashes, Dialect::current())),
            WriteOut::Fields => Ok(fields::endpoint_hashkv(hashes, self.fields_style())),
            WriteOut::Table => Ok(table::render(&table::endpoint_hashkv(hashes, Dialect::current()))),
            WriteOut::Protobuf => Err(unsupported(self.format)),
        }
    }

    pub fn member_add(&self, resp: &pb::MemberAddResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::member_add(resp)),
            WriteOut::Json => Ok(json::member_add(resp)),
            other => Err(unsupported(other)),
        }
    }

    /// `id` is the member the user named; the simple format prints it.
    pub fn member_remove(&self, id: u64, resp: &pb::MemberRemoveResponse) -> Result<String, CliError> {
        self.member_change("removed from", id, resp.header.as_ref(), &resp.members)
    }

    pub fn member_update(&self, id: u64, resp: &pb::MemberUpdateResponse) -> Result<String, CliError> {
        self.member_change("updated in", id, resp.header.as_ref(), &resp.members)
    }

    pub fn member_promote(&self, id: u64, resp: &pb::MemberPromoteResponse) -> Result<String, CliError> {
        self.member_change("promoted in", id, resp.header.as_ref(), &resp.members)
    }

    fn member_change(
        &self,
        verb: &str,
        id: u64,
        header: Option<&pb::ResponseHeader>,
        members: &[pb::Member],
    ) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::member_change(verb, id, header)),
            WriteOut::Json => Ok(json::member_change(header, members)),
            other => Err(unsupported(other)),
        }
    }

    /// Returns `(stdout, stderr)`: the simple format writes the health lines to stderr.
    pub fn endpoint_health(&self, list: &[EndpointHealth]) -> (String, String) {
        match self.format {
            // Protobuf never gets here: `Cli::run` refuses it for this verb.
            WriteOut::Simple | WriteOut::Protobuf => (String::new(), simple::endpoint_health(list)),
            WriteOut::Json => (json::endpoint_health(list), String::new()),
            WriteOut::Fields => (fields::endpoint_health(list), String::new()),
            WriteOut::Table => (table::render(&table::endpoint_health(list)), String::new()),
        }
    }

    pub fn alarm(&self, resp: &pb::AlarmResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::alarm(resp)),
            WriteOut::Json => Ok(json::alarm(resp)),
            WriteOut::Fields => Ok(fields::alarm(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    /// One watch response as etcdctl's `display.Watch` prints it (table has no watch view).
    pub fn watch(&self, resp: &crate::concurrency::WatchResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::watch(resp, self.hex)),
            WriteOut::Json => Ok(json::watch(resp)),
            WriteOut::Fields => Ok(fields::watch(resp, self.fields_style())),
            other => Err(unsupported(other)),
        }
    }

    /// An Auth response (`auth`, `user`, `role`). These print bytes: `-w protobuf` writes the
    /// response's wire encoding, and the simple format writes keys as they are.
    pub fn auth(&self, resp: &AuthResponse<'_>) -> Result<Vec<u8>, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::auth(resp)),
            WriteOut::Json => Ok(json::auth(resp).into_bytes()),
            WriteOut::Fields => {
                fields::auth(resp, self.fields_style()).map(String::into_bytes).ok_or_else(|| unsupported(self.format))
            }
            WriteOut::Protobuf => Ok(protobuf::auth(resp)),
            WriteOut::Table => Err(unsupported(self.format)),
        }
    }

    pub fn move_leader(&self, leader: u64, target: u64, resp: &pb::MoveLeaderResponse) -> Result<String, CliError> {
        match self.format {
            WriteOut::Simple => Ok(simple::move_leader(leader, target)),
            WriteOut::Json => Ok(json::move_leader(resp)),
            other => Err(unsupported(other)),
        }
    }
}

fn unsupported(format: WriteOut) -> CliError {
    let name = match format {
        WriteOut::Simple => "simple",
        WriteOut::Json => "json",
        WriteOut::Fields => "fields",
        WriteOut::Table => "table",
        WriteOut::Protobuf => "protobuf",
    };
    // etcdctl 3.4's table printer has no kv views: it sends the request, then fails like this.
    CliError::bad_feature(format!("{name} not supported as output format"))
}
