//! `make-mirror` between real etcd and our server, both ways: keys present at the start and keys
//! written while mirroring must arrive at the destination, exactly as etcdctl's `make-mirror`
//! writes them (etcdctl mirrors the same source into a second, identical destination; both
//! destinations must then hold the same keys at the same revisions).

mod common;
mod streaming;

use std::time::{Duration, Instant};

use common::{compare_on, etcd_tools_present, kvctl, run, Server, Step, ETCDCTL};
use streaming::{stderr_lines, Streaming, DEADLINE};
use tests::ServerKind;

/// Written to the source before mirroring starts.
const BASE: &[&[&str]] = &[&["put", "mm/a", "1"], &["put", "mm/b", "2"], &["put", "other", "x"]];

/// Written to the source while mirroring: puts, a delete, a txn of two puts (one destination
/// txn), a key outside the prefix.
const LIVE: &[(&[&str], Option<&str>)] = &[
    (&["put", "mm/c", "3"], None),
    (&["del", "mm/a"], None),
    (&["put", "other", "y"], None),
    (&["txn"], Some("\nput mm/t1 a\nput mm/t2 b\n\n\n")),
    (&["put", "mm/b", "22"], None),
];

/// Keys synced in all: the two base keys and five changes.
const SYNCED: &str = "7\n";

fn etcdctl_ok(server: &Server, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(ETCDCTL, &server.endpoint(), args, stdin);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `dest` holds exactly `want` (`get "" --prefix` output) from `mirror`.
fn wait_for_keys(dest: &Server, want: &str, mirror: &Streaming) {
    let start = Instant::now();
    loop {
        let got = etcdctl_ok(dest, &["get", "", "--prefix"], None);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "destination never reached {want:?}; has {got:?}\nmirror stdout: {:?}\nmirror stderr: {:?}",
            mirror.stdout(),
            mirror.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Mirrors `source` with `args` through etcdctl into one destination and through kvctl into
/// another (both fresh, of `dest_kind`), writes while mirroring, and compares the destinations.
/// With `wait_for_count`, also waits for the 30-second report of the number of synced keys.
async fn mirror(
    source_kind: ServerKind,
    dest_kind: ServerKind,
    args: &[&str],
    dest_keys: [&str; 2],
    wait_for_count: bool,
) {
    let (source, want_dest, got_dest) =
        tokio::join!(Server::start(source_kind), Server::start(dest_kind), Server::start(dest_kind));
    for step in BASE {
        etcdctl_ok(&source, step, None);
    }
    let with_dest = |dest: &Server| -> Vec<String> {
        args.iter().map(|a| a.to_string()).chain([dest.endpoint()]).collect::<Vec<_>>()
    };
    let (want_args, got_args) = (with_dest(&want_dest), with_dest(&got_dest));
    let want =
        Streaming::spawn(ETCDCTL, &source.endpoint(), &want_args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let got =
        Streaming::spawn(kvctl(), &source.endpoint(), &got_args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let [base_keys, final_keys] = dest_keys;
    wait_for_keys(&want_dest, base_keys, &want);
    wait_for_keys(&got_dest, base_keys, &got);
    for (step, stdin) in LIVE {
        etcdctl_ok(&source, step, *stdin);
    }
    wait_for_keys(&want_dest, final_keys, &want);
    wait_for_keys(&got_dest, final_keys, &got);
    if wait_for_count {
        for side in [&want, &got] {
            side.wait_for_within(Duration::from_secs(45), "the synced-keys count", |out| out == SYNCED);
        }
    }
    let (want, got) = (want.kill(), got.kill());
    assert_eq!(
        (want.stdout, stderr_lines(&want.stderr)),
        (got.stdout, stderr_lines(&got.stderr)),
        "make-mirror output"
    );
    let dump = ["get", "", "--prefix", "-w", "json"];
    assert_eq!(
        want_dest.normalize(&etcdctl_ok(&want_dest, &dump, None)),
        got_dest.normalize(&etcdctl_ok(&got_dest, &dump, None)),
        "destinations differ"
    );
    compare_errors(&source, &want_dest);
}

/// Argument errors, each run against the same source and destination.
fn compare_errors(source: &Server, dest: &Server) {
    let endpoint = dest.endpoint();
    let conflict = ["make-mirror", "--dest-prefix", "x", "--no-dest-prefix", endpoint.as_str()];
    let two = ["make-mirror", endpoint.as_str(), endpoint.as_str()];
    let script = [
        Step { args: &["make-mirror"], stdin: None },
        Step { args: &two, stdin: None },
        Step { args: &conflict, stdin: None },
    ];
    compare_on(source, source, &script);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_real_etcd_into_our_server() {
    if etcd_tools_present() {
        let base = "nn/a\n1\nnn/b\n2\n";
        let after = "nn/b\n22\nnn/c\n3\nnn/t1\na\nnn/t2\nb\n";
        let args = ["make-mirror", "--prefix", "mm/", "--dest-prefix", "nn/"];
        mirror(ServerKind::Etcd, ServerKind::Ours, &args, [base, after], true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_our_server_into_real_etcd() {
    if etcd_tools_present() {
        let base = "a\n1\nb\n2\n";
        let after = "b\n22\nc\n3\nt1\na\nt2\nb\n";
        // `--prefix=mm/`: a value here, where get's and watch's `--prefix` is a bool.
        let args = ["make-mirror", "--prefix=mm/", "--no-dest-prefix"];
        mirror(ServerKind::Ours, ServerKind::Etcd, &args, [base, after], false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_the_whole_keyspace_between_our_servers() {
    if etcd_tools_present() {
        let base = "mm/a\n1\nmm/b\n2\nother\nx\n";
        let after = "mm/b\n22\nmm/c\n3\nmm/t1\na\nmm/t2\nb\nother\ny\n";
        mirror(ServerKind::Ours, ServerKind::Ours, &["make-mirror"], [base, after], false).await;
    }
}
