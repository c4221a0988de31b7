//! kvctl against etcdctl 3.4 for the maintenance verbs on a single member: `endpoint health`,
//! `endpoint status|hashkv` when one endpoint fails, `alarm`, `defrag`, `move-leader`,
//! `snapshot save` and the argument errors of `member`. Each tool runs against its own fresh
//! server of the same kind, real etcd and ours.
//!
//! Unlike `compare.rs`, every stderr line is compared (except the Go client's JSON logs): these
//! commands report per-endpoint results there (`Failed to get the status of endpoint …`, `… is
//! healthy: …`).
//!
//! Each script runs against two servers of one kind (real etcd, or ours); the NOSPACE steps run on real
//! etcd only. `snapshot status` and
//! `snapshot restore` are compared here on their argument and file errors; what they make of a saved
//! file (etcd's format from both servers) is compared in the `tests` crate (`snapshot_etcd`).

mod common;

use std::path::Path;
use std::process::Output;

use common::{etcd_tools_present, kvctl, run, Server, ETCDCTL};
use proto::etcdserverpb as pb;
use tests::ServerKind;

/// An endpoint where nothing listens; with `--command-timeout=1s` both tools give up on it after
/// a second.
const DEAD: &str = "127.0.0.1:1";

/// How a step's output is made comparable beyond [`Server::normalize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mask {
    None,
    /// `endpoint health`: durations masked, table padding (which follows their width) squeezed.
    Timing,
}

/// One command line. `{self}` in an argument becomes the server's own member id (hex); `dead`
/// appends [`DEAD`] to `--endpoints`.
#[derive(Debug, Clone, Copy)]
struct Step {
    args: &'static [&'static str],
    dead: bool,
    mask: Mask,
}

const fn step(args: &'static [&'static str]) -> Step {
    Step { args, dead: false, mask: Mask::None }
}

const fn timed(args: &'static [&'static str]) -> Step {
    Step { args, dead: false, mask: Mask::Timing }
}

const fn with_dead(args: &'static [&'static str], mask: Mask) -> Step {
    Step { args, dead: true, mask }
}

/// What both servers answer alike, ours included.
const COMMON: &[Step] = &[
    timed(&["endpoint", "health"]),
    timed(&["-w", "json", "endpoint", "health"]),
    timed(&["-w", "fields", "endpoint", "health"]),
    timed(&["-w", "table", "endpoint", "health"]),
    with_dead(&["--command-timeout=1s", "endpoint", "health"], Mask::Timing),
    with_dead(&["--command-timeout=1s", "-w", "json", "endpoint", "health"], Mask::Timing),
    with_dead(&["--command-timeout=1s", "-w", "json", "endpoint", "status"], Mask::None),
    with_dead(&["--command-timeout=1s", "-w", "fields", "endpoint", "status"], Mask::None),
    // With a dead endpoint in the list: the live one answers, the dead one fails on stderr.
    with_dead(&["--command-timeout=1s", "-w", "json", "endpoint", "hashkv"], Mask::None),
    with_dead(&["--command-timeout=1s", "-w", "table", "endpoint", "hashkv"], Mask::None),
    with_dead(&["--command-timeout=1s", "endpoint", "hashkv"], Mask::None),
    step(&["alarm", "list"]),
    step(&["alarm", "disarm"]),
    step(&["-w", "json", "alarm", "disarm"]),
    step(&["-w", "table", "alarm", "list"]),
    step(&["alarm", "list", "extra"]),
    step(&["alarm", "disarm", "extra"]),
    step(&["defrag"]),
    with_dead(&["--command-timeout=1s", "defrag"], Mask::None),
    step(&["move-leader"]),
    step(&["move-leader", "1", "2"]),
    step(&["move-leader", "zz"]),
    step(&["move-leader", "1234"]),
    step(&["move-leader", "{self}"]),
    step(&["-w", "fields", "move-leader", "{self}"]),
    step(&["-w", "table", "move-leader", "{self}"]),
    step(&["member", "add"]),
    step(&["member", "add", "a", "b", "http://x:1"]),
    step(&["member", "add", "a"]),
    step(&["member", "remove"]),
    step(&["member", "remove", "zz"]),
    step(&["member", "remove", "1ffffffffffffffff"]),
    step(&["member", "remove", "1234"]),
    step(&["member", "update", "1234"]),
    step(&["member", "update", "1", "2", "--peer-urls=http://x:1"]),
    step(&["member", "update", "1234", "--peer-urls=http://x:1"]),
    step(&["member", "promote", "--", "-1"]),
    step(&["member", "promote", "1234"]),
    step(&["snapshot", "save"]),
    step(&["snapshot", "status"]),
    step(&["snapshot", "status", "a.db", "b.db"]),
    step(&["snapshot", "status", "/nonexistent-dir/x.db"]),
    step(&["snapshot", "restore"]),
    step(&["snapshot", "restore", "x.db", "--name=n1"]),
    step(&["snapshot", "restore", "/nonexistent-dir/x.db", "--data-dir=/nonexistent-dir/restored"]),
];

