//! Membership faults: shrink the cluster by removing a member, grow it back through learner →
//! voter, and the final heal's repair that leaves every member a voter.
//!
//! Shrink: `MemberRemove` (asked through another member, since the victim may be the leader and
//! would then drop the answer while stepping down), then SIGKILL and wipe the data dir: a removed
//! member may never come back with its old id and log (etcd refuses, and so should we).
//!
//! Grow follows etcd's runtime-reconfiguration guide: `MemberAdd` with `is_learner` under the old
//! peer URL, start the member with `--initial-cluster-state=existing` and an `--initial-cluster`
//! naming the current members plus itself, wait until it has caught up, then `MemberPromote`,
//! retrying while the leader says the learner is not in sync yet. The cluster gives the member a
//! new id (etcd mixes the time into it), so [`Cluster`]'s id table is updated for leader lookup.
//!
//! Every server call is bounded, and a refused or timed-out change is looked up again in
//! `MemberList` before it is retried: a `MemberRemove` that timed out may well have happened.
//! A change the server keeps refusing ends as [`Change::Failed`] with the last error, never as a
//! harness error, so that the run still gets its verdict.

use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;
use tracing::{info, warn};

use crate::client::{self, ListedMember};
use crate::cluster::{Cluster, SIZE};
use crate::error::Result;

/// How long one cluster API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one shrink or grow keeps retrying before it gives up.
const CHANGE_DEADLINE: Duration = Duration::from_secs(40);
/// How long a learner may take to catch up before the promotion is tried anyway.
const CATCH_UP_WAIT: Duration = Duration::from_secs(20);
/// The pause between two attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(300);
/// etcd's (and our) answer to a promote that comes too early; worth retrying.
const NOT_IN_SYNC: &str = "can only promote a learner member which is in sync with leader";

/// How a membership change ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It happened; what was done, for the nemesis log.
    Done(String),
    /// It did not happen (the cluster refused or did not answer in time); why.
    Failed(String),
}

