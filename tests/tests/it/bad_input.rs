//! Requests no etcd client library sends (unknown enum values, a missing permission, a hash in place of
//! a password, oversized auth requests), sent raw with our protos, and etcd's answer to each: the same
//! gRPC code and text. The cases etcd 3.5 and 3.6 answer alike run against real etcd 3.5.1 too, so the
//! expectations are etcd's own; the rest are etcd 3.6's answers (3.5.1 panics on an unknown sort option
//! and has no permission-range check).

use anyhow::Context;
use base64::Engine;
use proto::authpb;
use proto::etcdserverpb::{
    self as pb, auth_client::AuthClient, cluster_client::ClusterClient, kv_client::KvClient, lease_client::LeaseClient,
    maintenance_client::MaintenanceClient, watch_client::WatchClient,
};
use tests::server::{etcd35_bin, tool_present};
use tests::spawned::{free_ports, single_member};
use tests::{Member, MemberConfig, ServerKind};
use tonic::transport::Channel;
use tonic::Code;

/// One byte over etcd's default `--max-request-bytes`.
const TOO_LARGE: usize = 1536 * 1024 + 1;
/// bcrypt of "secret" (cost 4), as a client would send it in `hashedPassword`.
const SECRET_HASH: &str = "$2b$04$abcdefghijklmnopqrstuu2r9OfJnfCsdneAXAGHnS4UpFFP8WIrW";
const NO_PASSWORD_TEXT: &str = "auth: authentication failed, password was given for no password user";

type Answer = (Code, String);

fn answer<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Answer {
    match result {
        Ok(_) => (Code::Ok, String::new()),
        Err(status) => (status.code(), status.message().to_string()),
    }
}

async fn channel(endpoint: &str) -> anyhow::Result<Channel> {
    Ok(Channel::from_shared(format!("http://{endpoint}"))?.connect().await?)
}

fn perm(key: Vec<u8>, range_end: &[u8]) -> Option<authpb::Permission> {
    Some(authpb::Permission { perm_type: 0, key, range_end: range_end.to_vec() })
}

