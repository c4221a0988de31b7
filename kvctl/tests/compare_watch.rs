//! kvctl against etcdctl 3.4 for `watch`: every flag (`--prefix`, range end, `--rev`,
//! `--prev-kv`, `--hex`, `-i`, `-- <command>`, `ETCDCTL_WATCH_KEY`), every output format and the
//! errors, on real etcd and on ours.
//!
//! Each side watches its own server (etcdctl the reference one, kvctl ours) from the same
//! revision while the same writes go to both, one at a time: every watcher must have printed a
//! write's events before the next write, so each response holds exactly one revision and the
//! output is deterministic.

mod common;
mod streaming;

use common::{compare_on, etcd_tools_present, kvctl, run, steps, Server, ETCDCTL};
use streaming::{stderr_lines, Streaming};
use tests::ServerKind;

/// One write, done with etcdctl on both servers, and the keys it changes.
struct Write {
    args: &'static [&'static str],
    stdin: Option<&'static str>,
    keys: &'static [&'static str],
}

const WRITES: &[Write] = &[
    Write { args: &["put", "w/a", "1"], stdin: None, keys: &["w/a"] },
    Write { args: &["put", "w/a", "2"], stdin: None, keys: &["w/a"] },
    Write { args: &["put", "w/b", "x y\"é"], stdin: None, keys: &["w/b"] },
    Write { args: &["del", "w/a"], stdin: None, keys: &["w/a"] },
    Write { args: &["txn"], stdin: Some("\nput w/c 3\nput w/d 4\n\n\n"), keys: &["w/c", "w/d"] },
    Write { args: &["put", "other", "o"], stdin: None, keys: &["other"] },
    Write { args: &["del", "w/", "--prefix"], stdin: None, keys: &["w/b", "w/c", "w/d"] },
    Write { args: &["put", "w/a", ""], stdin: None, keys: &["w/a"] },
];

/// A watch command line (`<rev>` is replaced by the first revision of the writes) and the
/// `[start, end)` of keys it sees.
struct Scenario {
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    range: (&'static str, &'static str),
}

const SCENARIOS: &[Scenario] = &[
    Scenario { args: &["watch", "w/", "--prefix", "--rev", "<rev>"], env: &[], range: ("w/", "w0") },
    Scenario {
        args: &["watch", "--prev-kv", "w/", "--prefix", "--rev=<rev>", "-w", "json"],
        env: &[],
        range: ("w/", "w0"),
    },
    Scenario {
        args: &["-w", "fields", "watch", "w/a", "w/c", "--prev-kv", "--rev", "<rev>"],
        env: &[],
        range: ("w/a", "w/c"),
    },
    Scenario { args: &["--hex", "watch", "w/a", "--rev", "<rev>"], env: &[], range: ("w/a", "w/a\0") },
    Scenario { args: &["watch", "", "--prefix", "--rev", "<rev>", "-w", "json"], env: &[], range: ("", "\u{10ffff}") },
    Scenario {
        args: &[
            "watch",
            "--rev",
            "<rev>",
            "--",
            "sh",
            "-c",
            "echo $ETCD_WATCH_REVISION $ETCD_WATCH_EVENT_TYPE $ETCD_WATCH_KEY $ETCD_WATCH_VALUE",
        ],
        env: &[("ETCDCTL_WATCH_KEY", "w/"), ("ETCDCTL_WATCH_RANGE_END", "w0")],
        range: ("w/", "w0"),
    },
    Scenario {
        args: &["watch", "w/b", "--rev", "<rev>", "--", "printf", "%s|%s\\n"],
        env: &[],
        range: ("w/b", "w/b\0"),
    },
];

/// Events printed so far, in any format: `PUT`/`DELETE` lines (simple), `"Type" :` lines
/// (fields), `"kv":{` objects (json; `"prev_kv":{` does not match).
fn events_seen(out: &str) -> usize {
    let simple = out.lines().filter(|l| *l == "PUT" || *l == "DELETE").count();
    let fields = out.lines().filter(|l| l.starts_with("\"Type\" : ")).count();
    let json = out.matches("\"kv\":{").count();
    simple + fields + json
}

fn expected_events(scenario: &Scenario, writes: &[Write]) -> usize {
    let (start, end) = scenario.range;
    writes.iter().flat_map(|w| w.keys).filter(|k| **k >= start && **k < end).count()
}

fn substitute(args: &[&str], rev: &str) -> Vec<String> {
    args.iter().map(|a| a.replace("<rev>", rev)).collect()
}

