//! kvctl against etcdctl 3.4 for `lock` and `elect`, on real etcd and on ours (kvctl builds both on
//! KV + Watch + Lease, so it needs no Lock or Election service).
//!
//! Each side runs against its own server of the same kind: holders contend for a lock (each
//! acquires only after the previous one is interrupted), candidates take turns leading while
//! observers print every leader. Keys contain the session's lease id, chosen by the server: they
//! are masked (`<name>/<lease>`), in json after decoding the key.

mod common;
mod streaming;

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use common::{compare_on, etcd_tools_present, kvctl, steps, Server, ETCDCTL};
use streaming::{stderr_lines, Finished, Streaming};
use tests::ServerKind;

/// The lock and election names used; keys under them carry lease ids.
const NAMES: &[&str] = &["mylock", "cmdlock", "myelection"];

/// Replaces what differs between two servers: member ids (see [`Server::normalize`]), lease ids
/// in `<name>/<hex>` keys (json keys are decoded first) and `"lease"`/`"Lease"` values.
fn normalize(server: &Server, text: &str) -> String {
    let text = decode_json_keys(&server.normalize(text));
    let mut text = mask_number_field(&mask_number_field(&text, "\"lease\":"), "\"Lease\" : ");
    for name in NAMES {
        text = mask_lease_hex(&text, &format!("{name}/"));
    }
    text
}

/// `"key":"<base64>"` → `"key":<decoded>` so the lease id in it can be masked.
fn decode_json_keys(text: &str) -> String {
    let field = "\"key\":\"";
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(field) {
        out.push_str(&rest[..at + field.len() - 1]);
        rest = &rest[at + field.len()..];
        let end = rest.find('"').unwrap_or(rest.len());
        let decoded = STANDARD.decode(&rest[..end]).map(|b| String::from_utf8_lossy(&b).into_owned());
        out.push_str(&format!("<{}>", decoded.unwrap_or_else(|_| rest[..end].to_string())));
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

fn mask_number_field(text: &str, field: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(field) {
        out.push_str(&rest[..at + field.len()]);
        out.push_str("<lease>");
        rest = rest[at + field.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

fn mask_lease_hex(text: &str, prefix: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at + prefix.len()]);
        let tail = &rest[at + prefix.len()..];
        let hex_len = tail.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(tail.len());
        out.push_str(if hex_len > 0 { "<lease>" } else { "" });
        rest = &tail[hex_len..];
    }
    out.push_str(rest);
    out
}

/// A command run through etcdctl on the reference server and through kvctl on ours.
struct Both {
    args: &'static [&'static str],
    want: Streaming,
    got: Streaming,
}

impl Both {
    fn spawn(reference: &Server, ours: &Server, args: &'static [&'static str]) -> Both {
        Both {
            args,
            want: Streaming::spawn(ETCDCTL, &reference.endpoint(), args, &[]),
            got: Streaming::spawn(kvctl(), &ours.endpoint(), args, &[]),
        }
    }

    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool + Copy) {
        self.want.wait_for(what, done);
        self.got.wait_for(what, done);
    }

    /// Neither side printed anything yet (they are still waiting for the lock or leadership).
    fn assert_silent(&self) {
        assert_eq!((self.want.stdout(), self.got.stdout()), (String::new(), String::new()), "{:?}", self.args);
    }

    fn signal(&self, signal: &str) {
        self.want.signal(signal);
        self.got.signal(signal);
    }

    fn finish(self) -> (&'static [&'static str], Finished, Finished) {
        (self.args, self.want.finish(), self.got.finish())
    }
}

/// Compares how each pair ended; fails listing every difference.
fn assert_same(reference: &Server, ours: &Server, ended: Vec<(&[&str], Finished, Finished)>) {
    let mut mismatches = Vec::new();
    for (args, want, got) in ended {
        let want_view = (normalize(reference, &want.stdout), stderr_lines(&want.stderr), want.code);
        let got_view = (normalize(ours, &got.stdout), stderr_lines(&got.stderr), got.code);
        if want_view != got_view {
            mismatches.push(format!("{args:?}\n  etcdctl: {want_view:?}\n  kvctl:   {got_view:?}"));
        }
    }
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}

/// The time a waiting contender gets to (wrongly) print something before it is checked to be
/// still waiting.
const GRACE: Duration = Duration::from_millis(1500);

fn has_line_starting(prefix: &'static str) -> impl Fn(&str) -> bool + Copy {
    move |out: &str| out.lines().any(|l| l.starts_with(prefix))
}

