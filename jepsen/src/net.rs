//! Network faults inside the run's private namespace: nftables rules on loopback (table
//! `inet jepsen`) and, for delay, one proxy per peer link.
//!
//! # Partitions and one-way drops
//!
//! Each member runs under its own user id, and the `owners` chain marks every connection a member
//! opens with that id (`ct mark`); connections the harness opens (as root) keep mark 0. A one-way
//! cut from member A to member B drops, in the `input` and `output` chains:
//! - on input, packets with source A's address and destination B's address. This catches members
//!   that bind their outgoing peer connections to their own address (ours does), their answers
//!   on connections such members opened, and the delay proxies, which connect onward from the
//!   dialling member's address;
//! - on output, packets from a socket owned by A's user id to B's address: A's side of the
//!   connections A opened, also when they leave from 127.0.0.1 (etcd 3.4 does not bind them);
//! - on input, packets from A's address on connections marked as B's: A's answers on the
//!   connections B opened from 127.0.0.1 (etcd's peers read each other's messages from streams
//!   the *receiver* opens, so without this rule most of A's messages to B would get through).
//!
//! Clients talk from 127.0.0.1 and run as root, so no such rule touches them. A cut both ways is a
//! partition; the `one-way` fault cuts A→B alone. TCP needs both directions, so even a one-way cut
//! stalls the connections between A and B both ways: on A's connections to B nothing arrives, and
//! on B's connections to A the data B sends does reach A but A's acknowledgements and answers do
//! not, so B retransmits until its window is full. What differs from a partition is what gets
//! through first: B receives nothing from A (for Raft: a leader A's heartbeats and appends stop
//! reaching follower B, which then campaigns), while A still receives what B sends until B's
//! window fills. Established connections stall rather than reset; bytes in flight arrive by
//! retransmission after heal.
//!
//! # Client cuts
//!
//! `client-cut` drops, on input, the packets of connections the harness opened (mark 0) between
//! 127.0.0.1 and a member's client port, both ways: the workers can no longer reach that member,
//! while its peer traffic flows (and so does a member's own connection to its client port, like
//! etcd's gRPC gateway). The harness's own probes (Status for leader lookup, liveness,
//! convergence) share the workers' connections, so they cannot reach that member either while the
//! cut lasts: the nemesis never runs two faults at once, and the final heal flushes the rules
//! before any probe that matters.
//!
//! # Random loss
//!
//! `loss` drops each packet to or from a peer port (2380) with probability `--loss-percent`, using
//! nft's `numgen random`. It is applied on input only (a loopback packet passes output and input
//! once each), and not to the member-to-proxy leg of a proxied connection (`ct status dnat`), so
//! a proxied byte crosses exactly one lossy hop, like an unproxied one.
//!
//! # Delay
//!
//! The kernel has no `netem`, so latency comes from [`crate::proxy`]: when a run may delay links,
//! a proxy per directed link A→B is started before the members, and an nft `nat` rule redirects
//! every new connection from A's user id to B's peer port to that proxy (NAT applies only to new
//! connections, which is why the proxies must be in the path from the members' start). A delay
//! on a link holds back the bytes of its connections in both directions, so it adds twice the
//! delay to a round trip. The proxy connects onward from A's address, so the partition rules above
//! act on proxied connections just as on direct ones.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::error::{Error, Result};
use crate::options::{FaultKind, TestOptions, DEFAULT_DELAY_MS, DEFAULT_JITTER_MS, DEFAULT_LOSS_PERCENT};
use crate::proxy::{Delay, Proxy};

/// The nft table the harness owns.
const TABLE: &str = "inet jepsen";
/// Where clients (the harness's workers and probes) connect from.
const CLIENT_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// Every member serves clients on this port of its own address.
pub const CLIENT_PORT: u16 = 2379;
/// Every member talks to its peers on this port of its own address.
pub const PEER_PORT: u16 = 2380;
/// Our members serve etcd's failpoints over HTTP (`GOFAIL_HTTP`) on this port of their own address,
/// the port etcd's own robustness tests give gofail.
pub const FAILPOINT_PORT: u16 = 22381;

/// Who a member is on the network: its address and the user id its process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub ip: Ipv4Addr,
    pub uid: u32,
}

/// How strong the run's link faults are, and whether peer links go through delay proxies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shaping {
    /// Whether every peer link goes through a proxy (needed by [`Net::delay`]).
    pub proxies: bool,
    /// The latency [`Net::delay`] adds.
    pub delay: Delay,
    /// The share of peer packets [`Net::lose`] drops, in percent.
    pub loss_percent: u8,
}

