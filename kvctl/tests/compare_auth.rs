//! kvctl against etcdctl 3.4 for `auth`, `user` and `role` in every output format, and for what
//! `--user` logins may and may not do once auth is on (read-only, write-only and read-write
//! roles on `/app/`, through get, put, del, txn and watch).
//!
//! Each side runs the same script on its own fresh server. Protobuf output is compared after the
//! header's cluster id, member id and term are zeroed; everything else as the other comparison
//! tests do. Our server has no Auth service yet, so only the real-etcd run is on for now.

mod common;
mod streaming;

use prost::Message;
use proto::etcdserverpb as pb;
use tests::ServerKind;

use common::{error_lines, etcd_tools_present, kvctl, run, Server, View, ETCDCTL};
use streaming::Streaming;

enum Step {
    /// A command line without stdin.
    Run(&'static [&'static str]),
    /// A command line with this stdin (passwords).
    Stdin(&'static [&'static str], &'static str),
    /// A `-w protobuf` command line: stdout is a response's wire encoding.
    Proto(&'static [&'static str]),
    /// A watch left running until it printed this many lines, then killed.
    Watch(&'static [&'static str], usize),
}

use Step::{Proto, Run, Stdin, Watch};

const ROOT: &str = "--user=root:rootpw";
const READER: &str = "--user=ur:urpw";
const WRITER: &str = "--user=uw:uwpw";
const READ_WRITER: &str = "--user=urw:urwpw";

