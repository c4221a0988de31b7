//! Tests of [`super`]: the exact text etcdctl 3.4 and 3.6 print.

use super::*;

#[test]
fn cluster_views_match_etcdctl() {
    let member = pb::Member {
        id: 481639138879764659,
        peer_ur_ls: vec!["http://127.0.0.1:45002".into()],
        is_learner: true,
        ..Default::default()
    };
    let added = pb::MemberAddResponse { header: None, member: Some(member.clone()), members: vec![member] };
    assert_eq!(
        member_add(&added),
        "{\"member\":{\"ID\":481639138879764659,\"peerURLs\":[\"http://127.0.0.1:45002\"],\"isLearner\":true},\
         \"members\":[{\"ID\":481639138879764659,\"peerURLs\":[\"http://127.0.0.1:45002\"],\"isLearner\":true}]}\n"
    );
    let alarms =
        pb::AlarmResponse { header: None, alarms: vec![pb::AlarmMember { member_id: 16637631021480683366, alarm: 1 }] };
    assert_eq!(alarm(&alarms), "{\"alarms\":[{\"memberID\":16637631021480683366,\"alarm\":1}]}\n");
    assert_eq!(alarm(&pb::AlarmResponse::default()), "{}\n");
    assert_eq!(move_leader(&pb::MoveLeaderResponse::default()), "{}\n");
    let health = |error: &str| super::super::EndpointHealth {
        endpoint: "127.0.0.1:1".into(),
        health: error.is_empty(),
        took: "5.000887043s".into(),
        error: error.into(),
    };
    assert_eq!(
        endpoint_health(&[health(""), health("context deadline exceeded")]),
        "[{\"endpoint\":\"127.0.0.1:1\",\"health\":true,\"took\":\"5.000887043s\"},\
         {\"endpoint\":\"127.0.0.1:1\",\"health\":false,\"took\":\"5.000887043s\",\"error\":\"context deadline exceeded\"}]\n"
    );
    assert_eq!(endpoint_health(&[]), "[]\n");
}

fn header() -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { cluster_id: 14841639068965178418, member_id: 7, revision: 4, raft_term: 2 })
}

#[test]
fn member_list_hex_in_36_only() {
    let started = pb::Member {
        id: 0x0abc_0000_0000_0001,
        name: "infra1".into(),
        peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
        client_ur_ls: vec!["http://127.0.0.1:2379".into(), "http://a<b".into()],
        is_learner: true,
    };
    let unstarted =
        pb::Member { id: 10276657743932975437, peer_ur_ls: vec!["http://127.0.0.1:2381".into()], ..Default::default() };
    let resp = pb::MemberListResponse { header: header(), members: vec![started, unstarted] };
    let decimal = "{\"header\":{\"cluster_id\":14841639068965178418,\"member_id\":7,\"revision\":4,\"raft_term\":2},\
                   \"members\":[{\"ID\":773493236000882689,\"name\":\"infra1\",\"peerURLs\":[\"http://127.0.0.1:2380\"],\
                   \"clientURLs\":[\"http://127.0.0.1:2379\",\"http://a\\u003cb\"],\"isLearner\":true},\
                   {\"ID\":10276657743932975437,\"peerURLs\":[\"http://127.0.0.1:2381\"]}]}\n";
    assert_eq!(member_list(&resp, Dialect::V3_6, false), decimal);
    assert_eq!(member_list(&resp, Dialect::V3_4, false), decimal);
    assert_eq!(member_list(&resp, Dialect::V3_4, true), decimal);
    assert_eq!(
        member_list(&resp, Dialect::V3_6, true),
        "{\"header\":{\"cluster_id\":\"cdf818194e3a8c32\",\"member_id\":\"7\",\"raft_term\":2},\
         \"members\":[{\"ID\":\"abc000000000001\",\"name\":\"infra1\",\"peerURLs\":[\"http://127.0.0.1:2380\"],\
         \"clientURLs\":[\"http://127.0.0.1:2379\",\"http://a\\u003cb\"]},\
         {\"ID\":\"8e9e05c52164694d\",\"name\":\"\",\"peerURLs\":[\"http://127.0.0.1:2381\"],\"clientURLs\":null}]}\n"
    );
    // No members: no `members` key; a zero raft term is still written; a name goes in unescaped.
    let zero = pb::ResponseHeader { cluster_id: 1, member_id: 0, revision: 9, raft_term: 0 };
    let empty = pb::MemberListResponse { header: Some(zero), members: vec![] };
    assert_eq!(
        member_list(&empty, Dialect::V3_6, true),
        "{\"header\":{\"cluster_id\":\"1\",\"member_id\":\"0\",\"raft_term\":0}}\n"
    );
    assert_eq!(member_list(&empty, Dialect::V3_6, false), "{\"header\":{\"cluster_id\":1,\"revision\":9}}\n");
    let quoted = pb::MemberListResponse {
        header: Some(zero),
        members: vec![pb::Member { id: 1, name: "a\"b".into(), ..Default::default() }],
    };
    assert_eq!(
        member_list(&quoted, Dialect::V3_6, true),
        "{\"header\":{\"cluster_id\":\"1\",\"member_id\":\"0\",\"raft_term\":0},\
         \"members\":[{\"ID\":\"1\",\"name\":\"a\"b\",\"peerURLs\":null,\"clientURLs\":null}]}\n"
    );
}