impl Default for Shaping {
    fn default() -> Shaping {
        Shaping {
            proxies: false,
            delay: Delay {
                base: Duration::from_millis(DEFAULT_DELAY_MS),
                jitter: Duration::from_millis(DEFAULT_JITTER_MS),
            },
            loss_percent: DEFAULT_LOSS_PERCENT,
        }
    }
}

impl Shaping {
    /// The shaping a run asks for: proxies only when its faults include `delay`.
    pub fn of(opts: &TestOptions) -> Shaping {
        Shaping {
            proxies: opts.nemesis.contains(&FaultKind::Delay),
            delay: Delay {
                base: Duration::from_millis(opts.delay_ms),
                jitter: Duration::from_millis(opts.delay_jitter_ms),
            },
            loss_percent: opts.loss_percent.min(100),
        }
    }
}

/// The proxy of the directed link from member `from` to member `to` (the dialling side first).
#[derive(Debug)]
struct LinkProxy {
    from: usize,
    to: usize,
    proxy: Proxy,
}

/// The firewall of the run's namespace, and the delay proxies when there are any.
#[derive(Debug)]
pub struct Net {
    hosts: Vec<Host>,
    shaping: Shaping,
    /// Empty unless `shaping.proxies`.
    proxies: Vec<LinkProxy>,
}

impl Net {
    /// Creates the table and its filter chains (both accept by default); no proxies.
    pub async fn setup(hosts: Vec<Host>) -> Result<Net> {
        Net::setup_with(hosts, Shaping::default()).await
    }

    /// Creates the table and its chains and, with `shaping.proxies`, starts a proxy per directed
    /// peer link and redirects the members' peer connections through them. Must run before the
    /// members start when proxies are wanted.
    pub async fn setup_with(hosts: Vec<Host>, shaping: Shaping) -> Result<Net> {
        let mut proxies = Vec::new();
        if shaping.proxies {
            for (from, a) in hosts.iter().enumerate() {
                for (to, b) in hosts.iter().enumerate().filter(|&(to, _)| to != from) {
                    let upstream = SocketAddr::new(IpAddr::V4(b.ip), PEER_PORT);
                    let proxy = Proxy::start(upstream, Some(IpAddr::V4(a.ip))).await?;
                    proxies.push(LinkProxy { from, to, proxy });
                }
            }
        }
        let net = Net { hosts, shaping, proxies };
        nft(&net.setup_script()).await?;
        Ok(net)
    }

