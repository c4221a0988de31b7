//! The README's walkthrough, typed as a user would, through etcdctl and through kvctl: "alias
//! etcdctl=kvctl breaks nothing". Each tool gets its own fresh three-member cluster of the same
//! kind (ours, and real etcd), so both see the same history; every step must end with the same exit
//! code, the same `Error:` lines and the same stdout once cluster-specific values are masked.

mod common;

use std::collections::HashMap;
use std::process::{Command, Output};

use common::{error_lines, etcd_tools_present, kvctl, output_with_stdin, ETCDCTL};
use tests::{Cluster, ClusterConfig, ServerKind, Timing};

/// The ports the README's commands use (the `local-cluster` defaults), member by member.
const README_CLIENT_PORTS: [&str; 3] = ["127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"];
/// The lease id the README shows; each run substitutes the id its own `lease grant` printed.
const README_LEASE: &str = "694d8a0a2b3c4d5e";

/// One `$ etcdctl ...` line of the walkthrough, with its heredoc as stdin.
#[derive(Debug)]
struct Step {
    line: String,
    stdin: Option<String>,
}

/// The `$ ` lines of the first ```sh block after the "walkthrough" heading, with `export`ed
/// variables expanded.
fn walkthrough() -> Vec<Step> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    let section = readme.split("## A short walkthrough").nth(1).expect("README has a walkthrough section");
    let block = section.split("```sh").nth(1).and_then(|b| b.split("```").next()).expect("walkthrough sh block");
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut steps = Vec::new();
    let mut lines = block.lines();
    while let Some(line) = lines.next() {
        let Some(command) = line.strip_prefix("$ ") else { continue };
        let command = command.split("  #").next().unwrap_or(command).trim().to_string();
        if let Some(assignments) = command.strip_prefix("export ") {
            for assignment in assignments.split_whitespace() {
                if let Some((name, value)) = assignment.split_once('=') {
                    vars.insert(name.to_string(), value.to_string());
                }
            }
            continue;
        }
        let mut expanded = command.clone();
        for (name, value) in &vars {
            expanded = expanded.replace(&format!("${name}"), value);
        }
        let stdin = expanded.split_once("<<'").map(|(_, rest)| {
            let end = rest.trim_end_matches('\'').to_string();
            let mut text = String::new();
            for body in lines.by_ref() {
                if body == end {
                    break;
                }
                text.push_str(body);
                text.push('\n');
            }
            text
        });
        let expanded = expanded.split(" <<'").next().unwrap_or(&expanded).to_string();
        steps.push(Step { line: expanded, stdin });
    }
    steps
}

/// A shell-like split: whitespace separates words, single and double quotes group them.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// One tool's run of the walkthrough against its own cluster.
struct Run<'a> {
    program: &'a str,
    cluster: &'a Cluster,
    lease: Option<String>,
}

impl Run<'_> {
    fn step(&mut self, step: &Step) -> Output {
        let mut line = step.line.clone();
        for (i, port) in README_CLIENT_PORTS.iter().enumerate() {
            line = line.replace(port, &self.cluster.member(i).endpoint());
        }
        if let Some(lease) = &self.lease {
            line = line.replace(README_LEASE, lease);
        }
        let words = words(&line);
        assert_eq!(words.first().map(String::as_str), Some("etcdctl"), "walkthrough step {line:?}");
        let mut command = Command::new(self.program);
        command
            .env("ETCDCTL_API", "3")
            .env("KVCTL_ETCDCTL_VERSION", "3.4")
            .env_remove("ETCDCTL_ENDPOINTS")
            .args(&words[1..]);
        // Without `--endpoints` the README's commands go to the default, the first member.
        // (etcdctl refuses the variable and the flag together.)
        if !words.iter().any(|w| w.starts_with("--endpoints")) {
            command.env("ETCDCTL_ENDPOINTS", self.cluster.member(0).endpoint());
        }
        let output = output_with_stdin(command, step.stdin.as_deref());
        if words.get(1..3) == Some(&["lease".to_string(), "grant".to_string()]) {
            let stdout = String::from_utf8_lossy(&output.stdout);
            self.lease = stdout.split_whitespace().nth(1).map(str::to_string);
        }
        output
    }

    /// Masks what differs between two clusters: member endpoints and peer URLs, ids (hex and
    /// decimal), terms, sizes, and table padding.
    fn normalize(&self, stdout: &str) -> String {
        let mut text = stdout.to_string();
        for (i, member) in self.cluster.members().iter().enumerate() {
            text = text.replace(&member.client_url(), &format!("<client{i}>"));
            text = text.replace(&member.endpoint(), &format!("<client{i}>"));
            text = text.replace(&member.peer_url(), &format!("<peer{i}>"));
        }
        if let Some(lease) = &self.lease {
            text = text.replace(lease, "<lease>");
        }
        normalize_tables(&text.lines().map(mask_line).collect::<Vec<_>>()).join("\n")
    }
}