/// etcd 3.4 sends no header in Alarm and MoveLeader responses: `{}` in json.
const HEADERLESS: &[Step] = &[step(&["-w", "json", "alarm", "list"]), step(&["-w", "json", "move-leader", "{self}"])];

/// Run on real etcd after a NOSPACE alarm was raised on both servers. Not `-w fields`: etcdctl
/// 3.4 dereferences the header etcd never sends and crashes.
const ALARMED: &[Step] = &[
    step(&["alarm", "list"]),
    step(&["-w", "json", "alarm", "list"]),
    step(&["put", "k", "v"]),
    step(&["-w", "json", "alarm", "disarm"]),
    step(&["alarm", "list"]),
    step(&["put", "k", "v"]),
];

/// stdout, the stderr lines that are not Go client logs, and the exit code.
type View = (String, Vec<String>, Option<i32>);

fn view(server: &Server, step: &Step, out: &Output) -> View {
    let mut stdout = server.normalize(&String::from_utf8_lossy(&out.stdout));
    let mut stderr: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|line| !line.starts_with("{\"level\""))
        .map(|line| server.normalize(line))
        .collect();
    if step.mask == Mask::Timing {
        stdout = mask_timing(&stdout);
        stderr = stderr.iter().map(|line| mask_timing(line)).collect();
    }
    (stdout, stderr, out.status.code())
}

/// Replaces every Go duration (`1.6ms`, `5.0004s`, `850µs`) with `<took>`, then squeezes the runs
/// of spaces and dashes that pad table cells to the durations' widths.
fn mask_timing(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let after_word = out.chars().last().is_some_and(|p: char| p.is_alphanumeric() || p == '.');
        if c.is_ascii_digit() && !after_word {
            let number = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
            let unit = ["ns", "µs", "ms", "s"].into_iter().find(|u| rest[number..].starts_with(u));
            if let Some(unit) = unit {
                let end = number + unit.len();
                if !rest[end..].starts_with(|c: char| c.is_alphanumeric()) {
                    out.push_str("<took>");
                    rest = &rest[end..];
                    continue;
                }
            }
            out.push_str(&rest[..number]);
            rest = &rest[number..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    squeeze(&out)
}

fn squeeze(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c == ' ' || c == '-') && out.ends_with(c) {
            continue;
        }
        out.push(c);
    }
    out
}

fn run_step(program: &str, server: &Server, step: &Step) -> View {
    let args: Vec<&str> =
        step.args.iter().map(|a| if *a == "{self}" { server.member_id.as_str() } else { a }).collect();
    let endpoints = if step.dead { format!("{},{DEAD}", server.endpoint()) } else { server.endpoint() };
    view(server, step, &run(program, &endpoints, &args, None))
}

