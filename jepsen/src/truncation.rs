//! Faults that cut history away: MVCC compaction, and a Raft log truncated behind a snapshot while
//! a follower is cut off, so that the follower can only catch up by snapshot install.
//!
//! # Compaction
//!
//! `Compact` at a revision a few behind the current one, sometimes `physical` (the answer then
//! waits for the compaction). Reads of the register workload never ask for old revisions, so the
//! fault only checks that compaction leaves every member with the same keyspace (the convergence
//! check compares `compact_revision` and `HashKV`). Workloads that replay history from revision 1
//! must know the highest revision that may have been compacted: a `Compact` that timed out counts.
//!
//! # Blackhole until snapshot
//!
//! Isolate a follower (nft, as `partition-one`), then write filler entries (keys under
//! [`FILLER_PREFIX`], outside every workload's prefix) through the others until the leader has
//! taken a snapshot *and* dropped the log entries the follower still needs:
//!
//! - ours (openraft) snapshots every `--snapshot-count` entries (`LogsSinceLast`) and keeps
//!   `min(--snapshot-count, 5000)` entries behind the snapshot (`max_in_snapshot_log_to_keep`);
//! - etcd 3.4 snapshots once `--snapshot-count` entries were applied since the last one and keeps
//!   5000 entries behind it (`snapshotCatchUpEntries`, fixed in 3.4).
//!
//! Snapshots fall every `snapshot-count` entries, so after `kept + 2 × snapshot-count` entries the
//! latest snapshot lies at least `kept + snapshot-count` entries past the follower, and the log
//! still kept starts past it (see [`filler_entries`]). Heal flushes the rules; the fault then waits
//! for the follower to reach the others' revision and looks in its log for a snapshot install.
//!
//! etcd 3.4 needs more than 5,000 filler entries (about 5 s here), and its leader does not compact
//! its log while a snapshot it sent is in flight, which lasts until 30 s after the send: a second
//! blackhole within 30 s of the last install then catches up from the log. The heal's detail
//! says which happened (and quotes the leader's "skip compaction" line); ours has no such pause.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::client;
use crate::cluster::Cluster;
use crate::error::Result;
use crate::net::Net;
use crate::options::Target;

/// Filler keys are `<FILLER_PREFIX><n>`; no workload reads or watches them.
pub const FILLER_PREFIX: &str = "jepsen/filler/";
/// Filler writes cycle over this many keys, so the keyspace stays small.
const FILLER_KEYS: u64 = 64;
/// Concurrent filler writers (the leader batches their entries, so more writers fill faster).
const FILLER_WRITERS: usize = 32;
/// The filler gives up after this long (a leader without quorum never commits).
const FILLER_DEADLINE: Duration = Duration::from_secs(60);
/// Entries etcd 3.4 keeps behind a snapshot for slow followers (`snapshotCatchUpEntries`).
const ETCD_CATCH_UP_ENTRIES: u64 = 5000;
/// Our `max_in_snapshot_log_to_keep` is at most this (see raft-node's server.rs).
const OURS_MAX_KEPT: u64 = 5000;
/// Entries beyond the computed minimum, for the workload's own writes and membership entries
/// that do not count the same way.
const FILLER_MARGIN: u64 = 100;
/// More filler than this would not fit in a fault window; the fault then says the follower may
/// catch up from the log.
const MAX_FILLER: u64 = 20_000;
/// How far behind the current revision a compaction lands, at most.
const COMPACT_LAG: i64 = 20;
/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a Defragment may take (etcd's copies its whole file).
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the healed follower may take to catch up.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(30);
/// Log lines by which a member shows it installed a snapshot from its leader: openraft's state
/// machine worker (ours, with the log filter the cluster sets), etcd 3.4's raft node.
const INSTALL_MARKERS: &[&str] =
    &["install complete snapshot", "applied incoming snapshot", "applying snapshot at index", "restored snapshot"];
/// Log lines by which a leader shows it sent one.
const SEND_MARKERS: &[&str] = &["get snapshot", "sending database snapshot", "database snapshot [index"];
/// etcd 3.4's leader keeps its whole log while a snapshot it sent is "in flight", which lasts 30 s
/// past the send (`releaseDelayAfterSnapshot`): a second blackhole within 30 s of a snapshot
/// install then finds the log still there, and the follower catches up from it.
const SKIPPED_COMPACTION_MARKERS: &[&str] = &["skip compaction since there is an inflight snapshot"];

/// What one compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// For the nemesis log.
    pub detail: String,
    /// The revision that was (or, after a timeout, may have been) compacted.
    pub revision: Option<i64>,
}

