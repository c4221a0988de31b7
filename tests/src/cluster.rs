//! A multi-member cluster of [`ClusterMember`] processes: bootstrap, leader and convergence waits,
//! etcdctl against all members, and adding members the way an operator does.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};

use crate::cluster_member::{ClusterMember, MemberStatus};
use crate::etcdctl::{self, CtlOutput};
use crate::process::{self, free_ports};
use crate::server::ServerKind;

/// How long a cluster may take to elect a leader, at bootstrap or after a failure. Generous: a
/// few election timeouts are enough, but parallel tests share a couple of CPUs.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// How long members may take to apply the same log (a snapshot install included).
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`Cluster::etcdctl_reconfig`] repeats a change that etcd refuses as `unhealthy cluster`.
pub const RECONFIG_TIMEOUT: Duration = Duration::from_secs(20);
/// How many times a bootstrap retries with new ports when another test grabbed one first.
const PORT_RETRIES: usize = 5;
/// The pause between two polls of the members' Status.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Raft timing flags (`--heartbeat-interval`, `--election-timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat: Duration,
    pub election: Duration,
}

impl Timing {
    /// Fast failover, for tests that kill or pause a leader.
    pub const FAST: Timing = Timing { heartbeat: Duration::from_millis(50), election: Duration::from_millis(500) };
    /// etcd's defaults, spelled out: for tests where a spurious election (a loaded machine missing
    /// heartbeats) would be a false failure.
    pub const DEFAULT: Timing = Timing { heartbeat: Duration::from_millis(100), election: Duration::from_millis(1000) };
}

/// Server flags shared by every member of a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The implementation to run; defaults to `KV_TEST_SERVER`.
    pub kind: ServerKind,
    /// How many members to bootstrap.
    pub size: usize,
    /// `None` passes no timing flags, leaving the server's defaults.
    pub timing: Option<Timing>,
    /// `--snapshot-count`.
    pub snapshot_count: Option<u64>,
    /// More flags every member gets, passed as given.
    pub extra_args: Vec<String>,
    /// The user and password the harness's Status probes log in with: for clusters that start with auth
    /// enabled (restored from a snapshot), since etcd 3.6 answers Status only to a user then.
    pub credentials: Option<(String, String)>,
    /// Variables every member's process gets (beside the test's own environment).
    pub env: Vec<(String, String)>,
}

impl ClusterConfig {
    /// `size` members of the `KV_TEST_SERVER` kind with default flags.
    pub fn new(size: usize) -> ClusterConfig {
        ClusterConfig {
            kind: ServerKind::from_env(),
            size,
            timing: None,
            snapshot_count: None,
            extra_args: Vec::new(),
            credentials: None,
            env: Vec::new(),
        }
    }
}

/// What a member of a new cluster is bootstrapped with, for [`Cluster::start_prepared`].
#[derive(Debug, Clone, Copy)]
pub struct Bootstrap<'a> {
    pub name: &'a str,
    /// `--data-dir`, which does not exist yet.
    pub data_dir: &'a Path,
    /// `--initial-advertise-peer-urls`.
    pub peer_url: &'a str,
    pub initial_cluster: &'a str,
    pub token: &'a str,
}

/// Running members named `n1`, `n2`, ... Every process is killed when this is dropped.
pub struct Cluster {
    config: ClusterConfig,
    /// `--initial-cluster-token`, unique per cluster so that members of two parallel tests never
    /// take each other for peers.
    token: String,
    members: Vec<ClusterMember>,
}

impl Cluster {
    /// Bootstraps `size` members of the `KV_TEST_SERVER` kind with default flags.
    pub async fn start(size: usize) -> anyhow::Result<Cluster> {
        Cluster::start_with(ClusterConfig::new(size)).await
    }

    /// Bootstraps `config.size` members with one `--initial-cluster` and `--initial-cluster-state
    /// new`, and waits until all of them answer Status and agree on a leader.
    pub async fn start_with(config: ClusterConfig) -> anyhow::Result<Cluster> {
        Cluster::start_prepared(config, |_| Ok(())).await
    }

    /// [`Cluster::start_with`], calling `prepare` for each member before its first start, e.g. to
    /// fill its (not yet existing) data dir with `snapshot restore`.
    pub async fn start_prepared(
        config: ClusterConfig,
        prepare: impl Fn(&Bootstrap) -> anyhow::Result<()>,
    ) -> anyhow::Result<Cluster> {
        for attempt in 1..=PORT_RETRIES {
            let ports = free_ports(2 * config.size)?;
            let names: Vec<String> = (1..=config.size).map(|i| format!("n{i}")).collect();
            let initial_cluster = names
                .iter()
                .zip(ports.chunks(2))
                .map(|(name, pair)| format!("{name}={}", process::url(pair[1])))
                .collect::<Vec<_>>()
                .join(",");
            let mut cluster =
                Cluster { token: unique_token(), config: config.clone(), members: Vec::with_capacity(config.size) };
            let cluster_args = cluster.cluster_args(&initial_cluster, "new");
            for (name, pair) in names.iter().zip(ports.chunks(2)) {
                let mut member = ClusterMember::create(config.kind, name, pair[0], pair[1], &cluster_args)?;
                member.env.clone_from(&config.env);
                if let Some((user, password)) = &config.credentials {
                    member.set_credentials(user, password);
                }
                let peer_url = member.peer_url();
                let data_dir = member.data_dir();
                let token = cluster.token.clone();
                prepare(&Bootstrap {
                    name,
                    data_dir: &data_dir,
                    peer_url: &peer_url,
                    initial_cluster: &initial_cluster,
                    token: &token,
                })?;
                member.start_process()?;
                cluster.members.push(member);
            }
            match cluster.wait_ready().await {
                Ok(()) => return Ok(cluster),
                // Ports are picked by binding port 0 and closing it, so a parallel test may take one
                // before a member binds it. Dropping the cluster kills the members and their dirs.
                Err(_)
                    if attempt < PORT_RETRIES
                        && cluster.members.iter().any(|m| m.log_has("address already in use")) => {}
                Err(err) => return Err(err),
            }
        }
        unreachable!("the last attempt returns")
    }

