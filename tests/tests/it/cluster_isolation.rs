//! A member cut off from the others (they are paused with SIGSTOP) refuses linearizable requests
//! within a bounded time, still serves serializable reads, and recovers when they come back; a
//! deposed leader never serves a stale linearizable read.

use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use tests::{grpc_error, Cluster, ClusterConfig, Timing};
use tonic::Code;

/// How long an isolated member may take to refuse a request.
const REFUSE_WITHIN: Duration = Duration::from_secs(15);
/// The client's own timeout, longer than [`REFUSE_WITHIN`] so that the server's answer arrives.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long service may take to come back once the others are resumed.
const RECOVER_WITHIN: Duration = Duration::from_secs(20);

/// etcd 3.4's answers to a request that cannot reach a quorum.
///
/// Observed with etcd 3.4.23 (50/500 ms timing): a member that still believed in a leader when the
/// request came answers Unavailable `request timed out` after its request timeout (5 s + 2
/// election timeouts = 6 s), for puts and linearizable gets alike; a resumed deposed leader
/// answers a linearizable get with Unavailable `leader changed`. A member that already knows it
/// has no leader blocks a put until the same timeout and passes the context's error through
/// unmapped: Unknown `context deadline exceeded`. The other texts are the variants etcd picks
/// from the timing of leader changes.
const NO_QUORUM_ANSWERS: [(Code, &str); 6] = [
    (Code::Unavailable, "etcdserver: request timed out"),
    (Code::Unavailable, "etcdserver: request timed out, possibly due to previous leader failure"),
    (Code::Unavailable, "etcdserver: request timed out, possibly due to connection lost"),
    (Code::Unavailable, "etcdserver: leader changed"),
    (Code::Unavailable, "etcdserver: no leader"),
    (Code::Unknown, "context deadline exceeded"),
];

/// Asserts that `result` failed with one of [`NO_QUORUM_ANSWERS`] within [`REFUSE_WITHIN`] of
/// `start`, and returns the code.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(what: &str, result: Result<T, etcd_client::Error>, start: Instant) -> Code {
    let elapsed = start.elapsed();
    let err = match result {
        Ok(value) => panic!("{what} succeeded without a quorum: {value:?}"),
        Err(err) => err,
    };
    let (code, message) = grpc_error(&err).unwrap_or_else(|| panic!("{what}: not a server error: {err}"));
    eprintln!("{what}: {code:?} {message:?} after {elapsed:?}");
    assert!(NO_QUORUM_ANSWERS.contains(&(code, message.as_str())), "{what}: unexpected answer {code:?} {message:?}");
    assert!(elapsed <= REFUSE_WITHIN, "{what} refused only after {elapsed:?}");
    code
}

/// Retries `put key value` through `client` until it succeeds or [`RECOVER_WITHIN`] passes.
async fn put_until_success(client: &mut Client, key: &str, value: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + RECOVER_WITHIN;
    loop {
        match client.put(key, value, None).await {
            Ok(_) => return Ok(()),
            Err(err) if Instant::now() < deadline => {
                eprintln!("put {key} while recovering: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_member_refuses_linearizable_requests() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::FAST), ..ClusterConfig::new(3) }).await?;

    // Round 0 isolates the leader, round 1 a follower.
    for round in 0..2 {
        let leader = cluster.leader().await?;
        let alone = if round == 0 { leader } else { (leader + 1) % 3 };
        let others: Vec<usize> = (0..3).filter(|&i| i != alone).collect();
        let name = cluster.member(alone).name().to_owned();
        let mut client = cluster.member(alone).client_with_timeout(CLIENT_TIMEOUT).await?;
        let before = format!("before-{round}");
        client.put("isolation", before.as_str(), None).await?;
        cluster.wait_converged(&[0, 1, 2]).await?;

        for &i in &others {
            cluster.member_mut(i).pause()?;
        }
        // At once, while the member may still believe in a leader; then again, when it has had
        // many election timeouts to notice that it has none.
        for attempt in ["first", "second"] {
            let start = Instant::now();
            let (mut put_client, mut get_client) = (client.clone(), client.clone());
            let (put, get) =
                tokio::join!(put_client.put("isolation", "during", None), get_client.get("isolation", None));
            assert_refused(&format!("round {round}: {attempt} put at {name}"), put, start);
            let code = assert_refused(&format!("round {round}: {attempt} get at {name}"), get, start);
            // etcd's read path maps its timeout; only proposals leak the raw context error.
            assert_eq!(code, Code::Unavailable, "round {round}: {attempt} get at {name}");
        }
        // What it has applied, it still serves without consensus. The refused puts may have been
        // appended to its log, but were never committed, so never applied.
        let local = client.get("isolation", Some(GetOptions::new().with_serializable())).await?;
        let kv = local.kvs().first().expect("the key written before the pause");
        assert_eq!(kv.value(), before.as_bytes(), "round {round}");

        for &i in &others {
            cluster.member_mut(i).resume()?;
        }
        let after = format!("after-{round}");
        put_until_success(&mut client, "isolation", &after).await?;
        let got = client.get("isolation", None).await?;
        assert_eq!(got.kvs().first().map(|kv| kv.value()), Some(after.as_bytes()));
        cluster.leader().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_old_leader_serves_no_stale_read() -> anyhow::Result<()> {
    let mut cluster =
        Cluster::start_with(ClusterConfig { timing: Some(Timing::FAST), ..ClusterConfig::new(3) }).await?;
    let old = cluster.leader().await?;
    let mut old_client = cluster.member(old).client_with_timeout(CLIENT_TIMEOUT).await?;
    old_client.put("stale", "old", None).await?;
    cluster.wait_converged(&[0, 1, 2]).await?;
    let old_term = cluster.member(old).status().await?.raft_term;

    cluster.member_mut(old).pause()?;
    let new = cluster.leader().await?;
    assert_ne!(new, old);
    let mut new_client = cluster.member(new).client().await?;
    new_client.put("stale", "new", None).await?;

    // The read is sent while the old leader is still stopped, so that it is among the first things
    // the old leader sees when it runs again, next to its peers' messages. The pause only makes
    // that likely: were the read to arrive later, the expectation would be the same.
    let read = tokio::spawn(async move { old_client.get("stale", None).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.member_mut(old).resume()?;
    let start = Instant::now();
    match read.await? {
        Ok(resp) => {
            let value = resp.kvs().first().map(|kv| kv.value().to_vec());
            assert_eq!(value.as_deref(), Some(&b"new"[..]), "a deposed leader served a stale read");
            eprintln!("the resumed old leader answered with the new value");
        }
        // etcd 3.4.23: Unavailable "etcdserver: leader changed", at once.
        Err(err) => {
            assert_refused("linearizable get at the resumed old leader", Err::<(), _>(err), start);
        }
    }
    let leader = cluster.leader().await?;
    let term = cluster.member(leader).status().await?.raft_term;
    assert!(term > old_term, "{term} > {old_term}");
    Ok(())
}
