//! kvctl against etcdctl 3.4: the same script runs through both, each against its own fresh real
//! etcd (so both histories, and so all revisions, are identical), and stdout, the `Error:` line and
//! the exit code must match. Only the ids that differ between two clusters are normalized.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";

/// A real etcd on free ports with a temp data dir, killed on drop.
struct Etcd {
    child: Child,
    endpoint: String,
    peer: String,
    /// The member id in hex, as `member list` prints it.
    member_id: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    fn start() -> Etcd {
        let dir = tempfile::tempdir().expect("temp dir");
        let client = format!("http://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let child = Command::new(ETCD)
            .arg("--name=default")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn etcd");
        let mut etcd = Etcd { child, endpoint: client, peer, member_id: String::new(), _dir: dir };
        etcd.wait_ready();
        let status = run(ETCDCTL, &etcd.endpoint, &["endpoint", "status"]);
        let status = String::from_utf8_lossy(&status.stdout);
        etcd.member_id = status.split(", ").nth(1).expect("member id in endpoint status").to_string();
        etcd
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = run(ETCDCTL, &self.endpoint, &["get", "ready-probe"]);
            if out.status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "etcd at {} did not become ready", self.endpoint);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn run(program: &str, endpoint: &str, args: &[&str]) -> Output {
    Command::new(program)
        .env("ETCDCTL_API", "3")
        .env_remove("ETCDCTL_ENDPOINTS")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run client")
}

/// Replaces what differs between two clusters: this member's id and addresses, and the ids and
/// terms in json (`"cluster_id":`) and fields (`"ClusterID" : `) headers.
fn normalize(etcd: &Etcd, stdout: &str) -> String {
    let decimal_id = u64::from_str_radix(&etcd.member_id, 16).expect("hex member id").to_string();
    let mut text = stdout.to_string();
    let fields = [
        "\"cluster_id\":",
        "\"member_id\":",
        "\"raft_term\":",
        "\"ClusterID\" : ",
        "\"MemberID\" : ",
        "\"RaftTerm\" : ",
        // bbolt's file size depends on commit timing, not on the history.
        "\"dbSize\":",
        "\"dbSizeInUse\":",
        "\"DBSize\" : ",
    ];
    for field in fields {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(field) {
            let after = at + field.len();
            out.push_str(&rest[..after]);
            out.push('0');
            rest = rest[after..].trim_start_matches(|c: char| c.is_ascii_digit());
        }
        out.push_str(rest);
        text = out;
    }
    text.replace(&etcd.endpoint, "<client>")
        .replace(etcd.endpoint.trim_start_matches("http://"), "<client>")
        .replace(&etcd.peer, "<peer>")
        .replace(&etcd.member_id, "<id>")
        .replace(&decimal_id, "<id>")
}

fn error_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr).lines().filter(|l| l.starts_with("Error:")).map(str::to_string).collect()
}

const SCRIPT: &[&[&str]] = &[
    &["put", "foo", "bar"],
    &["put", "foo", "baz", "--prev-kv"],
    &["-w", "json", "put", "foo", "qux", "--prev-kv"],
    &["put", "k1", "v1"],
    &["put", "k2", "v2"],
    &["put", "k3", "v3"],
    &["get", "foo"],
    &["-w", "json", "get", "foo"],
    &["get", "k", "--prefix"],
    &["get", "k", "--prefix", "--keys-only"],
    &["get", "k", "--prefix", "--print-value-only"],
    &["get", "k", "--prefix", "--limit", "2", "-w", "json"],
    &["get", "k1", "k3"],
    &["get", "k", "--from-key"],
    &["get", "foo", "--rev", "2"],
    &["get", "k", "--prefix", "--order", "DESCEND", "--sort-by", "MODIFY"],
    &["get", "k", "--prefix", "--sort-by=VALUE", "--order=ASCEND", "-w", "json"],
    &["get", "foo", "--consistency", "s"],
    &["get", "foo", "--consistency", "x"],
    &["get", "--hex", "k1"],
    &["put", "odd", "a\x01\"\\é\t\u{2028}"],
    &["get", "odd"],
    &["-w", "json", "get", "odd"],
    &["-w", "fields", "get", "odd"],
    &["-w", "fields", "get", "k", "--prefix", "--limit", "1"],
    &["-w", "fields", "put", "odd", "x", "--prev-kv"],
    &["-w", "table", "get", "odd"],
    &["-w", "table", "put", "odd", "y"],
    &["get", "nope"],
    &["-w", "json", "get", "nope"],
    &["get"],
    &["get", "k", "--prefix", "--from-key"],
    &["put"],
    &["put", "k9", "v", "--lease", "zz"],
    &["del", "k", "--prefix", "--prev-kv"],
    &["-w", "json", "del", "foo", "--prev-kv"],
    &["-w", "json", "del", "absent"],
    &["-w", "fields", "del", "odd", "--prev-kv"],
    &["del"],
    &["compaction", "5"],
    &["get", "foo", "--rev", "5", "-w", "json"],
    &["get", "foo", "--rev", "3"],
    &["get", "foo", "--rev", "100"],
    &["compaction", "3"],
    &["-w", "json", "compaction", "--physical", "7"],
    &["compaction"],
    &["member", "list"],
    &["-w", "json", "member", "list"],
    &["-w", "fields", "member", "list"],
    // Not `endpoint status` in simple form: its humanized db size differs between two servers.
    &["-w", "json", "endpoint", "status"],
    &["-w", "fields", "endpoint", "status"],
    &["endpoint", "hashkv"],
    &["-w", "json", "endpoint", "hashkv", "--rev", "8"],
    &["-w", "fields", "endpoint", "hashkv"],
    // Tables only where no column width depends on the member id (its hex length varies).
    &["-w", "table", "endpoint", "hashkv"],
    &["version"],
    &["-w", "json", "version"],
];

#[test]
fn kvctl_matches_etcdctl() {
    if !Path::new(ETCD).exists() || !Path::new(ETCDCTL).exists() {
        eprintln!("skipping: {ETCD} or {ETCDCTL} is not installed");
        return;
    }
    let (reference, ours) = std::thread::scope(|s| {
        let a = s.spawn(Etcd::start);
        let b = s.spawn(Etcd::start);
        (a.join().expect("etcd a"), b.join().expect("etcd b"))
    });
    let kvctl = env!("CARGO_BIN_EXE_kvctl");
    let mut mismatches = Vec::new();
    for args in SCRIPT {
        let want = run(ETCDCTL, &reference.endpoint, args);
        let got = run(kvctl, &ours.endpoint, args);
        let want_view = (
            normalize(&reference, &String::from_utf8_lossy(&want.stdout)),
            error_lines(&want.stderr),
            want.status.code(),
        );
        let got_view =
            (normalize(&ours, &String::from_utf8_lossy(&got.stdout)), error_lines(&got.stderr), got.status.code());
        if want_view != got_view {
            mismatches.push(format!("{args:?}\n  etcdctl: {want_view:?}\n  kvctl:   {got_view:?}"));
        }
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}