const SCRIPT: &[Step] = &[
    // Users, auth off.
    Run(&["user", "add", "root:rootpw"]),
    Run(&["-w", "json", "user", "add", "alice:a"]),
    Run(&["-w", "fields", "user", "add", "bob:b"]),
    // The table format adds the user, then refuses to print.
    Run(&["-w", "table", "user", "add", "carol:c"]),
    Proto(&["-w", "protobuf", "user", "add", "dave:d"]),
    Run(&["user", "add", "alice:again"]),
    Run(&["user", "add", ":x"]),
    Run(&["user", "add"]),
    Run(&["user", "add", "a", "b"]),
    Run(&["user", "add", "nopw", "--no-password"]),
    Run(&["user", "add", "eve", "--new-user-password=e"]),
    Stdin(&["user", "add", "frank", "--interactive=false"], "fpw extra\n"),
    Stdin(&["user", "add", "greg"], "gpw\ngpw\n"),
    Stdin(&["user", "add", "greg2"], "one\ntwo\n"),
    Stdin(&["user", "add", "greg3"], "\n"),
    Stdin(&["user", "add", "hank", "--interactive=false"], ""),
    Run(&["user", "list"]),
    Run(&["-w", "json", "user", "list"]),
    Run(&["-w", "fields", "user", "list"]),
    Run(&["-w", "table", "user", "list"]),
    Proto(&["-w", "protobuf", "user", "list"]),
    Run(&["user", "list", "extra"]),
    // Roles and their permissions.
    Run(&["role", "add", "r1"]),
    Run(&["-w", "json", "role", "add", "r2"]),
    Run(&["-w", "fields", "role", "add", "r3"]),
    Proto(&["-w", "protobuf", "role", "add", "r4"]),
    Run(&["role", "add", "r1"]),
    Run(&["role", "add"]),
    Run(&["role", "grant-permission", "r1", "read", "a"]),
    Run(&["-w", "json", "role", "grant-permission", "r1", "write", "a", "c"]),
    Run(&["role", "grant-permission", "r1", "readwrite", "--prefix", "p/"]),
    Run(&["role", "grant-permission", "r1", "READ", "--from-key", "z"]),
    Run(&["role", "grant-permission", "r1", "read", "--prefix", ""]),
    Run(&["role", "grant-permission", "r1", "write", ""]),
    Run(&["-w", "fields", "role", "grant-permission", "r2", "Write", "k", "m"]),
    Proto(&["-w", "protobuf", "role", "grant-permission", "r2", "read", "--prefix", "q"]),
    Run(&["role", "grant-permission", "r1", "foo", "a"]),
    Run(&["role", "grant-permission", "r1", "read"]),
    Run(&["role", "grant-permission", "r1", "read", "a", "b", "--prefix"]),
    Run(&["role", "grant-permission", "r1", "read", "a", "b", "--from-key"]),
    Run(&["role", "grant-permission", "r1", "read", "a", "--prefix", "--from-key"]),
    Run(&["role", "grant-permission", "r1", "read", "", "--prefix", "--from-key"]),
    Run(&["role", "grant-permission", "nope", "read", "a"]),
    Run(&["role", "get", "r1"]),
    Run(&["-w", "json", "role", "get", "r1"]),
    Run(&["-w", "fields", "role", "get", "r1"]),
    Run(&["-w", "table", "role", "get", "r1"]),
    Proto(&["-w", "protobuf", "role", "get", "r1"]),
    Run(&["role", "get", "r3"]),
    Run(&["role", "get", "nope"]),
    Run(&["role", "get"]),
    Run(&["role", "list"]),
    Run(&["-w", "json", "role", "list"]),
    Run(&["-w", "fields", "role", "list"]),
    Run(&["-w", "table", "role", "list"]),
    Proto(&["-w", "protobuf", "role", "list"]),
    Run(&["role", "list", "extra"]),
    // Users and roles together.
    Run(&["user", "grant-role", "alice", "r1"]),
    Run(&["-w", "json", "user", "grant-role", "alice", "r2"]),
    Run(&["user", "grant-role", "alice", "nope"]),
    Run(&["user", "grant-role", "nobody", "r1"]),
    Run(&["user", "grant-role", "alice"]),
    Run(&["user", "get", "alice"]),
    Run(&["-w", "json", "user", "get", "alice"]),
    Run(&["-w", "fields", "user", "get", "alice"]),
    Run(&["-w", "table", "user", "get", "alice"]),
    Proto(&["-w", "protobuf", "user", "get", "alice"]),
    Run(&["user", "get", "alice", "--detail"]),
    Run(&["-w", "json", "user", "get", "alice", "--detail"]),
    Run(&["-w", "fields", "user", "get", "alice", "--detail"]),
    Run(&["-w", "table", "user", "get", "alice", "--detail"]),
    Run(&["-w", "protobuf", "user", "get", "bob", "--detail"]),
    Run(&["user", "get", "bob", "--detail"]),
    Run(&["user", "get", "nopw"]),
    Run(&["user", "get", "nobody"]),
    Run(&["user", "get"]),
    Run(&["role", "revoke-permission", "r1", "a"]),
    Run(&["role", "revoke-permission", "r1", "a", "c"]),
    Run(&["-w", "json", "role", "revoke-permission", "r1", "--prefix", "p/"]),
    Run(&["role", "revoke-permission", "r1", "--from-key", "z"]),
    Run(&["role", "revoke-permission", "r1", "--from-key", "z"]),
    Run(&["role", "revoke-permission", "r1", "", "--prefix"]),
    Run(&["role", "revoke-permission", "r1", ""]),
    Run(&["role", "revoke-permission", "r1", "a", "b", "--prefix"]),
    Run(&["role", "revoke-permission", "r1"]),
    Run(&["role", "revoke-permission", "nope", "a"]),
    Run(&["role", "get", "r1"]),
    Run(&["user", "revoke-role", "alice", "r1"]),
    Run(&["-w", "fields", "user", "revoke-role", "alice", "r2"]),
    Run(&["user", "revoke-role", "alice", "r2"]),
    Run(&["user", "revoke-role", "alice"]),
    Stdin(&["user", "passwd", "alice", "--interactive=false"], "newa\n"),
    Stdin(&["-w", "json", "user", "passwd", "alice"], "newa\nnewa\n"),
    Stdin(&["user", "passwd", "alice"], "x\ny\n"),
    Stdin(&["user", "passwd", "nobody", "--interactive=false"], "p\n"),
    Run(&["user", "passwd"]),
    Run(&["user", "delete", "carol"]),
    Run(&["-w", "json", "user", "delete", "dave"]),
    Run(&["user", "delete", "nobody"]),
    Run(&["user", "delete"]),
    Run(&["role", "delete", "r3"]),
    Proto(&["-w", "protobuf", "role", "delete", "r4"]),
    Run(&["role", "delete", "r3"]),
    Run(&["role", "delete"]),
    Run(&["auth", "enable", "now"]),
    Run(&["auth", "disable", "now"]),
    // Root has no root role yet: etcdctl creates it and grants it, then enables.
    Run(&["auth", "enable"]),
    Run(&["role", "get", "root"]),
    // Auth on: management needs root.
    Run(&["user", "list"]),
    Run(&["role", "add", "x"]),
    Run(&["--user=root:wrong", "user", "list"]),
    Run(&["--user=nobody:x", "user", "list"]),
    Run(&[ROOT, "user", "list"]),
    Run(&["--user=root", "--password=rootpw", "role", "list"]),
    Stdin(&["--user=root", "role", "list"], "rootpw\n"),
    Run(&[ROOT, "role", "add", "ro"]),
    Run(&[ROOT, "role", "add", "wo"]),
    Run(&[ROOT, "role", "add", "rw"]),
    Run(&[ROOT, "role", "grant-permission", "ro", "read", "--prefix", "/app/"]),
    Run(&[ROOT, "role", "grant-permission", "wo", "write", "--prefix", "/app/"]),
    Run(&[ROOT, "role", "grant-permission", "rw", "readwrite", "--prefix", "/app/"]),
    Run(&[ROOT, "user", "add", "ur:urpw"]),
    Run(&[ROOT, "user", "add", "uw:uwpw"]),
    Run(&[ROOT, "user", "add", "urw:urwpw"]),
    Run(&[ROOT, "user", "grant-role", "ur", "ro"]),
    Run(&[ROOT, "user", "grant-role", "uw", "wo"]),
    Run(&[ROOT, "user", "grant-role", "urw", "rw"]),
    Run(&[ROOT, "user", "grant-role", "nopw", "rw"]),
    Run(&[ROOT, "put", "/app/x", "1"]),
    Run(&[ROOT, "put", "/other", "1"]),
    // Read-only.
    Run(&[READER, "get", "/app/x"]),
    Run(&[READER, "-w", "json", "get", "/app/", "--prefix"]),
    Run(&[READER, "get", "/other"]),
    Run(&[READER, "get", "", "--from-key"]),
    Run(&[READER, "put", "/app/x", "2"]),
    Run(&[READER, "del", "/app/x"]),
    Stdin(&[READER, "txn"], "\nget /app/x\n\n\n"),
    Stdin(&[READER, "txn"], "\nput /app/x 2\n\n\n"),
    Watch(&[READER, "watch", "--rev=1", "/app/x"], 3),
    Run(&[READER, "watch", "/other"]),
    Run(&[READER, "user", "list"]),
    Run(&[READER, "role", "get", "ro"]),
    Run(&[READER, "role", "get", "wo"]),
    Run(&[READER, "user", "get", "ur", "--detail"]),
    Run(&[READER, "user", "get", "uw"]),
    Run(&[READER, "user", "passwd", "ur", "--interactive=false"]),
    // Write-only.
    Run(&[WRITER, "put", "/app/x", "3"]),
    Run(&[WRITER, "put", "/other", "3"]),
    Run(&[WRITER, "get", "/app/x"]),
    Stdin(&[WRITER, "txn"], "\nput /app/w 1\n\n\n"),
    Stdin(&[WRITER, "txn"], "\nget /app/x\n\n\n"),
    Run(&[WRITER, "watch", "/app/x"]),
    Run(&[WRITER, "del", "/app/w"]),
    // Read-write.
    Run(&[READ_WRITER, "put", "/app/y", "4"]),
    Run(&[READ_WRITER, "get", "/app/", "--prefix"]),
    Stdin(&[READ_WRITER, "txn"], "value(\"/app/y\") = \"4\"\n\nput /app/z 5\nget /app/y\n\n"),
    Stdin(&[READ_WRITER, "txn"], "\nget /other\n\n\n"),
    Watch(&[READER, "watch", "--rev=1", "--prefix", "/app/"], 12),
    Run(&[READ_WRITER, "del", "/app/", "--prefix"]),
    Run(&[READ_WRITER, "del", "/other"]),
    // A user without a password cannot log in: clientv3 then sends no user at all.
    Run(&["--user=nopw:", "get", "/app/x"]),
    Stdin(&["--user=nopw", "get", "/app/x"], "\n"),
    // Root itself is protected; only root disables auth.
    Run(&[ROOT, "user", "delete", "root"]),
    Run(&[ROOT, "role", "delete", "root"]),
    Run(&[ROOT, "user", "revoke-role", "root", "root"]),
    Run(&[READ_WRITER, "auth", "disable"]),
    Run(&["auth", "disable"]),
    Run(&[ROOT, "-w", "json", "auth", "disable"]),
    // The line is printed whatever the format.
    Run(&["-w", "table", "auth", "disable"]),
    Run(&["user", "list"]),
    Run(&["user", "delete", "root"]),
    Run(&["auth", "enable"]),
    Run(&["user", "add", "root", "--no-password"]),
    // Role root is still there: etcdctl's attempt to create it fails.
    Run(&["auth", "enable"]),
    Run(&["user", "grant-role", "root", "root"]),
    Run(&["auth", "enable"]),
    Run(&["--user=root:", "user", "list"]),
];

