//! Network partitions: nftables `drop` rules on loopback, inside the run's private namespace.
//!
//! A one-way cut from member A to member B drops, in table `inet jepsen`:
//! - on input, packets with source A's address and destination B's address. This catches members
//!   that bind their outgoing peer connections to their own address (ours does);
//! - on output, packets from a socket owned by A's user id to B's address. Each member runs under
//!   its own user id, so this also catches members whose outgoing connections leave from 127.0.0.1
//!   (etcd 3.4 does not bind them).
//!
//! Clients talk from 127.0.0.1 and run as root, so no rule touches them. Because TCP needs both
//! directions, a one-way cut stalls connections both ways; established connections stall rather
//! than reset, and bytes in flight arrive by retransmission after heal. Heal flushes both chains.

use std::net::Ipv4Addr;
use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::error::{Error, Result};

/// The nft table the harness owns.
const TABLE: &str = "inet jepsen";

/// Who a member is on the network: its address and the user id its process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub ip: Ipv4Addr,
    pub uid: u32,
}

/// The firewall of the run's namespace.
#[derive(Debug)]
pub struct Net {
    hosts: Vec<Host>,
}

impl Net {
    /// Creates the table and its two chains (both accept by default).
    pub async fn setup(hosts: Vec<Host>) -> Result<Net> {
        let script = format!(
            "add table {TABLE}\n\
             add chain {TABLE} input {{ type filter hook input priority 0; policy accept; }}\n\
             add chain {TABLE} output {{ type filter hook output priority 0; policy accept; }}\n"
        );
        nft(&script).await?;
        Ok(Net { hosts })
    }

    /// Drops every packet from member `from` to member `to` (by index).
    pub async fn cut(&self, links: &[(usize, usize)]) -> Result<()> {
        let mut script = String::new();
        for &(from, to) in links {
            script.push_str(&self.rules(from, to)?);
        }
        if script.is_empty() {
            return Ok(());
        }
        nft(&script).await
    }

    /// Cuts `member` off from every other member, both ways.
    pub async fn isolate(&self, member: usize) -> Result<()> {
        let links: Vec<(usize, usize)> = (0..self.hosts.len())
            .filter(|&other| other != member)
            .flat_map(|other| [(member, other), (other, member)])
            .collect();
        self.cut(&links).await
    }

    /// Removes every rule.
    pub async fn heal(&self) -> Result<()> {
        nft(&format!("flush chain {TABLE} input\nflush chain {TABLE} output\n")).await
    }

    fn rules(&self, from: usize, to: usize) -> Result<String> {
        let (Some(a), Some(b)) = (self.hosts.get(from), self.hosts.get(to)) else {
            return Err(Error::Setup(format!("no member {from} or {to} to cut")));
        };
        Ok(format!(
            "add rule {TABLE} input ip saddr {} ip daddr {} drop\n\
             add rule {TABLE} output meta skuid {} ip daddr {} drop\n",
            a.ip, b.ip, a.uid, b.ip
        ))
    }
}

/// Runs an nft script (`nft -f -`).
async fn nft(script: &str) -> Result<()> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::system("run nft (is nftables installed?)"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes()).await.map_err(Error::system("write the nft script"))?;
    }
    let output = child.wait_with_output().await.map_err(Error::system("wait for nft"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Nft {
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_matches_both_the_address_and_the_owner() {
        let hosts = vec![
            Host { ip: Ipv4Addr::new(127, 0, 0, 11), uid: 60011 },
            Host { ip: Ipv4Addr::new(127, 0, 0, 12), uid: 60012 },
        ];
        let net = Net { hosts };
        assert_eq!(
            net.rules(0, 1).expect("both exist"),
            "add rule inet jepsen input ip saddr 127.0.0.11 ip daddr 127.0.0.12 drop\n\
             add rule inet jepsen output meta skuid 60011 ip daddr 127.0.0.12 drop\n"
        );
        assert!(net.rules(0, 2).is_err());
    }
}
