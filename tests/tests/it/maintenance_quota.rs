//! `--quota-backend-bytes` and the NOSPACE alarm, Defragment, Hash/HashKV across members, and the log
//! flags. Each expectation is what etcd 3.4 does (`KV_TEST_SERVER=etcd` runs them against it).

use anyhow::Context;
use etcd_client::{AlarmAction, AlarmOptions, AlarmType, Client, DeleteOptions, TxnOp};
use tests::{assert_grpc_error, grpc_error, Cluster, Member, MemberConfig, ServerKind};
use tonic::Code;

use crate::util::header;

const NOSPACE: &str = "etcdserver: mvcc: database space exceeded";

/// A quota both servers pass after a few dozen 20 KB puts, and stay below after a defragmentation
/// (etcd starts at 20 KB, we at sled's first 512 KB segment).
const QUOTA_BYTES: i64 = 1_000_000;

/// Puts 20 KB values until the server refuses one; returns the refusal.
async fn fill(client: &mut Client) -> anyhow::Result<etcd_client::Error> {
    let value = "x".repeat(20_000);
    for i in 0..500 {
        if let Err(err) = client.put(format!("fill/{i:04}"), value.clone(), None).await {
            return Ok(err);
        }
    }
    anyhow::bail!("500 puts of 20 KB never passed a {QUOTA_BYTES}-byte quota")
}

#[tokio::test]
async fn past_the_quota_writes_fail_until_compaction_defrag_and_disarm() -> anyhow::Result<()> {
    let config =
        MemberConfig { extra_args: vec![format!("--quota-backend-bytes={QUOTA_BYTES}")], ..MemberConfig::default() };
    let mut member = Member::start_with(config).await?;
    let mut client = member.client().await?;
    let refused = fill(&mut client).await?;
    assert_eq!(grpc_error(&refused), Some((Code::ResourceExhausted, NOSPACE.to_owned())), "{refused}");

    // The alarm is raised through the log: listed, reported by Status, and it survives a crash.
    let member_id = header(client.status().await?.header()).member_id();
    let alarm = format!("memberID:{member_id} alarm:NOSPACE ");
    let listed = member.etcdctl(&["alarm", "list"]).await?.ok()?;
    assert_eq!(listed, format!("{alarm}\n"));
    assert_eq!(client.status().await?.errors(), std::slice::from_ref(&alarm));
    member.kill9()?;
    member.restart().await?;
    let mut client = member.client().await?;
    assert_eq!(member.etcdctl(&["alarm", "list"]).await?.ok()?, listed, "the alarm outlives a restart");

    // What takes space is refused; etcdctl prints etcd's text.
    let put = member.etcdctl(&["put", "small", "v"]).await?;
    assert!(!put.success());
    assert_eq!(put.error_line(), Some(format!("Error: {NOSPACE}").as_str()), "{put:?}");
    assert_grpc_error(client.lease_grant(10, None).await, Code::ResourceExhausted, NOSPACE);
    let txn_put = etcd_client::Txn::new().and_then([TxnOp::put("small", "v", None)]);
    assert_grpc_error(client.txn(txn_put).await, Code::ResourceExhausted, NOSPACE);

    // Deletes pass; compaction then defragmentation give the space back.
    let deleted = client.delete("fill/", Some(DeleteOptions::new().with_prefix())).await?;
    assert!(deleted.deleted() > 0);
    client.compact(header(deleted.header()).revision(), None).await?;
    let before = client.status().await?.db_size();
    let defrag = member.etcdctl(&["defrag"]).await?.ok()?;
    assert_eq!(defrag, format!("Finished defragmenting etcd member[{}]\n", member.endpoint()));
    let after = client.status().await?.db_size();
    assert!(after < before && after < QUOTA_BYTES, "defragmentation left {after} bytes of {before}");

    // Space alone does not end the alarm: writes wait for the disarm.
    assert_grpc_error(client.put("small", "v", None).await, Code::ResourceExhausted, NOSPACE);
    assert_eq!(member.etcdctl(&["alarm", "disarm"]).await?.ok()?, listed);
    assert_eq!(member.etcdctl(&["alarm", "list"]).await?.ok()?, "");
    assert_eq!(member.etcdctl(&["alarm", "disarm"]).await?.ok()?, "", "nothing left to disarm");
    assert!(client.status().await?.errors().is_empty());
    client.put("small", "v", None).await?;
    client.lease_grant(10, None).await?;
    Ok(())
}

/// `(hash, compact revision, header revision)` of HashKV at `revision` on every member.
async fn hash_kvs(clients: &mut [Client], revision: i64) -> anyhow::Result<Vec<(u32, i64, i64)>> {
    let mut out = Vec::new();
    for client in clients {
        let resp = client.hash_kv(revision).await?;
        out.push((resp.hash(), resp.compact_version(), header(resp.header()).revision()));
    }
    Ok(out)
}