/// The cases etcd 3.5.1 answers as 3.6 does, with the answer both give.
async fn shared_cases(endpoint: &str) -> anyhow::Result<Vec<(&'static str, Answer, Answer)>> {
    let channel = channel(endpoint).await?;
    let (mut kv, mut auth) = (KvClient::new(channel.clone()), AuthClient::new(channel.clone()));
    let grant = |name: &str, perm| pb::AuthRoleGrantPermissionRequest { name: name.into(), perm };
    let change = |name: &str, hashed_password: &str| pb::AuthUserChangePasswordRequest {
        name: name.into(),
        hashed_password: hashed_password.into(),
        ..Default::default()
    };
    let invalid = |text: &str| (Code::InvalidArgument, text.to_string());
    let mut out = Vec::new();

    let empty_key = pb::RangeRequest { sort_target: 9, ..Default::default() };
    out.push((
        "empty key before sort options",
        answer(kv.range(empty_key).await),
        invalid("etcdserver: key is not provided"),
    ));
    out.push((
        "no permission",
        answer(auth.role_grant_permission(grant("nobody", None)).await),
        invalid("etcdserver: permission not given"),
    ));
    let huge = grant("nobody", perm(vec![b'k'; TOO_LARGE], b""));
    out.push((
        "too large before the role",
        answer(auth.role_grant_permission(huge).await),
        invalid("etcdserver: request is too large"),
    ));
    let huge_revoke =
        pb::AuthRoleRevokePermissionRequest { role: "nobody".into(), key: vec![b'k'; TOO_LARGE], range_end: vec![] };
    out.push((
        "revoke too large",
        answer(auth.role_revoke_permission(huge_revoke).await),
        invalid("etcdserver: request is too large"),
    ));

    // Unknown compare enums: etcd compares an unknown target as equal and lets an unknown result hold.
    let compare =
        |target: i32, result: i32| pb::Compare { key: b"missing".to_vec(), target, result, ..Default::default() };
    for (target, result) in [(9, 0), (1, 7), (0, -3)] {
        let txn = pb::TxnRequest { compare: vec![compare(target, result)], ..Default::default() };
        let succeeded = kv.txn(txn).await.map(|r| r.into_inner().succeeded);
        out.push(("compare with unknown enums", (Code::Ok, format!("{succeeded:?}")), (Code::Ok, "Ok(true)".into())));
    }
    // A txn with a nested txn goes through the log even when it only reads, and meets its size limit.
    let huge_compare = pb::Compare { key: vec![b'k'; TOO_LARGE], ..Default::default() };
    let nested = pb::TxnRequest { compare: vec![huge_compare], ..Default::default() };
    let outer = pb::TxnRequest {
        success: vec![pb::RequestOp { request: Some(pb::request_op::Request::RequestTxn(nested)) }],
        ..Default::default()
    };
    out.push((
        "nested read-only txn too large",
        answer(kv.txn(outer).await),
        invalid("etcdserver: request is too large"),
    ));

    // The size limit holds for what is proposed: a client's hash is dropped for the server's own, and
    // auth reads go through the log too.
    let huge_hash = pb::AuthUserAddRequest {
        name: "big".into(),
        password: "pw".into(),
        hashed_password: vec![b'x'; TOO_LARGE],
        ..Default::default()
    };
    out.push(("user add, a huge hash dropped", answer(auth.user_add(huge_hash).await), (Code::Ok, String::new())));
    // A user without a password is proposed as sent, password included.
    let huge_unused = pb::AuthUserAddRequest {
        name: "nopw".into(),
        password: vec![b'x'; TOO_LARGE],
        options: Some(authpb::UserAddOptions { no_password: true }),
        ..Default::default()
    };
    out.push((
        "user add without password, too large",
        answer(auth.user_add(huge_unused).await),
        invalid("etcdserver: request is too large"),
    ));
    let huge_get = pb::AuthUserGetRequest { name: vec![b'x'; TOO_LARGE] };
    out.push((
        "user get too large",
        answer(auth.user_get(huge_get).await),
        invalid("etcdserver: request is too large"),
    ));
    // A lease grant meets a raised CORRUPT alarm before its TTL is checked (both at apply).
    let mut maintenance = MaintenanceClient::new(channel.clone());
    let corrupt = |action: i32| pb::AlarmRequest { action, member_id: 1, alarm: pb::AlarmType::Corrupt as i32 };
    maintenance.alarm(corrupt(1)).await?;
    let too_long = pb::LeaseGrantRequest { ttl: i64::MAX, id: 0 };
    let data_loss = (Code::DataLoss, "etcdserver: corrupt cluster".to_string());
    out.push((
        "lease TTL under a corrupt alarm",
        answer(LeaseClient::new(channel.clone()).lease_grant(too_long.clone()).await),
        data_loss,
    ));
    maintenance.alarm(corrupt(2)).await?;
    let ttl_large = (Code::OutOfRange, "etcdserver: too large lease TTL".to_string());
    out.push(("lease TTL", answer(LeaseClient::new(channel.clone()).lease_grant(too_long).await), ttl_large));

    let add = pb::AuthUserAddRequest { name: "u1".into(), password: "pw".into(), ..Default::default() };
    out.push(("user add", answer(auth.user_add(add).await), (Code::Ok, String::new())));
    let not_found = (Code::FailedPrecondition, "etcdserver: user name not found".to_string());
    out.push((
        "unknown user first",
        answer(auth.user_change_password(change("nobody", "not base64!")).await),
        not_found,
    ));
    let not_base64 = answer(auth.user_change_password(change("u1", "not base64!")).await);
    out.push(("hash not base64", not_base64, (Code::Unknown, NO_PASSWORD_TEXT.to_string())));
    let hashed = base64_encode(SECRET_HASH.as_bytes());
    out.push((
        "a client's own hash",
        answer(auth.user_change_password(change("u1", &hashed)).await),
        (Code::Ok, String::new()),
    ));

    // Names are bytes to etcd (Go takes any bytes in a proto3 string): users and roles whose names are
    // not UTF-8 are created, granted, listed and log in.
    let (odd_user, odd_role) = (b"u\xff".to_vec(), b"r\xfe\x80".to_vec());
    let add = pb::AuthUserAddRequest { name: odd_user.clone(), password: b"p\xff".to_vec(), ..Default::default() };
    out.push(("user add, name not UTF-8", answer(auth.user_add(add).await), (Code::Ok, String::new())));
    let role = pb::AuthRoleAddRequest { name: odd_role.clone() };
    out.push(("role add, name not UTF-8", answer(auth.role_add(role).await), (Code::Ok, String::new())));
    let grant_role = pb::AuthUserGrantRoleRequest { user: odd_user.clone(), role: odd_role.clone() };
    out.push(("grant, names not UTF-8", answer(auth.user_grant_role(grant_role).await), (Code::Ok, String::new())));
    let roles = auth.user_get(pb::AuthUserGetRequest { name: odd_user.clone() }).await.map(|r| r.into_inner().roles);
    out.push((
        "user get, name not UTF-8",
        (Code::Ok, format!("{roles:?}")),
        (Code::Ok, format!("{:?}", Ok::<_, ()>(vec![odd_role.clone()]))),
    ));
    let users = auth.user_list(pb::AuthUserListRequest {}).await.map(|r| r.into_inner().users.contains(&odd_user));
    out.push(("user list, name not UTF-8", (Code::Ok, format!("{users:?}")), (Code::Ok, "Ok(true)".to_string())));
    let unknown = pb::AuthRoleGetRequest { role: b"\xff".to_vec() };
    let role_not_found = (Code::FailedPrecondition, "etcdserver: role name not found".to_string());
    out.push(("role get, unknown name not UTF-8", answer(auth.role_get(unknown).await), role_not_found));

    // The hash the client sent is the user's password hash: "secret" logs in once auth is on.
    let root = pb::AuthUserAddRequest { name: "root".into(), password: "rootpw".into(), ..Default::default() };
    auth.user_add(root).await?;
    auth.user_grant_role(pb::AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() }).await?;
    auth.auth_enable(pb::AuthEnableRequest {}).await?;
    let login = pb::AuthenticateRequest { name: "u1".into(), password: "secret".into() };
    let token = auth.authenticate(login.clone()).await.map(|r| r.into_inner().token);
    out.push(("login with the client's hash", answer(auth.authenticate(login).await), (Code::Ok, String::new())));
    let odd_login = pb::AuthenticateRequest { name: odd_user.clone(), password: b"p\xff".to_vec() };
    let odd_token = auth.authenticate(odd_login).await.map(|r| r.into_inner().token);
    out.push((
        "login, name and password not UTF-8",
        answer(odd_token.clone().map(tonic::Response::new)),
        (Code::Ok, String::new()),
    ));
    let put = pb::PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), ..Default::default() };
    let odd_put = kv.put(with_token(&odd_token.unwrap_or_default(), put)).await;
    let denied = (Code::PermissionDenied, "etcdserver: permission denied".to_string());
    out.push(("put as a user whose name is not UTF-8", answer(odd_put), denied));

    // AuthStatus needs root once auth is on; a token must be valid even where no permission is needed.
    let empty = (Code::InvalidArgument, "etcdserver: user name is empty".to_string());
    out.push(("auth status without a token", answer(auth.auth_status(pb::AuthStatusRequest {}).await), empty));
    let token = token.unwrap_or_default();
    let denied = (Code::PermissionDenied, "etcdserver: permission denied".to_string());
    out.push((
        "auth status as a user",
        answer(auth.auth_status(with_token(&token, pb::AuthStatusRequest {})).await),
        denied,
    ));
    let mut lease = LeaseClient::new(channel.clone());
    let grant = pb::LeaseGrantRequest { ttl: 600, id: 0 };
    let invalid_token = (Code::Unauthenticated, "etcdserver: invalid auth token".to_string());
    let mut maintenance = MaintenanceClient::new(channel.clone());
    let list = pb::AlarmRequest::default();
    out.push((
        "alarm list with a bad token",
        answer(maintenance.alarm(with_token("no-such-token", list)).await),
        invalid_token.clone(),
    ));
    out.push((
        "lease grant with a bad token",
        answer(lease.lease_grant(with_token("no-such-token", grant)).await),
        invalid_token,
    ));
    Ok(out)
}

