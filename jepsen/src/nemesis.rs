//! The nemesis: after a quiet start, alternates a fault window and a calm window of
//! `--nemesis-interval` each until the time limit, then heals everything.
//!
//! Each window picks one of the requested fault kinds and its victims with the run's seeded RNG.
//! Which member is the leader depends on the run, so a "leader" fault asks the cluster at that
//! moment (and falls back to a random member, saying so, when no leader is known). Every start and
//! stop goes to `nemesis.jsonl` with the run's clock.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::membership::{self, Change};
use crate::net::Net;
use crate::options::FaultKind;
use crate::recorder::Clock;
use crate::truncation::{self, Blackhole};

/// A fault in force, and what healing it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Active {
    /// nft rules are in place; heal flushes them.
    Partition,
    /// These members are dead; heal restarts them.
    Killed(Vec<usize>),
    /// These members are stopped; heal continues them.
    Paused(Vec<usize>),
    /// This member was removed from the cluster; heal adds it back through learner → voter.
    Removed(usize),
    /// Nothing to heal (a compaction, or a membership change that did not happen).
    NothingToHeal,
    /// A follower is cut off until the leader snapshotted past it; heal reconnects it.
    Blackholed(Blackhole),
    /// Peer links are delayed in their proxies; heal clears the delay.
    Delayed,
    /// This member's log syncs are slowed or hung by its failpoint; heal turns it off.
    DiskSlowed(usize),
}

/// One line of `nemesis.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub struct NemesisEvent {
    pub time_ns: u64,
    /// `start` or `stop`.
    pub f: &'static str,
    pub fault: FaultKind,
    /// Who was hit, e.g. `isolated n2 (leader)`.
    pub detail: String,
}

pub struct Nemesis {
    kinds: Vec<FaultKind>,
    rng: StdRng,
    clock: Clock,
    log: BufWriter<File>,
    events: Vec<NemesisEvent>,
    /// The highest revision a `compact` fault compacted (or may have, after a timeout).
    compact_revision: Option<i64>,
    /// blackhole-snapshot heals, and how many of them saw the follower install a snapshot.
    blackholes: (usize, usize),
    /// What the final heal could not restore (a member left out or a learner).
    heal_failures: Vec<String>,
}

impl Nemesis {
    pub fn new(kinds: &[FaultKind], seed: u64, clock: Clock, log_path: &Path) -> Result<Nemesis> {
        let file = File::create(log_path).map_err(Error::system(format!("create {}", log_path.display())))?;
        let kinds: Vec<FaultKind> = kinds.iter().copied().filter(|k| *k != FaultKind::None).collect();
        // A stream of its own, so that the workers' use of the seed does not shift the faults.
        let rng = StdRng::seed_from_u64(seed ^ 0x6e65_6d65_7369_7321);
        Ok(Nemesis {
            kinds,
            rng,
            clock,
            log: BufWriter::new(file),
            events: Vec::new(),
            compact_revision: None,
            blackholes: (0, 0),
            heal_failures: Vec::new(),
        })
    }

    /// Everything that happened, in order.
    pub fn events(&self) -> &[NemesisEvent] {
        &self.events
    }

    /// The highest revision compacted during the run (counting compactions that timed out and so
    /// may have happened): history at or below it is gone, which workloads that replay history
    /// from revision 1 must take into account.
    pub fn compact_revision(&self) -> Option<i64> {
        self.compact_revision
    }

