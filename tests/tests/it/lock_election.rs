//! The Lock and Election services on three members, through the `etcd-client` crate: mutual exclusion
//! with fenced writes, a lock lost with its holder's lease, leadership changes seen in order by
//! `Observe`, every member serving the recipes (and etcd's JSON gateway), and a waiting Lock outliving
//! the loss of the Raft leader.
//!
//! Writes under a lock are fenced as etcd's users do it: the holder reads its lock key's create revision
//! once it holds the lock and makes every write a txn comparing it; once the key is gone (unlocked or
//! expired) no write of that holder can succeed, whatever it believes.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LeaderKey, LockOptions, LockResponse, ProclaimOptions, ResignOptions, Txn,
    TxnOp,
};
use tests::{assert_grpc_error, http, Cluster, ClusterConfig, Timing};
use tokio::task::JoinHandle;
use tonic::Code;

use crate::util::{header, keys, values};

/// Client timeout for calls that wait their turn (a Lock or Campaign behind others).
const WAIT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an Observe stream may take to report a change.
const OBSERVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause between two polls.
const POLL: Duration = Duration::from_millis(50);

/// A client of member `index` whose requests may wait long.
async fn waiting_client(cluster: &Cluster, index: usize) -> anyhow::Result<Client> {
    cluster.member(index).client_with_timeout(WAIT_TIMEOUT).await
}

/// The create revision of the lock key `key`: the fencing token of its holder (`None` once it is gone).
async fn fencing_token(client: &mut Client, key: &[u8]) -> anyhow::Result<Option<i64>> {
    Ok(client.get(key, None).await?.kvs().first().map(|kv| kv.create_revision()))
}

/// Puts `key` = `value` only while the lock key `lock_key` is the one created at `token`; answers
/// whether the write happened.
async fn fenced_put(
    client: &mut Client,
    lock_key: &[u8],
    token: i64,
    key: &str,
    value: String,
) -> anyhow::Result<bool> {
    let txn = Txn::new()
        .when([Compare::create_revision(lock_key, CompareOp::Equal, token)])
        .and_then([TxnOp::put(key, value, None)]);
    Ok(client.txn(txn).await?.succeeded())
}

/// Two clients, on the two given members, each with a 60-second lease: the holder holds lock `name`, and
/// the waiter's Lock waits in a task, its key queued behind the holder's.
struct Contended {
    holder: Client,
    holder_lease: i64,
    held: LockResponse,
    waiter: Client,
    waiter_lease: i64,
    waiting: JoinHandle<Result<LockResponse, etcd_client::Error>>,
}

async fn contend(cluster: &Cluster, members: [usize; 2], name: &str) -> anyhow::Result<Contended> {
    let mut holder = waiting_client(cluster, members[0]).await?;
    let waiter = waiting_client(cluster, members[1]).await?;
    let holder_lease = holder.lease_grant(60, None).await?.id();
    let waiter_lease = holder.lease_grant(60, None).await?.id();
    let held = holder.lock(name, Some(LockOptions::new().with_lease(holder_lease))).await?;
    let waiting = {
        let (mut waiter, name) = (waiter.clone(), name.to_owned());
        tokio::spawn(async move { waiter.lock(name, Some(LockOptions::new().with_lease(waiter_lease))).await })
    };
    wait_keys(&mut holder, &format!("{name}/"), 2).await?;
    Ok(Contended { holder, holder_lease, held, waiter, waiter_lease, waiting })
}

