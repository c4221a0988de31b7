//! One single-member server as a plain child process on loopback: free ports picked by the kernel, a
//! fresh data dir, stdout and stderr in a log file, ready once it logs "ready to serve client requests"
//! (ours and etcd both log that line). Killed when dropped. [`Binaries`]: the binaries of the sides that run.

use std::fs::OpenOptions;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tracing::debug;

use super::options::FuzzOptions;
use crate::client;
use crate::error::{Error, Result};

/// How long a fresh server may take to log that it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The line both servers log once they serve clients.
const READY_LINE: &str = "ready to serve client requests";
/// Starts tried on fresh ports before a lost port counts as a failure.
const PORT_ATTEMPTS: u32 = 3;

/// Which implementation a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Ours,
    Etcd,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::Etcd => "etcd",
        }
    }
}

/// The server binaries of the targets that run.
pub struct Binaries {
    ours: Option<PathBuf>,
    etcd: Option<PathBuf>,
}

impl Binaries {
    pub fn find(opts: &FuzzOptions) -> Result<Binaries> {
        let ours = if opts.target.ours() { Some(opts.server_bin()?) } else { None };
        let etcd = opts.target.etcd().then(|| opts.etcd_bin());
        if let Some(path) = ours.as_ref().filter(|p| !p.is_file()) {
            return Err(Error::Setup(format!("{} is missing: run `cargo build -p raft-node`", path.display())));
        }
        if let Some(path) = etcd.as_ref().filter(|p| !p.is_file()) {
            return Err(Error::Setup(format!(
                "{} is missing: run scripts/test (it downloads etcd 3.5.1), or give --etcd-bin",
                path.display()
            )));
        }
        Ok(Binaries { ours, etcd })
    }

    /// Starts `side`'s server under `root`; `None` when that side does not run.
    pub async fn start(&self, side: Side, root: &Path) -> Result<Option<Server>> {
        let binary = match side {
            Side::Ours => self.ours.as_ref(),
            Side::Etcd => self.etcd.as_ref(),
        };
        match binary {
            Some(binary) => Server::start(side, binary, root).await.map(Some),
            None => Ok(None),
        }
    }
}

/// A running single-member server.
pub struct Server {
    pub side: Side,
    binary: PathBuf,
    /// The session's folder; each start gets `<side>-<n>/` in it.
    root: PathBuf,
    starts: u32,
    dir: PathBuf,
    child: Option<Child>,
    channel: Channel,
}

impl Server {
    /// Starts a server on a fresh data dir under `root` and waits until it is ready.
    pub async fn start(side: Side, binary: &Path, root: &Path) -> Result<Server> {
        let (child, dir, channel) = spawn(side, binary, root, 1)?;
        let mut server = Server {
            side,
            binary: binary.to_path_buf(),
            root: root.to_path_buf(),
            starts: 1,
            dir,
            child: Some(child),
            channel,
        };
        match server.wait_ready().await {
            Err(err) if server.lost_a_port() => {
                debug!(%err, "a port was taken before the server bound it; starting again on new ports");
                server.restart_fresh().await?;
            }
            other => other?,
        }
        Ok(server)
    }

