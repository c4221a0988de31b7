//! etcd's rules around membership changes: only root changes the membership once auth is on; adding a
//! voter whose process is not started yet answers at once; `--strict-reconfig-check` (on by default)
//! refuses changes that would leave fewer started voters than a quorum. Every expectation is what etcd
//! does (`KV_TEST_SERVER=etcd` runs them against 3.4.23).

use std::time::{Duration, Instant};

use anyhow::Context;
use tests::spawned::free_ports;
use tests::{Cluster, ClusterMember};

const NOT_ENOUGH_STARTED: &str = "Error: etcdserver: re-configuration failed due to not enough started members";

async fn ctl(member: &ClusterMember, args: &[&str]) -> anyhow::Result<String> {
    member.etcdctl(args).await?.ok().with_context(|| format!("etcdctl {args:?}"))
}

async fn ctl_error(member: &ClusterMember, args: &[&str]) -> anyhow::Result<String> {
    let out = member.etcdctl(args).await?;
    assert_eq!(out.code, Some(1), "etcdctl {args:?}: {out:?}");
    Ok(out.error_line().with_context(|| format!("etcdctl {args:?}: no Error line in {out:?}"))?.to_string())
}

/// The id of the only member, in hex as etcdctl takes it.
async fn own_id(member: &ClusterMember) -> anyhow::Result<String> {
    let list = ctl(member, &["member", "list"]).await?;
    Ok(list.split(',').next().context("a member line")?.to_string())
}

#[tokio::test]
async fn only_root_changes_the_membership_once_auth_is_on() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let member = cluster.member(0);
    let id = own_id(member).await?;
    for args in [&["user", "add", "root:rootpw"][..], &["user", "add", "alice:alicepw"], &["auth", "enable"]] {
        ctl(member, args).await?;
    }
    let [port] = free_ports(1)?[..] else { unreachable!("one port") };
    let peer_urls = format!("--peer-urls=http://127.0.0.1:{port}");
    let changes: [&[&str]; 4] = [
        &["member", "add", "n9", &peer_urls],
        &["member", "remove", &id],
        &["member", "update", &id, &peer_urls],
        &["member", "promote", &id],
    ];
    for change in changes {
        let mut as_alice = vec!["--user", "alice:alicepw"];
        as_alice.extend_from_slice(change);
        assert_eq!(ctl_error(member, &as_alice).await?, "Error: etcdserver: permission denied", "{change:?}");
        assert_eq!(ctl_error(member, change).await?, "Error: etcdserver: user name is empty", "{change:?}");
    }
    // Listing stays open to everyone, and root may still change the membership.
    assert!(ctl(member, &["--user", "alice:alicepw", "member", "list"]).await?.contains(", started, "));
    let added = ctl(member, &["--user", "root:rootpw", "member", "add", "n9", &peer_urls, "--learner"]).await?;
    assert!(added.contains("ETCD_INITIAL_CLUSTER_STATE=\"existing\""), "{added}");
    Ok(())
}

#[tokio::test]
async fn a_voter_not_started_yet_is_added_at_once_and_counted_against_the_quorum() -> anyhow::Result<()> {
    let cluster = Cluster::start(1).await?;
    let member = cluster.member(0);
    let ports = free_ports(2)?;
    let started = Instant::now();
    let added = ctl(member, &["member", "add", "n2", &format!("--peer-urls=http://127.0.0.1:{}", ports[0])]).await?;
    let took = started.elapsed();
    assert!(added.starts_with("Member ") && added.contains(" added to cluster "), "{added}");
    assert!(added.contains("ETCD_NAME=\"n2\"\nETCD_INITIAL_CLUSTER=\""), "{added}");
    assert!(took < Duration::from_secs(1), "member add took {took:?}");
    let list = ctl(member, &["member", "list"]).await?;
    assert!(list.contains(&format!(", unstarted, , http://127.0.0.1:{}, , false", ports[0])), "{list}");
    // Two voters, one started: a third voter would leave one started member of three.
    let third = ["member", "add", "n3", &format!("--peer-urls=http://127.0.0.1:{}", ports[1])];
    assert_eq!(ctl_error(member, &third).await?, NOT_ENOUGH_STARTED);
    Ok(())
}

