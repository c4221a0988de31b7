//! One member process: started under its own user id on its own loopback address, killed with
//! SIGKILL and restarted on the same data dir, paused with SIGSTOP and resumed with SIGCONT.

use std::fs::OpenOptions;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tonic::transport::Channel;

use crate::client;
use crate::error::{Error, Result};
use crate::net::{Host, CLIENT_PORT, FAILPOINT_PORT, PEER_PORT};

/// A member of the cluster under test. The process is killed when this is dropped.
pub struct Member {
    pub name: String,
    pub host: Host,
    binary: PathBuf,
    /// The flags of the first start, reused on every restart (the bootstrap flags are then ignored
    /// by the server, which recovers from its data dir); [`Member::rejoin`] swaps the bootstrap
    /// flags for those of a member joining a running cluster.
    args: Vec<String>,
    /// Extra environment of the process (e.g. a log filter).
    env: Vec<(String, String)>,
    /// The server's `--data-dir`; removed when the member leaves the cluster for good.
    data_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    paused: bool,
    channel: Channel,
}

impl Member {
    /// Prepares the member's directory (`<root>/members/<name>`, owned by its user id) without
    /// starting it. `cluster_args` are the flags every member shares.
    pub fn new(name: &str, host: Host, binary: &Path, root: &Path, cluster_args: &[String]) -> Result<Member> {
        // `members/` stays traversable for every member's user id; each member's own dir is private.
        let parent = root.join("members");
        std::fs::create_dir_all(&parent).map_err(Error::system(format!("create {}", parent.display())))?;
        let dir = parent.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(Error::system(format!("create {}", dir.display())))?;
        std::os::unix::fs::chown(&dir, Some(host.uid), Some(host.uid)).map_err(Error::system(format!(
            "give {} to uid {}",
            dir.display(),
            host.uid
        )))?;
        let client_url = url(host, CLIENT_PORT);
        let peer_url = url(host, PEER_PORT);
        let data_dir = dir.join("data");
        let mut args = vec![
            format!("--name={name}"),
            format!("--data-dir={}", data_dir.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
        ];
        args.extend_from_slice(cluster_args);
        Ok(Member {
            name: name.to_string(),
            host,
            binary: binary.to_path_buf(),
            args,
            // etcd's release builds read no failpoints; ours serve them for the slow-disk fault.
            env: vec![("GOFAIL_HTTP".to_string(), format!("{}:{FAILPOINT_PORT}", host.ip))],
            data_dir,
            log_path: root.join(format!("{name}.log")),
            child: None,
            paused: false,
            channel: client::channel(&client_url)?,
        })
    }

    /// A channel to the member's client port (clients connect from 127.0.0.1).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The URL peers reach this member on (`http://127.0.0.12:2380`).
    pub fn peer_url(&self) -> String {
        url(self.host, PEER_PORT)
    }

    /// Sets (`Some(term)`) or clears etcd's `raftBeforeSave` failpoint over the member's gofail
    /// endpoint; the answer's status code, or why there was none (a server without failpoints).
    pub async fn set_before_save(&self, term: Option<&str>) -> std::io::Result<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (method, body) = match term {
            Some(term) => ("PUT", term),
            None => ("DELETE", ""),
        };
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect((self.host.ip, FAILPOINT_PORT)).await?;
            let request = format!(
                "{method} /raftBeforeSave HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                self.host.ip,
                body.len()
            );
            stream.write_all(request.as_bytes()).await?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await?;
            answer
                .split_whitespace()
                .nth(1)
                .and_then(|code| code.parse().ok())
                .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {answer:?}")))
        };
        tokio::time::timeout(Duration::from_secs(5), exchange).await.map_err(|_| std::io::ErrorKind::TimedOut)?
    }

    /// Sets an environment variable for the next starts.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Makes the next start join a running cluster that already lists this member (after
    /// `MemberAdd`), as etcd's docs say: `--initial-cluster-state=existing` and an
    /// `--initial-cluster` naming the current members plus this one.
    pub fn rejoin(&mut self, initial_cluster: &str) {
        self.args.retain(|arg| !arg.starts_with("--initial-cluster=") && !arg.starts_with("--initial-cluster-state="));
        self.args.push(format!("--initial-cluster={initial_cluster}"));
        self.args.push("--initial-cluster-state=existing".to_string());
    }

    /// Removes the data dir of a stopped member (a removed member must not come back with its
    /// old identity and log).
    pub fn wipe_data(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Err(Error::Setup(format!("{} is running; kill it before wiping its data", self.name)));
        }
        match std::fs::remove_dir_all(&self.data_dir) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::System { what: format!("remove {}", self.data_dir.display()), source: err })
            }
            _ => Ok(()),
        }
    }

    /// How many bytes the log holds now (to read only what comes after, see [`Member::log_since`]).
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log_path).map_or(0, |m| m.len())
    }

    /// What the member logged after the first `offset` bytes.
    pub fn log_since(&self, offset: u64) -> String {
        let bytes = std::fs::read(&self.log_path).unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// Starts the process, appending its stdout and stderr to `<name>.log`.
    pub fn start(&mut self) -> Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(Error::system(format!("open {}", self.log_path.display())))?;
        let stderr = log.try_clone().map_err(Error::system("duplicate the log file"))?;
        let child = Command::new(&self.binary)
            .args(&self.args)
            .uid(self.host.uid)
            .gid(self.host.uid)
            .env_remove("RUST_LOG")
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(Error::system(format!("start {} as {}", self.binary.display(), self.name)))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// SIGKILL (which also ends a stopped process), then reap.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().map_err(Error::system(format!("kill {}", self.name)))?;
            child.wait().map_err(Error::system(format!("reap {}", self.name)))?;
        }
        self.paused = false;
        Ok(())
    }

    /// SIGTERM, as systemd or an operator stops a member; waits up to `grace` for it to exit (then
    /// SIGKILL). Answers whether it exited by itself.
    pub async fn terminate(&mut self, grace: Duration) -> Result<bool> {
        self.signal(Signal::SIGTERM)?;
        let started = Instant::now();
        while self.is_running() {
            if started.elapsed() > grace {
                self.kill()?;
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.child = None;
        self.paused = false;
        Ok(true)
    }

    pub fn pause(&mut self) -> Result<()> {
        self.signal(Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    pub fn resume(&mut self) -> Result<()> {
        self.signal(Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// Whether the process is alive (it may be paused).
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The process id (in the harness's PID namespace) while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Everything the member wrote, over all its runs.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default()
    }

    fn signal(&self, signal: Signal) -> Result<()> {
        let Some(child) = &self.child else {
            return Err(Error::Setup(format!("{} is not running", self.name)));
        };
        let pid = i32::try_from(child.id()).map_err(|_| Error::Setup(format!("{}: pid out of range", self.name)))?;
        kill(Pid::from_raw(pid), signal)
            .map_err(|errno| Error::System { what: format!("{signal} {}", self.name), source: errno.into() })
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn url(host: Host, port: u16) -> String {
    format!("http://{}:{port}", host.ip)
}
