//! kvctl against etcdctl 3.4 for what every verb shares: command-line parse errors (cobra's
//! texts and exit codes), `ETCDCTL_*` environment variables, TLS flags and `--user` logins.
//!
//! TLS and auth run against real etcd only: our server gets TLS and auth with their own issues.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{compare, error_lines, etcd_tools_present, kvctl, steps, Server, ETCDCTL};
use tests::tls::Certs;
use tests::ServerKind;

/// Parse errors: etcdctl prints usage on stdout between two `Error:` lines. Our usage text is
/// clap's, so only the `Error:` lines and the exit code are compared.
const BAD_COMMAND_LINES: &[&[&str]] = &[
    &["get", "--foo"],
    &["foo"],
    &["get", "--limit", "abc"],
    &["get", "--limit=99999999999999999999", "a"],
    &["--dial-timeout=x", "get", "a"],
    &["--command-timeout=5", "get", "a"],
    &["-w", "yaml", "get", "a"],
    &["get", "--rev"],
    &["get", "--prefix=maybe", "a"],
    &["get", "-x"],
    &["--cacert=", "get", "a"],
    &["--cacert=/nonexistent/ca.pem", "get", "a"],
];

#[test]
fn parse_errors_match_etcdctl() {
    if !etcd_tools_present() {
        return;
    }
    let mut mismatches = Vec::new();
    for args in BAD_COMMAND_LINES {
        // Nothing listens on port 1: none of these may get as far as dialing.
        let want = common::run(ETCDCTL, "127.0.0.1:1", args, None);
        let got = common::run(kvctl(), "127.0.0.1:1", args, None);
        let want_view = (error_lines(&want.stderr), want.status.code());
        let got_view = (error_lines(&got.stderr), got.status.code());
        if want_view != got_view {
            mismatches.push(format!("{args:?}\n  etcdctl: {want_view:?}\n  kvctl:   {got_view:?}"));
        }
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}

/// Go-style boolean values and `ETCDCTL_*` variables, on a live server.
const FLAG_FORMS: &[&[&str]] = &[
    &["put", "k1", "v1"],
    &["put", "k2", "v2"],
    &["get", "k", "--prefix=true"],
    &["get", "k1", "--prefix=false"],
    &["get", "k", "--prefix=1", "--keys-only=T"],
    &["get", "k", "--prefix", "--hex=true"],
    &["--insecure-transport=true", "get", "k1"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_forms_match_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare(ServerKind::Etcd, &steps(FLAG_FORMS)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_forms_match_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare(ServerKind::Ours, &steps(FLAG_FORMS)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_variables_are_read_like_etcdctl() {
    if !etcd_tools_present() {
        return;
    }
    let server = Server::start(ServerKind::Ours).await;
    let put = common::run(kvctl(), &server.endpoint(), &["put", "env-key", "env-value"], None);
    assert!(put.status.success(), "put: {put:?}");
    let env_run = |program: &str, env: &[(&str, String)], args: &[&str]| {
        let mut command = Command::new(program);
        command.env("ETCDCTL_API", "3").env("KVCTL_ETCDCTL_VERSION", "3.4").env_remove("ETCDCTL_ENDPOINTS").args(args);
        for (name, value) in env {
            command.env(name, value);
        }
        command.stdin(Stdio::null()).output().expect("run client")
    };
    let cases: Vec<(Vec<(&str, String)>, Vec<&str>)> = vec![
        (vec![("ETCDCTL_ENDPOINTS", server.endpoint())], vec!["get", "env-key"]),
        (
            vec![("ETCDCTL_ENDPOINTS", server.endpoint()), ("ETCDCTL_WRITE_OUT", "fields".into())],
            vec!["get", "env-key"],
        ),
        (vec![("ETCDCTL_ENDPOINTS", server.endpoint()), ("ETCDCTL_HEX", "true".into())], vec!["get", "env-key"]),
        (
            vec![
                ("ETCDCTL_ENDPOINTS", format!("127.0.0.1:1,{}", server.endpoint())),
                ("ETCDCTL_DIAL_TIMEOUT", "1s".into()),
            ],
            vec!["get", "env-key", "--print-value-only"],
        ),
        (vec![("ETCDCTL_ENDPOINTS", server.endpoint()), ("ETCDCTL_WRITE_OUT", "yaml".into())], vec!["get", "env-key"]),
    ];
    for (env, args) in cases {
        let want = env_run(ETCDCTL, &env, &args);
        let got = env_run(kvctl(), &env, &args);
        assert_eq!(
            (server.normalize(&String::from_utf8_lossy(&got.stdout)), error_lines(&got.stderr), got.status.code()),
            (server.normalize(&String::from_utf8_lossy(&want.stdout)), error_lines(&want.stderr), want.status.code()),
            "env {env:?} args {args:?}"
        );
    }
}

/// Real etcd with client TLS (`--client-cert-auth`), killed on drop.
struct TlsEtcd {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn start_tls_etcd(certs: &Certs) -> TlsEtcd {
    let data = tempfile::tempdir().expect("temp dir");
    let (port, peer) = (free_port(), free_port());
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new(tests::server::etcd_bin())
        .arg(format!("--data-dir={}", data.path().join("data").display()))
        .arg(format!("--listen-client-urls=https://127.0.0.1:{port}"))
        .arg(format!("--advertise-client-urls=https://127.0.0.1:{port}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=default={peer_url}"))
        .arg(format!("--cert-file={}", certs.path("member.crt")))
        .arg(format!("--key-file={}", certs.path("member.key")))
        .arg(format!("--trusted-ca-file={}", certs.path("ca.crt")))
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn etcd");
    let etcd = TlsEtcd { child, port, _data: data };
    let deadline = Instant::now() + Duration::from_secs(20);
    let client_flags = tls_flags(certs, true);
    loop {
        let args: Vec<&str> = client_flags.iter().map(String::as_str).chain(["get", "probe"]).collect();
        if run_tls(ETCDCTL, &etcd, &args).status.success() {
            return etcd;
        }
        assert!(Instant::now() < deadline, "TLS etcd did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tls_flags(certs: &Certs, client_cert: bool) -> Vec<String> {
    let mut flags = vec![format!("--cacert={}", certs.path("ca.crt"))];
    if client_cert {
        flags.push(format!("--cert={}", certs.path("client.crt")));
        flags.push(format!("--key={}", certs.path("client.key")));
    }
    flags
}

fn run_tls(program: &str, etcd: &TlsEtcd, args: &[&str]) -> Output {
    let endpoint = format!("https://127.0.0.1:{}", etcd.port);
    let args: Vec<String> = args.iter().map(|a| a.replace("<https>", &endpoint)).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::run(program, &endpoint, &args, None)
}

#[test]
fn tls_flags_work_like_etcdctl_on_real_etcd() {
    if !etcd_tools_present() {
        return;
    }
    let certs = Certs::make().expect("openssl makes the test certificates");
    let etcd = start_tls_etcd(&certs);
    let full = tls_flags(&certs, true);
    let (cert, key, ca) = (&full[1], &full[2], &full[0]);
    let no_scheme = format!("--endpoints=127.0.0.1:{}", etcd.port);
    let cases: Vec<Vec<&str>> = vec![
        vec![ca, cert, key, "put", "tls-key", "tls-value"],
        vec![ca, cert, key, "get", "tls-key", "-w", "json"],
        // No scheme: TLS because TLS files are given.
        vec![ca, cert, key, &no_scheme, "get", "tls-key"],
        vec!["--insecure-skip-tls-verify", cert, key, "get", "tls-key"],
        vec![&no_scheme, "--insecure-transport=false", "--insecure-skip-tls-verify", cert, key, "get", "tls-key"],
        // The server's certificate is not signed by a known CA: refused.
        vec!["--command-timeout=2s", cert, key, "get", "tls-key"],
    ];
    for args in cases {
        let want = run_tls(ETCDCTL, &etcd, &args);
        let got = run_tls(kvctl(), &etcd, &args);
        assert_eq!(
            (String::from_utf8_lossy(&got.stdout), error_lines(&got.stderr), got.status.code()),
            (String::from_utf8_lossy(&want.stdout), error_lines(&want.stderr), want.status.code()),
            "args {args:?}"
        );
    }
    // Without a client certificate the server refuses the client: both fail (etcdctl keeps
    // retrying until its deadline; kvctl sees the refusal at once, so only the exit code matches).
    let refused = vec![ca.as_str(), "--command-timeout=2s", "get", "tls-key"];
    let (want, got) = (run_tls(ETCDCTL, &etcd, &refused), run_tls(kvctl(), &etcd, &refused));
    assert_eq!(want.status.code(), Some(1));
    assert_eq!(got.status.code(), Some(1), "kvctl without client cert: {got:?}");
    assert!(got.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_login_works_like_etcdctl_on_real_etcd() {
    if !etcd_tools_present() {
        return;
    }
    let server = Server::start(ServerKind::Etcd).await;
    let ep = server.endpoint();
    let ctl = |args: &[&str]| common::run(ETCDCTL, &ep, args, None);
    // Before auth is on, a login is ignored by etcd's clients.
    let before = ["--user=nobody:x", "put", "auth-key", "v"];
    assert_eq!(common::run(kvctl(), &ep, &before, None).status.code(), ctl(&before).status.code());
    for setup in [
        &["user", "add", "root:rootpw"][..],
        &["role", "add", "root"],
        &["user", "grant-role", "root", "root"],
        &["user", "add", "reader:readerpw"],
        &["role", "add", "readers"],
        &["role", "grant-permission", "readers", "read", "auth-key"],
        &["user", "grant-role", "reader", "readers"],
        &["auth", "enable"],
    ] {
        assert!(ctl(setup).status.success(), "{setup:?}: {:?}", ctl(setup));
    }
    let cases: &[&[&str]] = &[
        &["--user=root:rootpw", "get", "auth-key"],
        &["--user=root", "--password=rootpw", "get", "auth-key"],
        &["--user=root:wrong", "get", "auth-key"],
        &["--user=nobody:x", "get", "auth-key"],
        &["get", "auth-key"],
        &["--user=reader:readerpw", "get", "auth-key", "-w", "json"],
        &["--user=reader:readerpw", "put", "auth-key", "new"],
        &["--user=reader:readerpw", "get", "other"],
    ];
    let mut mismatches = Vec::new();
    for args in cases {
        let (want, got) = (ctl(args), common::run(kvctl(), &ep, args, None));
        let (want_view, got_view) = (common::view(&server, &want), common::view(&server, &got));
        if want_view != got_view {
            mismatches.push(format!("{args:?}\n  etcdctl: {want_view:?}\n  kvctl:   {got_view:?}"));
        }
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}
