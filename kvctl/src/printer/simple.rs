//! etcdctl's `simple` format (`printer_simple.go`): key and value on their own lines.

use std::fmt::Write;

use proto::etcdserverpb as pb;
use proto::mvccpb;

pub fn get(resp: &pb::RangeResponse, hex: bool, value_only: bool) -> String {
    let mut out = String::new();
    for kv in &resp.kvs {
        push_kv(&mut out, kv, hex, value_only);
    }
    out
}

pub fn put(resp: &pb::PutResponse, hex: bool, value_only: bool) -> String {
    let mut out = String::from("OK\n");
    if let Some(kv) = &resp.prev_kv {
        push_kv(&mut out, kv, hex, value_only);
    }
    out
}

pub fn del(resp: &pb::DeleteRangeResponse, hex: bool, value_only: bool) -> String {
    let mut out = format!("{}\n", resp.deleted);
    for kv in &resp.prev_kvs {
        push_kv(&mut out, kv, hex, value_only);
    }
    out
}

/// `txn`: the outcome, then each response as `get`/`put`/`del` print it, after an empty line.
pub fn txn(resp: &pb::TxnResponse, hex: bool) -> String {
    use pb::response_op::Response;
    let mut out = String::from(if resp.succeeded { "SUCCESS\n" } else { "FAILURE\n" });
    for op in &resp.responses {
        out.push('\n');
        match &op.response {
            Some(Response::ResponseRange(r)) => out.push_str(&get(r, hex, false)),
            Some(Response::ResponsePut(r)) => out.push_str(&put(r, hex, false)),
            Some(Response::ResponseDeleteRange(r)) => out.push_str(&del(r, hex, false)),
            // etcdctl cannot send nested txns; it prints anything else with `%+v`.
            other => {
                let _ = writeln!(out, "unexpected response {other:?}");
            }
        }
    }
    out
}

/// Go's `%016x` of a lease id (an `int64`: negative ids keep their sign inside the width).
pub fn lease_id_hex(id: i64) -> String {
    if id < 0 {
        format!("-{:015x}", id.unsigned_abs())
    } else {
        format!("{id:016x}")
    }
}

pub fn lease_grant(resp: &pb::LeaseGrantResponse) -> String {
    format!("lease {} granted with TTL({}s)\n", lease_id_hex(resp.id), resp.ttl)
}

/// etcdctl prints the id it asked to revoke (the response carries none).
pub fn lease_revoke(id: i64) -> String {
    format!("lease {} revoked\n", lease_id_hex(id))
}

pub fn lease_keep_alive(resp: &pb::LeaseKeepAliveResponse) -> String {
    format!("lease {} keepalived with TTL({})\n", lease_id_hex(resp.id), resp.ttl)
}

/// `lease timetolive [--keys]`; the server answers an unknown lease with TTL -1 and no granted TTL.
pub fn lease_time_to_live(resp: &pb::LeaseTimeToLiveResponse, keys: bool) -> String {
    let id = lease_id_hex(resp.id);
    if resp.granted_ttl == 0 && resp.ttl == -1 {
        return format!("lease {id} already expired\n");
    }
    let mut out = format!("lease {id} granted with TTL({}s), remaining({}s)", resp.granted_ttl, resp.ttl);
    if keys {
        // Go's `%v` of a `[]string`.
        let keys: Vec<_> = resp.keys.iter().map(|k| String::from_utf8_lossy(k)).collect();
        let _ = write!(out, ", attached keys([{}])", keys.join(" "));
    }
    out.push('\n');
    out
}

pub fn lease_leases(resp: &pb::LeaseLeasesResponse) -> String {
    let mut out = format!("found {} leases\n", resp.leases.len());
    for lease in &resp.leases {
        out.push_str(&lease_id_hex(lease.id));
        out.push('\n');
    }
    out
}

/// `member add`'s first line; `member add` itself then prints the `ETCD_*` variables.
pub fn member_add(resp: &pb::MemberAddResponse) -> String {
    let id = resp.member.as_ref().map_or(0, |m| m.id);
    format!("Member {id:16x} added to cluster {:16x}\n", cluster_id(resp.header.as_ref()))
}

/// `member remove|update|promote`: `verb` is `removed from`, `updated in` or `promoted in`.
pub fn member_change(verb: &str, id: u64, header: Option<&pb::ResponseHeader>) -> String {
    format!("Member {id:16x} {verb} cluster {:16x}\n", cluster_id(header))
}

