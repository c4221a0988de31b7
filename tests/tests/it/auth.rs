//! Auth with etcdctl and the etcd-client crate: users, roles, READ/WRITE/READWRITE grants, `--user`
//! access allowed and denied on every member, the admin rules around root, and auth state surviving a
//! restart. Every expectation is what etcd 3.4 does (`KV_TEST_SERVER=etcd` runs them against it).

use anyhow::Context;
use etcd_client::{Client, ConnectOptions, GetOptions, Permission, WatchOptions};
use tests::{assert_grpc_error, Cluster, ClusterMember, CtlOutput};
use tonic::Code;

const DENIED: &str = "Error: etcdserver: permission denied";
const NO_USER: &str = "Error: etcdserver: user name is empty";
const BAD_LOGIN: &str = "Error: etcdserver: authentication failed, invalid user ID or password";
const ROOT: &str = "root:rootpw";

async fn ctl(member: &ClusterMember, args: &[&str]) -> anyhow::Result<String> {
    member.etcdctl(args).await?.ok().with_context(|| format!("etcdctl {args:?}"))
}

/// Runs etcdctl expecting a refused request (exit code 1); returns its `Error:` line.
async fn ctl_error(member: &ClusterMember, args: &[&str]) -> anyhow::Result<String> {
    ctl_failure(member, args, 1).await
}

/// Runs etcdctl expecting a refused login, which etcdctl reports as a failed connection (exit code 2).
async fn ctl_login_error(member: &ClusterMember, args: &[&str]) -> anyhow::Result<String> {
    ctl_failure(member, args, 2).await
}

async fn ctl_failure(member: &ClusterMember, args: &[&str], code: i32) -> anyhow::Result<String> {
    let out: CtlOutput = member.etcdctl(args).await?;
    assert_eq!((out.code, out.stdout.as_str()), (Some(code), ""), "etcdctl {args:?}: {out:?}");
    Ok(out.error_line().with_context(|| format!("etcdctl {args:?} printed no Error line: {out:?}"))?.to_owned())
}

/// `args` run as `user` (`name:password`).
fn as_user<'a>(user: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--user", user];
    all.extend_from_slice(args);
    all
}