/// Removes member `victim` from the cluster, then kills it and wipes its data. `why` tags the
/// victim in the detail (e.g. ` (leader)`).
pub async fn shrink(cluster: &mut Cluster, victim: usize, why: &str) -> Result<Change> {
    let name = cluster.members[victim].name.clone();
    let peer_url = cluster.members[victim].peer_url();
    let others = channels_except(cluster, victim);
    let deadline = Instant::now() + CHANGE_DEADLINE;
    let mut attempt = 0usize;
    let mut last_error = String::from("no member answered MemberList");
    let mut checked = false;
    let removed_id = loop {
        if Instant::now() >= deadline {
            return Ok(Change::Failed(format!("could not remove {name}: {last_error}")));
        }
        attempt += 1;
        let Some(members) = look(&others, attempt, &mut last_error).await else { continue };
        let Some(listed) = find(&members, &peer_url) else {
            // Gone already: an earlier attempt that timed out went through after all.
            break cluster.member_id(victim);
        };
        if !checked && !all_voters(&members) {
            // Shrinking an already incomplete cluster could leave it without a quorum.
            return Ok(Change::Failed(format!(
                "not removing {name}: the cluster is not {SIZE} voters ({})",
                describe_members(&members)
            )));
        }
        checked = true;
        let through = &others[attempt % others.len()];
        match client::member_remove(through, listed.id, CALL_TIMEOUT).await {
            Ok(()) => break listed.id,
            Err(status) => {
                last_error = format!("MemberRemove: {}", client::describe(&status));
                warn!(member = %name, error = %last_error, "member remove failed; looking again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    };
    let member = &mut cluster.members[victim];
    member.kill()?;
    member.wipe_data()?;
    cluster.set_member_id(victim, 0);
    Ok(Change::Done(format!("removed {name}{why} (id {removed_id:x}), killed it and wiped its data")))
}

/// Adds member `victim` back as a learner, starts it on an empty data dir, waits until it has
/// caught up and promotes it to voter.
pub async fn grow(cluster: &mut Cluster, victim: usize) -> Result<Change> {
    let started = Instant::now();
    let deadline = started + CHANGE_DEADLINE;
    let name = cluster.members[victim].name.clone();
    let peer_url = cluster.members[victim].peer_url();
    let others = channels_except(cluster, victim);

    // 1. The cluster must list it: MemberAdd, unless an earlier attempt already did.
    let mut attempt = 0usize;
    let mut last_error = String::from("no member answered MemberList");
    let (listed, members) = loop {
        if Instant::now() >= deadline {
            return Ok(Change::Failed(format!("could not add {name} back: {last_error}")));
        }
        attempt += 1;
        let Some(members) = look(&others, attempt, &mut last_error).await else { continue };
        if let Some(listed) = find(&members, &peer_url) {
            break (listed.clone(), members);
        }
        let through = &others[attempt % others.len()];
        if let Err(status) = client::member_add(through, &peer_url, true, CALL_TIMEOUT).await {
            // Whether it failed or not, the next MemberList says.
            last_error = format!("MemberAdd: {}", client::describe(&status));
            warn!(member = %name, error = %last_error, "member add failed; looking again");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    };

    // 2. Start it as the new member, unless it already runs under that id (a repair of a grow
    //    that stopped at the promotion).
    let initial = initial_cluster(&members, &cluster.names(), &cluster.peer_urls());
    let member = &mut cluster.members[victim];
    let running_as_listed = member.is_running()
        && client::status(member.channel(), CALL_TIMEOUT).await.is_ok_and(|s| s.member_id == listed.id);
    if !running_as_listed {
        member.kill()?;
        member.wipe_data()?;
        member.rejoin(&initial);
        member.start()?;
    }
    cluster.set_member_id(victim, listed.id);
    if !listed.is_learner {
        return Ok(Change::Done(format!("{name} is a voter again (id {:x})", listed.id)));
    }

    // 3. Let it catch up (the promotion would be refused before), then promote it; the wait is
    //    shorter than the whole deadline so that the promotion still gets its tries.
    let caught_up = wait_caught_up(cluster, victim, deadline.min(Instant::now() + CATCH_UP_WAIT)).await;
    let mut last_error = String::from("no answer");
    loop {
        if !cluster.members[victim].is_running() {
            return Ok(Change::Failed(format!(
                "{name} exited while joining as learner {:x}; see {}",
                listed.id,
                cluster.members[victim].log_path().display()
            )));
        }
        if Instant::now() >= deadline {
            return Ok(Change::Failed(format!(
                "{name} joined as learner {:x} but could not be promoted: {last_error}",
                listed.id
            )));
        }
        attempt += 1;
        let through = &others[attempt % others.len()];
        match client::member_promote(through, listed.id, CALL_TIMEOUT).await {
            Ok(()) => break,
            Err(status) => {
                last_error = format!("MemberPromote: {}", client::describe(&status));
                if !status.message().contains(NOT_IN_SYNC) {
                    // A timeout may hide a promotion that happened.
                    let promoted = list(&others, attempt)
                        .await
                        .is_ok_and(|members| find(&members, &peer_url).is_some_and(|m| !m.is_learner));
                    if promoted {
                        break;
                    }
                    warn!(member = %name, error = %last_error, "member promote failed");
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    info!(member = %name, id = format!("{:x}", listed.id), "promoted");
    let catch_up = match caught_up {
        Some(after) => format!("caught up after {:.1} s", after.as_secs_f64()),
        None => "had not caught up by revision, promoted anyway".to_string(),
    };
    Ok(Change::Done(format!(
        "added {name} back as learner {:x}, {catch_up}, promoted to voter after {:.1} s",
        listed.id,
        started.elapsed().as_secs_f64()
    )))
}

/// The final heal's repair: every member must be a voter. Grows back each member that is missing
/// from `MemberList` or still a learner (an earlier grow that failed or a remove that went through
/// late); returns what it did and what failed.
pub async fn restore_voters(cluster: &mut Cluster) -> Result<(Vec<String>, Vec<String>)> {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    let channels = cluster.channels();
    let deadline = Instant::now() + CHANGE_DEADLINE;
    let mut attempt = 0usize;
    let members = loop {
        attempt += 1;
        match list(&channels, attempt).await {
            Ok(members) => break members,
            Err(err) if Instant::now() >= deadline => {
                failed.push(format!("could not list the members to check they are all voters: {err}"));
                return Ok((done, failed));
            }
            Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
        }
    };
    let peer_urls = cluster.peer_urls();
    for victim in to_restore(&members, &peer_urls, |i| cluster.is_removed(i)) {
        match grow(cluster, victim).await? {
            Change::Done(detail) => done.push(detail),
            Change::Failed(detail) => failed.push(detail),
        }
    }
    Ok((done, failed))
}

/// The members (by index) that are not voters: absent from `members`, listed as learners, or
/// marked removed by the harness.
fn to_restore(members: &[ListedMember], peer_urls: &[String], removed: impl Fn(usize) -> bool) -> Vec<usize> {
    peer_urls
        .iter()
        .enumerate()
        .filter(|(i, url)| removed(*i) || find(members, url).is_none_or(|m| m.is_learner))
        .map(|(i, _)| i)
        .collect()
}

/// Waits until member `victim` reports at least the revision the others had when it started to
/// answer; how long that took, or `None` at the deadline.
async fn wait_caught_up(cluster: &Cluster, victim: usize, deadline: Instant) -> Option<Duration> {
    let started = Instant::now();
    let mut target: Option<i64> = None;
    while Instant::now() < deadline {
        let statuses = cluster.statuses(CALL_TIMEOUT.min(Duration::from_secs(1))).await;
        let others = statuses.iter().enumerate().filter(|(i, _)| *i != victim);
        let highest = others.filter_map(|(_, s)| s.as_ref().ok().map(|s| s.revision)).max();
        // The first revision the others report is the mark: later writes need not be waited for.
        if target.is_none() {
            target = highest;
        }
        if let (Some(target), Some(Ok(own))) = (target, statuses.get(victim)) {
            if own.revision >= target {
                return Some(started.elapsed());
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    None
}

/// MemberList through one of `channels` (a different one on each attempt).
async fn list(channels: &[Channel], attempt: usize) -> Result<Vec<ListedMember>, String> {
    let channel = &channels[attempt % channels.len()];
    client::member_list(channel, CALL_TIMEOUT).await.map_err(|status| client::describe(&status))
}

/// One look at the membership in a change's retry loop: the members, or `None` once the error is
/// noted in `last_error` and the pause before the next attempt is over.
async fn look(channels: &[Channel], attempt: usize, last_error: &mut String) -> Option<Vec<ListedMember>> {
    match list(channels, attempt).await {
        Ok(members) => Some(members),
        Err(err) => {
            *last_error = format!("MemberList: {err}");
            tokio::time::sleep(RETRY_PAUSE).await;
            None
        }
    }
}

fn channels_except(cluster: &Cluster, victim: usize) -> Vec<Channel> {
    cluster.members.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, m)| m.channel().clone()).collect()
}

fn find<'a>(members: &'a [ListedMember], peer_url: &str) -> Option<&'a ListedMember> {
    members.iter().find(|m| m.peer_urls.iter().any(|u| u == peer_url))
}

fn all_voters(members: &[ListedMember]) -> bool {
    members.len() == SIZE && members.iter().all(|m| !m.is_learner)
}

/// `n1 voter, n3 learner` for messages.
fn describe_members(members: &[ListedMember]) -> String {
    let shown: Vec<String> = members
        .iter()
        .map(|m| {
            let name = if m.name.is_empty() { m.peer_urls.join(",") } else { m.name.clone() };
            format!("{name} {}", if m.is_learner { "learner" } else { "voter" })
        })
        .collect();
    shown.join(", ")
}

/// The `--initial-cluster` of a member joining the listed cluster: every listed member with its
/// peer URL, named as the harness names the member at that URL (a learner that never started
/// has no name in the list yet).
fn initial_cluster(members: &[ListedMember], names: &[String], peer_urls: &[String]) -> String {
    let entries: Vec<String> = members
        .iter()
        .flat_map(|member| {
            let name = peer_urls
                .iter()
                .position(|url| member.peer_urls.contains(url))
                .and_then(|i| names.get(i).cloned())
                .unwrap_or_else(|| member.name.clone());
            member.peer_urls.iter().map(move |url| format!("{name}={url}"))
        })
        .collect();
    entries.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: u64, name: &str, octet: u8, is_learner: bool) -> ListedMember {
        ListedMember { id, name: name.to_string(), peer_urls: vec![format!("http://127.0.0.{octet}:2380")], is_learner }
    }

    fn urls() -> Vec<String> {
        (11..=13).map(|octet| format!("http://127.0.0.{octet}:2380")).collect()
    }

    #[test]
    fn initial_cluster_names_the_unstarted_learner_as_the_harness_does() {
        let members = vec![listed(1, "n1", 11, false), listed(9, "", 12, true), listed(3, "n3", 13, false)];
        let names: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| n.to_string()).collect();
        assert_eq!(
            initial_cluster(&members, &names, &urls()),
            "n1=http://127.0.0.11:2380,n2=http://127.0.0.12:2380,n3=http://127.0.0.13:2380"
        );
    }

    #[test]
    fn restore_picks_missing_learner_and_removed_members() {
        type Case = (&'static str, Vec<ListedMember>, Option<usize>, Vec<usize>);
        let cases: Vec<Case> = vec![
            (
                "complete",
                vec![listed(1, "n1", 11, false), listed(2, "n2", 12, false), listed(3, "n3", 13, false)],
                None,
                vec![],
            ),
            ("one missing", vec![listed(1, "n1", 11, false), listed(3, "n3", 13, false)], None, vec![1]),
            (
                "a learner",
                vec![listed(1, "n1", 11, false), listed(2, "n2", 12, true), listed(3, "n3", 13, false)],
                None,
                vec![1],
            ),
            (
                "marked removed although listed",
                vec![listed(1, "n1", 11, false), listed(2, "n2", 12, false), listed(3, "n3", 13, false)],
                Some(2),
                vec![2],
            ),
        ];
        for (name, members, removed, want) in cases {
            assert_eq!(to_restore(&members, &urls(), |i| Some(i) == removed), want, "{name}");
        }
    }

    #[test]
    fn only_a_full_set_of_voters_may_shrink() {
        let full = vec![listed(1, "n1", 11, false), listed(2, "n2", 12, false), listed(3, "n3", 13, false)];
        assert!(all_voters(&full));
        let mut with_learner = full.clone();
        with_learner[1].is_learner = true;
        assert!(!all_voters(&with_learner));
        assert!(!all_voters(&full[..2]));
        assert_eq!(describe_members(&with_learner), "n1 voter, n2 learner, n3 voter");
        assert_eq!(find(&full, "http://127.0.0.13:2380").map(|m| m.id), Some(3));
        assert_eq!(find(&full, "http://127.0.0.14:2380"), None);
    }
}