/// `alarm list|disarm`: Go's `%+v` of each `*AlarmMember`, i.e. its compact protobuf text, where
/// every non-zero field is followed by a space.
pub fn alarm(resp: &pb::AlarmResponse) -> String {
    let mut out = String::new();
    for a in &resp.alarms {
        if a.member_id != 0 {
            let _ = write!(out, "memberID:{} ", a.member_id);
        }
        if a.alarm != 0 {
            let _ = write!(out, "alarm:{} ", alarm_type_name(a.alarm));
        }
        out.push('\n');
    }
    out
}

/// An `AlarmType` as protobuf text and Go's `String()` write it: its name, or its number when
/// unknown.
pub fn alarm_type_name(alarm: i32) -> String {
    pb::AlarmType::try_from(alarm).map_or_else(|_| alarm.to_string(), |t| t.as_str_name().to_string())
}

/// `endpoint health` in the simple format. etcdctl writes these lines to stderr, not stdout.
pub fn endpoint_health(list: &[super::EndpointHealth]) -> String {
    let mut out = String::new();
    for h in list {
        if h.error.is_empty() {
            let _ = writeln!(out, "{} is healthy: successfully committed proposal: took = {}", h.endpoint, h.took);
        } else {
            let _ = writeln!(out, "{} is unhealthy: failed to commit proposal: {}", h.endpoint, h.error);
        }
    }
    out
}

/// `move-leader`: both ids as etcd's `types.ID` prints them (hex, no padding).
pub fn move_leader(leader: u64, target: u64) -> String {
    format!("Leadership transferred from {leader:x} to {target:x}\n")
}

/// The Auth verbs: one line saying what was done, or the user's roles, or the role's
/// permissions (keys written as they are: Go prints `string(key)`).
pub fn auth(resp: &super::AuthResponse<'_>) -> Vec<u8> {
    use super::AuthResponse as R;
    let text = match resp {
        R::Status(r) => format!("Authentication Status: {}\nAuthRevision: {}\n", r.enabled, r.auth_revision),
        R::UserAdd(user, _) => format!("User {user} created\n"),
        R::UserGet(user, r) => {
            let roles: String = r.roles.iter().map(|role| format!(" {}", String::from_utf8_lossy(role))).collect();
            format!("User: {user}\nRoles:{roles}\n")
        }
        R::UserList(r) => r.users.iter().map(|user| format!("{}\n", String::from_utf8_lossy(user))).collect(),
        R::UserDelete(user, _) => format!("User {user} deleted\n"),
        R::UserChangePassword(_) => "Password updated\n".to_string(),
        R::UserGrantRole(user, role, _) => format!("Role {role} is granted to user {user}\n"),
        R::UserRevokeRole(user, role, _) => format!("Role {role} is revoked from user {user}\n"),
        R::RoleAdd(role, _) => format!("Role {role} created\n"),
        R::RoleGet(role, r) => return role_get(role, &r.perm),
        R::RoleList(r) => r.roles.iter().map(|role| format!("{}\n", String::from_utf8_lossy(role))).collect(),
        R::RoleDelete(role, _) => format!("Role {role} deleted\n"),
        R::RoleGrantPermission(role, _) => format!("Role {role} updated\n"),
        R::RoleRevokePermission(role, key, range_end, _) => match *range_end {
            [] => format!("Permission of key {key} is revoked from role {role}\n"),
            [0] => format!("Permission of range [{key}, <open ended> is revoked from role {role}\n"),
            end => {
                let mut out = format!("Permission of range [{key}, ").into_bytes();
                out.extend_from_slice(end);
                out.extend_from_slice(format!(") is revoked from role {role}\n").as_bytes());
                return out;
            }
        },
    };
    text.into_bytes()
}

