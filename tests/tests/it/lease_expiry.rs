//! Leases running out: an expired lease's key is deleted (and watchers see the DELETE), a lease kept
//! alive outlives its TTL, and on three members a leader's death neither expires a lease early nor
//! keeps it forever.
//!
//! Every wait polls against a deadline. The bounds are generous: etcd checks for expired leases
//! every 500 ms and revokes them through Raft, and parallel tests share a couple of CPUs.

use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, GetOptions, LeaseTimeToLiveOptions, PutOptions};
use tests::{Cluster, ClusterMember, Member};

use crate::util::header;

/// The pause between two polls.
const POLL: Duration = Duration::from_millis(100);
/// How long a watch response may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Polls `key` on `client` until it is gone or `deadline` passes. Returns when the first read that
/// found it gone returned, and that read's header revision.
async fn wait_gone(client: &mut Client, key: &str, options: Option<GetOptions>, deadline: Instant) -> (Instant, i64) {
    loop {
        let got = client.get(key, options.clone()).await.expect("get");
        if got.count() == 0 {
            return (Instant::now(), header(got.header()).revision());
        }
        assert!(Instant::now() < deadline, "{key} still exists at the deadline");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn expired_lease_deletes_its_key_and_watchers_see_it() -> anyhow::Result<()> {
    const TTL: Duration = Duration::from_secs(3);
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let mut watch = client.watch("k", None).await?;
    let created = tokio::time::timeout(ANSWER_TIMEOUT, watch.message()).await??;
    assert!(created.is_some_and(|r| r.created()), "the first watch response confirms the watch");

    let granted_at = Instant::now();
    let id = client.lease_grant(TTL.as_secs() as i64, None).await?.id();
    let put = client.put("k", "v", Some(PutOptions::new().with_lease(id))).await?;
    let put_revision = header(put.header()).revision();

    let (gone_at, revision) = wait_gone(&mut client, "k", None, granted_at + Duration::from_secs(8)).await;
    let lived = gone_at - granted_at;
    eprintln!("the key lived {lived:?} with a {TTL:?} lease");
    assert!(lived >= TTL, "the key went after {lived:?}, before its lease's {TTL:?}");
    assert_eq!(revision, put_revision + 1, "the expiry deleted the key at the next revision");

    // The watcher sees the PUT, then the DELETE at the revision the key disappeared.
    let mut events = Vec::new();
    while events.len() < 2 {
        let response = tokio::time::timeout(ANSWER_TIMEOUT, watch.message()).await??.expect("the watch stream ended");
        events.extend(response.events().iter().map(|event| {
            let kv = event.kv().expect("event without kv");
            (event.event_type(), kv.key().to_vec(), kv.mod_revision())
        }));
    }
    assert_eq!(events, [(EventType::Put, b"k".to_vec(), put_revision), (EventType::Delete, b"k".to_vec(), revision)]);

    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!(ttl.ttl(), -1, "the expired lease is gone");
    assert!(client.leases().await?.leases().is_empty());
    Ok(())
}

#[tokio::test]
async fn kept_alive_lease_outlives_its_ttl() -> anyhow::Result<()> {
    const TTL: i64 = 3;
    /// Three TTLs' worth of keep-alives, one a second.
    const KEEP_ALIVES: u32 = 9;
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let granted_at = Instant::now();
    let id = client.lease_grant(TTL, None).await?.id();
    client.put("k", "v", Some(PutOptions::new().with_lease(id))).await?;

    let (mut keeper, mut stream) = client.lease_keep_alive(id).await?;
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    for _ in 0..KEEP_ALIVES {
        ticks.tick().await;
        keeper.keep_alive().await?;
        let kept = tokio::time::timeout(ANSWER_TIMEOUT, stream.message()).await??.expect("the keep-alive stream ended");
        assert_eq!((kept.id(), kept.ttl()), (id, TTL), "after {:?}", granted_at.elapsed());
        assert_eq!(client.get("k", None).await?.count(), 1, "after {:?}", granted_at.elapsed());
    }
    let last_kept_at = Instant::now();
    assert!(last_kept_at - granted_at > Duration::from_secs(2 * TTL as u64));
    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!(ttl.granted_ttl(), TTL);
    assert!((1..=TTL).contains(&ttl.ttl()), "{ttl:?}");

    // Without keep-alives, the lease runs out a TTL after the last one.
    drop((keeper, stream));
    let (gone_at, _) = wait_gone(&mut client, "k", None, last_kept_at + Duration::from_secs(8)).await;
    eprintln!("the key went {:?} after the last keep-alive", gone_at - last_kept_at);
    Ok(())
}

#[tokio::test]
async fn lease_survives_restart_with_a_fresh_countdown() -> anyhow::Result<()> {
    const TTL: i64 = 10;
    let mut member = Member::start().await?;
    let mut client = member.client().await?;
    let granted_at = Instant::now();
    let id = client.lease_grant(TTL, None).await?.id();
    client.put("k", "v", Some(PutOptions::new().with_lease(id))).await?;
    // Let half the TTL run out, so that a deadline kept across the restart would show.
    loop {
        let ttl = client.lease_time_to_live(id, None).await?;
        if ttl.ttl() <= TTL / 2 {
            break;
        }
        assert!(granted_at.elapsed() < Duration::from_secs(TTL as u64), "{ttl:?}");
        tokio::time::sleep(POLL).await;
    }

    let killed_at = Instant::now();
    member.restart().await?;
    let mut client = member.client().await?;
    let ttl = client.lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys())).await?;
    assert_eq!((ttl.granted_ttl(), ttl.keys()), (TTL, [b"k".to_vec()].as_slice()), "the lease is durable");
    assert!(ttl.ttl() > 0, "{ttl:?}");

    // The lease outlives its first deadline (plus etcd's 500 ms expiry check) ...
    let first_deadline = granted_at + Duration::from_secs(TTL as u64 + 1);
    while Instant::now() < first_deadline {
        assert_eq!(
            client.get("k", None).await?.count(),
            1,
            "the key went {:?} after the restart, before a fresh TTL",
            killed_at.elapsed()
        );
        tokio::time::sleep(POLL).await;
    }
    // ... and runs out a full TTL after the restart began.
    let deadline = killed_at + Duration::from_secs(TTL as u64 + 15);
    let (gone_at, _) = wait_gone(&mut client, "k", None, deadline).await;
    let after_kill = gone_at - killed_at;
    eprintln!("the key went {after_kill:?} after the kill");
    assert!(after_kill >= Duration::from_secs(TTL as u64), "{after_kill:?}");
    Ok(())
}