/// One client (etcdctl or kvctl) on its own server.
struct Side<'a> {
    program: &'static str,
    server: &'a Server,
}

impl Side<'_> {
    fn run(&self, step: &Step) -> View {
        match step {
            Run(args) => self.view(args, None),
            Stdin(args, stdin) => self.view(args, Some(stdin)),
            Proto(args) => {
                let out = run(self.program, &self.server.endpoint(), args, None);
                (protobuf_view(&out.stdout), error_lines(&out.stderr), out.status.code())
            }
            Watch(args, lines) => self.watch(args, *lines),
        }
    }

    fn view(&self, args: &[&str], stdin: Option<&str>) -> View {
        common::view(self.server, &run(self.program, &self.server.endpoint(), args, stdin))
    }

    fn watch(&self, args: &[&str], lines: usize) -> View {
        let watch = Streaming::spawn(self.program, &self.server.endpoint(), args, &[]);
        watch.wait_for(&format!("{lines} lines"), |out| out.lines().count() >= lines);
        watch.settle();
        let stderr = watch.stderr();
        let stdout = self.server.normalize(&watch.stdout());
        (stdout, error_lines(stderr.as_bytes()), None)
    }
}

/// An Auth response's wire encoding with the header's ids and term zeroed (they differ between
/// the two servers), shown as hex. Every Auth response has the header as field 1.
fn protobuf_view(stdout: &[u8]) -> String {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let Some((&0x0a, rest)) = stdout.split_first() else {
        return format!("no header: {}", hex(stdout));
    };
    let mut slice = rest;
    let Ok(len) = prost::encoding::decode_varint(&mut slice) else {
        return format!("bad header length: {}", hex(stdout));
    };
    let len = usize::try_from(len).unwrap_or(usize::MAX).min(slice.len());
    let (header, fields) = slice.split_at(len);
    match pb::ResponseHeader::decode(header) {
        Ok(h) => {
            let h = pb::ResponseHeader { revision: h.revision, ..Default::default() };
            format!("header {} fields {}", hex(&h.encode_to_vec()), hex(fields))
        }
        Err(e) => format!("bad header {e}: {}", hex(stdout)),
    }
}