/// `role get`: the permissions that allow reading, then those that allow writing; a single key
/// as is, a range as `[key, end)` or `[key, <open ended>`, marked `(prefix key)` when it is one.
fn role_get(role: &str, perms: &[proto::authpb::Permission]) -> Vec<u8> {
    use proto::authpb::permission::Type;
    let mut out = format!("Role {role}\nKV Read:\n").into_bytes();
    let sections = [(Type::Read, "KV Write:\n"), (Type::Write, "")];
    for (kind, next_title) in sections {
        for perm in perms {
            let allowed = perm.perm_type == kind as i32 || perm.perm_type == Type::Readwrite as i32;
            if !allowed {
                continue;
            }
            out.push(b'\t');
            if perm.range_end.is_empty() {
                out.extend_from_slice(&perm.key);
            } else {
                out.push(b'[');
                out.extend_from_slice(&perm.key);
                if perm.range_end == [0] {
                    out.extend_from_slice(b", <open ended>");
                } else {
                    out.extend_from_slice(b", ");
                    out.extend_from_slice(&perm.range_end);
                    out.push(b')');
                }
                if crate::prefix::prefix_end(&perm.key) == perm.range_end {
                    out.extend_from_slice(b" (prefix ");
                    out.extend_from_slice(&perm.key);
                    out.push(b')');
                }
            }
            out.push(b'\n');
        }
        out.extend_from_slice(next_title.as_bytes());
    }
    out
}

/// Go's `time.Duration.String()`: `1.5µs`, `2.253556ms`, `5.002424736s`, `1m30s`, `1h0m5s`, `0s`.
pub fn go_duration(d: std::time::Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", decimal(nanos, 3));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", decimal(nanos, 6));
    }
    let (hours, rest) = (nanos / 3_600_000_000_000, nanos % 3_600_000_000_000);
    let (minutes, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let mut out = String::new();
    if hours > 0 {
        let _ = write!(out, "{hours}h");
    }
    if hours > 0 || minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    let _ = write!(out, "{}s", decimal(rest, 9));
    out
}

/// `value / 10^digits` with the fraction's trailing zeros (and a bare point) dropped.
fn decimal(value: u128, digits: u32) -> String {
    let scale = 10u128.pow(digits);
    let fraction = format!("{:0width$}", value % scale, width = digits as usize);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{}", value / scale)
    } else {
        format!("{}.{fraction}", value / scale)
    }
}

/// Go reads a nil header's fields as zeros.
fn cluster_id(header: Option<&pb::ResponseHeader>) -> u64 {
    header.map_or(0, |h| h.cluster_id)
}

