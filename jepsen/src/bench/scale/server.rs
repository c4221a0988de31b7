//! The one member a scale probe runs against: a single-member cluster of ours or of etcd on
//! 127.0.0.11 in the harness's private namespaces (see [`crate::netns`]), on a fresh data dir, with
//! the quota both get. Also what the probes read from it besides gRPC: its RSS from `/proc` (its pid
//! there for the probes that read more, see [`resources`]), and a counter of its Prometheus
//! `/metrics` page.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bench::resources;
use crate::client;
use crate::cluster;
use crate::error::{Error, Result};
use crate::member::Member;
use crate::net::{CLIENT_PORT, PEER_PORT};
use crate::options::Target;

/// How long a fresh member may take to elect itself.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one Status probe or one `/metrics` read may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The member's name (a single-member cluster).
const NAME: &str = "s1";

/// A running single-member server; killed when dropped.
pub struct Server {
    pub target: Target,
    pub member: Member,
    /// Its client URL (`http://127.0.0.11:2379`).
    pub url: String,
}

impl Server {
    /// Starts `binary` as a fresh single member under `root` and waits until it leads itself.
    pub async fn start(target: Target, binary: &Path, root: &Path, quota_bytes: u64) -> Result<Server> {
        if !binary.is_file() {
            return Err(Error::Setup(format!("server binary {} not found", binary.display())));
        }
        let host = cluster::hosts()[0];
        let args = vec![
            format!("--initial-cluster={NAME}=http://{}:{PEER_PORT}", host.ip),
            "--initial-cluster-state=new".to_string(),
            format!("--quota-backend-bytes={quota_bytes}"),
        ];
        let mut member = Member::new(NAME, host, binary, root, &args)?;
        member.start()?;
        let url = format!("http://{}:{CLIENT_PORT}", host.ip);
        let server = Server { target, member, url };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&self) -> Result<()> {
        let started = Instant::now();
        let mut last = String::from("no answer yet");
        while started.elapsed() < READY_TIMEOUT {
            match client::status(self.member.channel(), PROBE_TIMEOUT).await {
                Ok(status) if status.leader != 0 => return Ok(()),
                Ok(_) => last = "no leader yet".to_string(),
                Err(status) => last = client::describe(&status),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(Error::Setup(format!(
            "{} not ready after {READY_TIMEOUT:?}: {last}; see {}",
            self.target.name(),
            self.member.log_path().display()
        )))
    }

    /// The member's resident memory now, in bytes.
    pub fn rss_bytes(&self) -> Result<u64> {
        let pid = self.host_pid()?;
        let usage = resources::usage(pid).map_err(Error::system(format!("read /proc/{pid}")))?;
        Ok(usage.rss_bytes)
    }

    /// The member's name in `/proc` (finding it scans `/proc`: a probe that reads the member's
    /// memory often asks once).
    pub fn host_pid(&self) -> Result<u32> {
        self.member.pid().and_then(resources::host_pid).ok_or_else(|| {
            Error::Setup(format!("{} is not running; see {}", self.target.name(), self.member.log_path().display()))
        })
    }

    /// The member's log file.
    pub fn log_path(&self) -> PathBuf {
        self.member.log_path().to_path_buf()
    }

    /// The value of `metric` (a sample line's name, labels included) on the member's `/metrics`
    /// page; `None` when the page or the line is missing.
    pub async fn metric(&self, metric: &str) -> Option<f64> {
        let host = self.member.host.ip;
        let page = tokio::time::timeout(PROBE_TIMEOUT, http_get(&format!("{host}:{CLIENT_PORT}"), "/metrics")).await;
        metric_value(&page.ok()?.ok()?, metric)
    }
}

/// A plain HTTP/1.0 GET (the server closes the connection after the answer); the body and headers
/// as one text. Both servers serve `/metrics` on the client port beside gRPC.
async fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The value of the sample line named `metric` in Prometheus' text format.
fn metric_value(page: &str, metric: &str) -> Option<f64> {
    page.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == metric).then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_is_read_by_its_exact_name() {
        let page = "HTTP/1.0 200 OK\r\n\r\n# HELP x_count the count\n# TYPE x histogram\nx_sum 12.5\nx_count 3\n\
                    x_bucket{le=\"+Inf\"} 3\n";
        assert_eq!(metric_value(page, "x_count"), Some(3.0));
        assert_eq!(metric_value(page, "x_sum"), Some(12.5));
        assert_eq!(metric_value(page, "x_bucket{le=\"+Inf\"}"), Some(3.0));
        assert_eq!(metric_value(page, "x"), None, "a prefix is not the name");
        assert_eq!(metric_value("x_count nan-ish", "x_count"), None);
    }
}