/// Compacts a few revisions behind the current one, through the leader when known.
pub async fn compact(cluster: &Cluster, rng: &mut StdRng) -> Compaction {
    let index = match cluster.leader().await {
        Some(leader) => leader,
        None => rng.gen_range(0..cluster.members.len()),
    };
    let member = &cluster.members[index];
    let current = match client::status(member.channel(), CALL_TIMEOUT).await {
        Ok(status) => status.revision,
        Err(status) => {
            let detail = format!("no compaction: {} did not answer Status: {}", member.name, client::describe(&status));
            return Compaction { detail, revision: None };
        }
    };
    let revision = current - rng.gen_range(1..=COMPACT_LAG);
    if revision < 2 {
        return Compaction { detail: format!("no compaction: only {current} revisions so far"), revision: None };
    }
    let physical = rng.gen_bool(0.5);
    let how = if physical { "physical" } else { "not physical" };
    match client::compact(member.channel(), revision, physical, CALL_TIMEOUT).await {
        Ok(()) => {
            let detail = format!("compacted at revision {revision} (current {current}, {how}) through {}", member.name);
            // Half the time a member then defragments while the workload runs (etcd's own advice after
            // a compaction): the copy, or ours' collection in place, must lose nothing acknowledged.
            let defragmented = if rng.gen_bool(0.5) { defragment(cluster, rng).await } else { String::new() };
            Compaction { detail: format!("{detail}{defragmented}"), revision: Some(revision) }
        }
        Err(status) if status.message().contains("required revision has been compacted") => Compaction {
            detail: format!("revision {revision} was already compacted ({})", member.name),
            revision: None,
        },
        Err(status) => Compaction {
            detail: format!(
                "compaction at revision {revision} ({how}) through {} may or may not have happened: {}",
                member.name,
                client::describe(&status)
            ),
            revision: Some(revision),
        },
    }
}

/// Defragments a member chosen at random; what happened, for the nemesis log.
async fn defragment(cluster: &Cluster, rng: &mut StdRng) -> String {
    let member = &cluster.members[rng.gen_range(0..cluster.members.len())];
    let started = std::time::Instant::now();
    match client::defragment(member.channel(), DEFRAG_TIMEOUT).await {
        Ok(()) => format!("; defragmented {} in {} ms", member.name, started.elapsed().as_millis()),
        Err(status) => format!("; defragment of {} failed: {}", member.name, client::describe(&status)),
    }
}

/// How many filler entries push the leader's kept log past an isolated follower: `None` when the
/// members use the server's default snapshot count (too high to reach in a fault window).
pub fn filler_entries(target: Target, snapshot_count: Option<u64>) -> Option<u64> {
    let count = snapshot_count?;
    let kept = match target {
        Target::Ours => count.min(OURS_MAX_KEPT),
        Target::Etcd => ETCD_CATCH_UP_ENTRIES,
    };
    let entries = kept + 2 * count.max(1) + FILLER_MARGIN;
    (entries <= MAX_FILLER).then_some(entries)
}

/// A follower cut off until the leader has snapshotted past it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blackhole {
    pub victim: usize,
    /// Every member's log length when the fault started, so that only later lines count.
    log_offsets: Vec<u64>,
}

