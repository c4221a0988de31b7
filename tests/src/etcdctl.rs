//! Running `etcdctl` (v3 API) against a member.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{bail, Context};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The default location of etcdctl (Debian's `etcd-client` package).
pub const DEFAULT_ETCDCTL_BIN: &str = "/usr/bin/etcdctl";

/// What one etcdctl run printed and how it exited.
#[derive(Debug, Clone)]
pub struct CtlOutput {
    pub stdout: String,
    pub stderr: String,
    /// The exit code (`None` if a signal ended it).
    pub code: Option<i32>,
}

impl CtlOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The stdout of a successful run, or an error carrying everything it printed.
    pub fn ok(self) -> anyhow::Result<String> {
        if !self.success() {
            bail!("etcdctl failed ({:?}):\nstdout:\n{}\nstderr:\n{}", self.code, self.stdout, self.stderr);
        }
        Ok(self.stdout)
    }

    /// The `Error: ...` line etcdctl prints on failure (the client's retry warnings, which carry
    /// timestamps and random client IDs, are the other stderr lines).
    pub fn error_line(&self) -> Option<&str> {
        self.stderr.lines().find(|line| line.starts_with("Error: "))
    }

    /// The stdout parsed as JSON (for `-w json`).
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("etcdctl printed invalid JSON: {:?}", self.stdout))
    }
}

/// `ETCDCTL_BIN` or [`DEFAULT_ETCDCTL_BIN`].
pub fn etcdctl_bin() -> PathBuf {
    std::env::var_os("ETCDCTL_BIN").map_or_else(|| PathBuf::from(DEFAULT_ETCDCTL_BIN), PathBuf::from)
}

/// Runs `etcdctl --endpoints=<endpoint> <args>` with `ETCDCTL_API=3`.
pub async fn run(endpoint: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<CtlOutput> {
    let bin = etcdctl_bin();
    let mut child = Command::new(&bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {}", bin.display()))?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().context("etcdctl stdin")?;
        pipe.write_all(input.as_bytes()).await?;
        // Dropping the pipe closes it, which ends etcdctl's input.
    }
    let output = child.wait_with_output().await?;
    Ok(CtlOutput {
        stdout: String::from_utf8(output.stdout).context("etcdctl stdout is not UTF-8")?,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        code: output.status.code(),
    })
}
