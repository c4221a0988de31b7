//! The cluster under test: three members named n1..n3 on 127.0.0.11..13 (same ports each), each
//! under its own user id, bootstrapped with one `--initial-cluster`; leader lookup through Status.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::future::join_all;
use tonic::transport::Channel;
use tracing::info;

use crate::client::{self, MemberStatus};
use crate::error::{Error, Result};
use crate::member::Member;
use crate::net::Host;
use crate::options::{Target, TestOptions};

/// The number of members.
pub const SIZE: usize = 3;
/// The first member's address is 127.0.0.<FIRST_OCTET>.
const FIRST_OCTET: u8 = 11;
/// Member i runs as user id UID_BASE + its last address octet.
const UID_BASE: u32 = 60_000;
/// How long Status may take while looking for the leader.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The log filter of our members: the default (info, openraft at warn) plus openraft's state
/// machine worker, whose info lines say when a snapshot is built, sent and installed (the
/// blackhole-snapshot fault looks for them).
const OURS_LOG_FILTER: &str = "info,openraft=warn,openraft::core::sm::worker=info";

/// Running members; every process is killed when this is dropped.
pub struct Cluster {
    pub members: Vec<Member>,
    /// Each member's id, learned from its Status header once the cluster is up; a member removed
    /// from the cluster has 0 until it is added back (under a new id).
    member_ids: Vec<u64>,
    pub target: Target,
    /// The `--snapshot-count` every member got (`None`: the server's default).
    pub snapshot_count: Option<u64>,
}

impl Cluster {
    /// Prepares and starts every member; does not wait for them (see [`Cluster::wait_ready`]).
    pub fn start(opts: &TestOptions, root: &Path) -> Result<Cluster> {
        let binary = opts.server_bin();
        if !binary.is_file() {
            return Err(Error::Setup(format!(
                "server binary {} not found (build it with `cargo build -p raft-node`, or pass --server-bin)",
                binary.display()
            )));
        }
        let hosts = hosts();
        let names: Vec<String> = (1..=SIZE).map(|i| format!("n{i}")).collect();
        let initial_cluster: Vec<String> =
            names.iter().zip(&hosts).map(|(name, host)| format!("{name}=http://{}:2380", host.ip)).collect();
        let mut cluster_args = vec![
            format!("--initial-cluster={}", initial_cluster.join(",")),
            "--initial-cluster-state=new".to_string(),
            format!("--initial-cluster-token=jepsen-{}", opts.seed),
            format!("--heartbeat-interval={}", opts.heartbeat_interval),
            format!("--election-timeout={}", opts.election_timeout),
        ];
        if let Some(count) = opts.effective_snapshot_count() {
            cluster_args.push(format!("--snapshot-count={count}"));
        }
        let mut members = Vec::with_capacity(SIZE);
        for (name, host) in names.iter().zip(hosts) {
            members.push(Member::new(name, host, &binary, root, &cluster_args)?);
        }
        let mut cluster = Cluster {
            members,
            member_ids: Vec::new(),
            target: opts.target,
            snapshot_count: opts.effective_snapshot_count(),
        };
        for member in &mut cluster.members {
            if opts.target == Target::Ours {
                member.set_env("RUST_LOG", OURS_LOG_FILTER);
            }
            member.start()?;
        }
        info!(binary = %binary.display(), "started {SIZE} members");
        Ok(cluster)
    }

    /// Waits until every member answers Status and they agree on a leader; learns member ids.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            for member in &mut self.members {
                if !member.is_running() {
                    return Err(Error::Setup(format!(
                        "{} exited during bootstrap; see {}",
                        member.name,
                        member.log_path().display()
                    )));
                }
            }
            let statuses = self.statuses(PROBE_TIMEOUT).await;
            let answered: Vec<MemberStatus> = statuses.iter().filter_map(|s| s.as_ref().ok().copied()).collect();
            if answered.len() == SIZE {
                let leader = answered[0].leader;
                if leader != 0 && answered.iter().all(|s| s.leader == leader) {
                    self.member_ids = answered.iter().map(|s| s.member_id).collect();
                    return Ok(());
                }
                last = format!("leaders {:?}", answered.iter().map(|s| s.leader).collect::<Vec<_>>());
            } else if let Some(Err(err)) = statuses.iter().find(|s| s.is_err()) {
                last = err.clone();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(Error::Setup(format!("cluster not ready after {timeout:?}: {last}")))
    }

    /// The addresses and user ids of the members.
    pub fn hosts(&self) -> Vec<Host> {
        self.members.iter().map(|m| m.host).collect()
    }

    /// One channel per member, in member order.
    pub fn channels(&self) -> Vec<Channel> {
        self.members.iter().map(|m| m.channel().clone()).collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Each member's peer URL, in member order.
    pub fn peer_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.peer_url()).collect()
    }

    /// Status of every member (in order), or why it did not answer.
    pub async fn statuses(&self, timeout: Duration) -> Vec<Result<MemberStatus, String>> {
        let probes = self.members.iter().map(|m| async move {
            client::status(m.channel(), timeout).await.map_err(|err| format!("{}: {}", m.name, client::describe(&err)))
        });
        join_all(probes).await
    }

    /// The member that claims leadership in the highest term, if any answers.
    pub async fn leader(&self) -> Option<usize> {
        let statuses = self.statuses(PROBE_TIMEOUT).await;
        statuses
            .iter()
            .filter_map(|s| s.as_ref().ok())
            .filter(|s| s.leader != 0 && s.leader == s.member_id)
            .max_by_key(|s| s.raft_term)
            .and_then(|s| self.member_ids.iter().position(|&id| id == s.leader))
    }

    /// Member `index`'s id as last learned (0 while it is removed).
    pub fn member_id(&self, index: usize) -> u64 {
        self.member_ids.get(index).copied().unwrap_or(0)
    }

    /// Records member `index`'s id after a membership change (0: removed), so that leader lookup
    /// keeps working when a member comes back under a new id.
    pub fn set_member_id(&mut self, index: usize, id: u64) {
        if self.member_ids.len() <= index {
            self.member_ids.resize(index + 1, 0);
        }
        self.member_ids[index] = id;
    }

    /// Whether member `index` is out of the cluster (removed and not added back yet): it must not
    /// be restarted with its bootstrap flags.
    pub fn is_removed(&self, index: usize) -> bool {
        self.member_ids.get(index) == Some(&0)
    }

    /// SIGKILLs every member.
    pub fn kill_all(&mut self) -> Result<()> {
        for member in &mut self.members {
            member.kill()?;
        }
        Ok(())
    }
}

/// Member i (from 0) is 127.0.0.(11+i), running as uid 60011+i. Public so that the network can be
/// set up before the members start (see [`crate::net::Net::setup_with`]).
pub fn hosts() -> Vec<Host> {
    (0..SIZE)
        .map(|i| {
            let octet = FIRST_OCTET + i as u8;
            Host { ip: Ipv4Addr::new(127, 0, 0, octet), uid: UID_BASE + u32::from(octet) }
        })
        .collect()
}