/// Isolates a follower and writes the filler. Returns the fault and its detail.
pub async fn blackhole(cluster: &Cluster, net: &Net, rng: &mut StdRng) -> Result<(Blackhole, String)> {
    let size = cluster.members.len();
    let leader = cluster.leader().await;
    let victim = match leader {
        Some(leader) => (leader + rng.gen_range(1..size)) % size,
        None => rng.gen_range(0..size),
    };
    let log_offsets = cluster.members.iter().map(|m| m.log_len()).collect();
    net.isolate(victim).await?;
    let victim_name = &cluster.members[victim].name;
    let role = match leader {
        Some(leader) => format!("follower of {}", cluster.members[leader].name),
        None => "no leader known; a random member".to_string(),
    };
    let Some(entries) = filler_entries(cluster.target, cluster.snapshot_count) else {
        let detail = format!(
            "isolated {victim_name} ({role}); no filler: --snapshot-count {:?} is too high for a snapshot within \
             the fault, so it will likely catch up from the log",
            cluster.snapshot_count
        );
        return Ok((Blackhole { victim, log_offsets }, detail));
    };
    // Through the leader when known (no forwarding hop), else through the other members.
    let channels: Vec<Channel> = match leader {
        Some(leader) => vec![cluster.members[leader].channel().clone()],
        None => (0..size).filter(|&i| i != victim).map(|i| cluster.members[i].channel().clone()).collect(),
    };
    let started = Instant::now();
    let filled = fill(&channels, entries).await;
    let detail = format!(
        "isolated {victim_name} ({role}), then wrote {} filler puts under {FILLER_PREFIX}, {} log entries ({entries} \
         needed), in {:.1} s ({} failed) so that the leader snapshots and drops the log {victim_name} needs",
        filled.ok,
        filled.entries,
        started.elapsed().as_secs_f64(),
        filled.failed
    );
    Ok((Blackhole { victim, log_offsets }, detail))
}

/// Heals the network, waits for the follower to catch up and says whether it installed a
/// snapshot. The second value is true when the follower's log shows an install.
pub async fn heal_blackhole(cluster: &Cluster, net: &Net, hole: &Blackhole) -> Result<(String, bool)> {
    net.heal().await?;
    let started = Instant::now();
    let name = &cluster.members[hole.victim].name;
    let caught_up = wait_caught_up(cluster, hole.victim).await;
    let installed = hole
        .log_offsets
        .get(hole.victim)
        .and_then(|&offset| first_line(&cluster.members[hole.victim].log_since(offset), INSTALL_MARKERS));
    let others_logging = |markers: &[&str]| -> Vec<String> {
        cluster
            .members
            .iter()
            .zip(&hole.log_offsets)
            .enumerate()
            .filter(|(i, (member, &offset))| {
                *i != hole.victim && first_line(&member.log_since(offset), markers).is_some()
            })
            .map(|(_, (member, _))| member.name.clone())
            .collect()
    };
    let sent = others_logging(SEND_MARKERS);
    let progress = match caught_up {
        true => format!("{name} caught up in {:.1} s", started.elapsed().as_secs_f64()),
        false => format!("{name} had not caught up after {} s", CATCH_UP_DEADLINE.as_secs()),
    };
    let evidence = match &installed {
        Some(line) => format!("installed a snapshot ({}.log: {line})", name),
        None => {
            let held = others_logging(SKIPPED_COMPACTION_MARKERS);
            let why = match held.is_empty() {
                true => String::new(),
                false => format!(
                    " ({} skipped log compaction for an in-flight snapshot: etcd holds its log for 30 s after \
                     sending one)",
                    held.join(", ")
                ),
            };
            format!("no snapshot install in {name}.log: it caught up from the log{why}")
        }
    };
    let senders = if sent.is_empty() { String::new() } else { format!("; sent by {}", sent.join(", ")) };
    Ok((format!("healed the network; {progress}, {evidence}{senders}"), installed.is_some()))
}

/// How the filler went.
#[derive(Debug, Default)]
struct Filled {
    ok: u64,
    failed: u64,
    /// How far the first channel's member's Raft log grew meanwhile.
    entries: u64,
}

/// The last log index of the member behind `channel`.
async fn raft_index(channel: &Channel) -> Option<u64> {
    client::status(channel, Duration::from_secs(1)).await.ok().map(|s| s.raft_index)
}