/// Table rows sorted (member order follows random ids) with the cells that differ between two
/// clusters masked: which member leads, sizes, terms and indexes. `ETCD_INITIAL_CLUSTER` lists
/// members in id order too: its entries are sorted.
fn normalize_tables(lines: &[String]) -> Vec<String> {
    const MASKED: [&str; 6] = ["DB SIZE", "IS LEADER", "RAFT TERM", "RAFT INDEX", "RAFT APPLIED INDEX", "ID"];
    let mut out = Vec::new();
    let mut header: Vec<String> = Vec::new();
    let mut rows: Vec<String> = Vec::new();
    for line in lines {
        if line.starts_with('|') {
            let cells: Vec<String> = line.split('|').map(str::to_string).collect();
            if header.is_empty() {
                header = cells;
                out.push(line.clone());
                continue;
            }
            let masked: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, cell)| match header.get(i) {
                    Some(name) if MASKED.contains(&name.as_str()) => "*".to_string(),
                    _ => cell.clone(),
                })
                .collect();
            rows.push(masked.join("|"));
            continue;
        }
        rows.sort();
        out.append(&mut rows);
        if let Some(list) = line.strip_prefix("ETCD_INITIAL_CLUSTER=") {
            let mut entries: Vec<&str> = list.trim_matches('"').split(',').collect();
            entries.sort();
            out.push(format!("ETCD_INITIAL_CLUSTER={}", entries.join(",")));
        } else {
            // A rule line (`+---+` after masking: `---+---`) stays inside the table.
            if !line.starts_with(['-', '+']) {
                header.clear();
            }
            out.push(line.clone());
        }
    }
    rows.sort();
    out.append(&mut rows);
    out
}

/// Numbers of 4+ digits and hex words of 10+ digits become `#`; in tables, padding and rules go.
fn mask_line(line: &str) -> String {
    let mut out = String::new();
    let mut token = String::new();
    let flush = |token: &mut String, out: &mut String| {
        let digits = token.chars().all(|c| c.is_ascii_digit()) && token.len() >= 4;
        let hex = token.chars().all(|c| c.is_ascii_hexdigit()) && token.len() >= 10;
        out.push_str(if digits || hex { "#" } else { token });
        token.clear();
    };
    for c in line.chars() {
        if c.is_ascii_alphanumeric() {
            token.push(c);
        } else {
            flush(&mut token, &mut out);
            out.push(c);
        }
    }
    flush(&mut token, &mut out);
    // `%16x` pads an id with spaces to 16 columns; ids of two clusters differ in length.
    while out.contains("  #") {
        out = out.replace("  #", " #");
    }
    if out.starts_with('|') || out.starts_with('+') {
        // A table row: cell contents without their padding; raft terms and indexes masked.
        return out
            .split('|')
            .map(|cell| cell.trim().trim_matches('-').trim_matches('+'))
            .map(|cell| if cell.chars().all(|c| c.is_ascii_digit()) && !cell.is_empty() { "#" } else { cell })
            .collect::<Vec<_>>()
            .join("|");
    }
    for field in ["\"raft_term\":", "\"RaftTerm\" : "] {
        if let Some(at) = out.find(field) {
            let after = at + field.len();
            let rest = out[after..].trim_start_matches(|c: char| c.is_ascii_digit()).to_string();
            out = format!("{}#{}", &out[..after], rest);
        }
    }
    out
}

async fn walk(kind: ServerKind) {
    let steps = walkthrough();
    assert!(steps.len() >= 10, "the walkthrough has its steps: {steps:?}");
    let config = ClusterConfig { kind, timing: Some(Timing::DEFAULT), ..ClusterConfig::new(3) };
    let (a, b) = tokio::join!(Cluster::start_with(config.clone()), Cluster::start_with(config));
    let (a, b) = (a.expect("cluster a"), b.expect("cluster b"));
    if kind == ServerKind::Etcd {
        // etcd refuses `member add` until its leader has seen every voter for 5 s
        // (`--strict-reconfig-check`); a user reading the README is slower than that.
        tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    }
    let mut reference = Run { program: ETCDCTL, cluster: &a, lease: None };
    let mut ours = Run { program: kvctl(), cluster: &b, lease: None };
    let mut mismatches = Vec::new();
    for step in &steps {
        let (want, got) = (reference.step(step), ours.step(step));
        let want_view = (
            reference.normalize(&String::from_utf8_lossy(&want.stdout)),
            error_lines(&want.stderr),
            want.status.code(),
        );
        let got_view =
            (ours.normalize(&String::from_utf8_lossy(&got.stdout)), error_lines(&got.stderr), got.status.code());
        if want_view != got_view {
            mismatches.push(format!("{}\n  etcdctl: {want_view:?}\n  kvctl:   {got_view:?}", step.line));
        }
    }
    assert!(mismatches.is_empty(), "the walkthrough differs under kvctl:\n{}", mismatches.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_walkthrough_with_kvctl_on_our_cluster() {
    if etcd_tools_present() {
        walk(ServerKind::Ours).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_walkthrough_with_kvctl_on_real_etcd() {
    if etcd_tools_present() {
        walk(ServerKind::Etcd).await;
    }
}

#[test]
fn shell_words() {
    assert_eq!(words(r#"etcdctl put a "b c" 'd"e'"#), ["etcdctl", "put", "a", "b c", "d\"e"]);
    assert_eq!(mask_line(r#"{"member_id":12345678,"raft_term":2}"#), r#"{"member_id":#,"raft_term":#}"#);
}