#[test]
fn go_strings() {
    assert_eq!(go_string("a\"b\\c\n<&>\u{1}\u{2028}é"), r#""a\"b\\c\n\u003c\u0026\u003e\u0001\u2028é""#);
}

#[test]
fn matches_etcdctl() {
    let kv = mvccpb::KeyValue {
        key: b"foo".to_vec(),
        create_revision: 2,
        mod_revision: 4,
        version: 3,
        value: b"q".to_vec(),
        lease: 0,
    };
    let resp = pb::RangeResponse { header: header(), kvs: vec![kv.clone()], more: false, count: 1 };
    assert_eq!(
        range(&resp),
        "{\"header\":{\"cluster_id\":14841639068965178418,\"member_id\":7,\"revision\":4,\"raft_term\":2},\
         \"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":2,\"mod_revision\":4,\"version\":3,\"value\":\"cQ==\"}],\
         \"count\":1}\n"
    );
    let empty = pb::RangeResponse { header: header(), ..Default::default() };
    assert_eq!(
        range(&empty),
        "{\"header\":{\"cluster_id\":14841639068965178418,\"member_id\":7,\"revision\":4,\"raft_term\":2}}\n"
    );
    let del = pb::DeleteRangeResponse { header: None, deleted: 1, prev_kvs: vec![kv] };
    assert_eq!(
        delete_range(&del),
        "{\"deleted\":1,\"prev_kvs\":[{\"key\":\"Zm9v\",\"create_revision\":2,\"mod_revision\":4,\
         \"version\":3,\"value\":\"cQ==\"}]}\n"
    );
}

#[test]
fn auth_responses() {
    use super::super::AuthResponse;
    let perm = proto::authpb::Permission { perm_type: 0, key: b"a".to_vec(), range_end: b"\0".to_vec() };
    let role = pb::AuthRoleGetResponse { header: header(), perm: vec![perm] };
    assert_eq!(
        auth(&AuthResponse::RoleGet("r", &role)),
        "{\"header\":{\"cluster_id\":14841639068965178418,\"member_id\":7,\"revision\":4,\"raft_term\":2},\
         \"perm\":[{\"key\":\"YQ==\",\"range_end\":\"AA==\"}]}\n"
    );
    let status = pb::AuthStatusResponse { header: None, enabled: true, auth_revision: 3 };
    assert_eq!(auth(&AuthResponse::Status(&status)), "{\"enabled\":true,\"authRevision\":3}\n");
    let users = pb::AuthUserListResponse { header: None, users: vec![] };
    assert_eq!(auth(&AuthResponse::UserList(&users)), "{}\n");
}
