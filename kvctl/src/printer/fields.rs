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
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        let cases: [(&[u8], &str); 4] = [
            (b"foo", r#""foo""#),
            ("a\x01\"\\é\t".as_bytes(), r#""a\x01\"\\é\t""#),
            (b"\xff", r#""\xff""#),
            ("\u{2028} x".as_bytes(), r#""\u2028 x""#),
        ];
        for (bytes, want) in cases {
            assert_eq!(go_quote(bytes), want);
        }
    }

    const V34: Style = Style { dialect: Dialect::V3_4, hex: false };
    const V36: Style = Style { dialect: Dialect::V3_6, hex: false };
    const V36_HEX: Style = Style { dialect: Dialect::V3_6, hex: true };

    fn header_of(revision: i64) -> Option<pb::ResponseHeader> {
        Some(pb::ResponseHeader {
            cluster_id: 14841639068965178418,
            member_id: 10276657743932975437,
            revision,
            raft_term: 2,
        })
    }

    fn key_value() -> mvccpb::KeyValue {
        mvccpb::KeyValue {
            key: b"foo".to_vec(),
            create_revision: 2,
            mod_revision: 4,
            version: 3,
            value: b"bar".to_vec(),
            lease: 474240782616986208,
        }
    }

    #[test]
    fn put_without_prev_kv() {
        assert_eq!(
            put(&pb::PutResponse::default(), V34),
            "\"ClusterID\" : 0\n\"MemberID\" : 0\n\"Revision\" : 0\n\"RaftTerm\" : 0\n"
        );
        assert_eq!(put(&pb::PutResponse::default(), V36), "\"ClusterID\" : 0\n\"MemberID\" : 0\n\"RaftTerm\" : 0\n");
        assert_eq!(
            put(&pb::PutResponse::default(), V36_HEX),
            "\"ClusterID\" : 0\n\"MemberID\" : 0\n\"RaftTerm\" : 0\n"
        );
    }

    #[test]
    fn the_hex_flag_counts_in_the_36_dialect_only() {
        assert_eq!(Style::new(Dialect::V3_4, true), V34);
        assert_eq!(Style::new(Dialect::V3_4, false), V34);
        assert_eq!(Style::new(Dialect::V3_6, false), V36);
        assert_eq!(Style::new(Dialect::V3_6, true), V36_HEX);
    }

    #[test]
    fn header_revision_only_when_positive_in_36() {
        let revoked = |revision| pb::LeaseRevokeResponse { header: header_of(revision) };
        let with = "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 9\n\"RaftTerm\" : 2\n";
        assert_eq!(lease_revoke(&revoked(9), V34), with);
        assert_eq!(lease_revoke(&revoked(9), V36), with);
        assert_eq!(
            lease_revoke(&revoked(0), V34),
            "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 0\n\"RaftTerm\" : 2\n"
        );
        let without = "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"RaftTerm\" : 2\n";
        assert_eq!(lease_revoke(&revoked(0), V36), without);
        assert_eq!(lease_revoke(&revoked(-1), V36), without);
        // `member list` responses carry no revision: 3.6 leaves the line out there too.
        let members = pb::MemberListResponse { header: header_of(0), members: vec![] };
        assert_eq!(member_list(&members, V36), without);
    }

    #[test]
    fn hex_header_and_key_values() {
        let resp = pb::RangeResponse { header: header_of(4), kvs: vec![key_value()], more: false, count: 1 };
        let kv_lines =
            "\"Key\" : \"foo\"\n\"CreateRevision\" : 2\n\"ModRevision\" : 4\n\"Version\" : 3\n\"Value\" : \"bar\"\n";
        let decimal = format!(
            "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 4\n\
             \"RaftTerm\" : 2\n{kv_lines}\"Lease\" : 474240782616986208\n\"More\" : false\n\"Count\" : 1\n"
        );
        assert_eq!(get(&resp, V34), decimal);
        assert_eq!(get(&resp, V36), decimal);
        assert_eq!(
            get(&resp, V36_HEX),
            format!(
                "\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"Revision\" : 4\n\
                 \"RaftTerm\" : 2\n{kv_lines}\"Lease\" : 0694d77aa9e38260\n\"More\" : false\n\"Count\" : 1\n"
            )
        );
        // `types.ID` has no leading zeros; `%016x` pads, and a lease of 0 is all zeros.
        let small = Some(pb::ResponseHeader { cluster_id: 0xabc, member_id: 0, revision: 7, raft_term: 1 });
        let prev = mvccpb::KeyValue { lease: 0, ..key_value() };
        let put_resp = pb::PutResponse { header: small, prev_kv: Some(prev.clone()) };
        assert_eq!(
            put(&put_resp, V36_HEX),
            "\"ClusterID\" : abc\n\"MemberID\" : 0\n\"Revision\" : 7\n\"RaftTerm\" : 1\n\"PrevKey\" : \"foo\"\n\
             \"PrevCreateRevision\" : 2\n\"PrevModRevision\" : 4\n\"PrevVersion\" : 3\n\"PrevValue\" : \"bar\"\n\
             \"PrevLease\" : 0000000000000000\n"
        );
        let del_resp = pb::DeleteRangeResponse { header: small, deleted: 1, prev_kvs: vec![key_value()] };
        assert!(del(&del_resp, V36_HEX).ends_with("\"PrevLease\" : 0694d77aa9e38260\n"), "{}", del(&del_resp, V36_HEX));
        assert!(del(&del_resp, V34).ends_with("\"PrevLease\" : 474240782616986208\n"), "{}", del(&del_resp, V34));
        let txn_resp = pb::TxnResponse {
            header: small,
            succeeded: true,
            responses: vec![pb::ResponseOp { response: Some(pb::response_op::Response::ResponsePut(put_resp)) }],
        };
        assert!(txn(&txn_resp, V36_HEX).starts_with("\"ClusterID\" : abc\n"), "{}", txn(&txn_resp, V36_HEX));
        assert!(txn(&txn_resp, V36_HEX).ends_with("\"PrevLease\" : 0000000000000000\n"), "{}", txn(&txn_resp, V36_HEX));
    }

    #[test]
    fn hex_watch_events() {
        let event = mvccpb::Event { r#type: 0, kv: Some(key_value()), prev_kv: Some(key_value()) };
        let resp = crate::concurrency::WatchResponse {
            header: pb::ResponseHeader { revision: 0, ..header_of(0).unwrap_or_default() },
            events: Some(vec![event]),
            ..Default::default()
        };
        let kv = |prefix: &str, lease: &str| {
            format!(
                "\"{prefix}Key\" : \"foo\"\n\"{prefix}CreateRevision\" : 2\n\"{prefix}ModRevision\" : 4\n\
                 \"{prefix}Version\" : 3\n\"{prefix}Value\" : \"bar\"\n\"{prefix}Lease\" : {lease}\n"
            )
        };
        assert_eq!(
            watch(&resp, V36_HEX),
            format!(
                "\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"RaftTerm\" : 2\n\"Type\" : PUT\n{}{}",
                kv("Prev", "0694d77aa9e38260"),
                kv("", "0694d77aa9e38260")
            )
        );
        assert_eq!(
            watch(&resp, V34),
            format!(
                "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 0\n\
                 \"RaftTerm\" : 2\n\"Type\" : PUT\n{}{}",
                kv("Prev", "474240782616986208"),
                kv("", "474240782616986208")
            )
        );
    }

    #[test]
    fn hex_lease_ids() {
        let head =
            "\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"Revision\" : 3\n\"RaftTerm\" : 2\n";
        let head_34 =
            "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 3\n\"RaftTerm\" : 2\n";
        let grant =
            pb::LeaseGrantResponse { header: header_of(3), id: 474240782616986208, ttl: 60, error: String::new() };
        assert_eq!(lease_grant(&grant, V36_HEX), format!("{head}\"ID\" : 0694d77aa9e38260\n\"TTL\" : 60\n"));
        assert_eq!(lease_grant(&grant, V34), format!("{head_34}\"ID\" : 474240782616986208\n\"TTL\" : 60\n"));
        assert_eq!(lease_grant(&grant, V36), format!("{head_34}\"ID\" : 474240782616986208\n\"TTL\" : 60\n"));
        let kept = pb::LeaseKeepAliveResponse { header: header_of(3), id: 0x1f, ttl: 59 };
        assert_eq!(lease_keep_alive(&kept, V36_HEX), format!("{head}\"ID\" : 000000000000001f\n\"TTL\" : 59\n"));
        assert_eq!(lease_keep_alive(&kept, V34), format!("{head_34}\"ID\" : 31\n\"TTL\" : 59\n"));
        let ttl = pb::LeaseTimeToLiveResponse {
            header: header_of(3),
            id: 474240782616986208,
            ttl: 58,
            granted_ttl: 60,
            keys: vec![b"foo".to_vec()],
        };
        assert_eq!(
            lease_time_to_live(&ttl, V36_HEX),
            format!("{head}\"ID\" : 0694d77aa9e38260\n\"TTL\" : 58\n\"GrantedTTL\" : 60\n\"Key\" : \"foo\"\n")
        );
        assert_eq!(
            lease_time_to_live(&ttl, V34),
            format!("{head_34}\"ID\" : 474240782616986208\n\"TTL\" : 58\n\"GrantedTTL\" : 60\n\"Key\" : \"foo\"\n")
        );
        let leases = pb::LeaseLeasesResponse {
            header: header_of(3),
            leases: vec![pb::LeaseStatus { id: 474240782616986208 }, pb::LeaseStatus { id: -2 }],
        };
        assert_eq!(
            lease_leases(&leases, V36_HEX),
            format!("{head}\"ID\" : 0694d77aa9e38260\n\"ID\" : -000000000000002\n")
        );
        assert_eq!(lease_leases(&leases, V34), format!("{head_34}\"ID\" : 474240782616986208\n\"ID\" : -2\n"));
    }

    #[test]
    fn go_hex16_pads_after_the_sign() {
        assert_eq!(go_hex16(0), "0000000000000000");
        assert_eq!(go_hex16(0x694d77aa9e38260), "0694d77aa9e38260");
        assert_eq!(go_hex16(-1), "-000000000000001");
        assert_eq!(go_hex16(i64::MAX), "7fffffffffffffff");
        assert_eq!(go_hex16(i64::MIN), "-8000000000000000");
    }

    #[test]
    fn hex_member_and_alarm_ids() {
        let members = pb::MemberListResponse {
            header: header_of(0),
            members: vec![pb::Member {
                id: 0x0abc_0000_0000_0001,
                name: "infra1".into(),
                peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
                client_ur_ls: vec!["http://127.0.0.1:2379".into()],
                is_learner: false,
            }],
        };
        let member_lines = "\"Name\" : \"infra1\"\n\"PeerURL\" : \"http://127.0.0.1:2380\"\n\
                            \"ClientURL\" : \"http://127.0.0.1:2379\"\n\"IsLearner\" : false\n\n";
        assert_eq!(
            member_list(&members, V36_HEX),
            format!(
                "\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"RaftTerm\" : 2\n\
                 \"ID\" : abc000000000001\n{member_lines}"
            )
        );
        assert_eq!(
            member_list(&members, V34),
            format!(
                "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 0\n\
                 \"RaftTerm\" : 2\n\"ID\" : 773493236000882689\n{member_lines}"
            )
        );
        let alarms = pb::AlarmResponse {
            header: header_of(0),
            alarms: vec![pb::AlarmMember { member_id: 10276657743932975437, alarm: 1 }],
        };
        assert_eq!(
            alarm(&alarms, V36_HEX),
            "\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"RaftTerm\" : 2\n\
             \"MemberID\" : 8e9e05c52164694d\n\"AlarmType\" : NOSPACE\n\n"
        );
        assert_eq!(
            alarm(&alarms, V36),
            "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"RaftTerm\" : 2\n\
             \"MemberID\" : 10276657743932975437\n\"AlarmType\" : NOSPACE\n\n"
        );
    }

    #[test]
    fn hex_leaves_endpoint_and_auth_fields_but_the_header_alone() {
        let status = pb::StatusResponse {
            header: header_of(5),
            version: "3.6.14".into(),
            leader: 10276657743932975437,
            raft_term: 2,
            ..Default::default()
        };
        let statuses = [("127.0.0.1:2379".to_string(), status)];
        let hex = endpoint_status(&statuses, V36_HEX);
        assert!(
            hex.starts_with("\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"Revision\" : 5\n"),
            "{hex}"
        );
        assert!(hex.contains("\"Leader\" : 10276657743932975437\n"), "{hex}");
        let hash = pb::HashKvResponse { header: header_of(0), hash: 7, compact_revision: 0, hash_revision: 5 };
        assert_eq!(
            endpoint_hashkv(&[("127.0.0.1:2379".to_string(), hash)], V36_HEX),
            "\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"RaftTerm\" : 2\n\
             \"Endpoint\" : \"127.0.0.1:2379\"\n\"Hash\" : 7\n\"HashRevision\" : 5\n\n"
        );
        assert_eq!(
            endpoint_hashkv(&[("127.0.0.1:2379".to_string(), hash)], V34),
            "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 0\n\
             \"RaftTerm\" : 2\n\"Endpoint\" : \"127.0.0.1:2379\"\n\"Hash\" : 7\n\n"
        );
        let roles = pb::AuthRoleListResponse { header: header_of(0), roles: vec![b"root".to_vec()] };
        assert_eq!(
            auth(&super::super::AuthResponse::RoleList(&roles), V36_HEX).as_deref(),
            Some(
                "\"ClusterID\" : cdf818194e3a8c32\n\"MemberID\" : 8e9e05c52164694d\n\"RaftTerm\" : 2\n\
                 \"Roles\" : \"root\"\n"
            )
        );
    }
}