/// go-humanize's `Bytes`: SI units, one decimal below 10.
pub fn humanize_bytes(size: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if size < 10 {
        return format!("{size} B");
    }
    let size = size as f64;
    let exp = (size.ln() / 1000f64.ln()).floor();
    let unit = UNITS[(exp as usize).min(UNITS.len() - 1)];
    let value = (size / 1000f64.powf(exp) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

/// `watch`: per event its type (`PUT`/`DELETE`), then the previous key-value pair (with
/// `--prev-kv`), then the key and value after the event.
pub fn watch(resp: &crate::concurrency::WatchResponse, hex: bool) -> String {
    let mut out = String::new();
    for event in resp.events() {
        out.push_str(event_type_name(event.r#type));
        out.push('\n');
        if let Some(prev) = &event.prev_kv {
            push_kv(&mut out, prev, hex, false);
        }
        push_kv(&mut out, &event.kv.clone().unwrap_or_default(), hex, false);
    }
    out
}

/// mvccpb's `Event_EventType.String()`: the name, or the number for an unknown value.
pub fn event_type_name(kind: i32) -> &'static str {
    match mvccpb::event::EventType::try_from(kind) {
        Ok(kind) => kind.as_str_name(),
        Err(_) => "UNKNOWN",
    }
}

/// etcdctl's `printKV`: Go's `string([]byte)` passes bytes through unchanged; we can only hold
/// UTF-8 in a `String`, so invalid sequences are replaced (use `--hex` for binary data).
fn push_kv(out: &mut String, kv: &mvccpb::KeyValue, hex: bool, value_only: bool) {
    let render = |bytes: &[u8]| if hex { hex_escaped(bytes) } else { String::from_utf8_lossy(bytes).into_owned() };
    if !value_only {
        out.push_str(&render(&kv.key));
        out.push('\n');
    }
    out.push_str(&render(&kv.value));
    out.push('\n');
}

/// etcdctl's `addHexPrefix(hex.EncodeToString(b))`: every byte as `\xNN`, lowercase.
pub fn hex_escaped(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 4);
    for b in bytes {
        let _ = write!(out, "\\x{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        use std::time::Duration;
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_nanos(850_000), "850µs"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_nanos(2_253_556), "2.253556ms"),
            (Duration::from_nanos(5_002_424_736), "5.002424736s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3605), "1h0m5s"),
        ];
        for (duration, want) in cases {
            assert_eq!(go_duration(duration), want, "{duration:?}");
        }
    }

    #[test]
    fn cluster_lines() {
        let header = Some(pb::ResponseHeader { cluster_id: 0xdc50b8daae93b3e0, ..Default::default() });
        let member = Some(pb::Member { id: 0x159cf49344e9e51, ..Default::default() });
        let added = pb::MemberAddResponse { header, member, members: vec![] };
        assert_eq!(member_add(&added), "Member  159cf49344e9e51 added to cluster dc50b8daae93b3e0\n");
        assert_eq!(
            member_change("removed from", 0xab, None),
            "Member               ab removed from cluster                0\n"
        );
        assert_eq!(move_leader(0x1f, 0xab), "Leadership transferred from 1f to ab\n");
        let alarms = pb::AlarmResponse {
            header: None,
            alarms: vec![
                pb::AlarmMember { member_id: 16637631021480683366, alarm: pb::AlarmType::Nospace as i32 },
                pb::AlarmMember { member_id: 7, alarm: 9 },
            ],
        };
        assert_eq!(alarm(&alarms), "memberID:16637631021480683366 alarm:NOSPACE \nmemberID:7 alarm:9 \n");
    }

    fn kv(key: &str, value: &str) -> mvccpb::KeyValue {
        mvccpb::KeyValue { key: key.into(), value: value.into(), ..Default::default() }
    }

    #[test]
    fn humanized() {
        let cases = [(0, "0 B"), (9, "9 B"), (999, "999 B"), (1000, "1.0 kB"), (28672, "29 kB"), (1_550_000, "1.6 MB")];
        for (size, want) in cases {
            assert_eq!(humanize_bytes(size), want, "{size}");
        }
    }

    #[test]
    fn formats() {
        let range = pb::RangeResponse { kvs: vec![kv("k1", "v1"), kv("k2", "")], ..Default::default() };
        assert_eq!(get(&range, false, false), "k1\nv1\nk2\n\n");
        assert_eq!(get(&range, false, true), "v1\n\n");
        assert_eq!(get(&range, true, false), "\\x6b\\x31\n\\x76\\x31\n\\x6b\\x32\n\n");
        let put_resp = pb::PutResponse { prev_kv: Some(kv("foo", "bar")), ..Default::default() };
        assert_eq!(put(&put_resp, false, false), "OK\nfoo\nbar\n");
        assert_eq!(put(&pb::PutResponse::default(), false, false), "OK\n");
        let del_resp = pb::DeleteRangeResponse { deleted: 1, prev_kvs: vec![kv("a", "b")], ..Default::default() };
        assert_eq!(del(&del_resp, false, false), "1\na\nb\n");
    }

    #[test]
    fn role_permissions() {
        use proto::authpb::Permission;
        let perm = |perm_type, key: &[u8], range_end: &[u8]| Permission {
            perm_type,
            key: key.to_vec(),
            range_end: range_end.to_vec(),
        };
        let resp = pb::AuthRoleGetResponse {
            header: None,
            perm: vec![
                perm(0, b"\0", b"\0"),
                perm(1, b"a", b""),
                perm(2, b"p/", b"p0"),
                perm(0, b"z", b"\0"),
                perm(1, b"\xff", b"\0"),
            ],
        };
        assert_eq!(
            auth(&super::super::AuthResponse::RoleGet("r", &resp)),
            b"Role r\nKV Read:\n\t[\0, <open ended>\n\t[p/, p0) (prefix p/)\n\t[z, <open ended>\n\
              KV Write:\n\ta\n\t[p/, p0) (prefix p/)\n\t[\xff, <open ended> (prefix \xff)\n"
        );
        let status = pb::AuthStatusResponse { header: None, enabled: true, auth_revision: 7 };
        assert_eq!(
            auth(&super::super::AuthResponse::Status(&status)),
            b"Authentication Status: true\nAuthRevision: 7\n"
        );
        let revoke = pb::AuthRoleRevokePermissionResponse::default();
        let revoked = |end: &[u8]| auth(&super::super::AuthResponse::RoleRevokePermission("r", "k", end, &revoke));
        assert_eq!(revoked(b""), b"Permission of key k is revoked from role r\n");
        assert_eq!(revoked(b"\0"), b"Permission of range [k, <open ended> is revoked from role r\n");
        assert_eq!(revoked(b"l"), b"Permission of range [k, l) is revoked from role r\n");
    }
}
