//! What every end-to-end test needs: whether it can run here, one cluster at a time, and running
//! `jepsen test` into a fresh store and reading back its report folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

/// One run at a time under plain `cargo test` (nextest runs each test alone and gives it both cores).
static RUNS: Mutex<()> = Mutex::new(());

/// Why these tests cannot run here, if they cannot: they need root (`unshare --net --pid`), nftables
/// and a built `raft-node` next to the `jepsen` binary (`cargo build -p raft-node`).
pub fn missing_prerequisite() -> Option<String> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if !works("unshare", &["--net", "--pid", "--fork", "true"]) {
        return Some("`unshare --net --pid` is not permitted (needs root)".to_string());
    }
    if !works("nft", &["--version"]) {
        return Some("nftables (`nft`) is not installed".to_string());
    }
    let server = raft_node();
    if !server.is_file() {
        return Some(format!("{} is missing; run `cargo build -p raft-node` first", server.display()));
    }
    None
}

/// Skips the calling test (with a message) when it cannot run here; otherwise holds the run lock.
#[must_use]
pub fn start() -> Option<MutexGuard<'static, ()>> {
    if let Some(why) = missing_prerequisite() {
        // CI and scripts/test (which installs nftables and runs as root) require every run.
        assert!(!tools_required(), "this run requires the jepsen tests: {why}");
        eprintln!("skipped: {why}");
        return None;
    }
    Some(one_at_a_time())
}

/// Whether the run must have every tool (set by `CI` and by `scripts/test`): a missing one fails the test.
pub fn tools_required() -> bool {
    let set = |name| std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("KV_TEST_REQUIRE_TOOLS")
}

/// The run lock, for tests that check their own prerequisites.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    RUNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn raft_node() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_jepsen")).with_file_name("raft-node")
}

pub fn jepsen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_jepsen"))
}

/// What one `jepsen test` left behind; the store is removed when this is dropped.
pub struct Report {
    pub dir: PathBuf,
    pub summary: Value,
    _store: tempfile::TempDir,
}

impl Report {
    /// The result of one checker.
    pub fn result(&self, checker: &str) -> &Value {
        let summary = &self.summary;
        summary["results"]
            .as_array()
            .and_then(|results| results.iter().find(|r| r["checker"] == checker))
            .unwrap_or_else(|| panic!("no {checker} result in {summary:#}"))
    }

    /// A JSONL file of the report, one parsed value per line.
    pub fn jsonl(&self, name: &str) -> Vec<Value> {
        read_jsonl(&self.dir.join(name))
    }

    /// Whether a fault of this kind was started.
    pub fn fault_started(&self, fault: &str) -> bool {
        let faults = self.summary["faults"].as_array().expect("faults");
        faults.iter().any(|f| f["f"] == "start" && f["fault"] == fault)
    }

    /// Asserts the run and the named checkers are valid, printing the summary otherwise.
    pub fn assert_valid(&self, checkers: &[&str]) {
        assert_eq!(self.summary["valid"], "valid", "{:#}", self.summary);
        for checker in checkers {
            assert_eq!(self.result(checker)["valid"], "valid", "{checker}: {:#}", self.summary);
        }
    }

    /// The summary's notes.
    pub fn notes(&self) -> Vec<&str> {
        self.summary["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).collect()
    }

    /// The run's `ok` op count.
    pub fn ok_ops(&self) -> u64 {
        self.summary["ops"]["ok"].as_u64().unwrap_or(0)
    }
}

/// Runs `jepsen test <args>` into a fresh store and reads the summary.
pub fn jepsen_test(args: &[&str]) -> Report {
    let store = tempfile::tempdir().expect("temp store");
    let output = jepsen().arg("test").args(args).arg("--store").arg(store.path()).output().expect("run jepsen");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let dir = std::fs::read_dir(store.path())
        .expect("store")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.join("summary.json").is_file())
        .unwrap_or_else(|| panic!("no report (status {}):\n{stdout}\n{stderr}", output.status));
    eprintln!("{stdout}");
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    let summary = serde_json::from_str(&text).expect("summary.json parses");
    Report { dir, summary, _store: store }
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{}: {err}: {line}", path.display())))
        .collect()
}