/// Root, and a role `app-ro` reading the prefix `/app/` granted to `reader`; auth enabled.
async fn read_only_app_user(member: &ClusterMember) -> anyhow::Result<()> {
    for (args, printed) in [
        (&["user", "add", ROOT][..], "User root created\n"),
        (&["role", "add", "app-ro"], "Role app-ro created\n"),
        (&["role", "grant-permission", "app-ro", "read", "/app/", "--prefix"], "Role app-ro updated\n"),
        (&["user", "add", "reader:readpw"], "User reader created\n"),
        (&["user", "grant-role", "reader", "app-ro"], "Role app-ro is granted to user reader\n"),
        (&["put", "/app/a", "1"], "OK\n"),
        (&["put", "/secret", "s"], "OK\n"),
        (&["auth", "enable"], "Authentication Enabled\n"),
    ] {
        assert_eq!(ctl(member, args).await?, printed, "etcdctl {args:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_read_only_user_of_app_reads_it_and_nothing_else_and_cannot_write_on_any_member() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    read_only_app_user(cluster.member(0)).await?;
    let reader = "reader:readpw";
    for member in cluster.members() {
        assert_eq!(ctl(member, &as_user(reader, &["get", "/app/a"])).await?, "/app/a\n1\n", "{}", member.name());
        assert_eq!(ctl(member, &as_user(reader, &["get", "/app/", "--prefix", "--keys-only"])).await?, "/app/a\n\n");
        assert_eq!(
            ctl(member, &as_user(reader, &["get", "/app/", "--prefix", "--consistency=s"])).await?,
            "/app/a\n1\n"
        );
        for denied in [
            &["get", "/secret"][..],
            &["get", "", "--from-key"],
            &["get", "/app", "--prefix"],
            &["put", "/app/a", "2"],
            &["put", "/app/new", "x"],
            &["del", "/app/a"],
            &["user", "list"],
            &["role", "add", "mine"],
            &["auth", "disable"],
        ] {
            assert_eq!(ctl_error(member, &as_user(reader, denied)).await?, DENIED, "reader: {denied:?}");
        }
        assert_eq!(ctl_error(member, &["get", "/app/a"]).await?, NO_USER);
        assert_eq!(ctl_error(member, &["put", "/app/a", "3"]).await?, NO_USER);
        assert_eq!(ctl_login_error(member, &as_user("reader:wrong", &["get", "/app/a"])).await?, BAD_LOGIN);
        assert_eq!(ctl_login_error(member, &as_user("nobody:x", &["get", "/app/a"])).await?, BAD_LOGIN);
    }
    // A txn is checked as a whole: a read of /app/ with a write elsewhere is refused.
    let txn = "value(\"/app/a\") = \"1\"\n\nput /app/a 9\n\n\n";
    let out = cluster.member(1).etcdctl_stdin(&as_user(reader, &["txn"]), txn).await?;
    assert_eq!(out.error_line(), Some(DENIED), "{out:?}");
    // A watch outside the grant is cancelled with etcd's reason; inside it, events arrive.
    let client = reader_client(cluster.member(2), "reader", "readpw").await?;
    let mut stream = client.watch_client().watch("/secret", None).await?;
    let created = stream.message().await?.context("watch ended")?;
    assert!(created.created() && created.canceled(), "{created:?}");
    assert_eq!(created.cancel_reason(), "rpc error: code = PermissionDenied desc = etcdserver: permission denied");
    stream.watch("/app/", Some(WatchOptions::new().with_prefix())).await?;
    assert!(stream.message().await?.context("watch ended")?.created());
    ctl(cluster.member(0), &as_user(ROOT, &["put", "/app/b", "2"])).await?;
    let event = stream.message().await?.context("watch ended")?;
    assert_eq!(event.events().first().and_then(|e| e.kv()).map(|kv| kv.key()), Some(&b"/app/b"[..]));
    // Root reads and writes everything.
    assert_eq!(ctl(cluster.member(1), &as_user(ROOT, &["put", "/secret", "t"])).await?, "OK\n");
    assert_eq!(ctl(cluster.member(2), &as_user(ROOT, &["get", "/secret", "--print-value-only"])).await?, "t\n");
    Ok(())
}

async fn reader_client(member: &ClusterMember, user: &str, password: &str) -> anyhow::Result<Client> {
    let options = ConnectOptions::new().with_user(user, password);
    Ok(Client::connect([member.endpoint()], Some(options)).await?)
}

#[tokio::test]
async fn write_only_readwrite_and_revoked_grants_and_the_root_rules() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let member = cluster.member(0);
    for args in [
        &["user", "add", ROOT][..],
        &["user", "add", "w:wpw"],
        &["user", "add", "rw:rwpw"],
        &["role", "add", "writer"],
        &["role", "add", "both"],
        &["role", "grant-permission", "writer", "write", "/logs/", "--prefix"],
        &["role", "grant-permission", "both", "readwrite", "/data", "/datb"],
        &["role", "grant-permission", "both", "read", "/cfg"],
        &["user", "grant-role", "w", "writer"],
        &["user", "grant-role", "rw", "both"],
        &["auth", "enable"],
    ] {
        ctl(member, args).await?;
    }
    // WRITE: put and delete, but no reads (a delete asking for the previous values reads them).
    assert_eq!(ctl(member, &as_user("w:wpw", &["put", "/logs/1", "x"])).await?, "OK\n");
    assert_eq!(ctl_error(member, &as_user("w:wpw", &["get", "/logs/1"])).await?, DENIED);
    assert_eq!(ctl_error(member, &as_user("w:wpw", &["put", "/logs/1", "y", "--prev-kv"])).await?, DENIED);
    assert_eq!(ctl(member, &as_user("w:wpw", &["del", "/logs/", "--prefix"])).await?, "1\n");
    assert_eq!(ctl_error(member, &as_user("w:wpw", &["put", "/other", "x"])).await?, DENIED);
    // READWRITE on a range, READ on one key.
    assert_eq!(ctl(member, &as_user("rw:rwpw", &["put", "/data/k", "v"])).await?, "OK\n");
    assert_eq!(ctl(member, &as_user("rw:rwpw", &["get", "/data", "/datb", "--print-value-only"])).await?, "v\n");
    assert_eq!(ctl(member, &as_user("rw:rwpw", &["get", "/cfg"])).await?, "");
    assert_eq!(ctl_error(member, &as_user("rw:rwpw", &["put", "/cfg", "x"])).await?, DENIED);
    assert_eq!(ctl_error(member, &as_user("rw:rwpw", &["get", "/cfg", "--prefix"])).await?, DENIED);
    // Revoking the grant takes effect for the next request.
    let revoked = ctl(member, &as_user(ROOT, &["role", "revoke-permission", "both", "/data", "/datb"])).await?;
    assert_eq!(revoked, "Permission of range [/data, /datb) is revoked from role both\n");
    assert_eq!(ctl_error(member, &as_user("rw:rwpw", &["get", "/data/k"])).await?, DENIED);
    // A new password replaces the old one.
    let changed =
        member.etcdctl_stdin(&as_user(ROOT, &["user", "passwd", "rw", "--interactive=false"]), "new\n").await?;
    assert_eq!(changed.ok()?, "Password updated\n");
    assert_eq!(ctl_login_error(member, &as_user("rw:rwpw", &["get", "/cfg"])).await?, BAD_LOGIN);
    assert_eq!(ctl(member, &as_user("rw:new", &["get", "/cfg"])).await?, "");
    // Root stays while auth is on; errors name what is wrong.
    let invalid = "Error: etcdserver: invalid auth management";
    assert_eq!(ctl_error(member, &as_user(ROOT, &["user", "delete", "root"])).await?, invalid);
    assert_eq!(ctl_error(member, &as_user(ROOT, &["user", "revoke-role", "root", "root"])).await?, invalid);
    assert_eq!(ctl_error(member, &as_user(ROOT, &["role", "delete", "root"])).await?, invalid);
    let exists = ctl_error(member, &as_user(ROOT, &["user", "add", "w:again"])).await?;
    assert_eq!(exists, "Error: etcdserver: user name already exists");
    let missing = ctl_error(member, &as_user(ROOT, &["role", "get", "nope"])).await?;
    assert_eq!(missing, "Error: etcdserver: role name not found");
    let missing = ctl_error(member, &as_user(ROOT, &["user", "grant-role", "nobody", "writer"])).await?;
    assert_eq!(missing, "Error: etcdserver: user name not found");
    let not_granted = ctl_error(member, &as_user(ROOT, &["user", "revoke-role", "w", "both"])).await?;
    assert_eq!(not_granted, "Error: etcdserver: role is not granted to the user");
    // Deleting a role takes it from its users.
    ctl(member, &as_user(ROOT, &["role", "delete", "writer"])).await?;
    assert_eq!(ctl(member, &as_user(ROOT, &["user", "get", "w"])).await?, "User: w\nRoles:\n");
    assert_eq!(ctl_error(member, &as_user("w:wpw", &["put", "/logs/2", "x"])).await?, DENIED);
    // Disabled, nobody needs a user.
    assert_eq!(ctl(member, &as_user(ROOT, &["auth", "disable"])).await?, "Authentication Disabled\n");
    assert_eq!(ctl(member, &["put", "/other", "x"]).await?, "OK\n");
    Ok(())
}

#[tokio::test]
async fn auth_state_and_logins_through_any_member_survive_a_restart() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    read_only_app_user(cluster.member(0)).await?;
    // The etcd-client crate: errors carry etcd's codes and texts.
    let mut client = reader_client(cluster.member(1), "reader", "readpw").await?;
    assert_eq!(client.get("/app/a", None).await?.kvs().len(), 1);
    assert_grpc_error(client.get("/secret", None).await, Code::PermissionDenied, "etcdserver: permission denied");
    assert_grpc_error(client.put("/app/a", "2", None).await, Code::PermissionDenied, "etcdserver: permission denied");
    let everything = GetOptions::new().with_all_keys();
    assert_grpc_error(client.get("", Some(everything)).await, Code::PermissionDenied, "etcdserver: permission denied");
    let options = ConnectOptions::new().with_user("reader", "wrong");
    let refused = Client::connect([cluster.member(2).endpoint()], Some(options)).await;
    let auth_failed = "etcdserver: authentication failed, invalid user ID or password";
    assert_grpc_error(refused.map(|_| ()), Code::InvalidArgument, auth_failed);

    // Grants made through one member apply on the others at once.
    let mut root = reader_client(cluster.member(2), "root", "rootpw").await?;
    root.role_grant_permission("app-ro", Permission::read("/secret")).await?;
    let mut client = reader_client(cluster.member(0), "reader", "readpw").await?;
    assert_eq!(client.get("/secret", None).await?.kvs().first().map(|kv| kv.value()), Some(&b"s"[..]));

    // Users, roles, grants and the enabled flag are on disk.
    cluster.set_credentials("root", "rootpw");
    for index in 0..3 {
        cluster.member_mut(index).kill9()?;
    }
    for index in 0..3 {
        cluster.member_mut(index).relaunch()?;
    }
    cluster.leader().await?;
    let member = cluster.member(1);
    assert_eq!(ctl_error(member, &["get", "/app/a"]).await?, NO_USER);
    assert_eq!(ctl(member, &as_user("reader:readpw", &["get", "/secret", "--print-value-only"])).await?, "s\n");
    assert_eq!(ctl_error(member, &as_user("reader:readpw", &["put", "/secret", "x"])).await?, DENIED);
    assert_eq!(ctl(member, &as_user(ROOT, &["user", "list"])).await?, "reader\nroot\n");
    Ok(())
}

