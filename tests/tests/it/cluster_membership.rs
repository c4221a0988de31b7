//! Membership changes with etcdctl, as an operator makes them: add a learner, start it, promote it,
//! remove it, while a writer keeps writing; and etcd's errors for invalid changes.

use std::time::{Duration, Instant};

use serde_json::Value;
use tests::{assert_grpc_error, Cluster, CtlOutput};
use tonic::Code;

use crate::cluster_writer::{assert_acks_present, read_prefix, Load};

const PREFIX: &str = "membership/";
/// How long a started learner may take to catch up, and a removed member to stop.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Acks each writer must get after each membership step.
const ACKS_PER_STEP: usize = 10;

/// The stdout of a successful etcdctl run.
fn ok(out: CtlOutput) -> String {
    out.ok().unwrap_or_else(|err| panic!("{err:#}"))
}

/// The `Error: ...` line of a failed etcdctl run.
#[track_caller]
fn error_line(out: &CtlOutput) -> &str {
    assert_eq!(out.code, Some(1), "etcdctl should fail: {out:?}");
    out.error_line().unwrap_or_else(|| panic!("no Error line: {out:?}"))
}

/// `etcdctl member list -w json`: `(hex id, name, is learner)` per member, and the raw JSON.
async fn member_list(cluster: &Cluster) -> anyhow::Result<(Vec<(String, String, bool)>, Value)> {
    let json = cluster.etcdctl(&["member", "list", "-w", "json"]).await?.json()?;
    let members = json["members"]
        .as_array()
        .unwrap_or_else(|| panic!("no members: {json}"))
        .iter()
        .map(|member| {
            let id = member["ID"].as_u64().unwrap_or_else(|| panic!("no ID: {member}"));
            let name = member["name"].as_str().unwrap_or_default().to_owned();
            (format!("{id:x}"), name, member["isLearner"] == true)
        })
        .collect();
    Ok((members, json))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn learner_is_added_promoted_and_removed_under_load() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    let endpoints = cluster.members().iter().map(|m| m.endpoint()).collect();
    let load = Load::start(endpoints, PREFIX, 2);
    load.wait_progress(&[0, 0], ACKS_PER_STEP, CHANGE_TIMEOUT).await?;

    // Add n4 as a learner and start it with the `existing` cluster etcdctl printed.
    let n4 = cluster.add_member(true).await?;
    let status = cluster.member(n4).status().await?;
    assert!(status.is_learner, "{status:?}");
    let n4_id = format!("{:x}", status.member_id);
    // etcd serves clients only once the new member has published its name and client URLs
    // through the log, so they are listed as soon as it answers Status.
    let (members, json) = member_list(&cluster).await?;
    assert_eq!(members.len(), 4, "{json}");
    assert!(members.contains(&(n4_id.clone(), "n4".to_owned(), true)), "{json}");
    let listed = json["members"].as_array().into_iter().flatten();
    for member in listed {
        assert!(member["clientURLs"].as_array().is_some_and(|urls| urls.len() == 1), "{member}");
    }

    // A learner serves serializable reads only.
    let mut learner = cluster.member(n4).client().await?;
    let unsupported = "etcdserver: rpc not supported for learner";
    assert_grpc_error(learner.get("k", None).await, Code::Unavailable, unsupported);
    assert_grpc_error(learner.put("k", "v", None).await, Code::Unavailable, unsupported);

    // Wait until n4 has applied what the leader had applied, then promote it. etcd refuses while the
    // learner lags; keep asking until the deadline.
    let leader = cluster.leader().await?;
    let target = cluster.member(leader).status().await?.raft_applied_index;
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    while cluster.member(n4).status().await?.raft_applied_index < target {
        assert!(Instant::now() < deadline, "n4 did not catch up to index {target}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let replicated = read_prefix(&mut learner, PREFIX, true).await?;
    assert!(!replicated.is_empty(), "the learner serves serializable reads of what it applied");
    loop {
        let out = cluster.promote(n4).await?;
        if out.success() {
            assert!(
                out.stdout.starts_with("Member ") && out.stdout.contains(&format!("{n4_id} promoted in cluster ")),
                "{out:?}"
            );
            break;
        }
        assert_eq!(
            error_line(&out),
            "Error: etcdserver: can only promote a learner member which is in sync with leader"
        );
        assert!(Instant::now() < deadline, "n4 was never in sync: {out:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (members, json) = member_list(&cluster).await?;
    assert_eq!(members.len(), 4, "{json}");
    assert!(members.iter().all(|(_, _, learner)| !learner), "four voters: {json}");
    let mut names: Vec<&str> = members.iter().map(|(_, name, _)| name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["n1", "n2", "n3", "n4"]);
    let status = cluster.member(n4).status().await?;
    assert!(!status.is_learner, "{status:?}");
    load.wait_progress(&load.acked(), ACKS_PER_STEP, CHANGE_TIMEOUT).await?;
    // A voter serves linearizable reads.
    let mut voter = cluster.member(n4).client().await?;
    voter.get("k", None).await?;

    // Remove n4: it stops (etcd exits once it applies its own removal), and the cluster is back to
    // three members.
    let out = ok(cluster.etcdctl_reconfig(&["member", "remove", &n4_id]).await?);
    assert!(out.starts_with("Member ") && out.contains(&format!("{n4_id} removed from cluster ")), "{out:?}");
    let deadline = Instant::now() + CHANGE_TIMEOUT;
    while cluster.member(n4).is_running() {
        assert!(Instant::now() < deadline, "the removed member is still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Asked only now: until it stops, the removed member may still answer with its old list.
    let (members, json) = member_list(&cluster).await?;
    let mut names: Vec<&str> = members.iter().map(|(_, name, _)| name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["n1", "n2", "n3"], "{json}");
    load.wait_progress(&load.acked(), ACKS_PER_STEP, CHANGE_TIMEOUT).await?;

    let reports = load.stop().await?;
    for report in &reports {
        report.assert_revisions_increase();
        eprintln!("writer {}: {} acks, failures: {:?}", report.id, report.acks.len(), report.failures);
    }
    let leader = cluster.leader().await?;
    let mut client = cluster.member(leader).client().await?;
    let map = read_prefix(&mut client, PREFIX, false).await?;
    assert_acks_present(&reports, &map, "linearizable read at the leader");
    Ok(())
}

#[tokio::test]
async fn invalid_membership_changes_fail_with_etcds_errors() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let (members, json) = member_list(&cluster).await?;
    assert_eq!(members.len(), 3, "{json}");
    let voter = members[0].0.clone();

    let out = cluster.etcdctl(&["member", "promote", &voter]).await?;
    assert_eq!(error_line(&out), "Error: etcdserver: can only promote a learner member");
    // IDs are random 64-bit numbers; 1 is not one of them.
    let out = cluster.etcdctl(&["member", "remove", "1"]).await?;
    assert_eq!(error_line(&out), "Error: etcdserver: member not found");
    let out = cluster.etcdctl(&["member", "promote", "1"]).await?;
    assert_eq!(error_line(&out), "Error: etcdserver: member not found");
    let taken = format!("--peer-urls={}", cluster.member(1).peer_url());
    let out = cluster.etcdctl_reconfig(&["member", "add", "dup", &taken]).await?;
    assert_eq!(error_line(&out), "Error: etcdserver: Peer URLs already exists");
    let out = cluster.etcdctl(&["member", "add", "dup", &taken, "--learner"]).await?;
    assert_eq!(error_line(&out), "Error: etcdserver: Peer URLs already exists");

    // A learner that never started has applied nothing, so it cannot be promoted; it can be
    // removed. Nothing listens on the reserved port of the closed listener below.
    let unused = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let peer = format!("--peer-urls=http://127.0.0.1:{unused}");
    let out = ok(cluster.etcdctl_reconfig(&["member", "add", "n4", &peer, "--learner"]).await?);
    let (members, json) = member_list(&cluster).await?;
    let (learner, name, is_learner) = members
        .iter()
        .find(|(id, ..)| out.contains(&format!("{id} added to cluster ")))
        .cloned()
        .unwrap_or_else(|| panic!("the new member is not listed: {out:?} {json}"));
    // A member that has not started yet has no name (nor client URLs) in the list.
    assert_eq!((name.as_str(), is_learner), ("", true), "{json}");
    let out = cluster.etcdctl(&["member", "promote", &learner]).await?;
    assert_eq!(error_line(&out), "Error: etcdserver: can only promote a learner member which is in sync with leader");
    // One learner at a time (etcd's `maxLearners`).
    let second = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let second = format!("--peer-urls=http://127.0.0.1:{second}");
    let out = cluster.etcdctl(&["member", "add", "n5", &second, "--learner"]).await?;
    assert_eq!(error_line(&out), "Error: etcdserver: too many learner members in cluster");
    ok(cluster.etcdctl(&["member", "remove", &learner]).await?);
    let (members, json) = member_list(&cluster).await?;
    assert_eq!(members.len(), 3, "{json}");
    Ok(())
}
