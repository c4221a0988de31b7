//! kvctl against etcdctl 3.4 for `lease grant|revoke|timetolive|list|keep-alive` (and `put --lease`,
//! `txn` puts with a lease) in every output format, on real etcd and on ours.
//!
//! Lease ids are chosen by each server, so the script names them `<lease1>`, `<lease2>`… in the
//! order `lease grant` printed them on that server; each side substitutes its own ids into the
//! command lines and maps them back in the output. Remaining TTLs (`timetolive`) depend on the
//! clock and are masked; granted TTLs are compared as they are.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::{error_lines, etcd_tools_present, kvctl, run, view, Server, View, ETCDCTL};
use tests::ServerKind;

enum Step {
    /// A command line without stdin.
    Run(&'static [&'static str]),
    /// A command line with stdin (a txn).
    Txn(&'static [&'static str], &'static str),
    /// `lease keep-alive` left running until its first answer; then the lease (its last argument)
    /// is revoked with etcdctl, and the command must end by itself.
    KeepAliveUntilRevoked(&'static [&'static str]),
}

use Step::{KeepAliveUntilRevoked, Run, Txn};

const SCRIPT: &[Step] = &[
    Run(&["lease", "grant", "600"]),
    Run(&["-w", "json", "lease", "grant", "500"]),
    Run(&["-w", "fields", "lease", "grant", "400"]),
    Run(&["put", "--lease=<lease1>", "k1", "v1"]),
    Run(&["put", "k2", "v2", "--lease", "<lease2>"]),
    Run(&["-w", "json", "get", "k", "--prefix"]),
    Txn(&["txn"], "\nput k3 v3 --lease=<lease3>\nget k3\n\n\n"),
    Txn(&["-w", "json", "txn"], "\nput k4 v4 --lease=<lease3>\n\n\n"),
    Run(&["-w", "fields", "get", "k3"]),
    // One key per lease where keys are listed: etcd lists them in map order.
    Run(&["lease", "timetolive", "<lease1>"]),
    Run(&["lease", "timetolive", "<lease1>", "--keys"]),
    Run(&["-w", "json", "lease", "timetolive", "<lease2>", "--keys"]),
    Run(&["-w", "fields", "lease", "timetolive", "--keys", "<lease1>"]),
    Run(&["-w", "json", "lease", "timetolive", "<lease3>"]),
    Run(&["-w", "table", "lease", "timetolive", "<lease1>"]),
    Run(&["lease", "timetolive", "1234"]),
    Run(&["lease", "timetolive", "1234", "--keys"]),
    Run(&["-w", "json", "lease", "timetolive", "1234"]),
    Run(&["-w", "fields", "lease", "timetolive", "1234"]),
    // Several leases: listed soonest expiry first.
    Run(&["lease", "list"]),
    Run(&["-w", "json", "lease", "list"]),
    Run(&["-w", "fields", "lease", "list"]),
    Run(&["-w", "table", "lease", "list"]),
    Run(&["lease", "keep-alive", "--once", "<lease1>"]),
    Run(&["-w", "json", "lease", "keep-alive", "--once", "<lease1>"]),
    Run(&["-w", "fields", "lease", "keep-alive", "--once", "<lease2>"]),
    Run(&["-w", "table", "lease", "keep-alive", "--once", "<lease2>"]),
    // Revoking deletes the attached keys.
    Run(&["lease", "revoke", "<lease3>"]),
    Run(&["-w", "json", "get", "k", "--prefix"]),
    Run(&["lease", "timetolive", "<lease3>"]),
    Run(&["lease", "revoke", "<lease3>"]),
    Run(&["lease", "keep-alive", "<lease3>"]),
    Run(&["-w", "json", "lease", "keep-alive", "<lease3>"]),
    Run(&["-w", "fields", "lease", "keep-alive", "<lease3>"]),
    Run(&["-w", "table", "lease", "keep-alive", "<lease3>"]),
    Run(&["lease", "keep-alive", "--once", "<lease3>"]),
    Run(&["-w", "json", "lease", "revoke", "<lease2>"]),
    Run(&["-w", "fields", "lease", "grant", "300"]),
    Run(&["-w", "fields", "lease", "revoke", "<lease4>"]),
    Run(&["lease", "grant", "300"]),
    Run(&["-w", "table", "lease", "revoke", "<lease5>"]),
    Run(&["lease", "list"]),
    Run(&["put", "k5", "v", "--lease=<lease5>"]),
    // Arguments etcdctl refuses.
    Run(&["lease", "grant"]),
    Run(&["lease", "grant", "x"]),
    Run(&["lease", "grant", "1", "2"]),
    Run(&["lease", "grant", "99999999999"]),
    Run(&["lease", "revoke"]),
    Run(&["lease", "revoke", "zz"]),
    Run(&["lease", "revoke", "1", "2"]),
    Run(&["lease", "revoke", "8000000000000000"]),
    Run(&["lease", "timetolive"]),
    Run(&["lease", "timetolive", "zz"]),
    Run(&["lease", "keep-alive"]),
    Run(&["lease", "keep-alive", "zz"]),
    Run(&["lease", "keep-alive", "--once"]),
    // Streaming keep-alive, in every format, until the lease is revoked under it.
    Run(&["lease", "grant", "6"]),
    KeepAliveUntilRevoked(&["lease", "keep-alive", "<lease6>"]),
    Run(&["lease", "grant", "6"]),
    KeepAliveUntilRevoked(&["-w", "json", "lease", "keep-alive", "<lease7>"]),
    Run(&["lease", "grant", "6"]),
    KeepAliveUntilRevoked(&["-w", "fields", "lease", "keep-alive", "<lease8>"]),
    Run(&["lease", "grant", "6"]),
    KeepAliveUntilRevoked(&["-w", "table", "lease", "keep-alive", "<lease9>"]),
    // Last: the table format grants but never prints the id.
    Run(&["-w", "table", "lease", "grant", "100"]),
];