#[tokio::test]
async fn hashes_agree_on_every_member_and_alarms_reach_every_member() -> anyhow::Result<()> {
    let cluster = Cluster::start(3).await?;
    let mut clients = Vec::new();
    for member in cluster.members() {
        clients.push(member.client().await?);
    }
    let writer = &mut clients[0];
    for i in 0..30 {
        writer.put(format!("k{}", i % 7), format!("v{i}"), None).await?;
    }
    writer.delete("k3", None).await?;
    writer.lease_grant(100, None).await?;
    let middle = header(writer.put("k1", "middle", None).await?.header()).revision();
    for i in 0..10 {
        writer.put(format!("k{}", i % 4), format!("late{i}"), None).await?;
    }
    writer.compact(middle, None).await?;
    let last = header(writer.put("k6", "last", None).await?.header()).revision();
    cluster.wait_converged(&[0, 1, 2]).await?;

    let at_last = hash_kvs(&mut clients, last).await?;
    assert!(at_last.iter().all(|h| *h == at_last[0]), "HashKV({last}) differs across members: {at_last:?}");
    assert_eq!(at_last[0].1, middle, "compact revision");
    assert_eq!(at_last[0].2, last, "the header carries the current revision");
    let current = hash_kvs(&mut clients, 0).await?;
    assert_eq!(current, at_last, "HashKV(0) is HashKV at the current revision");
    let at_middle = hash_kvs(&mut clients, middle + 1).await?;
    assert!(at_middle.iter().all(|h| h.0 == at_middle[0].0), "{at_middle:?}");
    assert_ne!(at_middle[0].0, at_last[0].0, "later writes change the hash");
    assert_grpc_error(
        clients[1].hash_kv(middle - 1).await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
    if cluster.kind() == ServerKind::Ours {
        // etcd's whole-backend Hash covers per-member bookkeeping; ours covers what the log decides.
        let mut hashes = Vec::new();
        for client in &mut clients {
            hashes.push(client.hash().await?.hash());
        }
        assert!(hashes.iter().all(|h| *h == hashes[0]), "Hash differs across members: {hashes:?}");
    }
    let printed = cluster.member(0).etcdctl(&["endpoint", "hashkv", "--cluster"]).await?.ok()?;
    let hashes: Vec<&str> = printed.lines().filter_map(|line| line.split(", ").nth(1)).collect();
    assert_eq!(hashes, vec![at_last[0].0.to_string(); 3], "etcdctl printed:\n{printed}");

    // An alarm raised through one member is active on every member, and disarmed through another.
    let target = header(clients[2].status().await?.header()).member_id();
    let mut options = AlarmOptions::new();
    options.with_member(target);
    let raised = clients[0].alarm(AlarmAction::Activate, AlarmType::Nospace, Some(options)).await?;
    assert_eq!(raised.alarms().len(), 1);
    for (i, client) in clients.iter_mut().enumerate() {
        let listed = client.alarm(AlarmAction::Get, AlarmType::None, None).await?;
        let alarms: Vec<_> = listed.alarms().iter().map(|a| (a.member_id(), a.alarm())).collect();
        assert_eq!(alarms, [(target, AlarmType::Nospace)], "member {i}");
        assert_grpc_error(client.put("k", "v", None).await, Code::ResourceExhausted, NOSPACE);
    }
    // etcd's /health is false on every member while an alarm is active.
    for member in cluster.members() {
        let health = tests::http::get(&member.client_url(), "/health").await?;
        assert_eq!((health.status, health.body.as_str()), (503, "{\"health\":\"false\"}\n"), "{}", member.name());
    }
    let disarmed = cluster.member(1).etcdctl(&["alarm", "disarm"]).await?.ok()?;
    assert_eq!(disarmed, format!("memberID:{target} alarm:NOSPACE \n"));
    for client in &mut clients {
        client.put("k", "v", None).await?;
    }
    for member in cluster.members() {
        let health = tests::http::get(&member.client_url(), "/health").await?;
        assert_eq!((health.status, health.body.as_str()), (200, "{\"health\":\"true\"}"), "{}", member.name());
    }
    Ok(())
}

/// Replaces `from` with `to` (same length) inside the stored value of a stopped member of ours, in its
/// store's current generation, as a disk fault would.
fn tamper(data_dir: &std::path::Path, from: &[u8], to: &[u8]) -> anyhow::Result<()> {
    let kv_dir = data_dir.join("member").join("db.kv");
    let generation = std::fs::read_to_string(kv_dir.join("CURRENT"))?;
    let db = sled::open(kv_dir.join(generation.trim()))?;
    let tree = db.open_tree("kv")?;
    let mut changed = 0;
    for item in tree.iter() {
        let (key, value) = item?;
        if let Some(at) = value.windows(from.len()).position(|w| w == from) {
            let mut value = value.to_vec();
            value[at..at + from.len()].copy_from_slice(to);
            tree.insert(key, value)?;
            changed += 1;
        }
    }
    db.flush()?;
    anyhow::ensure!(changed == 1, "expected one stored value holding {from:?}, found {changed}");
    Ok(())
}

#[tokio::test]
async fn corruption_checks_find_a_diverged_member() -> anyhow::Result<()> {
    if ServerKind::from_env() == ServerKind::Etcd {
        // Tampering with etcd's bbolt file needs bbolt's tools; etcd's check itself is etcd's.
        return Ok(());
    }
    let config = tests::ClusterConfig {
        extra_args: vec!["--experimental-corrupt-check-time=500ms".into()],
        ..tests::ClusterConfig::new(3)
    };
    let mut cluster = Cluster::start_with(config).await?;
    let leader = cluster.leader().await?;
    let victim = (leader + 1) % 3;
    let mut client = cluster.member(leader).client().await?;
    client.put("k", "original", None).await?;
    // Later applies commit the store (every 100 ms), and sled's flusher persists it (every 500 ms): the
    // tampered revision is then on disk, not replayed from the log on restart.
    for i in 0..5 {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        client.put("other", format!("{i}"), None).await?;
    }
    // With auth on, the members still compare hashes (they ask each other on the peer port).
    for args in [&["user", "add", "root:pw"][..], &["user", "grant-role", "root", "root"], &["auth", "enable"]] {
        cluster.member(leader).etcdctl(args).await?.ok()?;
    }
    let root = etcd_client::ConnectOptions::new().with_user("root", "pw");
    let mut client = Client::connect([cluster.member(leader).endpoint()], Some(root)).await?;
    cluster.set_credentials("root", "pw");
    cluster.wait_converged(&[0, 1, 2]).await?;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let victim_id = cluster.member(victim).status().await?.member_id;
    cluster.member_mut(victim).kill9()?;
    tamper(&cluster.member(victim).data_dir(), b"original", b"tampered")?;
    cluster.member_mut(victim).restart().await?;

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let listed = client.alarm(AlarmAction::Get, AlarmType::None, None).await?;
        let alarms: Vec<_> = listed.alarms().iter().map(|a| (a.member_id(), a.alarm())).collect();
        if !alarms.is_empty() {
            assert_eq!(alarms, [(victim_id, AlarmType::Corrupt)]);
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no CORRUPT alarm was raised");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // As etcd's corrupt applier: every request through the log is refused.
    assert_grpc_error(client.put("k", "v", None).await, Code::DataLoss, "etcdserver: corrupt cluster");

    // With the initial check, the diverged member refuses to start.
    let victim = cluster.member_mut(victim);
    victim.add_args(&["--experimental-initial-corrupt-check"]);
    let restarted = victim.restart().await;
    assert!(restarted.is_err(), "a diverged member started with --experimental-initial-corrupt-check");
    assert!(victim.log().contains("found data inconsistency with peers"), "{}", victim.log());
    Ok(())
}

/// The member's log lines, each parsed as a JSON object.
fn json_lines(log: &str) -> anyhow::Result<Vec<serde_json::Map<String, serde_json::Value>>> {
    log.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).with_context(|| format!("not a JSON object: {line:?}")))
        .collect()
}