    pub fn shaping(&self) -> Shaping {
        self.shaping
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

    /// Cuts the clients (127.0.0.1) off from `member`'s client port, both ways.
    pub async fn cut_clients(&self, member: usize) -> Result<()> {
        nft(&self.client_cut_rules(member)?).await
    }

    /// Drops `shaping.loss_percent` percent of the packets on every peer link, at random.
    pub async fn lose(&self) -> Result<()> {
        nft(&loss_rules(self.shaping.loss_percent)).await
    }

    /// Adds `shaping.delay` to every peer link that has one of `members` at either end (pass every
    /// member for all links). Fails when the run started without proxies.
    pub fn delay(&self, members: &[usize]) -> Result<Delay> {
        if self.proxies.is_empty() {
            return Err(Error::Setup(
                "delay needs the link proxies, which only a run whose --nemesis lists `delay` starts".to_string(),
            ));
        }
        for link in self.proxies.iter().filter(|l| members.contains(&l.from) || members.contains(&l.to)) {
            link.proxy.set_delay(self.shaping.delay);
        }
        Ok(self.shaping.delay)
    }

    /// The links (from, to) that have a delay now.
    pub fn delayed_links(&self) -> Vec<(usize, usize)> {
        self.proxies.iter().filter(|l| !l.proxy.delay().is_none()).map(|l| (l.from, l.to)).collect()
    }

    /// Removes every delay; bytes already held back still wait out theirs.
    pub fn clear_delay(&self) {
        for link in &self.proxies {
            link.proxy.set_delay(Delay::NONE);
        }
    }

    /// Removes every drop rule (cuts, client cuts, loss) and every delay. The redirection through
    /// the proxies stays: it is not a fault.
    pub async fn heal(&self) -> Result<()> {
        self.clear_delay();
        nft(&format!("flush chain {TABLE} input\nflush chain {TABLE} output\n")).await
    }

    /// The table, its chains, the marking of each member's connections and, with proxies, the
    /// redirection of each peer link.
    fn setup_script(&self) -> String {
        let mut script = format!(
            "add table {TABLE}\n\
             add chain {TABLE} input {{ type filter hook input priority 0; policy accept; }}\n\
             add chain {TABLE} output {{ type filter hook output priority 0; policy accept; }}\n\
             add chain {TABLE} owners {{ type filter hook output priority -10; policy accept; }}\n"
        );
        for host in &self.hosts {
            script
                .push_str(&format!("add rule {TABLE} owners ct state new meta skuid {0} ct mark set {0}\n", host.uid));
        }
        if self.proxies.is_empty() {
            return script;
        }
        // Destination NAT of locally made connections happens on the output hook, before filter.
        script.push_str(&format!(
            "add chain {TABLE} proxy_links {{ type nat hook output priority -100; policy accept; }}\n"
        ));
        for link in &self.proxies {
            let (a, b) = (self.hosts[link.from], self.hosts[link.to]);
            script.push_str(&format!(
                "add rule {TABLE} proxy_links meta skuid {} ip daddr {} tcp dport {PEER_PORT} dnat ip to {}\n",
                a.uid,
                b.ip,
                link.proxy.addr()
            ));
        }
        script
    }

    fn host(&self, member: usize) -> Result<Host> {
        self.hosts.get(member).copied().ok_or_else(|| Error::Setup(format!("no member {member}")))
    }

    /// The rules of a one-way cut from `from` to `to`.
    fn rules(&self, from: usize, to: usize) -> Result<String> {
        let (a, b) = (self.host(from)?, self.host(to)?);
        Ok(format!(
            "add rule {TABLE} input ip saddr {} ip daddr {} drop\n\
             add rule {TABLE} output meta skuid {} ip daddr {} drop\n\
             add rule {TABLE} input ct mark {} ip saddr {} drop\n",
            a.ip, b.ip, a.uid, b.ip, b.uid, a.ip
        ))
    }

    fn client_cut_rules(&self, member: usize) -> Result<String> {
        let host = self.host(member)?;
        Ok(format!(
            "add rule {TABLE} input ct mark 0 ip saddr {CLIENT_IP} ip daddr {ip} tcp dport {CLIENT_PORT} drop\n\
             add rule {TABLE} input ct mark 0 ip saddr {ip} ip daddr {CLIENT_IP} tcp sport {CLIENT_PORT} drop\n",
            ip = host.ip
        ))
    }
}

/// Random loss on every peer link: each packet to or from a peer port, once (on input), except the
/// member-to-proxy leg of proxied connections (whose conntrack entry carries the redirection).
fn loss_rules(percent: u8) -> String {
    let percent = percent.min(100);
    format!(
        "add rule {TABLE} input tcp dport {PEER_PORT} numgen random mod 100 < {percent} drop\n\
         add rule {TABLE} input tcp sport {PEER_PORT} ct status & dnat == 0 numgen random mod 100 < {percent} drop\n"
    )
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

    fn hosts(n: u8) -> Vec<Host> {
        (0..n).map(|i| Host { ip: Ipv4Addr::new(127, 0, 0, 11 + i), uid: 60011 + u32::from(i) }).collect()
    }

    fn unproxied(n: u8) -> Net {
        Net { hosts: hosts(n), shaping: Shaping::default(), proxies: Vec::new() }
    }

    #[test]
    fn a_cut_matches_both_the_address_and_the_owner() {
        let net = unproxied(2);
        assert_eq!(
            net.rules(0, 1).expect("both exist"),
            "add rule inet jepsen input ip saddr 127.0.0.11 ip daddr 127.0.0.12 drop\n\
             add rule inet jepsen output meta skuid 60011 ip daddr 127.0.0.12 drop\n\
             add rule inet jepsen input ct mark 60012 ip saddr 127.0.0.11 drop\n"
        );
        assert!(net.rules(0, 2).is_err());
    }

    #[test]
    fn a_client_cut_drops_the_client_port_both_ways_and_nothing_else() {
        let net = unproxied(3);
        assert_eq!(
            net.client_cut_rules(1).expect("n2 exists"),
            "add rule inet jepsen input ct mark 0 ip saddr 127.0.0.1 ip daddr 127.0.0.12 tcp dport 2379 drop\n\
             add rule inet jepsen input ct mark 0 ip saddr 127.0.0.12 ip daddr 127.0.0.1 tcp sport 2379 drop\n"
        );
        assert!(net.client_cut_rules(3).is_err());
    }

    #[test]
    fn loss_hits_peer_ports_once_and_is_capped_at_all_packets() {
        assert_eq!(
            loss_rules(20),
            "add rule inet jepsen input tcp dport 2380 numgen random mod 100 < 20 drop\n\
             add rule inet jepsen input tcp sport 2380 ct status & dnat == 0 numgen random mod 100 < 20 drop\n"
        );
        assert!(loss_rules(250).contains("< 100 drop"));
    }

    #[test]
    fn without_proxies_setup_makes_the_filter_chains_and_marks_each_members_connections() {
        let script = unproxied(3).setup_script();
        assert_eq!(script.lines().count(), 7, "{script}");
        assert!(!script.contains("nat"), "{script}");
        assert!(
            script.ends_with("add rule inet jepsen owners ct state new meta skuid 60013 ct mark set 60013\n"),
            "{script}"
        );
    }

    #[tokio::test]
    async fn with_proxies_each_directed_link_is_redirected_to_its_own_proxy() {
        let hosts = hosts(3);
        let mut proxies = Vec::new();
        for from in 0..3 {
            for to in (0..3).filter(|&to| to != from) {
                let upstream = SocketAddr::new(IpAddr::V4(hosts[to].ip), PEER_PORT);
                let proxy = Proxy::start(upstream, Some(IpAddr::V4(hosts[from].ip))).await.expect("proxy");
                proxies.push(LinkProxy { from, to, proxy });
            }
        }
        let ports: Vec<u16> = proxies.iter().map(|l| l.proxy.addr().port()).collect();
        let net = Net { hosts, shaping: Shaping { proxies: true, ..Shaping::default() }, proxies };
        let script = net.setup_script();
        let redirects: Vec<&str> = script.lines().filter(|l| l.contains("dnat")).collect();
        assert_eq!(redirects.len(), 6, "{script}");
        assert!(script.contains("add chain inet jepsen proxy_links { type nat hook output priority -100;"));
        assert_eq!(
            redirects[0],
            format!(
                "add rule inet jepsen proxy_links meta skuid 60011 ip daddr 127.0.0.12 tcp dport 2380 dnat ip to \
                 127.0.0.1:{}",
                ports[0]
            )
        );
        // n3 -> n2 is the last link.
        assert!(redirects[5].contains("skuid 60013 ip daddr 127.0.0.12"), "{}", redirects[5]);
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 6, "two links share a proxy: {ports:?}");

        // Delaying n1 touches the four links it is on, not n2 <-> n3.
        let delay = net.delay(&[0]).expect("proxied");
        assert_eq!(delay, Shaping::default().delay);
        assert_eq!(net.delayed_links(), vec![(0, 1), (0, 2), (1, 0), (2, 0)]);
        net.clear_delay();
        assert!(net.delayed_links().is_empty());
        net.delay(&[0, 1, 2]).expect("proxied");
        assert_eq!(net.delayed_links().len(), 6);
    }

