//! One member of a [`crate::Cluster`]: a process with its own data dir, ports and log, which a test
//! can kill, restart, pause and resume.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use etcd_client::{Client, ConnectOptions, GetOptions, KeyValue};
use tempfile::TempDir;

use crate::etcdctl::{self, CtlOutput};
use crate::process::{self, open_append, send_signal, tail};
use crate::server::ServerKind;

/// How long a (re)started member may take to answer Status.
pub const SERVE_TIMEOUT: Duration = Duration::from_secs(20);
/// The request timeout of [`ClusterMember::client`]; longer than etcd's own request timeout
/// (5 s + 2 election timeouts), so that the server's error arrives rather than the client's.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// The timeout of one Status probe: a paused or overloaded member must not stall a poll loop.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// What Maintenance.Status says about one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    pub member_id: u64,
    /// The leader this member knows of; 0 when it knows none.
    pub leader: u64,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub is_learner: bool,
    pub revision: i64,
}

impl MemberStatus {
    pub fn is_leader(&self) -> bool {
        self.leader == self.member_id
    }
}

/// A member process. It is killed (SIGKILL, which also ends a stopped process) when dropped.
pub struct ClusterMember {
    kind: ServerKind,
    binary: PathBuf,
    name: String,
    /// Holds `data/` (the data dir) and `member.log` (stdout and stderr of every run).
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
    /// The flags of the first start, passed unchanged on every restart: a restarted member must
    /// ignore the bootstrap flags (`--initial-cluster*`) and recover from its data dir.
    args: Vec<String>,
    /// Variables of every start, beside the test's own environment.
    pub(crate) env: Vec<(String, String)>,
    /// Behind a lock only so that [`ClusterMember::is_running`] (`try_wait`) can take `&self`.
    child: Mutex<Option<Child>>,
    paused: bool,
    /// Added as a learner and not promoted (through [`crate::Cluster::promote`]) since.
    pub(crate) learner: bool,
    /// The user and password [`ClusterMember::status`] logs in with, once a test enabled auth (etcd 3.6
    /// answers Status only to a user then).
    credentials: Option<(String, String)>,
    /// The logged-in client of those probes, kept: every login is a Raft entry (on etcd too), so a
    /// login per probe would move the raft index the probes wait to see agree.
    status_client: tokio::sync::Mutex<Option<Client>>,
}

