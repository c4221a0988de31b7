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
