//! Shared by the comparison tests: run the same command lines through etcdctl 3.4 and kvctl, each
//! against its own fresh server of the same kind (real etcd, or ours), so both histories — and so all
//! revisions — are identical. stdout, the `Error:` lines and the exit code must match; only what
//! differs between two clusters (ids, addresses, terms, db sizes) is normalized.

#![allow(dead_code)] // each test file uses its own part

use std::process::{Command, Output, Stdio};

use tests::{Member, MemberConfig, ServerKind};

pub const ETCDCTL: &str = "/usr/bin/etcdctl";

/// One command line, with optional stdin.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub args: &'a [&'a str],
    pub stdin: Option<&'a str>,
}

/// Command lines without stdin.
pub fn steps<'a>(script: &'a [&'a [&'a str]]) -> Vec<Step<'a>> {
    script.iter().map(|args| Step { args, stdin: None }).collect()
}

/// Whether the tools the comparison needs are installed. Without them the test skips with a message,
/// or fails when the run requires them (CI, `scripts/test`): see `tests::server::tool_present`.
pub fn etcd_tools_present() -> bool {
    tests::server::tool_present(std::path::Path::new(ETCDCTL)) && tests::server::etcd_available()
}

pub fn kvctl() -> &'static str {
    env!("CARGO_BIN_EXE_kvctl")
}

/// A fresh single-member server plus what normalization needs to know about it.
pub struct Server {
    pub member: Member,
    /// The member id in hex, as `member list` prints it.
    pub member_id: String,
}

impl Server {
    pub async fn start(kind: ServerKind) -> Server {
        let member = Member::start_with(MemberConfig { kind, ..MemberConfig::default() }).await.expect("member starts");
        let status = run(ETCDCTL, &member.endpoint(), &["endpoint", "status"], None);
        let status = String::from_utf8_lossy(&status.stdout);
        let member_id = status.split(", ").nth(1).expect("member id in endpoint status").to_string();
        Server { member, member_id }
    }

    pub fn endpoint(&self) -> String {
        self.member.endpoint()
    }

    /// Replaces what differs between two clusters: this member's id and addresses, and the ids,
    /// terms and sizes in json (`"cluster_id":`) and fields (`"ClusterID" : `) output.
    pub fn normalize(&self, stdout: &str) -> String {
        let decimal_id = u64::from_str_radix(&self.member_id, 16).expect("hex member id").to_string();
        let mut text = stdout.to_string();
        let fields = [
            "\"cluster_id\":",
            "\"member_id\":",
            "\"raft_term\":",
            "\"leader\":",
            "\"ClusterID\" : ",
            "\"MemberID\" : ",
            "\"RaftTerm\" : ",
            "\"Leader\" : ",
            // bbolt's file size depends on commit timing, not on the history.
            "\"dbSize\":",
            "\"dbSizeInUse\":",
            "\"DBSize\" : ",
            "\"DBSizeInUse\" : ",
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
        let client_url = self.member.client_url();
        text.replace(&client_url, "<client>")
            .replace(&self.endpoint(), "<client>")
            .replace(&self.member.peer_url(), "<peer>")
            .replace(&self.member_id, "<id>")
            .replace(&decimal_id, "<id>")
    }
}

/// Runs `program --endpoints=<endpoint> <args>` (etcdctl's v3 API, no endpoints from the env).
pub fn run(program: &str, endpoint: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(program);
    // kvctl speaks etcdctl 3.4 here: the reference is Debian's etcdctl 3.4.23.
    command
        .env("ETCDCTL_API", "3")
        .env("KVCTL_ETCDCTL_VERSION", "3.4")
        .env_remove("ETCDCTL_ENDPOINTS")
        .arg(format!("--endpoints={endpoint}"))
        .args(args);
    output_with_stdin(command, stdin)
}

/// Runs `command` to its end with `stdin` (or nothing) as its standard input.
pub fn output_with_stdin(mut command: Command, stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = command
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        // A client may end before it has read all of its input (etcdctl stops at a line it refuses):
        // its output and exit code, compared by the caller, say what happened.
        if let Err(err) = pipe.write_all(input.as_bytes()) {
            assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {err}");
        }
    }
    child.wait_with_output().expect("client output")
}

/// The `Error:` lines (etcdctl's other stderr lines are clientv3 retry logs with timestamps).
pub fn error_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr).lines().filter(|l| l.starts_with("Error:")).map(str::to_string).collect()
}

/// What a run looks like after normalization: stdout, `Error:` lines, exit code.
pub type View = (String, Vec<String>, Option<i32>);

pub fn view(server: &Server, out: &Output) -> View {
    (server.normalize(&String::from_utf8_lossy(&out.stdout)), error_lines(&out.stderr), out.status.code())
}

/// Starts two fresh servers of `kind`, runs every step through etcdctl on one and kvctl on the
/// other, and fails listing every step whose views differ.
pub async fn compare(kind: ServerKind, script: &[Step<'_>]) {
    let (reference, ours) = tokio::join!(Server::start(kind), Server::start(kind));
    compare_on(&reference, &ours, script);
}

/// [`compare`] on two servers the caller started (and may have prepared identically).
pub fn compare_on(reference: &Server, ours: &Server, script: &[Step<'_>]) {
    let mut mismatches = Vec::new();
    for step in script {
        let want = run(ETCDCTL, &reference.endpoint(), step.args, step.stdin);
        let got = run(kvctl(), &ours.endpoint(), step.args, step.stdin);
        let (want_view, got_view) = (view(reference, &want), view(ours, &got));
        if want_view != got_view {
            mismatches.push(format!("{:?}\n  etcdctl: {want_view:?}\n  kvctl:   {got_view:?}", step.args));
        }
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}