/// Standard base64, as Go's `base64.StdEncoding` that etcd decodes `hashedPassword` with.
fn base64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `request` carrying `token` as etcd's clients send it.
fn with_token<T>(token: &str, request: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(request);
    request.metadata_mut().insert("token", token.parse().expect("an ASCII token"));
    request
}

fn check(cases: &[(&str, Answer, Answer)], server: &str) {
    for (name, got, want) in cases {
        assert_eq!(got, want, "{server}: {name}");
    }
}

#[tokio::test]
async fn odd_requests_get_etcds_answers_on_ours_and_on_real_etcd_35() -> anyhow::Result<()> {
    let ours = Member::start_with(MemberConfig { kind: ServerKind::Ours, ..MemberConfig::default() }).await?;
    check(&shared_cases(&ours.endpoint()).await?, "ours");
    let etcd = etcd35_bin("etcd");
    if tool_present(&etcd) {
        let dir = tempfile::tempdir()?;
        let ports: [u16; 2] = free_ports(2)?.try_into().map_err(|_| anyhow::anyhow!("two ports"))?;
        let (_etcd, endpoint) = single_member(&etcd, dir.path(), &dir.path().join("data"), ports).await?;
        check(&shared_cases(&endpoint).await?, "etcd 3.5.1");
    }
    Ok(())
}