/// Writes puts over `channels` with [`FILLER_WRITERS`] concurrent writers until the Raft log of the
/// first channel's member has grown by `entries` (a leader may carry many puts in one entry, so
/// puts are not entries) or the deadline passes. Failed puts are not retried.
async fn fill(channels: &[Channel], entries: u64) -> Filled {
    let next = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + FILLER_DEADLINE;
    let start = raft_index(&channels[0]).await.unwrap_or(0);
    let grown = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (done, grown, channel) = (Arc::clone(&done), Arc::clone(&grown), channels[0].clone());
        async move {
            while Instant::now() < deadline {
                if let Some(index) = raft_index(&channel).await {
                    grown.store(index.saturating_sub(start), Ordering::Relaxed);
                    if index >= start + entries {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            done.store(true, Ordering::Relaxed);
        }
    };
    let writers = (0..FILLER_WRITERS).map(|writer| {
        let channel = channels[writer % channels.len()].clone();
        let (next, ok, failed, done) = (Arc::clone(&next), Arc::clone(&ok), Arc::clone(&failed), Arc::clone(&done));
        async move {
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let key = format!("{FILLER_PREFIX}{}", n % FILLER_KEYS);
                let left = deadline.saturating_duration_since(Instant::now());
                match client::put(&channel, &key, &n.to_string(), CALL_TIMEOUT.min(left)).await {
                    Ok(_) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    });
    futures::future::join(monitor, futures::future::join_all(writers)).await;
    Filled {
        ok: ok.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        entries: grown.load(Ordering::Relaxed),
    }
}

/// Waits until `victim` reports at least the highest revision the others report.
async fn wait_caught_up(cluster: &Cluster, victim: usize) -> bool {
    let deadline = Instant::now() + CATCH_UP_DEADLINE;
    while Instant::now() < deadline {
        let statuses = cluster.statuses(Duration::from_secs(1)).await;
        let highest = statuses
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != victim)
            .filter_map(|(_, s)| s.as_ref().ok())
            .map(|s| s.revision)
            .max();
        let own = statuses.get(victim).and_then(|s| s.as_ref().ok()).map(|s| s.revision);
        if let (Some(highest), Some(own)) = (highest, own) {
            if own >= highest {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// The first line of `log` containing one of `markers` (case-insensitive), trimmed and cut short.
fn first_line(log: &str, markers: &[&str]) -> Option<String> {
    log.lines()
        .find(|line| {
            let lower = line.to_lowercase();
            markers.iter().any(|m| lower.contains(m))
        })
        .map(|line| line.trim().chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_passes_the_kept_log_plus_two_snapshots() {
        let cases = [
            (Target::Ours, Some(100), Some(100 + 200 + FILLER_MARGIN)),
            (Target::Ours, Some(10_000), None),
            (Target::Ours, Some(3000), Some(3000 + 6000 + FILLER_MARGIN)),
            (Target::Etcd, Some(100), Some(5000 + 200 + FILLER_MARGIN)),
            (Target::Etcd, None, None),
            (Target::Ours, Some(0), Some(2 + FILLER_MARGIN)),
        ];
        for (target, count, want) in cases {
            assert_eq!(filler_entries(target, count), want, "{target:?} {count:?}");
        }
    }

    #[test]
    fn snapshot_lines_are_found_in_both_servers_logs() {
        let ours = "2026-01-01T00:00:00Z  INFO openraft::core::sm::worker: worker_loop: install complete snapshot\n";
        let etcd = "2026-01-01 00:00:00.000 I | etcdserver: applying snapshot at index 5300...\n";
        assert!(first_line(ours, INSTALL_MARKERS).is_some_and(|l| l.contains("install complete snapshot")));
        assert!(first_line(etcd, INSTALL_MARKERS).is_some());
        assert_eq!(first_line("INFO raft: became follower\n", INSTALL_MARKERS), None);
        assert!(first_line("INFO openraft::core::sm::worker: worker_loop: get snapshot", SEND_MARKERS).is_some());
    }
}
