//! etcdctl's `fields` format (`printer_fields.go`): one `"Name" : value` line per field, strings
//! quoted with Go's `%q`.
//!
//! etcdctl 3.6 differs from 3.4 in two ways here: the header leaves out `"Revision"` when it is not
//! positive, and `--hex` prints member and cluster IDs as hex (`types.ID`) and lease IDs as 16 hex
//! digits. etcdctl 3.4's fields printer ignores `--hex`.

use std::fmt::Write;

use proto::etcdserverpb as pb;
use proto::mvccpb;

use crate::dialect::Dialect;

/// What etcdctl's `fieldsPrinter` knows besides the response: which release it is and, in 3.6,
/// its `isHex`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    dialect: Dialect,
    hex: bool,
}

impl Style {
    /// `hex` is the global `--hex`; it only counts in the 3.6 dialect.
    pub fn new(dialect: Dialect, hex: bool) -> Self {
        Style { dialect, hex: hex && dialect == Dialect::V3_6 }
    }

    /// A member or cluster ID: `types.ID`'s `String()` (lower-case hex) with `--hex`.
    fn id(self, id: u64) -> String {
        if self.hex {
            format!("{id:x}")
        } else {
            id.to_string()
        }
    }

    /// A lease ID: Go's `%016x` with `--hex`.
    fn lease(self, id: i64) -> String {
        if self.hex {
            go_hex16(id)
        } else {
            id.to_string()
        }
    }
}

pub fn get(resp: &pb::RangeResponse, style: Style) -> String {
    let mut out = header(resp.header.as_ref(), style);
    for kv in &resp.kvs {
        push_kv(&mut out, "", kv, style);
    }
    let _ = writeln!(out, "\"More\" : {}", resp.more);
    let _ = writeln!(out, "\"Count\" : {}", resp.count);
    out
}

pub fn put(resp: &pb::PutResponse, style: Style) -> String {
    let mut out = header(resp.header.as_ref(), style);
    if let Some(kv) = &resp.prev_kv {
        push_kv(&mut out, "Prev", kv, style);
    }
    out
}

pub fn del(resp: &pb::DeleteRangeResponse, style: Style) -> String {
    let mut out = header(resp.header.as_ref(), style);
    let _ = writeln!(out, "\"Deleted\" : {}", resp.deleted);
    for kv in &resp.prev_kvs {
        push_kv(&mut out, "Prev", kv, style);
    }
    out
}

pub fn member_list(resp: &pb::MemberListResponse, style: Style) -> String {
    let mut out = header(resp.header.as_ref(), style);
    for m in &resp.members {
        let _ = writeln!(out, "\"ID\" : {}", style.id(m.id));
        let _ = writeln!(out, "\"Name\" : {}", go_quote(m.name.as_bytes()));
        for url in &m.peer_ur_ls {
            let _ = writeln!(out, "\"PeerURL\" : {}", go_quote(url.as_bytes()));
        }
        for url in &m.client_ur_ls {
            let _ = writeln!(out, "\"ClientURL\" : {}", go_quote(url.as_bytes()));
        }
        let _ = writeln!(out, "\"IsLearner\" : {}", m.is_learner);
        out.push('\n');
    }
    out
}

/// `Leader` stays decimal with `--hex`, as in etcdctl 3.6.
pub fn endpoint_status(statuses: &[(String, pb::StatusResponse)], style: Style) -> String {
    let v36 = style.dialect == Dialect::V3_6;
    let mut out = String::new();
    for (endpoint, s) in statuses {
        out.push_str(&header(s.header.as_ref(), style));
        let _ = writeln!(out, "\"Version\" : {}", go_quote(s.version.as_bytes()));
        if v36 {
            let _ = writeln!(out, "\"StorageVersion\" : {}", go_quote(s.storage_version.as_bytes()));
        }
        let _ = writeln!(out, "\"DBSize\" : {}", s.db_size);
        if v36 {
            let _ = writeln!(out, "\"DBSizeInUse\" : {}", s.db_size_in_use);
            let _ = writeln!(out, "\"DBSizeQuota\" : {}", s.db_size_quota);
        }
        let _ = writeln!(out, "\"Leader\" : {}", s.leader);
        let _ = writeln!(out, "\"IsLearner\" : {}", s.is_learner);
        let _ = writeln!(out, "\"RaftIndex\" : {}", s.raft_index);
        let _ = writeln!(out, "\"RaftTerm\" : {}", s.raft_term);
        let _ = writeln!(out, "\"RaftAppliedIndex\" : {}", s.raft_applied_index);
        // Go's fmt.Println of a []string: `[a b]`.
        let _ = writeln!(out, "\"Errors\" : [{}]", s.errors.join(" "));
        let _ = writeln!(out, "\"Endpoint\" : {}", go_quote(endpoint.as_bytes()));
        if v36 {
            let downgrade = s.downgrade_info.as_ref();
            let target = downgrade.map(|d| d.target_version.clone()).unwrap_or_default();
            let _ = writeln!(out, "\"DowngradeTargetVersion\" : {}", go_quote(target.as_bytes()));
            let _ = writeln!(out, "\"DowngradeEnabled\" : {}", downgrade.is_some_and(|d| d.enabled));
        }
        out.push('\n');
    }
    out
}