async fn compare_auth(kind: ServerKind) {
    let (reference, ours) = tokio::join!(Server::start(kind), Server::start(kind));
    let etcdctl = Side { program: ETCDCTL, server: &reference };
    let kv = Side { program: kvctl(), server: &ours };
    let mut mismatches = Vec::new();
    let mut errors = Vec::new();
    for (index, step) in SCRIPT.iter().enumerate() {
        let (want, got) = (etcdctl.run(step), kv.run(step));
        errors.extend(want.1.iter().cloned());
        if want != got {
            mismatches.push(format!("step {index}\n  etcdctl: {want:?}\n  kvctl:   {got:?}"));
        }
    }
    // The script reaches the cases it is about (and the servers did answer).
    for error in [
        "etcdserver: user name already exists",
        "etcdserver: role name already exists",
        "etcdserver: role name not found",
        "etcdserver: permission denied",
        "etcdserver: authentication failed, invalid user ID or password",
        "etcdserver: root user does not exist",
        "etcdserver: invalid auth management",
        "etcdserver: user name is empty",
        "given passwords are different",
        "table not supported as output format",
    ] {
        assert!(errors.iter().any(|e| e == &format!("Error: {error}")), "no step ended in {error:?}: {errors:?}");
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matches_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare_auth(ServerKind::Etcd).await;
    }
}

/// The same script with both tools against our server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matches_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare_auth(ServerKind::Ours).await;
    }
}

#[test]
fn protobuf_headers_are_normalized() {
    let resp = |member_id| pb::AuthUserListResponse {
        header: Some(pb::ResponseHeader { cluster_id: 7, member_id, revision: 3, raft_term: 2 }),
        users: vec!["alice".into()],
    };
    let (a, b) = (protobuf_view(&resp(1).encode_to_vec()), protobuf_view(&resp(99999).encode_to_vec()));
    assert_eq!(a, b);
    assert!(a.ends_with(&format!("{:02x}{:02x}616c696365", 0x12, 5)), "{a}");
}