/// The revision the next write will get.
fn next_revision(server: &Server) -> String {
    let out = run(ETCDCTL, &server.endpoint(), &["get", "x", "-w", "fields"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("\"Revision\" : ")).expect("revision line");
    let rev: i64 = line["\"Revision\" : ".len()..].parse().expect("revision number");
    (rev + 1).to_string()
}

fn write_both(reference: &Server, ours: &Server, write: &Write) {
    for server in [reference, ours] {
        let out = run(ETCDCTL, &server.endpoint(), write.args, write.stdin);
        assert!(out.status.success(), "{:?} failed: {}", write.args, String::from_utf8_lossy(&out.stderr));
    }
}

/// Every scenario watched at once on both sides while the writes happen one by one.
fn compare_live_watches(reference: &Server, ours: &Server) {
    let rev = next_revision(reference);
    assert_eq!(rev, next_revision(ours), "both servers must start from the same history");
    let mut watchers = Vec::new();
    for scenario in SCENARIOS {
        let args = substitute(scenario.args, &rev);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = Streaming::spawn(ETCDCTL, &reference.endpoint(), &args, scenario.env);
        let got = Streaming::spawn(kvctl(), &ours.endpoint(), &args, scenario.env);
        watchers.push((scenario, want, got));
    }
    for done in 1..=WRITES.len() {
        write_both(reference, ours, &WRITES[done - 1]);
        for (scenario, want, got) in &watchers {
            let expected = expected_events(scenario, &WRITES[..done]);
            for side in [want, got] {
                side.wait_for(&format!("{expected} events"), |out| events_seen(out) >= expected);
            }
        }
    }
    let mut mismatches = Vec::new();
    for (scenario, want, got) in watchers {
        want.settle();
        got.settle();
        let (want, got) = (want.kill(), got.kill());
        let (want_out, got_out) = (reference.normalize(&want.stdout), ours.normalize(&got.stdout));
        if want_out != got_out || stderr_lines(&want.stderr) != stderr_lines(&got.stderr) {
            mismatches.push(format!(
                "{:?}\n  etcdctl: {want_out:?} {:?}\n  kvctl:   {got_out:?} {:?}",
                scenario.args, want.stderr, got.stderr
            ));
        }
    }
    assert!(mismatches.is_empty(), "kvctl watch differs from etcdctl:\n{}", mismatches.join("\n"));
}

/// `watch -i`: lines from stdin, bad lines reported and skipped, a progress request, and the
/// end of stdin ending the command (exit 3).
fn compare_interactive(reference: &Server, ours: &Server) {
    let rev = next_revision(reference);
    let lines = [
        String::new(),
        "foo".to_string(),
        "watch".to_string(),
        "watch a b --prefix".to_string(),
        format!("watch \"w/\" --prefix --prev-kv --rev {rev}"),
    ];
    let mut sides = [
        Streaming::spawn(ETCDCTL, &reference.endpoint(), &["watch", "-i"], &[]),
        Streaming::spawn(kvctl(), &ours.endpoint(), &["watch", "-i"], &[]),
    ];
    for side in &mut sides {
        for line in &lines {
            side.write_line(line);
        }
    }
    for (done, write) in [(1, &WRITES[0]), (2, &WRITES[2])] {
        write_both(reference, ours, write);
        for side in &sides {
            side.wait_for(&format!("{done} events"), |out| events_seen(out) >= done);
        }
    }
    for side in &mut sides {
        side.settle();
        side.write_line("progress");
        side.wait_for("progress notify", |out| out.contains("progress notify: "));
        side.settle();
        side.close_stdin();
    }
    let [want, got] = sides.map(Streaming::finish);
    assert_eq!(
        (reference.normalize(&want.stdout), stderr_lines(&want.stderr), want.code),
        (ours.normalize(&got.stdout), stderr_lines(&got.stderr), got.code),
        "watch -i"
    );
    assert_eq!(want.code, Some(3));
}

/// Commands that end by themselves: argument errors, a compacted start revision, the table
/// format (which etcdctl cannot print a watch in), env key errors, a failing command.
fn compare_ending_watches(reference: &Server, ours: &Server) {
    let next = next_revision(reference);
    let current = (next.parse::<i64>().expect("revision") - 1).to_string();
    for server in [reference, ours] {
        let out = run(ETCDCTL, &server.endpoint(), &["compaction", &current], None);
        assert!(out.status.success(), "compaction: {}", String::from_utf8_lossy(&out.stderr));
    }
    compare_on(
        reference,
        ours,
        &steps(&[
            &["watch"],
            &["watch", "a", "--"],
            &["watch", "a", "b", "--prefix"],
            &["-w", "table", "watch", "w/", "--prefix", "--rev", "2"],
        ]),
    );
    // (args, env, whether a write must come to end it)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], bool);
    let cases: [Case; 6] = [
        (&["watch", "w/", "--prefix", "--rev", "2"], &[], false),
        (&["-w", "json", "watch", "w/", "--prefix", "--rev", "2"], &[], false),
        (&["-w", "fields", "watch", "w/", "--prefix", "--rev", "2"], &[], false),
        (&["watch"], &[("ETCDCTL_WATCH_RANGE_END", "z")], false),
        (&["watch", "w/a"], &[("ETCDCTL_WATCH_KEY", "w/")], false),
        (
            &["watch", "--rev", "<rev>", "--", "false"],
            &[("ETCDCTL_WATCH_KEY", "w/"), ("ETCDCTL_WATCH_RANGE_END", "w0")],
            true,
        ),
    ];
    for (args, env, needs_write) in cases {
        let args = substitute(args, &next);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = Streaming::spawn(ETCDCTL, &reference.endpoint(), &args, env);
        let got = Streaming::spawn(kvctl(), &ours.endpoint(), &args, env);
        if needs_write {
            write_both(reference, ours, &Write { args: &["put", "w/z", "1"], stdin: None, keys: &[] });
        }
        let (want, got) = (want.finish(), got.finish());
        assert_eq!(
            (reference.normalize(&want.stdout), stderr_lines(&want.stderr), want.code),
            (ours.normalize(&got.stdout), stderr_lines(&got.stderr), got.code),
            "{args:?} {env:?}"
        );
    }
}

async fn compare_watch(kind: ServerKind) {
    let (reference, ours) = tokio::join!(Server::start(kind), Server::start(kind));
    compare_live_watches(&reference, &ours);
    compare_interactive(&reference, &ours);
    compare_ending_watches(&reference, &ours);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_watch_matches_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare_watch(ServerKind::Etcd).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_watch_matches_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare_watch(ServerKind::Ours).await;
    }
}