/// Runs every step through etcdctl on `reference` and kvctl on `ours`; fails listing every step
/// whose views differ.
fn compare_steps(reference: &Server, ours: &Server, script: &[Step]) {
    let mut mismatches = Vec::new();
    for step in script {
        let (want, got) = (run_step(ETCDCTL, reference, step), run_step(kvctl(), ours, step));
        if want != got {
            mismatches.push(format!("{:?}\n  etcdctl: {want:?}\n  kvctl:   {got:?}", step.args));
        }
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}

/// Raises a NOSPACE alarm for the member itself, as etcd does when its backend outgrows the quota.
async fn raise_nospace(server: &Server) {
    let mut client = pb::maintenance_client::MaintenanceClient::connect(server.member.client_url())
        .await
        .expect("connect for Alarm");
    let member_id = u64::from_str_radix(&server.member_id, 16).expect("hex member id");
    let request = pb::AlarmRequest {
        action: pb::alarm_request::AlarmAction::Activate as i32,
        member_id,
        alarm: pb::AlarmType::Nospace as i32,
    };
    client.alarm(request).await.expect("Alarm ACTIVATE");
}

/// `snapshot save` through one tool into `dir/<name>`: the view, plus whether `<name>.part` was
/// left behind.
fn save_snapshot(program: &str, server: &Server, dir: &Path, name: &str) -> (View, bool) {
    let path = dir.join(name);
    let out = run(program, &server.endpoint(), &["snapshot", "save", path.to_str().expect("utf-8 path")], None);
    let mut view = view(server, &step(&[]), &out);
    let path_text = path.to_string_lossy();
    view.0 = view.0.replace(&*path_text, "<file>");
    view.1 = view.1.iter().map(|line| line.replace(&*path_text, "<file>")).collect();
    (view, dir.join(format!("{name}.part")).exists())
}

/// `etcdctl snapshot status` of a saved file, `-w json`, with its hash left out (the two servers'
/// backends differ in bytes) — revision and key count are what the history decides.
fn snapshot_status(path: &Path) -> String {
    let out = run(ETCDCTL, DEAD, &["-w", "json", "snapshot", "status", path.to_str().expect("utf-8 path")], None);
    assert!(out.status.success(), "snapshot status: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let revision = text.split("\"revision\":").nth(1).and_then(|r| r.split([',', '}']).next()).unwrap_or("");
    let keys = text.split("\"totalKey\":").nth(1).and_then(|r| r.split([',', '}']).next()).unwrap_or("");
    format!("revision {revision}, keys {keys}")
}

async fn compare_snapshots(reference: &Server, ours: &Server, kind: ServerKind) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (want, want_left) = save_snapshot(ETCDCTL, reference, dir.path(), "etcdctl.db");
    let (got, got_left) = save_snapshot(kvctl(), ours, dir.path(), "kvctl.db");
    assert_eq!(got, want, "snapshot save");
    assert!(!want_left && !got_left, "a .part file was left behind");
    if kind == ServerKind::Etcd {
        assert_eq!(want.0, "Snapshot saved at <file>\n");
        assert_eq!(snapshot_status(&dir.path().join("kvctl.db")), snapshot_status(&dir.path().join("etcdctl.db")));
    }
    let unwritable = "/nonexistent-dir/x.db";
    let step = step(&[]);
    let want = view(reference, &step, &run(ETCDCTL, &reference.endpoint(), &["snapshot", "save", unwritable], None));
    let got = view(ours, &step, &run(kvctl(), &ours.endpoint(), &["snapshot", "save", unwritable], None));
    assert_eq!(got, want, "snapshot save into a missing directory");
    let two = format!("{0},{0}", ours.endpoint());
    let got = run(kvctl(), &two, &["snapshot", "save", "x.db"], None);
    let want = run(ETCDCTL, &two, &["snapshot", "save", "x.db"], None);
    assert_eq!(view(ours, &step, &got), view(ours, &step, &want), "snapshot save with two endpoints");
}

async fn compare_maintenance(kind: ServerKind) {
    let (reference, ours) = tokio::join!(Server::start(kind), Server::start(kind));
    compare_steps(&reference, &ours, COMMON);
    compare_snapshots(&reference, &ours, kind).await;
    compare_steps(&reference, &ours, HEADERLESS);
    if kind == ServerKind::Etcd {
        raise_nospace(&reference).await;
        raise_nospace(&ours).await;
        compare_steps(&reference, &ours, ALARMED);
        // Defragment works on etcd: one `Finished defragmenting` line per endpoint.
        let got = run_step(kvctl(), &ours, &step(&["defrag"]));
        assert_eq!(got, ("Finished defragmenting etcd member[<client>]\n".to_string(), vec![], Some(0)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_maintenance_matches_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare_maintenance(ServerKind::Etcd).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_maintenance_matches_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare_maintenance(ServerKind::Ours).await;
    }
}

#[test]
fn timing_masks() {
    let cases = [
        (
            "127.0.0.1:2379 is healthy: successfully committed proposal: took = 1.606828ms",
            "127.0.0.1:2379 is healthy: successfully committed proposal: took = <took>",
        ),
        (
            "[{\"endpoint\":\"a:1\",\"health\":false,\"took\":\"1.0004s\",\"error\":\"x\"}]",
            "[{\"endpoint\":\"a:1\",\"health\":false,\"took\":\"<took>\",\"error\":\"x\"}]",
        ),
        ("| a:1 |   true | 850µs |       |", "| a:1 | true | <took> | |"),
        ("+------+---+", "+-+-+"),
        ("20 kB, 3.4.23, v1s", "20 kB, 3.4.23, v1s"),
    ];
    for (text, want) in cases {
        assert_eq!(mask_timing(text), want, "{text}");
    }
}
