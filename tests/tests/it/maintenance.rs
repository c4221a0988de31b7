//! Maintenance.Status and the gRPC health service.

use tests::{Member, ServerKind};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::util::header;

/// `major.minor.patch` of a semver string (pre-release and build suffixes ignored).
fn semver(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|part| part.parse::<u64>().ok());
    let triple = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(triple)
}

#[test]
fn semver_parses() {
    assert_eq!(semver("3.4.23"), Some((3, 4, 23)));
    assert_eq!(semver("3.5.13-alpha.0"), Some((3, 5, 13)));
    assert_eq!(semver("3.5"), None);
    assert_eq!(semver("3.5.x"), None);
    assert_eq!(semver("3.5.1.2"), None);
}

#[tokio::test]
async fn status_reports_version_leader_and_raft_progress() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;

    let status = client.status().await?;
    let version = semver(status.version()).unwrap_or_else(|| panic!("version {:?} is not semver", status.version()));
    if member.kind() == ServerKind::Ours {
        // Clients gate features (e.g. watch progress semantics) on the reported version.
        assert!(version >= (3, 5, 13), "our server must report at least 3.5.13, got {version:?}");
    }
    let status_header = header(status.header());
    assert_ne!(status_header.member_id(), 0);
    assert_eq!(status.leader(), status_header.member_id(), "a single member leads itself");
    assert!(status.raft_term() >= 1);
    assert!(status.db_size() > 0, "etcdctl 3.6 divides by dbSize");
    assert!(status.raft_index() >= 1);
    assert!(status.raft_applied_index() <= status.raft_index());
    assert!(status.errors().is_empty(), "errors: {:?}", status.errors());
    assert!(!status.is_learner());

    client.put("k", "v", None).await?;
    let after = client.status().await?;
    assert!(after.raft_index() > status.raft_index(), "a put is a new log entry");
    assert!(after.raft_applied_index() > status.raft_applied_index(), "the put was applied");
    assert_eq!(header(after.header()).revision(), 2);
    Ok(())
}

#[tokio::test]
async fn grpc_health_check_serves() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let channel = tonic::transport::Endpoint::from_shared(member.client_url())?.connect().await?;
    let mut health = HealthClient::new(channel);
    let resp = health.check(HealthCheckRequest { service: String::new() }).await?.into_inner();
    assert_eq!(resp.status(), ServingStatus::Serving);
    Ok(())
}

#[tokio::test]
async fn member_list_describes_the_member() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let list = client.member_list().await?;
    let member_id = header(list.header()).member_id();
    let [only] = list.members() else { panic!("one member: {:?}", list.members()) };
    assert_eq!(only.id(), member_id);
    assert_eq!(only.name(), member.name());
    assert_eq!(only.peer_urls(), [member.peer_url()]);
    assert_eq!(only.client_urls(), [member.client_url()]);
    assert!(!only.is_learner());
    Ok(())
}

