//! etcdctl's `json` format: Go's `encoding/json` applied to the gogo-protobuf response structs.
//!
//! That means: fields in `.proto` order under their proto names, every field `omitempty` (zero
//! numbers, `false`, empty bytes and empty lists vanish), 64-bit integers as bare numbers and bytes
//! as standard padded base64. Written by hand because field order and omission rules matter
//! byte-for-byte.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use proto::etcdserverpb as pb;
use proto::mvccpb;

use crate::dialect::Dialect;

pub fn range(resp: &pb::RangeResponse) -> String {
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    obj.list("kvs", resp.kvs.iter().map(key_value).collect());
    obj.bool("more", resp.more);
    obj.int("count", resp.count);
    obj.finish_line()
}

pub fn put(resp: &pb::PutResponse) -> String {
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    if let Some(kv) = &resp.prev_kv {
        obj.raw("prev_kv", key_value(kv));
    }
    obj.finish_line()
}

pub fn delete_range(resp: &pb::DeleteRangeResponse) -> String {
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    obj.int("deleted", resp.deleted);
    obj.list("prev_kvs", resp.prev_kvs.iter().map(key_value).collect());
    obj.finish_line()
}

/// `member list`. With `--hex`, etcdctl 3.6 writes this one by hand instead: see `member_list_hex`.
/// etcdctl 3.4's json printer ignores `--hex`.
pub fn member_list(resp: &pb::MemberListResponse, dialect: Dialect, hex: bool) -> String {
    if hex && dialect == Dialect::V3_6 {
        return member_list_hex(resp);
    }
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    obj.list("members", resp.members.iter().map(member).collect());
    obj.finish_line()
}

/// etcdctl 3.6's `printMemberListWithHexJSON`, quirks included: the cluster, member and member IDs
/// as strings of lower-case hex; the header without its revision but with its raft term even when
/// 0; no `omitempty` (an empty URL list is Go's nil slice, `null`), no `isLearner`, no `members`
/// at all when there are none; and each name written between quotes as it is, unescaped. Go reads
/// a nil header as zeros here too.
fn member_list_hex(resp: &pb::MemberListResponse) -> String {
    let h = resp.header.unwrap_or_default();
    let mut out = format!(
        "{{\"header\":{{\"cluster_id\":\"{:x}\",\"member_id\":\"{:x}\",\"raft_term\":{}}}",
        h.cluster_id, h.member_id, h.raft_term
    );
    let urls = |urls: &[String]| {
        if urls.is_empty() {
            "null".to_string()
        } else {
            format!("[{}]", urls.iter().map(|u| go_string(u)).collect::<Vec<_>>().join(","))
        }
    };
    let members = resp
        .members
        .iter()
        .map(|m| {
            format!(
                "{{\"ID\":\"{:x}\",\"name\":\"{}\",\"peerURLs\":{},\"clientURLs\":{}}}",
                m.id,
                m.name,
                urls(&m.peer_ur_ls),
                urls(&m.client_ur_ls)
            )
        })
        .collect::<Vec<_>>();
    if !members.is_empty() {
        out.push_str(&format!(",\"members\":[{}]", members.join(",")));
    }
    out.push_str("}\n");
    out
}

/// `endpoint status`: etcdctl marshals a list of `{Endpoint, Status}` pairs.
pub fn endpoint_status(statuses: &[(String, pb::StatusResponse)], dialect: Dialect) -> String {
    let items = statuses
        .iter()
        .map(|(endpoint, s)| {
            let mut status = Object::default();
            header(&mut status, s.header.as_ref());
            status.string("version", &s.version);
            status.int("dbSize", s.db_size);
            status.uint("leader", s.leader);
            status.uint("raftIndex", s.raft_index);
            status.uint("raftTerm", s.raft_term);
            status.uint("raftAppliedIndex", s.raft_applied_index);
            status.strings("errors", &s.errors);
            status.int("dbSizeInUse", s.db_size_in_use);
            status.bool("isLearner", s.is_learner);
            if dialect == Dialect::V3_6 {
                status.string("storageVersion", &s.storage_version);
                status.int("dbSizeQuota", s.db_size_quota);
                if let Some(downgrade) = &s.downgrade_info {
                    let mut info = Object::default();
                    info.string("targetVersion", &downgrade.target_version);
                    info.bool("enabled", downgrade.enabled);
                    status.raw("downgradeInfo", info.finish());
                }
            }
            format!("{{\"Endpoint\":{},\"Status\":{}}}", go_string(endpoint), status.finish())
        })
        .collect::<Vec<_>>();
    format!("[{}]\n", items.join(","))
}