#[tokio::test]
async fn the_gateway_authenticates_and_passes_the_token_from_the_authorization_header() -> anyhow::Result<()> {
    use tests::http::request_with;
    let cluster = Cluster::start(1).await?;
    let member = cluster.member(0);
    read_only_app_user(member).await?;
    let url = member.client_url();
    let login = r#"{"name":"reader","password":"readpw"}"#;
    let answer = request_with(&url, "POST", "/v3/auth/authenticate", Some(login), &[]).await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let json: serde_json::Value = serde_json::from_str(&answer.body)?;
    let token = json["token"].as_str().context("no token")?.to_owned();

    // base64 of "/app/a" and "/secret".
    let (app, secret) = (r#"{"key":"L2FwcC9h"}"#, r#"{"key":"L3NlY3JldA=="}"#);
    let auth = [("Authorization", token.as_str())];
    let read = request_with(&url, "POST", "/v3/kv/range", Some(app), &auth).await?;
    assert_eq!(read.status, 200, "{read:?}");
    let json: serde_json::Value = serde_json::from_str(&read.body)?;
    assert_eq!(json["kvs"][0]["value"], "MQ==", "{json}");
    let denied = request_with(&url, "POST", "/v3/kv/range", Some(secret), &auth).await?;
    assert_eq!(denied.status, 403, "{denied:?}");
    let json: serde_json::Value = serde_json::from_str(&denied.body)?;
    assert_eq!((json["message"].as_str(), json["code"].as_i64()), (Some("etcdserver: permission denied"), Some(7)));
    let anonymous = request_with(&url, "POST", "/v3/kv/range", Some(app), &[]).await?;
    assert_eq!(anonymous.status, 400, "{anonymous:?}");
    let wrong = request_with(&url, "POST", "/v3/kv/range", Some(app), &[("Authorization", "bogus.1")]).await?;
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let json: serde_json::Value = serde_json::from_str(&wrong.body)?;
    assert_eq!(json["message"], "etcdserver: invalid auth token", "{json}");
    Ok(())
}

/// etcd 3.5 checks the keys a lease holds before it tells them (3.4.23 does not): a lease's keys are
/// no way around a missing read permission. Ours follows 3.5, so this runs against ours only.
#[tokio::test]
async fn a_leases_keys_are_told_only_to_who_may_read_them() -> anyhow::Result<()> {
    if tests::ServerKind::from_env() == tests::ServerKind::Etcd {
        return Ok(());
    }
    let cluster = Cluster::start(1).await?;
    let member = cluster.member(0);
    read_only_app_user(member).await?;
    let mut root = reader_client(member, "root", "rootpw").await?;
    let secret = root.lease_grant(60, None).await?.id();
    root.put("/secret/k", "v", Some(etcd_client::PutOptions::new().with_lease(secret))).await?;
    let app = root.lease_grant(60, None).await?.id();
    root.put("/app/leased", "v", Some(etcd_client::PutOptions::new().with_lease(app))).await?;

    let mut reader = reader_client(member, "reader", "readpw").await?;
    let keys = etcd_client::LeaseTimeToLiveOptions::new().with_keys();
    let told = reader.lease_time_to_live(app, Some(keys.clone())).await?;
    assert_eq!(told.keys(), [b"/app/leased".to_vec()]);
    let refused = reader.lease_time_to_live(secret, Some(keys)).await;
    assert_grpc_error(refused, Code::PermissionDenied, "etcdserver: permission denied");
    Ok(())
}