pub fn endpoint_hashkv(hashes: &[(String, pb::HashKvResponse)], style: Style) -> String {
    let mut out = String::new();
    for (endpoint, h) in hashes {
        out.push_str(&header(h.header.as_ref(), style));
        let _ = writeln!(out, "\"Endpoint\" : {}", go_quote(endpoint.as_bytes()));
        let _ = writeln!(out, "\"Hash\" : {}", h.hash);
        if style.dialect == Dialect::V3_6 {
            let _ = writeln!(out, "\"HashRevision\" : {}", h.hash_revision);
        }
        out.push('\n');
    }
    out
}

/// `txn`: the header and outcome, then each response's own fields (with its own header).
pub fn txn(resp: &pb::TxnResponse, style: Style) -> String {
    use pb::response_op::Response;
    let mut out = header(resp.header.as_ref(), style);
    let _ = writeln!(out, "\"Succeeded\" : {}", resp.succeeded);
    for op in &resp.responses {
        match &op.response {
            Some(Response::ResponseRange(r)) => out.push_str(&get(r, style)),
            Some(Response::ResponsePut(r)) => out.push_str(&put(r, style)),
            Some(Response::ResponseDeleteRange(r)) => out.push_str(&del(r, style)),
            // etcdctl quotes `%+v` of anything else; it cannot send nested txns.
            Some(other) => {
                let _ = writeln!(out, "\"Unknown\" : {}", go_quote(format!("{other:?}").as_bytes()));
            }
            None => out.push_str("\"Unknown\" : \"<nil>\"\n"),
        }
    }
    out
}

/// `lease grant` and `lease keep-alive` print the same fields.
pub fn lease_grant(resp: &pb::LeaseGrantResponse, style: Style) -> String {
    lease_id_ttl(resp.header.as_ref(), resp.id, resp.ttl, style)
}

pub fn lease_revoke(resp: &pb::LeaseRevokeResponse, style: Style) -> String {
    header(resp.header.as_ref(), style)
}

pub fn lease_keep_alive(resp: &pb::LeaseKeepAliveResponse, style: Style) -> String {
    lease_id_ttl(resp.header.as_ref(), resp.id, resp.ttl, style)
}

pub fn lease_time_to_live(resp: &pb::LeaseTimeToLiveResponse, style: Style) -> String {
    let mut out = lease_id_ttl(resp.header.as_ref(), resp.id, resp.ttl, style);
    let _ = writeln!(out, "\"GrantedTTL\" : {}", resp.granted_ttl);
    for key in &resp.keys {
        let _ = writeln!(out, "\"Key\" : {}", go_quote(key));
    }
    out
}

pub fn lease_leases(resp: &pb::LeaseLeasesResponse, style: Style) -> String {
    let mut out = header(resp.header.as_ref(), style);
    for lease in &resp.leases {
        let _ = writeln!(out, "\"ID\" : {}", style.lease(lease.id));
    }
    out
}

fn lease_id_ttl(h: Option<&pb::ResponseHeader>, id: i64, ttl: i64, style: Style) -> String {
    let mut out = header(h, style);
    let _ = writeln!(out, "\"ID\" : {}\n\"TTL\" : {ttl}", style.lease(id));
    out
}

/// `endpoint health`: Go's `Println` puts a space after `:` even before an empty error.
pub fn endpoint_health(list: &[super::EndpointHealth]) -> String {
    let mut out = String::new();
    for h in list {
        let _ = writeln!(out, "\"Endpoint\" : {}", go_quote(h.endpoint.as_bytes()));
        let _ = writeln!(out, "\"Health\" : {}", h.health);
        let _ = writeln!(out, "\"Took\" : {}", h.took);
        let _ = writeln!(out, "\"Error\" : {}", h.error);
        out.push('\n');
    }
    out
}

/// `alarm list|disarm`. etcdctl 3.4 dereferences the header here, and etcd 3.4 sends none, so
/// etcdctl crashes on real etcd; we print the zero header Go would read from an empty one.
pub fn alarm(resp: &pb::AlarmResponse, style: Style) -> String {
    let mut out = header(resp.header.as_ref(), style);
    for a in &resp.alarms {
        let _ = writeln!(out, "\"MemberID\" : {}", style.id(a.member_id));
        let _ = writeln!(out, "\"AlarmType\" : {}", super::simple::alarm_type_name(a.alarm));
        out.push('\n');
    }
    out
}