    /// Kills the server and starts it again, empty, on a new data dir and new ports. Ports are free
    /// when picked but another process (a parallel run) may bind them first: then it tries new ones.
    pub async fn restart_fresh(&mut self) -> Result<()> {
        let mut attempt = 1;
        loop {
            self.kill();
            self.starts += 1;
            let (child, dir, channel) = spawn(self.side, &self.binary, &self.root, self.starts)?;
            (self.child, self.dir, self.channel) = (Some(child), dir, channel);
            match self.wait_ready().await {
                Err(err) if attempt < PORT_ATTEMPTS && self.lost_a_port() => {
                    debug!(%err, attempt, "a port was taken before the server bound it; trying new ports");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Whether the last start failed because a port it was given was taken meanwhile (both servers
    /// log the OS's "address already in use").
    fn lost_a_port(&self) -> bool {
        self.log_tail(20).to_lowercase().contains("address already in use")
    }

    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Whether the process exits within `grace` (a crash takes a moment to finish dying).
    pub async fn exits_within(&mut self, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_running() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        !self.is_running()
    }

    /// The end of the log (where a panic's message is).
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read(self.log_path()).unwrap_or_default();
        let text = String::from_utf8_lossy(&log);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Kills the process and removes its data dir (its log stays).
    pub fn stop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            let log = std::fs::read(self.log_path()).unwrap_or_default();
            if String::from_utf8_lossy(&log).contains(READY_LINE) {
                return Ok(());
            }
            if !self.is_running() {
                return Err(Error::Setup(format!(
                    "{} exited before it was ready; the end of {}:\n{}",
                    self.side.name(),
                    self.log_path().display(),
                    self.log_tail(20)
                )));
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::Setup(format!(
                    "{} did not log {READY_LINE:?} within {READY_TIMEOUT:?}; see {}",
                    self.side.name(),
                    self.log_path().display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the process of the `start`-th run in `<root>/<side>-<start>/`.
fn spawn(side: Side, binary: &Path, root: &Path, start: u32) -> Result<(Child, PathBuf, Channel)> {
    let dir = root.join(format!("{}-{start}", side.name()));
    std::fs::create_dir_all(&dir).map_err(Error::system(format!("create {}", dir.display())))?;
    let [client_port, peer_port] = free_ports()?;
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let log_path = dir.join("server.log");
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(Error::system(format!("open {}", log_path.display())))?;
    let stderr = log.try_clone().map_err(Error::system("duplicate the log file"))?;
    let child = Command::new(binary)
        .arg("--name=f1")
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=f1={peer_url}"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .map_err(Error::system(format!("start {} ({})", side.name(), binary.display())))?;
    Ok((child, dir, client::channel(&client_url)?))
}

/// Two ports nobody listens on right now (both held until both are known, so they differ).
fn free_ports() -> Result<[u16; 2]> {
    let bind = || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(Error::system("find a free port"));
    let (first, second) = (bind()?, bind()?);
    let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).map_err(Error::system("read a bound port"));
    Ok([port(&first)?, port(&second)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in server that, as a real one whose port was taken, exits with the OS's bind error on its
    /// first `failures` starts, then logs the ready line and stays up.
    fn flaky_server(dir: &Path, failures: u32) -> PathBuf {
        let script = dir.join("server.sh");
        let count = dir.join("starts");
        let text = format!(
            "#!/bin/sh\necho x >> {count}\nif [ $(wc -l < {count}) -le {failures} ]; then\n  echo 'listen tcp 127.0.0.1:1: bind: address already in use'; exit 1\nfi\necho '{READY_LINE}'\nexec sleep 60\n",
            count = count.display()
        );
        std::fs::write(&script, text).expect("write script");
        let status = Command::new("chmod").arg("+x").arg(&script).status().expect("chmod");
        assert!(status.success());
        script
    }

    #[tokio::test]
    async fn a_port_taken_by_another_process_is_tried_again_on_new_ports() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = Server::start(Side::Etcd, &flaky_server(dir.path(), 2), dir.path()).await.expect("started");
        assert_eq!(server.starts, 3, "two lost ports, then a start on fresh ones");
    }

    #[tokio::test]
    async fn a_server_that_keeps_losing_its_port_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Server::start(Side::Etcd, &flaky_server(dir.path(), 10), dir.path()).await.err().expect("gave up");
        assert!(err.to_string().contains("address already in use"), "{err}");
    }

    #[tokio::test]
    async fn any_other_failure_to_start_is_not_retried() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("broken.sh");
        std::fs::write(&script, "#!/bin/sh\necho 'error: unexpected argument'\nexit 2\n").expect("write script");
        assert!(Command::new("chmod").arg("+x").arg(&script).status().expect("chmod").success());
        let err = Server::start(Side::Ours, &script, dir.path()).await.err().expect("failed");
        assert!(err.to_string().contains("unexpected argument"), "{err}");
        assert!(!dir.path().join("ours-2").exists(), "started only once");
    }
}