    /// Lines for the report's notes about the cluster-level faults.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(revision) = self.compact_revision {
            notes.push(format!("compact: the keyspace was compacted up to revision {revision}"));
        }
        let (healed, installed) = self.blackholes;
        if healed > 0 {
            notes.push(format!(
                "blackhole-snapshot: the follower's log shows a snapshot install after {installed} of {healed} heals"
            ));
        }
        notes
    }

    /// The nemesis's own verdict: `Unknown` when the final heal could not give back three voting
    /// members (the checks after it then judge a different cluster than the run meant to).
    pub fn check(&self) -> CheckResult {
        let anomalies = self
            .heal_failures
            .iter()
            .map(|failure| Anomaly::new(AnomalyKind::Unreachable, format!("final heal: {failure}")))
            .collect();
        CheckResult::from_anomalies("nemesis", anomalies)
    }

    /// Runs the fault schedule until `end`, then heals everything. Returns when all is healed.
    pub async fn run(
        &mut self,
        cluster: &mut Cluster,
        net: &Net,
        quiet: Duration,
        interval: Duration,
        end: Instant,
    ) -> Result<()> {
        tokio::time::sleep_until(end.min(Instant::now() + quiet)).await;
        while !self.kinds.is_empty() && Instant::now() + Duration::from_millis(500) < end {
            let kind = self.kinds[self.rng.gen_range(0..self.kinds.len())];
            let active = self.start(kind, cluster, net).await?;
            tokio::time::sleep_until(end.min(Instant::now() + interval)).await;
            self.stop(kind, active, cluster, net).await?;
            tokio::time::sleep_until(end.min(Instant::now() + interval)).await;
        }
        self.heal_everything(cluster, net).await
    }

    async fn start(&mut self, kind: FaultKind, cluster: &mut Cluster, net: &Net) -> Result<Active> {
        let size = cluster.members.len();
        let (active, detail) = match kind {
            FaultKind::None => (Active::Partition, "nothing".to_string()),
            FaultKind::PartitionOne | FaultKind::PartitionLeader => {
                let (victim, why) = self.victim(kind == FaultKind::PartitionLeader, cluster).await;
                net.isolate(victim).await?;
                (Active::Partition, format!("isolated {}{why}", cluster.members[victim].name))
            }
            FaultKind::Bridge => {
                let a = self.rng.gen_range(0..size);
                let b = (a + self.rng.gen_range(1..size)) % size;
                net.cut(&[(a, b), (b, a)]).await?;
                let (na, nb) = (&cluster.members[a].name, &cluster.members[b].name);
                (Active::Partition, format!("cut {na}<->{nb}; the third member bridges them"))
            }
            FaultKind::KillOne | FaultKind::KillLeader => {
                let (victim, why) = self.victim(kind == FaultKind::KillLeader, cluster).await;
                cluster.members[victim].kill()?;
                (Active::Killed(vec![victim]), format!("killed {}{why}", cluster.members[victim].name))
            }
            FaultKind::KillAll => {
                cluster.kill_all()?;
                (Active::Killed((0..size).collect()), "killed every member".to_string())
            }
            FaultKind::PauseOne | FaultKind::PauseLeader => {
                let (victim, why) = self.victim(kind == FaultKind::PauseLeader, cluster).await;
                cluster.members[victim].pause()?;
                (Active::Paused(vec![victim]), format!("paused {}{why}", cluster.members[victim].name))
            }
            FaultKind::MemberShrinkGrow => {
                let victim = self.rng.gen_range(0..size);
                let why = if cluster.leader().await == Some(victim) { " (leader)" } else { "" };
                match membership::shrink(cluster, victim, why).await? {
                    Change::Done(detail) => (Active::Removed(victim), detail),
                    Change::Failed(detail) => (Active::NothingToHeal, detail),
                }
            }
            FaultKind::Compact => {
                let compaction = truncation::compact(cluster, &mut self.rng).await;
                self.compact_revision = self.compact_revision.max(compaction.revision);
                (Active::NothingToHeal, compaction.detail)
            }
            FaultKind::BlackholeSnapshot => {
                let (hole, detail) = truncation::blackhole(cluster, net, &mut self.rng).await?;
                (Active::Blackholed(hole), detail)
            }
            FaultKind::OneWay => {
                let (from, why) = self.victim(true, cluster).await;
                let to = (from + self.rng.gen_range(1..size)) % size;
                net.cut(&[(from, to)]).await?;
                let (nf, nt) = (&cluster.members[from].name, &cluster.members[to].name);
                (Active::Partition, format!("dropping {nf}->{nt} only{why}"))
            }
            FaultKind::ClientCut => {
                let leader = self.rng.gen_bool(0.5);
                let (victim, why) = self.victim(leader, cluster).await;
                net.cut_clients(victim).await?;
                (Active::Partition, format!("cut the clients off {}'s client port{why}", cluster.members[victim].name))
            }
            FaultKind::Delay => {
                let (members, whose) = if self.rng.gen_bool(0.5) {
                    ((0..size).collect(), "every peer link".to_string())
                } else {
                    let victim = self.rng.gen_range(0..size);
                    (vec![victim], format!("{}'s peer links", cluster.members[victim].name))
                };
                let delay = net.delay(&members)?;
                (Active::Delayed, format!("delayed {whose} by {delay} each way"))
            }
            FaultKind::Loss => {
                net.lose().await?;
                (Active::Partition, format!("dropping {}% of peer packets", net.shaping().loss_percent))
            }
            FaultKind::SlowDisk => {
                let (victim, why) = self.victim(true, cluster).await;
                let (term, what) = if self.rng.gen_bool(1.0 / 3.0) {
                    ("sleep(600000)".to_string(), "hung".to_string())
                } else {
                    let millis = self.rng.gen_range(100..=800);
                    (format!("sleep({millis})"), format!("slowed by {millis} ms each"))
                };
                let name = &cluster.members[victim].name;
                match cluster.members[victim].set_before_save(Some(&term)).await {
                    Ok(204) => (Active::DiskSlowed(victim), format!("{what}: {name}'s log syncs{why}")),
                    answer => (Active::NothingToHeal, format!("no failpoint on {name}{why} ({answer:?}): nothing")),
                }
            }
        };
        self.event("start", kind, detail)?;
        Ok(active)
    }

    async fn stop(&mut self, kind: FaultKind, active: Active, cluster: &mut Cluster, net: &Net) -> Result<()> {
        let detail = match active {
            Active::Partition => {
                net.heal().await?;
                "healed the network".to_string()
            }
            Active::Killed(victims) => {
                let mut names = Vec::new();
                for i in victims {
                    cluster.members[i].start()?;
                    names.push(cluster.members[i].name.clone());
                }
                format!("restarted {}", names.join(", "))
            }
            Active::Paused(victims) => {
                let mut names = Vec::new();
                for i in victims {
                    cluster.members[i].resume()?;
                    names.push(cluster.members[i].name.clone());
                }
                format!("resumed {}", names.join(", "))
            }
            Active::Removed(victim) => match membership::grow(cluster, victim).await? {
                Change::Done(detail) => detail,
                // The final heal tries again.
                Change::Failed(detail) => format!("FAILED: {detail}"),
            },
            Active::NothingToHeal => "nothing to heal".to_string(),
            Active::Delayed => {
                net.clear_delay();
                "removed the delay".to_string()
            }
            Active::DiskSlowed(victim) => {
                let name = &cluster.members[victim].name;
                match cluster.members[victim].set_before_save(None).await {
                    Ok(204) => format!("{name}'s log syncs as the disk allows again"),
                    answer => format!("FAILED to clear {name}'s failpoint ({answer:?}); the final heal tries again"),
                }
            }
            Active::Blackholed(hole) => {
                let (detail, installed) = truncation::heal_blackhole(cluster, net, &hole).await?;
                self.blackholes.0 += 1;
                self.blackholes.1 += usize::from(installed);
                detail
            }
        };
        self.event("stop", kind, detail)
    }

    /// The final heal: no rules, no stopped or dead member, every member a voter, whatever
    /// happened before.
    async fn heal_everything(&mut self, cluster: &mut Cluster, net: &Net) -> Result<()> {
        net.heal().await?;
        if self.kinds.contains(&FaultKind::SlowDisk) {
            for member in cluster.members.iter_mut() {
                if !member.is_running() {
                    continue;
                }
                if let Ok(code) = member.set_before_save(None).await {
                    if code != 204 {
                        self.heal_failures.push(format!("{}'s failpoint answered {code}", member.name));
                    }
                }
            }
        }
        // A removed member must not restart with its bootstrap flags: the membership repair below
        // adds it back.
        let removed: Vec<bool> = (0..cluster.members.len()).map(|i| cluster.is_removed(i)).collect();
        for (member, removed) in cluster.members.iter_mut().zip(removed) {
            if member.is_paused() {
                member.resume()?;
            }
            if !member.is_running() && !removed {
                warn!(member = %member.name, "not running at the final heal; starting it");
                member.start()?;
            }
        }
        if self.kinds.contains(&FaultKind::MemberShrinkGrow) {
            let (restored, failed) = membership::restore_voters(cluster).await?;
            for detail in restored {
                self.event("stop", FaultKind::MemberShrinkGrow, format!("final heal: {detail}"))?;
            }
            self.heal_failures.extend(failed);
        }
        let detail = match self.heal_failures.is_empty() {
            true => "final heal".to_string(),
            false => format!("final heal, FAILED: {}", self.heal_failures.join("; ")),
        };
        self.event("stop", FaultKind::None, detail)
    }

    /// A random member, or the leader when `leader` (falling back to a random member).
    async fn victim(&mut self, leader: bool, cluster: &Cluster) -> (usize, &'static str) {
        let random = self.rng.gen_range(0..cluster.members.len());
        if !leader {
            return (random, "");
        }
        match cluster.leader().await {
            Some(i) => (i, " (leader)"),
            None => (random, " (no leader known; a random member)"),
        }
    }

    fn event(&mut self, f: &'static str, fault: FaultKind, detail: String) -> Result<()> {
        info!(fault = fault.name(), "nemesis {f}: {detail}");
        let event = NemesisEvent { time_ns: self.clock.now_ns(), f, fault, detail };
        crate::history::write_record(&mut self.log, &event)?;
        self.log.flush().map_err(Error::system("write nemesis.jsonl"))?;
        self.events.push(event);
        Ok(())
    }
}
