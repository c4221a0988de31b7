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

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::net::Net;
use crate::options::FaultKind;
use crate::recorder::Clock;

/// A fault in force, and what healing it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Active {
    /// nft rules are in place; heal flushes them.
    Partition,
    /// These members are dead; heal restarts them.
    Killed(Vec<usize>),
    /// These members are stopped; heal continues them.
    Paused(Vec<usize>),
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
}

impl Nemesis {
    pub fn new(kinds: &[FaultKind], seed: u64, clock: Clock, log_path: &Path) -> Result<Nemesis> {
        let file = File::create(log_path).map_err(Error::system(format!("create {}", log_path.display())))?;
        let kinds: Vec<FaultKind> = kinds.iter().copied().filter(|k| *k != FaultKind::None).collect();
        // A stream of its own, so that the workers' use of the seed does not shift the faults.
        let rng = StdRng::seed_from_u64(seed ^ 0x6e65_6d65_7369_7321);
        Ok(Nemesis { kinds, rng, clock, log: BufWriter::new(file), events: Vec::new() })
    }

    /// Everything that happened, in order.
    pub fn events(&self) -> &[NemesisEvent] {
        &self.events
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
        };
        self.event("stop", kind, detail)
    }

    /// The final heal: no rules, no stopped or dead member, whatever happened before.
    async fn heal_everything(&mut self, cluster: &mut Cluster, net: &Net) -> Result<()> {
        net.heal().await?;
        for member in &mut cluster.members {
            if member.is_paused() {
                member.resume()?;
            }
            if !member.is_running() {
                warn!(member = %member.name, "not running at the final heal; starting it");
                member.start()?;
            }
        }
        self.event("stop", FaultKind::None, "final heal".to_string())
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