#[tokio::test]
async fn unknown_sort_options_and_bad_permission_ranges_get_etcd_36s_answers() -> anyhow::Result<()> {
    let ours = Member::start_with(MemberConfig { kind: ServerKind::Ours, ..MemberConfig::default() }).await?;
    let channel = channel(&ours.endpoint()).await?;
    let (mut kv, mut auth) = (KvClient::new(channel.clone()), AuthClient::new(channel.clone()));
    let sort = (Code::InvalidArgument, "etcdserver: invalid sort option".to_string());
    for (order, target) in [(0, 7), (-1, 0), (3, 0), (0, -5)] {
        let range =
            pb::RangeRequest { key: b"k".to_vec(), sort_order: order, sort_target: target, ..Default::default() };
        assert_eq!(answer(kv.range(range.clone()).await), sort, "range {order} {target}");
        // Inside a txn, nested once, and checked before any revision check.
        let op = pb::RequestOp {
            request: Some(pb::request_op::Request::RequestRange(pb::RangeRequest { revision: 1 << 40, ..range })),
        };
        let inner = pb::TxnRequest { success: vec![op], ..Default::default() };
        let outer = pb::TxnRequest {
            failure: vec![pb::RequestOp { request: Some(pb::request_op::Request::RequestTxn(inner)) }],
            ..Default::default()
        };
        assert_eq!(answer(kv.txn(outer).await), sort, "txn {order} {target}");
    }
    auth.role_add(pb::AuthRoleAddRequest { name: "r".into() }).await?;
    let invalid = (Code::InvalidArgument, "etcdserver: invalid auth management".to_string());
    for (key, end) in [(&b""[..], &b""[..]), (b"b", b"a"), (b"a", b"a")] {
        let req = pb::AuthRoleGrantPermissionRequest { name: "r".into(), perm: perm(key.to_vec(), end) };
        assert_eq!(answer(auth.role_grant_permission(req).await), invalid, "{key:?}..{end:?}");
    }
    let from_key = pb::AuthRoleGrantPermissionRequest { name: "r".into(), perm: perm(b"a".to_vec(), &[0]) };
    assert_eq!(answer(auth.role_grant_permission(from_key).await), (Code::Ok, String::new()));
    let role = auth.role_get(pb::AuthRoleGetRequest { role: "r".into() }).await?.into_inner();
    assert_eq!(role.perm.len(), 1, "only the valid range was granted");

    // A watch from a negative revision is cancelled as compacted, before anything else (3.6).
    use tonic::codegen::tokio_stream::{self, StreamExt};
    let create = pb::WatchCreateRequest { key: b"k".to_vec(), start_revision: -5, ..Default::default() };
    let request = pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) };
    let requests = tokio_stream::iter(vec![request]).chain(tokio_stream::pending());
    let mut watch = WatchClient::new(channel.clone());
    let first = watch.watch(requests).await?.into_inner().message().await?.context("a first response")?;
    assert_eq!(
        (first.created, first.canceled, first.watch_id, first.cancel_reason.as_str()),
        (true, true, -1, "etcdserver: mvcc: required revision has been compacted")
    );
    Ok(())
}