/// Polls until `count` keys are under `prefix`.
async fn wait_keys(client: &mut Client, prefix: &str, count: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT_TIMEOUT;
    loop {
        let got = client.get(prefix, Some(GetOptions::new().with_prefix().with_count_only())).await?;
        if got.count() == count as i64 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{prefix}: {} keys, want {count}", got.count());
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn fenced_increments_under_the_lock_lose_nothing() -> anyhow::Result<()> {
    const WORKERS: usize = 5;
    const INCREMENTS: usize = 20;
    let cluster = Cluster::start(3).await?;
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        // Spread over the members: followers serve locks too.
        let mut client = waiting_client(&cluster, worker % cluster.len()).await?;
        workers.push(tokio::spawn(async move {
            let lease = client.lease_grant(60, None).await?.id();
            for _ in 0..INCREMENTS {
                let lock = client.lock("counter-lock", Some(LockOptions::new().with_lease(lease))).await?;
                let key = lock.key().to_vec();
                let expected = format!("counter-lock/{lease:x}");
                anyhow::ensure!(
                    key == expected.as_bytes(),
                    "lock key {:?}, want {expected}",
                    String::from_utf8_lossy(&key)
                );
                let token = fencing_token(&mut client, &key).await?.expect("a held lock's key exists");
                let got = client.get("counter", None).await?;
                let count: u64 = got.kvs().first().map_or(Ok(0), |kv| String::from_utf8_lossy(kv.value()).parse())?;
                let written = fenced_put(&mut client, &key, token, "counter", (count + 1).to_string()).await?;
                anyhow::ensure!(written, "a fenced write by the lock holder failed");
                client.unlock(key).await?;
            }
            anyhow::Ok(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let mut client = cluster.member(0).client().await?;
    let got = client.get("counter", None).await?;
    assert_eq!(values(got.kvs()), [(WORKERS * INCREMENTS).to_string()], "increments were lost");
    let left = client.get("counter-lock/", Some(GetOptions::new().with_prefix())).await?;
    assert!(left.kvs().is_empty(), "every lock key is unlocked: {:?}", keys(left.kvs()));
    Ok(())
}

#[tokio::test]
async fn a_holder_whose_lease_expires_loses_the_lock_and_its_fenced_writes() -> anyhow::Result<()> {
    const TTL: i64 = 3;
    let cluster = Cluster::start(3).await?;
    let mut holder = waiting_client(&cluster, 0).await?;
    let mut waiter = waiting_client(&cluster, 1).await?;

    // The holder never keeps its lease alive.
    let granted_at = Instant::now();
    let holder_lease = holder.lease_grant(TTL, None).await?.id();
    let held = holder.lock("job", Some(LockOptions::new().with_lease(holder_lease))).await?;
    let held_key = held.key().to_vec();
    let token = fencing_token(&mut holder, &held_key).await?.expect("the lock key exists");
    assert_eq!(token, header(held.header()).revision(), "an uncontended lock's key is created by the Lock itself");
    assert!(fenced_put(&mut holder, &held_key, token, "result", "from the first holder".into()).await?);

    let waiter_lease = waiter.lease_grant(60, None).await?.id();
    let waiting: JoinHandle<anyhow::Result<_>> = {
        let mut waiter = waiter.clone();
        tokio::spawn(async move { Ok(waiter.lock("job", Some(LockOptions::new().with_lease(waiter_lease))).await?) })
    };
    let won = waiting.await??;
    let waited = granted_at.elapsed();
    assert!(
        waited >= Duration::from_secs(TTL as u64),
        "the waiter got the lock after {waited:?}, before the lease ran out"
    );
    assert_eq!(won.key(), format!("job/{waiter_lease:x}").as_bytes());
    assert_eq!(fencing_token(&mut waiter, &held_key).await?, None, "the expired holder's key is gone");

    // The old holder still thinks it holds the lock: its fenced write fails, the new holder's succeeds.
    assert!(!fenced_put(&mut holder, &held_key, token, "result", "stale".into()).await?);
    let new_token = fencing_token(&mut waiter, won.key()).await?.expect("the new holder's key exists");
    assert!(new_token > token);
    assert!(fenced_put(&mut waiter, won.key(), new_token, "result", "from the second holder".into()).await?);
    let got = waiter.get("result", None).await?;
    assert_eq!(values(got.kvs()), ["from the second holder"]);

    // The old holder's lease is gone: locking with it fails as etcd does.
    assert_grpc_error(
        holder.lock("job", Some(LockOptions::new().with_lease(holder_lease))).await,
        Code::Unknown,
        "etcdserver: requested lease not found",
    );
    Ok(())
}

#[tokio::test]
async fn a_cancelled_lock_or_campaign_leaves_the_queue() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let mut client = waiting_client(&cluster, 0).await?;
    let holder_lease = client.lease_grant(60, None).await?.id();
    let held = client.lock("q", Some(LockOptions::new().with_lease(holder_lease))).await?;
    let leading = client.campaign("qe", "a", holder_lease).await?;
    let leader_key = leading.leader().expect("leader key").key().to_vec();

    // Waiters on another member give up: their client times out.
    let impatient = cluster.member(1).client_with_timeout(Duration::from_secs(2)).await?;
    let impatient_lease = client.lease_grant(60, None).await?.id();
    let locking = {
        let mut impatient = impatient.clone();
        tokio::spawn(async move { impatient.lock("q", Some(LockOptions::new().with_lease(impatient_lease))).await })
    };
    let campaigning = {
        let mut impatient = impatient.clone();
        tokio::spawn(async move { impatient.campaign("qe", "b", impatient_lease).await })
    };
    // Both are queued before either client gives up.
    wait_keys(&mut client, "q/", 2).await?;
    wait_keys(&mut client, "qe/", 2).await?;
    gives_up(&mut client, "q/", locking, held.key()).await?;
    gives_up(&mut client, "qe/", campaigning, &leader_key).await?;
    Ok(())
}

/// Checks that a waiting request, whose key was queued under `prefix`, failed (its client gave up), and
/// that its key then left (etcd deletes it when the waiting request ends), leaving only `kept`.
async fn gives_up<T: std::fmt::Debug>(
    client: &mut Client,
    prefix: &str,
    waiting: JoinHandle<Result<T, etcd_client::Error>>,
    kept: &[u8],
) -> anyhow::Result<()> {
    let gave_up = waiting.await?;
    assert!(gave_up.is_err(), "{prefix} is held: the waiter cannot get it, got {gave_up:?}");
    wait_keys(client, prefix, 1).await?;
    let left = client.get(prefix, Some(GetOptions::new().with_prefix())).await?;
    assert_eq!(keys(left.kvs()), [String::from_utf8_lossy(kept).into_owned()]);
    Ok(())
}

#[tokio::test]
async fn observe_sees_every_leadership_in_order() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let mut client = waiting_client(&cluster, 0).await?;
    assert_grpc_error(client.leader("pick").await, Code::Unknown, "election: no leader");

    let mut leases = Vec::new();
    for _ in 0..3 {
        leases.push(client.lease_grant(60, None).await?.id());
    }
    // A stream opened before anyone leads reports the first leader (etcd answers Observe only then).
    let early = {
        let mut observer = waiting_client(&cluster, 2).await?;
        tokio::spawn(async move {
            let mut stream = observer.observe("pick").await?;
            anyhow::Ok(tokio::time::timeout(WAIT_TIMEOUT, stream.message()).await??)
        })
    };
    // Time for the call to reach the server. Were it late, it would report the same first leader (from a
    // read rather than a wait), so this pause only decides which path runs, never the outcome.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!early.is_finished(), "Observe answered before anyone led");
    // The first candidate, on member 1, wins at once.
    let mut first = waiting_client(&cluster, 1).await?;
    let won = first.campaign("pick", "v1", leases[0]).await?;
    let first_key = won.leader().expect("a campaign answers its leader key").clone();
    assert_eq!(first_key.key(), format!("pick/{:x}", leases[0]).as_bytes());
    assert_eq!(first_key.rev(), header(won.header()).revision());
    assert_eq!(first_key.lease(), leases[0]);
    let early = early.await??.expect("the early Observe stream ended");
    let early_kv = early.kv().expect("Observe answers the leader's key-value");
    assert_eq!((early_kv.key(), early_kv.value()), (first_key.key(), &b"v1"[..]));
    assert_eq!(header(early.header()).revision(), early_kv.mod_revision());

    let mut observe = client.observe("pick").await?;
    let mut observed = Vec::new();
    let mut next_observed = async |observed: &mut Vec<(String, String)>| -> anyhow::Result<()> {
        let response = tokio::time::timeout(OBSERVE_TIMEOUT, observe.message()).await??.expect("Observe ended");
        let kv = response.kv().expect("Observe answers the leader's key-value");
        observed.push((kv.key_str()?.to_owned(), kv.value_str()?.to_owned()));
        Ok(())
    };
    next_observed(&mut observed).await?;

    // Two more candidates queue up, in this order, on the other members.
    let mut campaigns = Vec::new();
    for (index, value) in [(2, "v2"), (0, "v3")] {
        let mut candidate = waiting_client(&cluster, index).await?;
        let lease = leases[campaigns.len() + 1];
        campaigns.push(tokio::spawn(async move { candidate.campaign("pick", value, lease).await }));
        wait_keys(&mut client, "pick/", campaigns.len() + 1).await?;
    }

    // Proclaim changes the value Leader and Observe see.
    first.proclaim("v1b", Some(ProclaimOptions::new().with_leader(first_key.clone()))).await?;
    let leader = client.leader("pick").await?;
    assert_eq!(leader.kv().map(|kv| kv.value()), Some(&b"v1b"[..]));
    next_observed(&mut observed).await?;

    // Resign hands over to the next candidate; the resigned leader can proclaim no more.
    first.resign(Some(ResignOptions::new().with_leader(first_key.clone()))).await?;
    let second = campaigns.remove(0).await??;
    let second_key = second.leader().expect("leader key").clone();
    next_observed(&mut observed).await?;
    assert_grpc_error(
        first.proclaim("late", Some(ProclaimOptions::new().with_leader(first_key))).await,
        Code::Unknown,
        "election: not leader",
    );

    // The second leader's lease runs out (revoked here): leadership goes with it.
    client.lease_revoke(leases[1]).await?;
    let third = campaigns.remove(0).await??;
    let third_key = third.leader().expect("leader key").clone();
    next_observed(&mut observed).await?;
    assert_grpc_error(
        client.proclaim("late", Some(ProclaimOptions::new().with_leader(second_key.clone()))).await,
        Code::Unknown,
        "election: not leader",
    );
    assert!(second_key.rev() < third_key.rev(), "candidates lead in the order they campaigned");

    let name = |lease: i64| format!("pick/{lease:x}");
    let want = [
        (name(leases[0]), "v1".to_owned()),
        (name(leases[0]), "v1b".to_owned()),
        (name(leases[1]), "v2".to_owned()),
        (name(leases[2]), "v3".to_owned()),
    ];
    assert_eq!(observed, want);

    // The last leader resigns: nobody leads.
    client.resign(Some(ResignOptions::new().with_leader(third_key))).await?;
    assert_grpc_error(client.leader("pick").await, Code::Unknown, "election: no leader");
    Ok(())
}

#[tokio::test]
async fn followers_serve_lock_and_election() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader().await?;
    let followers: Vec<usize> = (0..cluster.len()).filter(|i| *i != leader).collect();
    // A lock taken on one follower blocks a Lock on the other until it is unlocked.
    let Contended { holder: mut a, holder_lease: lease_a, held, waiter: mut b, waiter_lease: lease_b, waiting } =
        contend(&cluster, [followers[0], followers[1]], "f").await?;
    assert!(!waiting.is_finished(), "the second Lock waits while the first holds");
    a.unlock(held.key()).await?;
    let won = waiting.await??;
    assert_eq!(won.key(), format!("f/{lease_b:x}").as_bytes());
    assert!(header(won.header()).revision() > header(held.header()).revision());

    // The same for a campaign, and Leader answers on every member.
    let first = a.campaign("g", "a", lease_a).await?;
    let campaigning = {
        let mut b = b.clone();
        tokio::spawn(async move { b.campaign("g", "b", lease_b).await })
    };
    wait_keys(&mut a, "g/", 2).await?;
    for index in 0..cluster.len() {
        let mut client = cluster.member(index).client().await?;
        let leader = client.leader("g").await?;
        assert_eq!(leader.kv().map(|kv| kv.value()), Some(&b"a"[..]), "Leader on member {index}");
    }
    a.resign(Some(ResignOptions::new().with_leader(first.leader().expect("leader key").clone()))).await?;
    let second = campaigning.await??;
    assert_eq!(second.leader().map(LeaderKey::lease), Some(lease_b));
    let leader = b.leader("g").await?;
    assert_eq!(leader.kv().map(|kv| kv.value()), Some(&b"b"[..]));

    // Campaigning again with the same lease keeps the candidate's place and proclaims the new value.
    let again = b.campaign("g", "b2", lease_b).await?;
    assert_eq!(again.leader().map(LeaderKey::rev), second.leader().map(LeaderKey::rev));
    let leader = a.leader("g").await?;
    assert_eq!(leader.kv().map(|kv| kv.value()), Some(&b"b2"[..]));

    // Without a lease, Lock opens a 60-second one (etcd's default session TTL) and names the key after it.
    let unleased = b.lock("h", None).await?;
    let key = String::from_utf8_lossy(unleased.key()).into_owned();
    let lease = i64::from_str_radix(key.strip_prefix("h/").expect("the key is under the lock's name"), 16)?;
    let granted = a.lease_time_to_live(lease, None).await?;
    assert_eq!(granted.granted_ttl(), 60, "the lease of {key}");

    // etcd's JSON gateway serves the unary calls too, with the same answers.
    let url = cluster.member(followers[0]).client_url();
    let nobody = http::request(&url, "POST", "/v3/election/leader", Some(r#"{"name":"bm9ib2R5"}"#)).await?;
    let no_leader = r#"{"error":"election: no leader","message":"election: no leader","code":2}"#;
    assert_eq!((nobody.status, nobody.body.as_str()), (500, no_leader));
    let body = format!(r#"{{"name":"d2Vi","lease":"{lease_a}"}}"#);
    let locked = http::request(&url, "POST", "/v3/lock/lock", Some(&body)).await?;
    let key = STANDARD.encode(format!("web/{lease_a:x}"));
    assert_eq!(locked.status, 200, "{}", locked.body);
    assert!(locked.body.ends_with(&format!(r#""key":"{key}"}}"#)), "{}", locked.body);

    // Requests without their leader key fail as etcd's do.
    assert_grpc_error(b.proclaim("x", None).await, Code::Unknown, "\"leader\" field must be provided");
    assert_grpc_error(b.resign(None).await, Code::Unknown, "\"leader\" field must be provided");
    Ok(())
}

#[tokio::test]
async fn a_waiting_lock_survives_the_loss_of_the_raft_leader() -> anyhow::Result<()> {
    let config = ClusterConfig { timing: Some(Timing::FAST), ..ClusterConfig::new(3) };
    let mut cluster = Cluster::start_with(config).await?;
    let leader = cluster.leader().await?;
    let followers: Vec<usize> = (0..cluster.len()).filter(|i| *i != leader).collect();
    let Contended { mut holder, held, mut waiter, waiter_lease, waiting, .. } =
        contend(&cluster, [followers[0], followers[1]], "failover").await?;

    // The Raft leader dies while the waiter waits on a follower; the holder unlocks once a new leader
    // is elected (an unlock refused meanwhile is repeated).
    cluster.member_mut(leader).kill9()?;
    cluster.leader().await?;
    let deadline = Instant::now() + WAIT_TIMEOUT;
    while let Err(err) = holder.unlock(held.key()).await {
        anyhow::ensure!(Instant::now() < deadline, "unlock kept failing: {err}");
        tokio::time::sleep(POLL).await;
    }
    let won = tokio::time::timeout(WAIT_TIMEOUT, waiting).await???;
    assert_eq!(won.key(), format!("failover/{waiter_lease:x}").as_bytes());
    let token = fencing_token(&mut waiter, won.key()).await?.expect("the new holder's key exists");
    assert!(fenced_put(&mut waiter, won.key(), token, "after-failover", "written".into()).await?);
    Ok(())
}