/// `endpoint hashkv`: a list of `{Endpoint, HashKV}` pairs.
pub fn endpoint_hashkv(hashes: &[(String, pb::HashKvResponse)], dialect: Dialect) -> String {
    let items = hashes
        .iter()
        .map(|(endpoint, h)| {
            let mut hash = Object::default();
            header(&mut hash, h.header.as_ref());
            hash.uint("hash", u64::from(h.hash));
            hash.int("compact_revision", h.compact_revision);
            if dialect == Dialect::V3_6 {
                hash.int("hash_revision", h.hash_revision);
            }
            format!("{{\"Endpoint\":{},\"HashKV\":{}}}", go_string(endpoint), hash.finish())
        })
        .collect::<Vec<_>>();
    format!("[{}]\n", items.join(","))
}

/// `txn`: each `ResponseOp` is `{"Response":…}` where the oneof's Go wrapper struct shows up under
/// its Go field name (`{"ResponsePut":{…}}`), or `null` when unset.
pub fn txn(resp: &pb::TxnResponse) -> String {
    format!("{}\n", txn_object(resp))
}

fn txn_object(resp: &pb::TxnResponse) -> String {
    use pb::response_op::Response;
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    obj.bool("succeeded", resp.succeeded);
    let ops = resp
        .responses
        .iter()
        .map(|op| {
            let inner = match &op.response {
                Some(Response::ResponseRange(r)) => format!("{{\"ResponseRange\":{}}}", range(r).trim_end()),
                Some(Response::ResponsePut(r)) => format!("{{\"ResponsePut\":{}}}", put(r).trim_end()),
                Some(Response::ResponseDeleteRange(r)) => {
                    format!("{{\"ResponseDeleteRange\":{}}}", delete_range(r).trim_end())
                }
                Some(Response::ResponseTxn(r)) => format!("{{\"ResponseTxn\":{}}}", txn_object(r)),
                None => "null".to_string(),
            };
            format!("{{\"Response\":{inner}}}")
        })
        .collect();
    obj.list("responses", ops);
    obj.finish()
}

/// clientv3's `LeaseGrantResponse` embeds `*pb.ResponseHeader` (its fields inline) and has no
/// `omitempty` on `ID`, `TTL` and `Error`.
pub fn lease_grant(resp: &pb::LeaseGrantResponse) -> String {
    let mut obj = Object::default();
    inline_header(&mut obj, resp.header.as_ref());
    obj.raw("ID", resp.id.to_string());
    obj.raw("TTL", resp.ttl.to_string());
    obj.raw("Error", go_string(&resp.error));
    obj.finish_line()
}

/// `LeaseRevokeResponse` is the protobuf struct itself.
pub fn lease_revoke(resp: &pb::LeaseRevokeResponse) -> String {
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    obj.finish_line()
}

pub fn lease_keep_alive(resp: &pb::LeaseKeepAliveResponse) -> String {
    let mut obj = Object::default();
    inline_header(&mut obj, resp.header.as_ref());
    obj.raw("ID", resp.id.to_string());
    obj.raw("TTL", resp.ttl.to_string());
    obj.finish_line()
}

/// clientv3's `LeaseTimeToLiveResponse`: lower-case tags, `granted-ttl`, and `keys` is `null` when
/// the server sent none.
pub fn lease_time_to_live(resp: &pb::LeaseTimeToLiveResponse) -> String {
    let mut obj = Object::default();
    inline_header(&mut obj, resp.header.as_ref());
    obj.raw("id", resp.id.to_string());
    obj.raw("ttl", resp.ttl.to_string());
    obj.raw("granted-ttl", resp.granted_ttl.to_string());
    let keys = if resp.keys.is_empty() {
        "null".to_string()
    } else {
        let keys: Vec<_> = resp.keys.iter().map(|k| format!("\"{}\"", STANDARD.encode(k))).collect();
        format!("[{}]", keys.join(","))
    };
    obj.raw("keys", keys);
    obj.finish_line()
}