/// One client (etcdctl or kvctl) on its own server, with the leases granted there so far.
struct Side<'a> {
    program: &'static str,
    server: &'a Server,
    leases: Vec<i64>,
}

impl Side<'_> {
    fn run(&mut self, step: &Step) -> View {
        match step {
            Run(args) => self.run_args(args, None),
            Txn(args, stdin) => self.run_args(args, Some(&self.substitute(stdin))),
            KeepAliveUntilRevoked(args) => self.keep_alive_until_revoked(args),
        }
    }

    fn run_args(&mut self, args: &[&str], stdin: Option<&str>) -> View {
        let args = self.substitute_all(args);
        let out = run(self.program, &self.server.endpoint(), &strs(&args), stdin);
        let (stdout, errors, code) = view(self.server, &out);
        if args.iter().any(|a| a == "grant") {
            self.learn(&stdout);
        }
        let mut stdout = self.normalize(&stdout);
        if args.iter().any(|a| a == "timetolive") {
            stdout = mask_remaining_ttl(&stdout);
        }
        (stdout, errors.iter().map(|e| self.normalize(e)).collect(), code)
    }

    /// Runs keep-alive until its first line, revokes the lease, and waits for the command to end.
    /// Answers repeat while it runs, so the output is compared as its distinct lines in order.
    fn keep_alive_until_revoked(&mut self, args: &[&str]) -> View {
        let args = self.substitute_all(args);
        let lease = args.last().cloned().unwrap_or_default();
        let endpoint = self.server.endpoint();
        let mut child = Command::new(self.program)
            .env("ETCDCTL_API", "3")
            .env("KVCTL_ETCDCTL_VERSION", "3.4")
            .env_remove("ETCDCTL_ENDPOINTS")
            .arg(format!("--endpoints={endpoint}"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn keep-alive");
        let stdout = child.stdout.take().expect("stdout pipe");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        lines.extend(rx.recv_timeout(Duration::from_secs(15)).ok());
        run(ETCDCTL, &endpoint, &["lease", "revoke", &lease], None);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => lines.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    lines.push("<still running 20 s after the revoke>".to_string());
                    break;
                }
            }
        }
        let status = child.wait().expect("keep-alive exits");
        let mut stderr = Vec::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_end(&mut stderr);
        }
        let mut distinct: Vec<String> = Vec::new();
        for line in lines {
            let line = self.normalize(&self.server.normalize(&line));
            if !distinct.contains(&line) {
                distinct.push(line);
            }
        }
        (distinct.iter().map(|l| format!("{l}\n")).collect(), error_lines(&stderr), status.code())
    }

    /// Remembers the id a `lease grant` printed, in any format.
    fn learn(&mut self, stdout: &str) {
        let id = if let Some(rest) = stdout.strip_prefix("lease ") {
            rest.split(' ').next().and_then(|hex| i64::from_str_radix(hex, 16).ok())
        } else {
            ["\"ID\":", "\"ID\" : "].iter().find_map(|marker| {
                let at = stdout.find(marker)? + marker.len();
                let digits: String = stdout[at..].chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
        };
        if let Some(id) = id.filter(|id| !self.leases.contains(id)) {
            self.leases.push(id);
        }
    }

    fn substitute(&self, text: &str) -> String {
        // Highest numbers first, so `<lease1>` does not eat into `<lease10>`.
        self.leases
            .iter()
            .enumerate()
            .rev()
            .fold(text.to_string(), |text, (i, id)| text.replace(&format!("<lease{}>", i + 1), &format!("{id:016x}")))
    }

    fn substitute_all(&self, args: &[&str]) -> Vec<String> {
        args.iter().map(|a| self.substitute(a)).collect()
    }

    /// Each known id, hexadecimal or decimal, back to its `<leaseN>` name.
    fn normalize(&self, text: &str) -> String {
        self.leases.iter().enumerate().fold(text.to_string(), |text, (i, id)| {
            let name = format!("<lease{}>", i + 1);
            text.replace(&format!("{id:016x}"), &name).replace(&id.to_string(), &name)
        })
    }
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The remaining TTL of `timetolive` in each format: `remaining(Ns)`, `"ttl":N`, `"TTL" : N`.
fn mask_remaining_ttl(text: &str) -> String {
    ["remaining(", "\"ttl\":", "\"TTL\" : "].iter().fold(text.to_string(), |text, marker| {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(marker) {
            let after = at + marker.len();
            out.push_str(&rest[..after]);
            let tail = &rest[after..];
            let number = tail.strip_prefix('-').unwrap_or(tail);
            let digits = number.len() - number.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            // -1 ("already expired") is exact; only a live lease's countdown is masked.
            if tail.starts_with('-') || digits == 0 {
                rest = tail;
            } else {
                out.push_str("<ttl>");
                rest = &number[digits..];
            }
        }
        out.push_str(rest);
        out
    })
}

async fn compare_leases(kind: ServerKind) {
    let (reference, ours) = tokio::join!(Server::start(kind), Server::start(kind));
    let mut etcdctl = Side { program: ETCDCTL, server: &reference, leases: Vec::new() };
    let mut kv = Side { program: kvctl(), server: &ours, leases: Vec::new() };
    let mut mismatches = Vec::new();
    for (index, step) in SCRIPT.iter().enumerate() {
        let (want, got) = (etcdctl.run(step), kv.run(step));
        if want != got {
            mismatches.push(format!("step {index}\n  etcdctl: {want:?}\n  kvctl:   {got:?}"));
        }
    }
    assert_eq!(etcdctl.leases.len(), 9, "every grant's id was learned");
    assert!(mismatches.is_empty(), "kvctl differs from etcdctl:\n{}", mismatches.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_matches_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare_leases(ServerKind::Etcd).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_matches_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare_leases(ServerKind::Ours).await;
    }
}

#[test]
fn masks_only_live_countdowns() {
    assert_eq!(
        mask_remaining_ttl("granted with TTL(600s), remaining(598s)\n\"ttl\":-1,\"TTL\" : 12\n"),
        "granted with TTL(600s), remaining(<ttl>s)\n\"ttl\":-1,\"TTL\" : <ttl>\n"
    );
}
