//! Tests of [`super`]: the exact text etcdctl 3.4 and 3.6 print.

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
    assert_eq!(put(&pb::PutResponse::default(), V36_HEX), "\"ClusterID\" : 0\n\"MemberID\" : 0\n\"RaftTerm\" : 0\n");
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
    let grant = pb::LeaseGrantResponse { header: header_of(3), id: 474240782616986208, ttl: 60, error: String::new() };
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
    assert_eq!(lease_leases(&leases, V36_HEX), format!("{head}\"ID\" : 0694d77aa9e38260\n\"ID\" : -000000000000002\n"));
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