    /// Every script the faults generate, after the setup script, passes `nft --check` (in a
    /// throwaway network namespace; skipped where that is not permitted or nft is missing).
    #[tokio::test]
    async fn nft_accepts_every_generated_script() {
        let hosts = hosts(3);
        let mut proxies = Vec::new();
        for (from, to) in [(0, 1), (1, 0)] {
            let upstream = SocketAddr::new(IpAddr::V4(hosts[to].ip), PEER_PORT);
            proxies.push(LinkProxy { from, to, proxy: Proxy::start(upstream, None).await.expect("proxy") });
        }
        let net = Net { hosts, shaping: Shaping { proxies: true, ..Shaping::default() }, proxies };
        let script = [
            net.setup_script(),
            net.rules(0, 1).expect("cut"),
            net.client_cut_rules(2).expect("client cut"),
            loss_rules(20),
            format!("flush chain {TABLE} input\nflush chain {TABLE} output\n"),
        ]
        .concat();
        let child = std::process::Command::new("unshare")
            .args(["--net", "nft", "--check", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("skipped: cannot run `unshare --net nft`");
            return;
        };
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin.write_all(script.as_bytes()).expect("write the script");
        }
        let output = child.wait_with_output().expect("wait for nft");
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("unshare failed") || stderr.contains("Operation not permitted") {
            eprintln!("skipped: {stderr}");
            return;
        }
        assert!(output.status.success(), "nft rejected the script:\n{stderr}\n{script}");
    }

    #[test]
    fn delay_without_proxies_is_refused() {
        assert!(unproxied(3).delay(&[0]).is_err());
    }
}