impl ClusterMember {
    /// A member with its temp dir and flags, whose process is not started yet (see
    /// [`ClusterMember::start_process`]), so that its data dir can be prepared first.
    pub(crate) fn create(
        kind: ServerKind,
        name: &str,
        client_port: u16,
        peer_port: u16,
        cluster_args: &[String],
    ) -> anyhow::Result<ClusterMember> {
        let dir = tempfile::Builder::new().prefix(&format!("kv-cluster-{name}-")).tempdir()?;
        let mut member = ClusterMember {
            kind,
            binary: kind.binary()?,
            name: name.to_owned(),
            dir,
            client_port,
            peer_port,
            args: Vec::new(),
            env: Vec::new(),
            child: Mutex::new(None),
            paused: false,
            learner: false,
            credentials: None,
            status_client: tokio::sync::Mutex::new(None),
        };
        let (client, peer) = (member.client_url(), member.peer_url());
        member.args = vec![
            format!("--name={name}"),
            format!("--data-dir={}", member.data_dir().display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
        ];
        member.args.extend_from_slice(cluster_args);
        Ok(member)
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// `--name` (`n1`, `n2`, ...).
    pub fn name(&self) -> &str {
        &self.name
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

    /// The data dir, kept across restarts.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The flags the process runs with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Everything the process (all its runs) wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("member.log")).unwrap_or_else(|err| format!("<no log: {err}>"))
    }

    pub(crate) fn log_has(&self, needle: &str) -> bool {
        self.log().to_lowercase().contains(needle)
    }

    /// Whether the process is alive (it may be paused).
    pub fn is_running(&self) -> bool {
        self.child().as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Whether the process is alive and not paused, so that it can answer.
    pub fn is_reachable(&self) -> bool {
        !self.paused && self.is_running()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether the cluster added this member as a learner and has not promoted it since. Learners
    /// refuse most requests (`etcdserver: rpc not supported for learner`), so etcdctl and clients
    /// of the whole cluster leave them out.
    pub fn is_learner(&self) -> bool {
        self.learner
    }

    /// Kills the process with SIGKILL, without any chance to flush, and reaps it.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child().take() {
            child.kill().context("kill")?;
            child.wait().context("wait")?;
        }
        self.paused = false;
        Ok(())
    }

    /// Stops the process with SIGTERM, as an operator or systemd does, and waits up to `grace` for it to
    /// exit (then kills it with SIGKILL). Returns when it exited, whether it stopped cleanly: with status 0
    /// (ours) or ended by the SIGTERM itself (etcd re-raises the signal once it has shut down).
    pub async fn terminate(&mut self, grace: Duration) -> anyhow::Result<(Instant, bool)> {
        use std::os::unix::process::ExitStatusExt;
        /// SIGTERM's number on Linux.
        const SIGTERM: i32 = 15;
        let pid = self.pid().context("terminate: the member is not running")?;
        send_signal(pid, "TERM")?;
        let deadline = Instant::now() + grace;
        loop {
            // Its own statement: the guard must be gone before `child()` locks again below.
            let exited = self.child().as_mut().map(Child::try_wait).transpose()?.flatten();
            if let Some(status) = exited {
                let at = Instant::now();
                self.child().take();
                return Ok((at, status.success() || status.signal() == Some(SIGTERM)));
            }
            if Instant::now() > deadline {
                self.kill9()?;
                bail!("{} did not exit within {grace:?} of SIGTERM", self.name);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Replaces the flags for the next (re)start.
    pub fn set_args(&mut self, args: Vec<String>) {
        self.args = args;
    }

    /// Adds flags for the next (re)start.
    pub fn add_args(&mut self, args: &[&str]) {
        self.args.extend(args.iter().map(|arg| arg.to_string()));
    }

    /// Kills the process if it runs, starts it again with the same flags on the same data dir and
    /// waits until it answers Status. It may still be catching up.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9()?;
        self.start_process()?;
        self.wait_serving().await
    }

    /// Kills the process if it runs and starts it again with the same flags, without waiting: etcd
    /// answers clients only once it has published itself through a quorum, which a member restarted
    /// alone cannot.
    pub fn relaunch(&mut self) -> anyhow::Result<()> {
        self.kill9()?;
        self.start_process()
    }

    /// Stops the process with SIGSTOP: it keeps its sockets but neither answers nor ticks.
    pub fn pause(&mut self) -> anyhow::Result<()> {
        let pid = self.pid().context("pause: the member is not running")?;
        send_signal(pid, "STOP")?;
        self.paused = true;
        Ok(())
    }

    /// Continues a paused process with SIGCONT.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        let pid = self.pid().context("resume: the member is not running")?;
        send_signal(pid, "CONT")?;
        self.paused = false;
        Ok(())
    }

    /// A client connected to this member only, with [`CLIENT_TIMEOUT`].
    pub async fn client(&self) -> anyhow::Result<Client> {
        self.client_with_timeout(CLIENT_TIMEOUT).await
    }

    /// A client connected to this member only, with the given request timeout.
    pub async fn client_with_timeout(&self, timeout: Duration) -> anyhow::Result<Client> {
        let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2)).with_timeout(timeout);
        Ok(Client::connect([self.endpoint()], Some(options)).await?)
    }

    /// Logs [`ClusterMember::status`] in as `user` from now on.
    pub fn set_credentials(&mut self, user: &str, password: &str) {
        self.credentials = Some((user.to_string(), password.to_string()));
    }

    /// Maintenance.Status of this member, failing after a short timeout.
    pub async fn status(&self) -> anyhow::Result<MemberStatus> {
        let probe = async {
            let options = ConnectOptions::new().with_connect_timeout(STATUS_TIMEOUT).with_timeout(STATUS_TIMEOUT);
            let status = match &self.credentials {
                None => Client::connect([self.endpoint()], Some(options)).await?.status().await?,
                Some((user, password)) => {
                    let mut kept = self.status_client.lock().await;
                    let mut client = match kept.take() {
                        Some(client) => client,
                        None => Client::connect([self.endpoint()], Some(options.with_user(user, password))).await?,
                    };
                    // Kept only while it works: a restarted member forgets the token.
                    let status = client.status().await?;
                    *kept = Some(client);
                    status
                }
            };
            let header = status.header().context("Status response without a header")?;
            anyhow::Ok(MemberStatus {
                member_id: header.member_id(),
                leader: status.leader(),
                raft_term: status.raft_term(),
                raft_index: status.raft_index(),
                raft_applied_index: status.raft_applied_index(),
                is_learner: status.is_learner(),
                revision: header.revision(),
            })
        };
        tokio::time::timeout(STATUS_TIMEOUT * 2, probe)
            .await
            .with_context(|| format!("{}: Status timed out", self.name))?
            .with_context(|| format!("{}: Status", self.name))
    }

    /// Every key under `prefix`, read with a serializable range from this member's own store.
    pub async fn serializable_range(&self, prefix: &str) -> anyhow::Result<Vec<KeyValue>> {
        let mut client = self.client().await?;
        let options = GetOptions::new().with_prefix().with_serializable();
        Ok(client.get(prefix, Some(options)).await?.take_kvs())
    }

    /// Runs `etcdctl --endpoints=<this member> <args>`.
    pub async fn etcdctl(&self, args: &[&str]) -> anyhow::Result<CtlOutput> {
        etcdctl::run(&self.endpoint(), args, None).await
    }

    /// Runs `etcdctl --endpoints=<this member> <args>` with `stdin` as its standard input.
    pub async fn etcdctl_stdin(&self, args: &[&str], stdin: &str) -> anyhow::Result<CtlOutput> {
        etcdctl::run(&self.endpoint(), args, Some(stdin)).await
    }

    /// Polls Status until it answers, the process exits, or [`SERVE_TIMEOUT`] passes. Status,
    /// unlike a linearizable read, is served by learners and by members still catching up.
    pub async fn wait_serving(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + SERVE_TIMEOUT;
        let mut last_error = String::from("no attempt");
        while Instant::now() < deadline {
            if !self.is_running() {
                bail!("{:?} member {} exited before it served; log:\n{}", self.kind, self.name, tail(&self.log(), 60));
            }
            match self.status().await {
                Ok(_) => return Ok(()),
                Err(err) => last_error = format!("{err:#}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "{:?} member {} does not answer Status after {SERVE_TIMEOUT:?} (last error: {last_error}); log:\n{}",
            self.kind,
            self.name,
            tail(&self.log(), 60)
        )
    }

    pub(crate) fn start_process(&mut self) -> anyhow::Result<()> {
        let log = open_append(&self.dir.path().join("member.log"))?;
        let child = Command::new(&self.binary)
            .args(&self.args)
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {}", self.binary.display()))?;
        *self.child() = Some(child);
        self.paused = false;
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(Child::id)
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        // A panic while holding this lock cannot leave the `Option` half-written.
        self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for ClusterMember {
    fn drop(&mut self) {
        // Shown only for failing tests (see `Member`'s `Drop`).
        eprintln!(
            "---- {:?} member {} log ({}) ----\n{}",
            self.kind,
            self.name,
            self.endpoint(),
            tail(&self.log(), 40)
        );
        // Nothing to do about a failure while dropping; the temp dir goes away anyway.
        let _ = self.kill9();
    }
}