/// `--auto-compaction-mode=periodic --auto-compaction-retention=2s`: the leader keeps about two seconds of
/// history, compacting on its own, as etcd does (the compacted revision moves up while puts go on).
#[tokio::test]
async fn periodic_auto_compaction_keeps_the_retention_of_history() -> anyhow::Result<()> {
    use std::time::{Duration, Instant};

    let config = tests::MemberConfig {
        extra_args: vec!["--auto-compaction-mode=periodic".into(), "--auto-compaction-retention=2s".into()],
        ..tests::MemberConfig::default()
    };
    let member = Member::start_with(config).await?;
    let mut client = member.client().await?;
    let first = client.put("auto", "0", None).await?.header().map_or(0, |h| h.revision());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut puts = 1;
    loop {
        client.put("auto", puts.to_string(), None).await?;
        puts += 1;
        let old = client.get("auto", Some(etcd_client::GetOptions::new().with_revision(first))).await;
        if let Err(err) = old {
            let (code, message) = tests::grpc_error(&err).expect("a server error");
            assert_eq!(message, "etcdserver: mvcc: required revision has been compacted", "{code:?}");
            break;
        }
        assert!(Instant::now() < deadline, "revision {first} still readable after 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A retention's worth of history is kept: the latest revisions still read.
    let latest = client.get("auto", None).await?.header().map_or(0, |h| h.revision());
    assert!(client.get("auto", Some(etcd_client::GetOptions::new().with_revision(latest - 1))).await.is_ok());
    Ok(())
}

/// etcd 3.6's downgrade through the etcd-client crate: validation one minor version down only, enable
/// recorded on every member (Status.downgradeInfo, the cluster version in `/version`) and kept across a
/// restart, cancel clearing it; and 3.6's Status fields. Ours only: etcd 3.4.23 has neither.
#[tokio::test]
async fn downgrade_validates_enables_and_cancels_on_every_member() -> anyhow::Result<()> {
    use etcd_client::DowngradeOptions;
    if ServerKind::from_env() == ServerKind::Etcd {
        return Ok(());
    }
    let mut config = tests::ClusterConfig::new(3);
    config.extra_args = vec!["--quota-backend-bytes=123456789".into()];
    let mut cluster = tests::Cluster::start_with(config).await?;
    cluster.leader().await?;
    let mut client = cluster.member(0).client().await?;
    let status = client.status().await?;
    assert_eq!((status.storage_version(), status.db_size_quota()), ("3.6.0", 123_456_789));
    assert!(status.downgrade_info().is_some_and(|info| !info.enabled()));

    let validated = client.maintenance_client().downgrade(DowngradeOptions::Validate("3.5".into())).await?;
    assert_eq!(validated.version(), "3.6", "etcd answers major.minor");
    let refused = client.maintenance_client().downgrade(DowngradeOptions::Validate("3.4".into())).await;
    tests::assert_grpc_error(refused, tonic::Code::InvalidArgument, "etcdserver: invalid downgrade target version");
    // kvctl speaks etcdctl 3.6 here.
    let endpoint = cluster.member(0).endpoint();
    let kvctl = |args: &'static [&'static str]| {
        let endpoint = endpoint.clone();
        async move {
            let out = tokio::process::Command::new(tests::kvctl::kvctl_bin()?)
                .arg(format!("--endpoints={endpoint}"))
                .args(args)
                .output()
                .await?;
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            anyhow::Ok((text(&out.stdout), text(&out.stderr)))
        }
    };
    // The gateway serves Downgrade too, as etcd 3.6's.
    let url = cluster.member(1).client_url();
    let body = r#"{"action":"VALIDATE","version":"3.5"}"#;
    let validated = tests::http::request(&url, "POST", "/v3/maintenance/downgrade", Some(body)).await?;
    assert!(validated.status == 200 && validated.body.contains(r#""version":"3.6""#), "{validated:?}");
    let (out, _) = kvctl(&["downgrade", "enable", "3.5"]).await?;
    assert_eq!(out, "Downgrade enable success, cluster version 3.6\n", "the cluster version before the change");
    // etcdctl 3.6's endpoint status shows the storage version, migrated to the cluster version (the
    // target) as etcd 3.6's monitor does, and the downgrade in progress.
    let (out, _) = kvctl(&["endpoint", "status"]).await?;
    let columns: Vec<&str> = out.trim_end().split(", ").collect();
    assert_eq!(columns.len(), 16, "{out}");
    assert_eq!((columns[3], columns[14], columns[15]), ("3.5.0", "3.5.0", "true"), "{out}");
    let (out, _) = kvctl(&["endpoint", "hashkv"]).await?;
    assert_eq!(out.trim_end().split(", ").count(), 3, "the hash revision too: {out}");
    let again = client.maintenance_client().downgrade(DowngradeOptions::Enable("3.5".into())).await;
    tests::assert_grpc_error(
        again,
        tonic::Code::FailedPrecondition,
        "etcdserver: cluster has a downgrade job in progress",
    );

    cluster.member_mut(2).restart().await?;
    // Status is answered from each member's own state: a member that just restarted may still be
    // catching up, so each gets a while to report it.
    for member in cluster.members() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let status = member.client().await?.status().await?;
            let info = status.downgrade_info().map(|info| (info.enabled(), info.target_version().to_string()));
            if info == Some((true, "3.5.0".to_string())) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{}: {info:?}", member.name());
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let version = tests::http::get(&member.client_url(), "/version").await?.body;
        assert!(version.contains(r#""etcdcluster":"3.5.0","storage":"3.5.0""#), "{}: {version}", member.name());
    }
    let (out, _) = kvctl(&["downgrade", "validate", "3.5"]).await?;
    assert_eq!(out, "", "validate while a downgrade is enabled fails");
    let (out, _) = kvctl(&["downgrade", "cancel"]).await?;
    assert_eq!(out, "Downgrade cancel success, cluster version 3.5\n");
    let (out, _) = kvctl(&["downgrade", "validate", "3.5"]).await?;
    assert_eq!(out, "Downgrade validate success, cluster version 3.6\n");
    let (_, err) = kvctl(&["downgrade", "validate", "3.4"]).await?;
    assert!(err.contains("Error: etcdserver: invalid downgrade target version"), "{err}");
    let status = client.status().await?;
    assert!(status.downgrade_info().is_some_and(|info| !info.enabled()));
    assert_eq!(status.storage_version(), "3.6.0", "the storage version follows the cluster version back");
    // A cancel with nothing to cancel succeeds, as in etcd.
    client.maintenance_client().downgrade(DowngradeOptions::Cancel).await?;
    Ok(())
}