/// A serializable read of `key` on `member`: what its own store holds, leader or not.
async fn local_count(member: &ClusterMember, key: &str) -> anyhow::Result<(i64, i64)> {
    let mut client = member.client().await?;
    let got = client.get(key, Some(GetOptions::new().with_serializable())).await?;
    Ok((got.count(), header(got.header()).revision()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_outlives_leader_kill_then_expires_everywhere() -> anyhow::Result<()> {
    const TTL: Duration = Duration::from_secs(10);
    /// How long after the kill the key must still exist on every survivor.
    const STILL_THERE: Duration = Duration::from_secs(5);
    /// The TTL, plus an election and its retries, plus etcd's expiry check and revoke.
    const GONE_BY: Duration = Duration::from_secs(30);
    const KEY: &str = "lease/k";

    let mut cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    let mut client = cluster.member(follower).client().await?;
    let id = client.lease_grant(TTL.as_secs() as i64, None).await?.id();
    let put = client.put(KEY, "v", Some(PutOptions::new().with_lease(id))).await?;
    let put_revision = header(put.header()).revision();
    // The put is acknowledged once a quorum has it: wait until every member has applied it, or a
    // lagging survivor would "lose" a key it never had yet (a serializable read of it, below).
    let applied_by = Instant::now() + Duration::from_secs(5);
    for i in 0..3 {
        while local_count(cluster.member(i), KEY).await?.0 != 1 {
            assert!(Instant::now() < applied_by, "{} did not apply the put in 5 s", cluster.member(i).name());
            tokio::time::sleep(POLL).await;
        }
    }
    cluster.member_mut(leader).kill9()?;
    let killed_at = Instant::now();
    let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();

    // Until STILL_THERE after the kill, every survivor holds the key, whoever leads meanwhile.
    loop {
        let now = Instant::now();
        for &i in &survivors {
            let (count, _) = local_count(cluster.member(i), KEY).await?;
            assert_eq!(count, 1, "{} lost the key {:?} after the kill", cluster.member(i).name(), now - killed_at);
        }
        if now >= killed_at + STILL_THERE {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let new_leader = cluster.leader().await?;
    assert_ne!(new_leader, leader);
    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!(ttl.granted_ttl(), TTL.as_secs() as i64);
    assert!(ttl.ttl() > 0, "the lease outlived the leader: {ttl:?}");

    // Then it expires, on every survivor, at one revision.
    for &i in &survivors {
        let member = cluster.member(i);
        let mut member_client = member.client().await?;
        let serializable = Some(GetOptions::new().with_serializable());
        let (gone_at, revision) = wait_gone(&mut member_client, KEY, serializable, killed_at + GONE_BY).await;
        let after_kill = gone_at - killed_at;
        eprintln!("{}: the key went {after_kill:?} after the kill", member.name());
        // The new leader was elected after the kill and restarted the countdown then.
        assert!(after_kill >= TTL, "{}: the key went {after_kill:?} after the kill, before a full TTL", member.name());
        assert_eq!(revision, put_revision + 1, "{}", member.name());
    }
    let ttl = client.lease_time_to_live(id, None).await?;
    assert_eq!(ttl.ttl(), -1);
    Ok(())
}