/// clientv3's `LeaseLeasesResponse`: `leases` is always a list (`[]` when empty).
pub fn lease_leases(resp: &pb::LeaseLeasesResponse) -> String {
    let mut obj = Object::default();
    inline_header(&mut obj, resp.header.as_ref());
    let leases: Vec<_> = resp.leases.iter().map(|l| format!("{{\"id\":{}}}", l.id)).collect();
    obj.raw("leases", format!("[{}]", leases.join(",")));
    obj.finish_line()
}

/// An embedded `*pb.ResponseHeader`: its fields at the top level, nothing when nil.
fn inline_header(obj: &mut Object, header: Option<&pb::ResponseHeader>) {
    let Some(h) = header else { return };
    obj.uint("cluster_id", h.cluster_id);
    obj.uint("member_id", h.member_id);
    obj.int("revision", h.revision);
    obj.uint("raft_term", h.raft_term);
}

/// `member add`: the new member, then the whole membership after the change.
pub fn member_add(resp: &pb::MemberAddResponse) -> String {
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    if let Some(m) = &resp.member {
        obj.raw("member", member(m));
    }
    obj.list("members", resp.members.iter().map(member).collect());
    obj.finish_line()
}

/// `member remove|update|promote`: their responses all hold the header and the membership after
/// the change.
pub fn member_change(response_header: Option<&pb::ResponseHeader>, members: &[pb::Member]) -> String {
    let mut obj = Object::default();
    header(&mut obj, response_header);
    obj.list("members", members.iter().map(member).collect());
    obj.finish_line()
}

/// `alarm list|disarm`: the alarm type is an enum, so Go writes its number.
pub fn alarm(resp: &pb::AlarmResponse) -> String {
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    let alarms = resp
        .alarms
        .iter()
        .map(|a| {
            let mut alarm = Object::default();
            alarm.uint("memberID", a.member_id);
            alarm.int("alarm", i64::from(a.alarm));
            alarm.finish()
        })
        .collect();
    obj.list("alarms", alarms);
    obj.finish_line()
}

pub fn move_leader(resp: &pb::MoveLeaderResponse) -> String {
    let mut obj = Object::default();
    header(&mut obj, resp.header.as_ref());
    obj.finish_line()
}

/// The Auth responses: the protobuf structs, so `omitempty` everywhere; a permission's type is an
/// enum (its number, left out for READ).
pub fn auth(resp: &super::AuthResponse<'_>) -> String {
    use super::AuthResponse as R;
    let mut obj = Object::default();
    header(&mut obj, resp.header());
    match resp {
        R::Status(r) => {
            obj.bool("enabled", r.enabled);
            obj.uint("authRevision", r.auth_revision);
        }
        R::UserGet(_, r) => obj.names("roles", &r.roles),
        R::UserList(r) => obj.names("users", &r.users),
        R::RoleList(r) => obj.names("roles", &r.roles),
        R::RoleGet(_, r) => {
            let perms = r
                .perm
                .iter()
                .map(|p| {
                    let mut perm = Object::default();
                    perm.int("permType", i64::from(p.perm_type));
                    perm.bytes("key", &p.key);
                    perm.bytes("range_end", &p.range_end);
                    perm.finish()
                })
                .collect();
            obj.list("perm", perms);
        }
        _ => {}
    }
    obj.finish_line()
}

/// `endpoint health`: etcdctl's own `epHealth` struct, whose only `omitempty` field is `error`.
pub fn endpoint_health(list: &[super::EndpointHealth]) -> String {
    let items = list
        .iter()
        .map(|h| {
            let mut obj = Object::default();
            obj.raw("endpoint", go_string(&h.endpoint));
            obj.raw("health", h.health.to_string());
            obj.raw("took", go_string(&h.took));
            obj.string("error", &h.error);
            obj.finish()
        })
        .collect::<Vec<_>>();
    format!("[{}]\n", items.join(","))
}

fn member(m: &pb::Member) -> String {
    let mut member = Object::default();
    member.uint("ID", m.id);
    member.string("name", &m.name);
    member.strings("peerURLs", &m.peer_ur_ls);
    member.strings("clientURLs", &m.client_ur_ls);
    member.bool("isLearner", m.is_learner);
    member.finish()
}