/// etcd 3.6.14's auth hardening (etcd-io/etcd 7f73a57b8, c99cf0c39, 576a6a00c, 633de82d0, 6643f8060): with
/// auth on, every request names a user, compaction and maintenance need root and are refused with mapped
/// errors, lease keys and txn puts are checked, and a single-key grant does not open a from-key watch.
#[tokio::test]
async fn auth_hardening_of_etcd_3614() -> anyhow::Result<()> {
    let ours = Member::start_with(MemberConfig { kind: ServerKind::Ours, ..MemberConfig::default() }).await?;
    let channel = channel(&ours.endpoint()).await?;
    let (mut kv, mut auth) = (KvClient::new(channel.clone()), AuthClient::new(channel.clone()));
    let (mut lease, mut maintenance) = (LeaseClient::new(channel.clone()), MaintenanceClient::new(channel.clone()));
    let mut cluster = ClusterClient::new(channel.clone());
    for (name, password) in [("root", "rootpw"), ("u", "upw")] {
        let add = pb::AuthUserAddRequest { name: name.into(), password: password.into(), ..Default::default() };
        auth.user_add(add).await?;
    }
    auth.user_grant_role(pb::AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() }).await?;
    auth.role_add(pb::AuthRoleAddRequest { name: "one-key".into() }).await?;
    // Read and write on "foo" only.
    let grant = pb::AuthRoleGrantPermissionRequest {
        name: "one-key".into(),
        perm: Some(authpb::Permission { perm_type: 2, key: b"foo".to_vec(), range_end: vec![] }),
    };
    auth.role_grant_permission(grant).await?;
    auth.user_grant_role(pb::AuthUserGrantRoleRequest { user: "u".into(), role: "one-key".into() }).await?;
    auth.auth_enable(pb::AuthEnableRequest {}).await?;
    let login = |name: &str, password: &str| pb::AuthenticateRequest { name: name.into(), password: password.into() };
    let root = auth.authenticate(login("root", "rootpw")).await?.into_inner().token;
    let user = auth.authenticate(login("u", "upw")).await?.into_inner().token;

    let empty = (Code::InvalidArgument, "etcdserver: user name is empty".to_string());
    let denied = (Code::PermissionDenied, "etcdserver: permission denied".to_string());
    let ok = (Code::Ok, String::new());
    assert_eq!(answer(maintenance.status(pb::StatusRequest {}).await), empty, "status without a user");
    assert_eq!(answer(maintenance.status(with_token(&user, pb::StatusRequest {})).await), ok, "status as a user");
    assert_eq!(answer(cluster.member_list(pb::MemberListRequest::default()).await), empty, "member list");
    assert_eq!(answer(lease.lease_grant(pb::LeaseGrantRequest { ttl: 600, id: 0 }).await), empty, "lease grant");
    let compact = pb::CompactionRequest { revision: 1, physical: false };
    assert_eq!(answer(kv.compact(with_token(&user, compact)).await), denied, "compaction as a user");
    let defrag = with_token(&user, pb::DefragmentRequest {});
    assert_eq!(answer(maintenance.defragment(defrag).await), denied, "defragment, mapped");
    // etcd 3.6's bcrypt refuses passwords past 72 bytes (3.5's hashed the first 72), before anything else.
    let long = pb::AuthUserAddRequest { name: "long".into(), password: vec![b'p'; 73], ..Default::default() };
    let too_long = (Code::Unknown, "bcrypt: password length exceeds 72 bytes".to_string());
    assert_eq!(answer(auth.user_add(with_token(&root, long)).await), too_long, "a 73-byte password");
    let odd_downgrade = with_token(&root, pb::DowngradeRequest { action: 9, version: "3.5".into() });
    let unknown_method = (Code::Unknown, "etcdserver: unknown method".to_string());
    assert_eq!(answer(maintenance.downgrade(odd_downgrade).await), unknown_method, "an unknown downgrade action");
    let odd_alarm = pb::AlarmRequest { action: i32::MAX, member_id: 0, alarm: 0 };
    assert_eq!(answer(maintenance.alarm(with_token(&user, odd_alarm)).await), denied, "an unknown alarm action");

    // Root's lease carries "bar", which the user may not write: the user may not keep it alive, list
    // the leases, read its keys, or attach a key to it inside a txn; nor read "bar" through prev_kv.
    let id = lease.lease_grant(with_token(&root, pb::LeaseGrantRequest { ttl: 600, id: 0 })).await?.into_inner().id;
    let put = |key: &str, lease: i64, prev_kv: bool| pb::PutRequest {
        key: key.into(),
        value: b"v".to_vec(),
        lease,
        prev_kv,
        ..Default::default()
    };
    kv.put(with_token(&root, put("bar", id, false))).await?;
    let ttl = pb::LeaseTimeToLiveRequest { id, keys: true };
    assert_eq!(answer(lease.lease_time_to_live(with_token(&user, ttl)).await), denied, "time to live with keys");
    assert_eq!(answer(lease.lease_leases(with_token(&user, pb::LeaseLeasesRequest {})).await), denied, "leases");
    let txn_put = |put: pb::PutRequest| pb::TxnRequest {
        success: vec![pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put)) }],
        ..Default::default()
    };
    assert_eq!(answer(kv.txn(with_token(&user, txn_put(put("foo", id, false)))).await), denied, "txn lease");
    assert_eq!(answer(kv.txn(with_token(&user, txn_put(put("foo", 0, false)))).await), ok, "txn put");
    use tonic::codegen::tokio_stream::{self, StreamExt};
    let renew = tokio_stream::iter(vec![pb::LeaseKeepAliveRequest { id }]);
    let mut renewals = lease.lease_keep_alive(with_token(&user, renew)).await?.into_inner();
    let refused = renewals.message().await.map_err(|status| (status.code(), status.message().to_string()));
    assert_eq!(refused.map(|_| ()), Err(denied.clone()), "keep-alive");

    // A from-key watch ("foo" and everything after) is more than a grant of "foo" alone.
    let create = pb::WatchCreateRequest { key: b"foo".to_vec(), range_end: vec![0], ..Default::default() };
    let request = pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) };
    let requests = tokio_stream::iter(vec![request]).chain(tokio_stream::pending());
    let mut watch = WatchClient::new(channel.clone());
    let first = watch.watch(with_token(&user, requests)).await?.into_inner().message().await?.context("a response")?;
    assert!(first.canceled, "{first:?}");
    Ok(())
}
