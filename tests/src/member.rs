//! One member process (real etcd or `raft-node`) on free ports with a temporary data dir.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use etcd_client::{Client, ConnectOptions};
use tempfile::TempDir;

use crate::etcdctl::{self, CtlOutput};
use crate::process::{self, free_port, open_append, tail};
use crate::server::ServerKind;

/// How long a member may take to start serving requests.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How many times a fresh start retries with new ports when another test grabbed one first.
const PORT_RETRIES: usize = 5;
/// The member's name in `--name` and `--initial-cluster`.
pub const MEMBER_NAME: &str = "m1";

/// Server flags that a test may change. The defaults leave etcd's defaults alone.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// The implementation to run; defaults to `KV_TEST_SERVER`.
    pub kind: ServerKind,
    /// `--max-txn-ops`.
    pub max_txn_ops: Option<u32>,
    /// `--max-request-bytes`.
    pub max_request_bytes: Option<u64>,
    /// More flags, passed as given (e.g. `--quota-backend-bytes=...`).
    pub extra_args: Vec<String>,
}

impl Default for MemberConfig {
    fn default() -> Self {
        MemberConfig {
            kind: ServerKind::from_env(),
            max_txn_ops: None,
            max_request_bytes: None,
            extra_args: Vec::new(),
        }
    }
}

/// A running single-member cluster. The process is killed (SIGKILL) when this is dropped.
pub struct Member {
    config: MemberConfig,
    binary: PathBuf,
    /// Holds `data/` (the data dir) and `member.log` (stdout and stderr of every run).
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl Member {
    /// Starts a member of the `KV_TEST_SERVER` kind with default flags.
    pub async fn start() -> anyhow::Result<Member> {
        Member::start_with(MemberConfig::default()).await
    }

    /// Starts a member with `config` and waits until it serves reads.
    pub async fn start_with(config: MemberConfig) -> anyhow::Result<Member> {
        let binary = config.kind.binary()?;
        let dir = tempfile::Builder::new().prefix("kv-member-").tempdir()?;
        let mut member = Member { config, binary, dir, client_port: 0, peer_port: 0, child: None };
        for attempt in 1..=PORT_RETRIES {
            member.client_port = free_port()?;
            member.peer_port = free_port()?;
            member.spawn()?;
            match member.wait_ready().await {
                Ok(()) => return Ok(member),
                // Ports are picked by binding port 0 and closing it, so a parallel test may take one
                // before the member binds it.
                Err(_) if attempt < PORT_RETRIES && member.exited() && member.log_has("address already in use") => {
                    // A new data dir too: the failed run may have written a member ID for these ports.
                    std::fs::remove_dir_all(member.data_dir()).ok();
                }
                Err(err) => return Err(err),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The implementation this member runs.
    pub fn kind(&self) -> ServerKind {
        self.config.kind
    }

    /// `127.0.0.1:<client port>`, as etcdctl's `--endpoints` takes it.
    pub fn endpoint(&self) -> String {
        process::endpoint(self.client_port)
    }

    /// `http://127.0.0.1:<client port>`.
    pub fn client_url(&self) -> String {
        process::url(self.client_port)
    }

    /// `http://127.0.0.1:<peer port>`.
    pub fn peer_url(&self) -> String {
        process::url(self.peer_port)
    }

    /// The member's name (`--name`).
    pub fn name(&self) -> &str {
        MEMBER_NAME
    }

    /// The data dir, kept across [`Member::restart`].
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Everything the process (all its runs) wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_else(|err| format!("<no log: {err}>"))
    }

    /// A client connected to this member only.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let options =
            ConnectOptions::new().with_connect_timeout(Duration::from_secs(2)).with_timeout(Duration::from_secs(10));
        Ok(Client::connect([self.endpoint()], Some(options)).await?)
    }

    /// Runs `etcdctl --endpoints=<this member> <args>`.
    pub async fn etcdctl(&self, args: &[&str]) -> anyhow::Result<CtlOutput> {
        etcdctl::run(&self.endpoint(), args, None).await
    }

    /// Runs `etcdctl --endpoints=<this member> <args>` with `stdin` as its standard input.
    pub async fn etcdctl_stdin(&self, args: &[&str], stdin: &str) -> anyhow::Result<CtlOutput> {
        etcdctl::run(&self.endpoint(), args, Some(stdin)).await
    }

    /// Kills the process with SIGKILL, without any chance to flush, and reaps it.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("kill")?;
            child.wait().context("wait")?;
        }
        Ok(())
    }

    /// Kills the process if it runs, then starts it again on the same data dir and ports.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9()?;
        self.spawn()?;
        self.wait_ready().await
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("member.log")
    }

    fn log_has(&self, needle: &str) -> bool {
        self.log().to_lowercase().contains(needle)
    }

    fn exited(&mut self) -> bool {
        self.child.as_mut().is_none_or(|child| !matches!(child.try_wait(), Ok(None)))
    }

    /// The flags of a single-member cluster. etcd ignores the `--initial-*` ones on a restart.
    fn args(&self) -> Vec<String> {
        let (client, peer) = (self.client_url(), self.peer_url());
        let mut args = vec![
            format!("--name={MEMBER_NAME}"),
            format!("--data-dir={}", self.data_dir().display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster={MEMBER_NAME}={peer}"),
            "--initial-cluster-state=new".to_owned(),
        ];
        if let Some(ops) = self.config.max_txn_ops {
            args.push(format!("--max-txn-ops={ops}"));
        }
        if let Some(bytes) = self.config.max_request_bytes {
            args.push(format!("--max-request-bytes={bytes}"));
        }
        args.extend(self.config.extra_args.iter().cloned());
        args
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = open_append(&self.log_path())?;
        let child = Command::new(&self.binary)
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {}", self.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls with a linearizable read until one succeeds, the process exits, or the deadline passes.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last_error = String::from("no attempt");
        while Instant::now() < deadline {
            if self.exited() {
                bail!("{:?} member exited before it was ready; log:\n{}", self.kind(), self.log());
            }
            match tokio::time::timeout(Duration::from_secs(3), self.probe()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(err)) => last_error = format!("{err:#}"),
                Err(_) => last_error = "probe timed out".to_owned(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "{:?} member not ready after {READY_TIMEOUT:?} (last error: {last_error}); log:\n{}",
            self.kind(),
            self.log()
        )
    }

    async fn probe(&self) -> anyhow::Result<()> {
        let mut client = self.client().await?;
        client.get("health", None).await?;
        Ok(())
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // The test harness shows captured output only for failing tests, so always leave the log's
        // end there: a test that returns `Err` fails without panicking.
        eprintln!("---- {:?} member log ({}) ----\n{}", self.kind(), self.endpoint(), tail(&self.log(), 60));
        // Nothing to do about a failure while dropping; the temp dir goes away anyway.
        let _ = self.kill9();
    }
}