/// etcd's `HealthInterval`: how long members must have been reachable to count as active.
const HEALTH_INTERVAL: Duration = Duration::from_secs(5);

#[tokio::test]
async fn with_a_voter_down_removing_a_healthy_one_is_refused_and_the_down_one_may_go() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let (down, healthy) = (followers[0], followers[1]);
    // Every member reachable for etcd's health interval: the refusal below is the down member's doing,
    // not a young cluster's.
    tokio::time::sleep(HEALTH_INTERVAL + Duration::from_secs(1)).await;
    let list = ctl(cluster.member(leader), &["member", "list"]).await?;
    let id_of = |name: &str| {
        list.lines()
            .find(|line| line.contains(&format!(", started, {name}, ")))
            .and_then(|line| line.split(',').next())
            .map(str::to_string)
            .with_context(|| format!("{name} in {list}"))
    };
    let (down_id, healthy_id) = (id_of(cluster.member(down).name())?, id_of(cluster.member(healthy).name())?);
    cluster.member_mut(down).kill9()?;
    // The leader learns of it from its next heartbeat (100 ms); a removal decided before that would go
    // ahead (and, losing its quorum, time out).
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Without the healthy follower, only the leader would be active of the two voters left.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = cluster.member(leader).etcdctl(&["member", "remove", &healthy_id]).await?;
        assert!(!out.success(), "removing a healthy voter while another is down: {out:?}");
        if out.error_line() == Some("Error: etcdserver: unhealthy cluster") {
            break;
        }
        // The leader may not have noticed the kill yet.
        assert!(Instant::now() < deadline, "{out:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let removed = ctl(cluster.member(leader), &["member", "remove", &down_id]).await?;
    assert!(removed.contains(" removed from cluster "), "{removed}");
    Ok(())
}

/// `--force-new-cluster`, etcd's disaster recovery: every member of a three-member cluster is killed and
/// only one comes back, with the flag; it serves every acknowledged write as a one-member cluster, takes
/// new writes, and stays a one-member cluster when restarted without the flag.
///
/// Ours only: etcd 3.4.23 drops the entries its WAL does not know committed, and a follower learns of the
/// last commits only from the next heartbeat, so it came back with 19 of the 20 acknowledged writes in
/// two runs of two; ours applies every entry of the survivor's log.
#[tokio::test]
async fn force_new_cluster_brings_a_dead_clusters_data_back_on_one_member() -> anyhow::Result<()> {
    if tests::ServerKind::from_env() == tests::ServerKind::Etcd {
        return Ok(());
    }
    let mut cluster = Cluster::start(3).await?;
    cluster.leader().await?;
    for i in 0..20 {
        let key = format!("survivor/{i:02}");
        ctl(cluster.member(i % 3), &["put", &key, &i.to_string()]).await?;
    }
    for i in 0..3 {
        cluster.member_mut(i).kill9()?;
    }
    let survivor = cluster.member_mut(0);
    survivor.add_args(&["--force-new-cluster"]);
    survivor.restart().await?;
    let survivor = cluster.member(0);
    let keys = ctl(survivor, &["get", "survivor/", "--prefix", "--keys-only"]).await?;
    assert_eq!(keys.lines().filter(|l| !l.is_empty()).count(), 20, "{keys}");
    let list = ctl(survivor, &["member", "list"]).await?;
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(list.contains(&format!(", started, {}, ", survivor.name())), "{list}");
    ctl(survivor, &["put", "after", "recovery"]).await?;

    let args: Vec<String> = cluster.member(0).args().iter().filter(|a| *a != "--force-new-cluster").cloned().collect();
    let survivor = cluster.member_mut(0);
    survivor.kill9()?;
    survivor.set_args(args);
    survivor.restart().await?;
    let survivor = cluster.member(0);
    assert_eq!(ctl(survivor, &["get", "after", "--print-value-only"]).await?, "recovery\n");
    assert_eq!(ctl(survivor, &["member", "list"]).await?.lines().count(), 1);
    Ok(())
}