/// Waits until both servers hold `count` keys under `prefix` (contenders queued up).
fn wait_for_keys(reference: &Server, ours: &Server, prefix: &str, count: usize) {
    for server in [reference, ours] {
        let start = std::time::Instant::now();
        loop {
            let out = common::run(ETCDCTL, &server.endpoint(), &["get", prefix, "--prefix", "--keys-only"], None);
            let keys = String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).count();
            if keys == count {
                break;
            }
            assert!(start.elapsed() < streaming::DEADLINE, "{count} keys under {prefix} never showed up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Three holders in turn: each acquires only after the previous one was interrupted.
fn compare_lock_contention(reference: &Server, ours: &Server) {
    let first = Both::spawn(reference, ours, &["lock", "mylock"]);
    first.wait_for("the lock key", has_line_starting("mylock/"));
    let second = Both::spawn(reference, ours, &["-w", "json", "lock", "mylock", "--ttl", "30"]);
    // The third must queue after the second: wait for the second's key first.
    wait_for_keys(reference, ours, "mylock/", 2);
    let third = Both::spawn(reference, ours, &["-w", "fields", "lock", "mylock"]);
    wait_for_keys(reference, ours, "mylock/", 3);
    std::thread::sleep(GRACE);
    second.assert_silent();
    third.assert_silent();
    first.signal("INT");
    let first = first.finish();
    second.wait_for("the json response", |out| out.ends_with("}\n"));
    third.assert_silent();
    second.signal("TERM");
    let second = second.finish();
    third.wait_for("the count field", |out| out.contains("\"Count\" : "));
    third.signal("INT");
    let ended = vec![first, second, third.finish()];
    assert!(ended.iter().all(|(_, want, _)| want.code == Some(0)), "{ended:?}");
    assert_same(reference, ours, ended);
}

/// Candidates take turns; observers print each leader (one started before any candidate, so it
/// waits for the first one; two started once there is a leader).
fn compare_election(reference: &Server, ours: &Server) {
    let early = Both::spawn(reference, ours, &["elect", "-l", "myelection"]);
    let first = Both::spawn(reference, ours, &["elect", "myelection", "p1"]);
    first.wait_for("the leader key", has_line_starting("myelection/"));
    early.wait_for("the first leader", |out| out.ends_with("p1\n"));
    let observer = Both::spawn(reference, ours, &["elect", "--listen", "myelection"]);
    let json_observer = Both::spawn(reference, ours, &["-w", "json", "elect", "-l", "myelection"]);
    observer.wait_for("the first leader", |out| out.ends_with("p1\n"));
    json_observer.wait_for("the first leader", |out| out.lines().count() == 1);
    let second = Both::spawn(reference, ours, &["elect", "myelection", "p 2"]);
    std::thread::sleep(GRACE);
    second.assert_silent();
    first.signal("INT");
    let first = first.finish();
    second.wait_for("the leader key", has_line_starting("myelection/"));
    for watcher in [&early, &observer] {
        watcher.wait_for("the second leader", |out| out.ends_with("p 2\n"));
    }
    json_observer.wait_for("the second leader", |out| out.lines().count() == 2);
    second.signal("TERM");
    let second = second.finish();
    for watcher in [&early, &observer, &json_observer] {
        watcher.signal("INT");
    }
    let ended = vec![first, second, early.finish(), observer.finish(), json_observer.finish()];
    assert!(ended.iter().all(|(_, want, _)| want.code == Some(0)), "{ended:?}");
    assert_same(reference, ours, ended);
}

/// `lock` running a command while holding the lock, and the argument errors.
fn compare_lock_commands(reference: &Server, ours: &Server) {
    let finished: [&'static [&'static str]; 4] = [
        &["lock", "cmdlock", "--", "sh", "-c", "echo key=$ETCD_LOCK_KEY rev=$ETCD_LOCK_REV"],
        &["lock", "--ttl", "5", "cmdlock", "--", "sh", "-c", "exit 3"],
        &["-w", "json", "lock", "cmdlock", "echo", "hi"],
        &["lock", "cmdlock", "no-such-command-xyz"],
    ];
    let ended = finished.iter().map(|args| Both::spawn(reference, ours, args).finish()).collect();
    assert_same(reference, ours, ended);
    compare_on(
        reference,
        ours,
        &steps(&[&["lock"], &["elect"], &["elect", "x"], &["elect", "-l", "x", "y"], &["elect", "a", "b", "c"]]),
    );
}

async fn compare_lock_elect(kind: ServerKind) {
    let (reference, ours) = tokio::join!(Server::start(kind), Server::start(kind));
    compare_lock_contention(&reference, &ours);
    compare_election(&reference, &ours);
    compare_lock_commands(&reference, &ours);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_lock_elect_match_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare_lock_elect(ServerKind::Etcd).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_lock_elect_match_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare_lock_elect(ServerKind::Ours).await;
    }
}

#[test]
fn normalization_masks_lease_ids() {
    let key = STANDARD.encode("mylock/694d77aa9e38260f");
    let json = format!("{{\"kvs\":[{{\"key\":\"{key}\",\"create_revision\":2,\"lease\":7587869}}]}}");
    assert_eq!(
        decode_json_keys(&json),
        "{\"kvs\":[{\"key\":<mylock/694d77aa9e38260f>,\"create_revision\":2,\"lease\":7587869}]}"
    );
    assert_eq!(mask_lease_hex("mylock/694d77aa9e38260f\n\n", "mylock/"), "mylock/<lease>\n\n");
    assert_eq!(mask_number_field("\"lease\":7587869}", "\"lease\":"), "\"lease\":<lease>}");
}