    pub fn kind(&self) -> ServerKind {
        self.config.kind
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// How many member processes this cluster started (removed and killed ones included).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn member(&self, index: usize) -> &ClusterMember {
        &self.members[index]
    }

    pub fn member_mut(&mut self, index: usize) -> &mut ClusterMember {
        &mut self.members[index]
    }

    pub fn members(&self) -> &[ClusterMember] {
        &self.members
    }

    /// Every member's Status probe logs in as `user` from now on (needed once auth is enabled), members
    /// added later too.
    pub fn set_credentials(&mut self, user: &str, password: &str) {
        self.config.credentials = Some((user.to_string(), password.to_string()));
        for member in &mut self.members {
            member.set_credentials(user, password);
        }
    }

    /// The indexes of the members whose process is alive (paused ones included).
    pub fn running(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&i| self.members[i].is_running()).collect()
    }

    /// The client endpoints of the running members (learners left out), joined with commas for
    /// `--endpoints`.
    pub fn endpoints(&self) -> String {
        self.running()
            .into_iter()
            .filter(|&i| !self.members[i].is_learner())
            .map(|i| self.members[i].endpoint())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs `etcdctl --endpoints=<all running members but learners> <args>`.
    pub async fn etcdctl(&self, args: &[&str]) -> anyhow::Result<CtlOutput> {
        etcdctl::run(&self.endpoints(), args, None).await
    }

    /// Runs a membership change (`etcdctl member add|remove|promote ...`) against all running
    /// members, repeating it while the answer is `etcdserver: unhealthy cluster`.
    ///
    /// etcd (`--strict-reconfig-check`, on by default) refuses to add a member until the leader has
    /// been connected to every voter for 5 s (`HealthInterval`), so right after a bootstrap or a
    /// restart the first attempts fail that way. A server without that check answers at once.
    pub async fn etcdctl_reconfig(&self, args: &[&str]) -> anyhow::Result<CtlOutput> {
        let deadline = Instant::now() + RECONFIG_TIMEOUT;
        loop {
            let out = self.etcdctl(args).await?;
            if out.error_line() != Some("Error: etcdserver: unhealthy cluster") || Instant::now() >= deadline {
                return Ok(out);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The index of the leader, once every reachable (running, not paused) member answers Status
    /// and they all name the same reachable member, which calls itself leader. Waits up to
    /// [`LEADER_TIMEOUT`] for an election to finish.
    pub async fn leader(&self) -> anyhow::Result<usize> {
        let deadline = Instant::now() + LEADER_TIMEOUT;
        loop {
            let error = match self.agreed_leader().await {
                Ok(index) => return Ok(index),
                Err(err) => err,
            };
            if Instant::now() >= deadline {
                return Err(error.context(format!("no agreed leader after {LEADER_TIMEOUT:?}")));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The Status of every member in `indexes`, in that order.
    pub async fn statuses(&self, indexes: &[usize]) -> anyhow::Result<Vec<MemberStatus>> {
        let mut statuses = Vec::with_capacity(indexes.len());
        for &i in indexes {
            statuses.push(self.members[i].status().await?);
        }
        Ok(statuses)
    }

    /// Waits until the members in `indexes` have applied the same log index and none of them knows
    /// of a committed entry beyond it, i.e. they hold the same data. Returns that index.
    pub async fn wait_converged(&self, indexes: &[usize]) -> anyhow::Result<u64> {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        let mut last = String::from("no attempt");
        while Instant::now() < deadline {
            match self.statuses(indexes).await {
                Ok(statuses) => {
                    let applied = statuses[0].raft_applied_index;
                    let newest = statuses.iter().map(|s| s.raft_index).max().unwrap_or(0);
                    if statuses.iter().all(|s| s.raft_applied_index == applied) && newest <= applied {
                        return Ok(applied);
                    }
                    last = format!("{statuses:?}");
                }
                Err(err) => last = format!("{err:#}"),
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        bail!("members {indexes:?} did not converge in {CONVERGE_TIMEOUT:?}; last: {last}")
    }

    /// Adds a member the way an operator does: `etcdctl member add nX --peer-urls=... [--learner]`,
    /// then starts it with the `ETCD_INITIAL_CLUSTER` and `ETCD_INITIAL_CLUSTER_STATE` (`existing`)
    /// that etcdctl printed. Returns its index once it answers Status; it may still be catching up.
    pub async fn add_member(&mut self, learner: bool) -> anyhow::Result<usize> {
        let name = format!("n{}", self.members.len() + 1);
        let ports = free_ports(2)?;
        let peer_url = format!("--peer-urls={}", process::url(ports[1]));
        let mut args = vec!["member", "add", name.as_str(), peer_url.as_str()];
        if learner {
            args.push("--learner");
        }
        let printed = self.etcdctl_reconfig(&args).await?.ok().context("etcdctl member add")?;
        let initial_cluster = printed_var(&printed, "ETCD_INITIAL_CLUSTER")?;
        let state = printed_var(&printed, "ETCD_INITIAL_CLUSTER_STATE")?;
        let cluster_args = self.cluster_args(&initial_cluster, &state);
        let mut member = ClusterMember::create(self.config.kind, &name, ports[0], ports[1], &cluster_args)?;
        member.env.clone_from(&self.config.env);
        member.start_process()?;
        member.learner = learner;
        if let Some((user, password)) = &self.config.credentials {
            member.set_credentials(user, password);
        }
        self.members.push(member);
        let index = self.members.len() - 1;
        self.members[index].wait_serving().await?;
        Ok(index)
    }

    /// Runs `etcdctl member promote <id of member index>` (see [`Cluster::etcdctl_reconfig`]) and
    /// returns its output; on success the member is no longer left out as a learner.
    pub async fn promote(&mut self, index: usize) -> anyhow::Result<CtlOutput> {
        let id = format!("{:x}", self.members[index].status().await?.member_id);
        let out = self.etcdctl_reconfig(&["member", "promote", &id]).await?;
        if out.success() {
            self.members[index].learner = false;
        }
        Ok(out)
    }

    /// The flags every member of this cluster gets after its identity flags.
    fn cluster_args(&self, initial_cluster: &str, state: &str) -> Vec<String> {
        let mut args = vec![
            format!("--initial-cluster={initial_cluster}"),
            format!("--initial-cluster-state={state}"),
            format!("--initial-cluster-token={}", self.token),
        ];
        if let Some(timing) = self.config.timing {
            args.push(format!("--heartbeat-interval={}", timing.heartbeat.as_millis()));
            args.push(format!("--election-timeout={}", timing.election.as_millis()));
        }
        if let Some(count) = self.config.snapshot_count {
            args.push(format!("--snapshot-count={count}"));
        }
        args.extend(self.config.extra_args.iter().cloned());
        args
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        for member in &self.members {
            member.wait_serving().await?;
        }
        self.leader().await?;
        Ok(())
    }

    async fn agreed_leader(&self) -> anyhow::Result<usize> {
        let reachable: Vec<usize> = (0..self.members.len()).filter(|&i| self.members[i].is_reachable()).collect();
        let statuses = self.statuses(&reachable).await?;
        let Some(first) = statuses.first() else {
            bail!("no reachable member");
        };
        if first.leader == 0 || statuses.iter().any(|s| s.leader != first.leader) {
            bail!("members disagree on the leader: {statuses:?}");
        }
        reachable
            .iter()
            .zip(&statuses)
            .find(|(_, s)| s.is_leader())
            .map(|(&i, _)| i)
            .with_context(|| format!("the leader is not reachable: {statuses:?}"))
    }
}

/// The value of `NAME="value"` in the environment lines `etcdctl member add` prints.
fn printed_var(printed: &str, name: &str) -> anyhow::Result<String> {
    let prefix = format!("{name}=");
    printed
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim_matches('"').to_owned())
        .with_context(|| format!("etcdctl member add printed no {name}: {printed:?}"))
}

/// A cluster token no other cluster (in this or a parallel test process) uses.
fn unique_token() -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
    format!("kv-test-{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_variables_member_add_prints() {
        // etcdctl 3.4's output for `member add n4 --peer-urls=http://127.0.0.1:32383 --learner`.
        let printed = "Member  159cf49344e9e51 added to cluster d19d6230f38ef9e0\n\n\
            ETCD_NAME=\"n4\"\n\
            ETCD_INITIAL_CLUSTER=\"n4=http://127.0.0.1:32383,n3=http://127.0.0.1:32382\"\n\
            ETCD_INITIAL_ADVERTISE_PEER_URLS=\"http://127.0.0.1:32383\"\n\
            ETCD_INITIAL_CLUSTER_STATE=\"existing\"\n";
        let cases = [
            ("ETCD_INITIAL_CLUSTER", Some("n4=http://127.0.0.1:32383,n3=http://127.0.0.1:32382")),
            ("ETCD_INITIAL_CLUSTER_STATE", Some("existing")),
            ("ETCD_NAME", Some("n4")),
            ("ETCD_DATA_DIR", None),
        ];
        for (name, want) in cases {
            assert_eq!(printed_var(printed, name).ok().as_deref(), want, "{name}");
        }
    }
}