/// A string as Go's `encoding/json` writes it: HTML-safe (`<`, `>`, `&` escaped) and with
/// U+2028/U+2029 escaped; control characters other than `\n`, `\r`, `\t` as `\u00XX`.
pub fn go_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `watch`: clientv3's `WatchResponse` struct, which has no JSON tags: Go field names, nothing
/// omitted at its level (`"Events":null` for the response clientv3 makes up for an error).
pub fn watch(resp: &crate::concurrency::WatchResponse) -> String {
    let mut obj = Object::default();
    let mut holder = Object::default();
    header(&mut holder, Some(&resp.header));
    // `header` writes `"header":{…}`; the struct's field is `Header`, a value, never omitted.
    let header_json = holder.finish();
    obj.raw("Header", header_json["{\"header\":".len()..header_json.len() - 1].to_string());
    let events = match &resp.events {
        Some(events) => format!("[{}]", events.iter().map(event).collect::<Vec<_>>().join(",")),
        None => "null".to_string(),
    };
    obj.raw("Events", events);
    obj.raw("CompactRevision", resp.compact_revision.to_string());
    obj.raw("Canceled", resp.canceled.to_string());
    obj.raw("Created", resp.created.to_string());
    obj.finish_line()
}

/// An `mvccpb.Event`: `type` (omitted for PUT, 0), `kv`, `prev_kv`.
fn event(event: &mvccpb::Event) -> String {
    let mut obj = Object::default();
    obj.int("type", i64::from(event.r#type));
    if let Some(kv) = &event.kv {
        obj.raw("kv", key_value(kv));
    }
    if let Some(kv) = &event.prev_kv {
        obj.raw("prev_kv", key_value(kv));
    }
    obj.finish()
}

fn header(obj: &mut Object, header: Option<&pb::ResponseHeader>) {
    let Some(h) = header else { return };
    let mut inner = Object::default();
    inner.uint("cluster_id", h.cluster_id);
    inner.uint("member_id", h.member_id);
    inner.int("revision", h.revision);
    inner.uint("raft_term", h.raft_term);
    obj.raw("header", inner.finish());
}

fn key_value(kv: &mvccpb::KeyValue) -> String {
    let mut obj = Object::default();
    obj.bytes("key", &kv.key);
    obj.int("create_revision", kv.create_revision);
    obj.int("mod_revision", kv.mod_revision);
    obj.int("version", kv.version);
    obj.bytes("value", &kv.value);
    obj.int("lease", kv.lease);
    obj.finish()
}

/// A JSON object under construction; every setter skips Go's zero values (`omitempty`).
#[derive(Default)]
struct Object {
    fields: Vec<String>,
}

impl Object {
    fn raw(&mut self, name: &str, json: String) {
        self.fields.push(format!("\"{name}\":{json}"));
    }

    fn int(&mut self, name: &str, value: i64) {
        if value != 0 {
            self.raw(name, value.to_string());
        }
    }

    fn uint(&mut self, name: &str, value: u64) {
        if value != 0 {
            self.raw(name, value.to_string());
        }
    }

    fn bool(&mut self, name: &str, value: bool) {
        if value {
            self.raw(name, "true".to_string());
        }
    }

    /// Base64 never needs JSON escaping, so the string is written as is.
    fn bytes(&mut self, name: &str, value: &[u8]) {
        if !value.is_empty() {
            self.raw(name, format!("\"{}\"", STANDARD.encode(value)));
        }
    }

    fn string(&mut self, name: &str, value: &str) {
        if !value.is_empty() {
            self.raw(name, go_string(value));
        }
    }

    fn strings(&mut self, name: &str, values: &[String]) {
        self.list(name, values.iter().map(|v| go_string(v)).collect());
    }

    /// Names, which may be any bytes (Go's encoder writes U+FFFD for what is not UTF-8).
    fn names(&mut self, name: &str, values: &[Vec<u8>]) {
        self.list(name, values.iter().map(|v| go_string(&String::from_utf8_lossy(v))).collect());
    }

    fn list(&mut self, name: &str, items: Vec<String>) {
        if !items.is_empty() {
            self.raw(name, format!("[{}]", items.join(",")));
        }
    }

    fn finish(self) -> String {
        format!("{{{}}}", self.fields.join(","))
    }

    /// etcdctl prints with `fmt.Println`.
    fn finish_line(self) -> String {
        format!("{}\n", self.finish())
    }
}

#[cfg(test)]
#[path = "json_test.rs"]
mod tests;