/// `watch`: the header, then per event its type and key-value pairs.
pub fn watch(resp: &crate::concurrency::WatchResponse, style: Style) -> String {
    let mut out = header(Some(&resp.header), style);
    for event in resp.events() {
        let _ = writeln!(out, "\"Type\" : {}", super::simple::event_type_name(event.r#type));
        if let Some(prev) = &event.prev_kv {
            push_kv(&mut out, "Prev", prev, style);
        }
        push_kv(&mut out, "", &event.kv.clone().unwrap_or_default(), style);
    }
    out
}

/// The Auth responses etcdctl's fields printer knows; `None` for the others (`user get`,
/// `user list`, `auth status`), which it refuses.
pub fn auth(resp: &super::AuthResponse<'_>, style: Style) -> Option<String> {
    use super::AuthResponse as R;
    let mut out = header(resp.header(), style);
    match resp {
        R::UserGet(..) | R::UserList(_) | R::Status(_) => return None,
        R::RoleGet(_, r) => {
            for p in &r.perm {
                // `Println` of `"PermType" : ` and the name: two spaces.
                let _ = writeln!(out, "\"PermType\" :  {}", perm_type_name(p.perm_type));
                let _ = writeln!(out, "\"Key\" : {}", go_quote(&p.key));
                let _ = writeln!(out, "\"RangeEnd\" : {}", go_quote(&p.range_end));
            }
        }
        R::RoleList(r) => {
            out.push_str("\"Roles\" :");
            for role in &r.roles {
                let _ = write!(out, " {}", go_quote(role));
            }
            out.push('\n');
        }
        _ => {}
    }
    Some(out)
}

/// authpb's `Permission_Type.String()`: the name, or the number when unknown.
pub fn perm_type_name(perm_type: i32) -> String {
    proto::authpb::permission::Type::try_from(perm_type)
        .map_or_else(|_| perm_type.to_string(), |t| t.as_str_name().to_string())
}

/// Go reads the fields of a nil header as zeros. etcdctl 3.6 prints the revision only when it is
/// positive (responses other than key-value ones rarely carry one); 3.4 always does.
fn header(header: Option<&pb::ResponseHeader>, style: Style) -> String {
    let h = header.cloned().unwrap_or_default();
    let mut out = format!("\"ClusterID\" : {}\n\"MemberID\" : {}\n", style.id(h.cluster_id), style.id(h.member_id));
    if style.dialect == Dialect::V3_4 || h.revision > 0 {
        let _ = writeln!(out, "\"Revision\" : {}", h.revision);
    }
    let _ = writeln!(out, "\"RaftTerm\" : {}", h.raft_term);
    out
}

fn push_kv(out: &mut String, prefix: &str, kv: &mvccpb::KeyValue, style: Style) {
    let _ = writeln!(out, "\"{prefix}Key\" : {}", go_quote(&kv.key));
    let _ = writeln!(out, "\"{prefix}CreateRevision\" : {}", kv.create_revision);
    let _ = writeln!(out, "\"{prefix}ModRevision\" : {}", kv.mod_revision);
    let _ = writeln!(out, "\"{prefix}Version\" : {}", kv.version);
    let _ = writeln!(out, "\"{prefix}Value\" : {}", go_quote(&kv.value));
    let _ = writeln!(out, "\"{prefix}Lease\" : {}", style.lease(kv.lease));
}

/// Go's `%016x` of an `int64`: at least 16 digits, the sign (if any) taking one of them.
fn go_hex16(value: i64) -> String {
    if value < 0 {
        format!("-{:015x}", value.unsigned_abs())
    } else {
        format!("{value:016x}")
    }
}

/// Go's `strconv.Quote` of `string(bytes)`: printable runes as is, the usual C escapes, `\xNN`
/// for invalid UTF-8 and `\uNNNN`/`\UNNNNNNNN` for other non-printable runes. "Printable" is
/// approximated as "neither control nor whitespace, or a plain space".
pub fn go_quote(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\x07' => out.push_str("\\a"),
                '\x08' => out.push_str("\\b"),
                '\x0c' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\x0b' => out.push_str("\\v"),
                ' ' => out.push(' '),
                c if (c as u32) < 0x80 && !c.is_ascii_graphic() => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if c.is_control() || c.is_whitespace() => {
                    if (c as u32) < 0x10000 {
                        let _ = write!(out, "\\u{:04x}", c as u32);
                    } else {
                        let _ = write!(out, "\\U{:08x}", c as u32);
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "fields_test.rs"]
mod tests;