#[tokio::test]
async fn zap_logger_writes_json_lines() -> anyhow::Result<()> {
    let config = MemberConfig { extra_args: vec!["--logger=zap".into()], ..MemberConfig::default() };
    let member = Member::start_with(config).await?;
    member.client().await?.put("k", "v", None).await?;
    let lines = json_lines(&member.log())?;
    assert!(!lines.is_empty(), "the member logged nothing");
    for line in &lines {
        let level = line.get("level").and_then(|l| l.as_str()).context("a line without a level")?;
        assert!(["debug", "info", "warn", "error"].contains(&level.to_lowercase().as_str()), "{line:?}");
    }
    Ok(())
}

#[tokio::test]
async fn log_format_json_and_log_level_warn() -> anyhow::Result<()> {
    if ServerKind::from_env() == ServerKind::Etcd {
        // etcd 3.4 has no --log-format (its --logger=zap is checked above).
        return Ok(());
    }
    let args = ["--log-format=json", "--log-level=warn", "--quota-backend-bytes=1"];
    let config = MemberConfig { extra_args: args.map(String::from).to_vec(), ..MemberConfig::default() };
    let member = Member::start_with(config).await?;
    let mut client = member.client().await?;
    // Past a one-byte quota: the refusal is logged at warn.
    assert_grpc_error(client.put("k", "v", None).await, Code::ResourceExhausted, NOSPACE);
    let lines = json_lines(&member.log())?;
    let levels: Vec<_> = lines.iter().filter_map(|l| l.get("level")?.as_str().map(str::to_owned)).collect();
    assert_eq!(levels.len(), lines.len(), "every line has a level");
    // zap's keys and lower-case levels, as tools that read etcd's JSON logs expect.
    assert!(levels.iter().any(|l| l == "warn"), "the quota warning is logged: {lines:?}");
    assert!(levels.iter().all(|l| l == "warn" || l == "error"), "nothing below warn: {levels:?}");
    for key in ["ts", "caller", "msg"] {
        assert!(lines.iter().all(|line| line.get(key).is_some()), "every line has {key:?}: {lines:?}");
    }
    Ok(())
}
