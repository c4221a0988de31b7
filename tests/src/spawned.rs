//! A server process started with exactly the flags, variables and files a test gives it, as an operator
//! starts one from a unit file or a manifest (for tests of the flags themselves); killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::process;

/// One process, its own temp dir (for data dirs, config files, certificates) and its log.
pub struct Spawned {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Spawned {
    /// Starts `binary` in `dir` (its working directory) with `args` and `env` (and no `ETCD_*` variable of
    /// the test's own environment).
    pub fn start(binary: &Path, dir: &Path, args: &[String], env: &[(&str, &str)]) -> anyhow::Result<Spawned> {
        let log = dir.join(format!("{}.log", binary.file_name().and_then(|n| n.to_str()).unwrap_or("server")));
        let mut command = Command::new(binary);
        for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("ETCD_")) {
            command.env_remove(key);
        }
        let child = command
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdout(process::open_append(&log)?)
            .stderr(process::open_append(&log)?)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("spawn {}", binary.display()))?;
        Ok(Spawned { child, dir: dir.to_path_buf(), log })
    }

    /// The working directory the process was started in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Everything the process wrote.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has `line`, failing with the log if the process exits or `timeout` passes.
    pub async fn wait_for_log(&mut self, line: &str, timeout: Duration) -> anyhow::Result<()> {
        self.wait_for_log_count(line, 1, timeout).await
    }

    /// Waits until the log has `line` at least `count` times: processes started in one directory share
    /// its log, so a restarted one's line is the next of them, not the first.
    pub async fn wait_for_log_count(&mut self, line: &str, count: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().matches(line).count() >= count {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("the process exited ({status}) before logging {line:?}:\n{}", self.log());
            }
            if Instant::now() > deadline {
                bail!("no {line:?} in the log within {timeout:?}:\n{}", process::tail(&self.log(), 30));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the process to exit; its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<Option<i32>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status.code());
            }
            if Instant::now() > deadline {
                bail!("still running after {timeout:?}:\n{}", process::tail(&self.log(), 30));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// How long a member started by [`single_member`] may take to serve.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts `binary` (real etcd, or ours: they take the same flags) as member `e1` of a one-member cluster
/// on loopback `ports` (client, peer) with `data_dir` (new, or restored), its log in `dir`; returns once
/// it serves, with its client endpoint (`127.0.0.1:port`).
pub async fn single_member(
    binary: &Path,
    dir: &Path,
    data_dir: &Path,
    ports: [u16; 2],
) -> anyhow::Result<(Spawned, String)> {
    let [client, peer] = ports.map(process::url);
    let args = [
        "--name=e1".to_string(),
        format!("--data-dir={}", data_dir.display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=e1={peer}"),
    ];
    let mut member = Spawned::start(binary, dir, &args, &[])?;
    member.wait_for_log("ready to serve client requests", START_TIMEOUT).await?;
    Ok((member, format!("127.0.0.1:{}", ports[0])))
}

/// `count` distinct loopback ports that were free a moment ago.
pub fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    process::free_ports(count)
}
