//! A member started the way operators deploy etcd: kubeadm's static-pod flags with certificates, a
//! config file, `ETCD_*` variables, probes on the metrics URL; and flags it cannot honour refused in
//! one line. Most run our binary only (etcd 3.4.23 has neither `/livez` nor `/readyz`, nor 3.5's flags);
//! those that say so pass on etcd 3.4.23 too.

use std::time::{Duration, Instant};

use anyhow::Context;
use tests::http::{self, Metrics};
use tests::spawned::{free_ports, Spawned};
use tests::tls::Certs;
use tests::{Cluster, ServerKind};

const START_TIMEOUT: Duration = Duration::from_secs(30);

fn ours() -> anyhow::Result<std::path::PathBuf> {
    ServerKind::Ours.binary()
}

/// Polls `path` on `url` until it answers `status`, for up to `timeout`; the last answer.
async fn http_until(url: &str, path: &str, status: u16, timeout: Duration) -> anyhow::Result<http::HttpResponse> {
    let deadline = Instant::now() + timeout;
    loop {
        match http::get(url, path).await {
            Ok(answer) if answer.status == status => return Ok(answer),
            Ok(answer) if Instant::now() > deadline => {
                anyhow::bail!("{path}: {} {:?} after {timeout:?}, want {status}", answer.status, answer.body)
            }
            Err(err) if Instant::now() > deadline => return Err(err.context(format!("{path} within {timeout:?}"))),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// kubeadm's stacked-etcd command, unchanged, with certificates made as kubeadm makes them: the member
/// starts, the probes kubelet sends to the metrics URL answer `ok`, and etcdctl with a client certificate
/// writes through the TLS client URL. Both generations of the command: the etcd 3.5 one
/// (`--experimental-*` names) and today's 3.6 one (`--feature-gates`, the new names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadms_manifest_starts_a_member_and_its_probes_pass() -> anyhow::Result<()> {
    let etcd35 = ["--experimental-initial-corrupt-check=true", "--experimental-watch-progress-notify-interval=5s"];
    let etcd36 = ["--feature-gates=InitialCorruptCheck=true", "--watch-progress-notify-interval=5s"];
    for generation in [etcd35, etcd36] {
        let (member, _dir) = kubeadm_member(&generation).await?;
        let old_names = generation[0].starts_with("--experimental");
        let deprecated = member.log().contains("--experimental-watch-progress-notify-interval is deprecated in v3.6");
        assert_eq!(deprecated, old_names, "3.6's deprecation warning for the old names only:\n{}", member.log());
    }
    Ok(())
}

/// A member started with kubeadm's flags (`generation`'s on top of those both generations share), after
/// the checks every kubeadm member passes; with its data dir.
async fn kubeadm_member(generation: &[&str]) -> anyhow::Result<(Spawned, tempfile::TempDir)> {
    let certs = Certs::make()?;
    let dir = tempfile::tempdir()?;
    let [client, peer, metrics] = free_ports(3)?[..] else { unreachable!("three ports") };
    let client_url = format!("https://127.0.0.1:{client}");
    let peer_url = format!("https://127.0.0.1:{peer}");
    let metrics_url = format!("http://127.0.0.1:{metrics}");
    let mut args: Vec<String> = [
        format!("--advertise-client-urls={client_url}"),
        format!("--cert-file={}", certs.path("member.crt")),
        "--client-cert-auth=true".into(),
        format!("--data-dir={}", dir.path().join("etcd").display()),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=m1={peer_url}"),
        format!("--key-file={}", certs.path("member.key")),
        format!("--listen-client-urls=https://127.0.0.1:{client}"),
        format!("--listen-metrics-urls={metrics_url}"),
        format!("--listen-peer-urls={peer_url}"),
        "--name=m1".into(),
        format!("--peer-cert-file={}", certs.path("member.crt")),
        "--peer-client-cert-auth=true".into(),
        format!("--peer-key-file={}", certs.path("member.key")),
        format!("--peer-trusted-ca-file={}", certs.path("ca.crt")),
        "--snapshot-count=10000".into(),
        format!("--trusted-ca-file={}", certs.path("ca.crt")),
    ]
    .into();
    args.extend(generation.iter().map(|a| a.to_string()));
    let mut member = Spawned::start(&ours()?, dir.path(), &args, &[])?;
    member.wait_for_log("ready to serve client requests", START_TIMEOUT).await?;

    let readyz = http_until(&metrics_url, "/readyz", 200, START_TIMEOUT).await?;
    assert_eq!(readyz.body, "ok\n");
    assert_eq!(readyz.header("content-type"), Some("text/plain; charset=utf-8"));
    let livez = http::get(&metrics_url, "/livez").await?;
    assert_eq!((livez.status, livez.body.as_str()), (200, "ok\n"));
    let verbose = http::get(&metrics_url, "/readyz?verbose").await?;
    assert_eq!(
        verbose.body,
        "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\nok\n"
    );
    let excluded = http::get(&metrics_url, "/readyz?verbose&exclude=non_learner&exclude=data_corruption").await?;
    assert_eq!(excluded.body, "[+]serializable_read ok\n[+]linearizable_read ok\nok\n");
    let one = http::get(&metrics_url, "/readyz/linearizable_read?verbose").await?;
    assert_eq!((one.status, one.body.as_str()), (200, "[+]linearizable_read ok\nok\n"));
    let post = http::request(&metrics_url, "POST", "/livez", Some("")).await?;
    assert_eq!((post.status, post.header("allow")), (405, Some("GET")));
    assert_eq!(http::get(&metrics_url, "/livez/linearizable_read").await?.status, 404, "not a livez check");
    // The metrics URL serves the probes and metrics only, not the gateway.
    assert_eq!(http::request(&metrics_url, "POST", "/v3/kv/range", Some("{}")).await?.status, 404);
    let scraped = Metrics::parse(&http::get(&metrics_url, "/metrics").await?.body)?;
    assert!(scraped.value("etcd_server_healthcheck", &[("type", "readyz"), ("name", "linearizable_read")]) == 1.0);
    let runs = [("type", "readyz"), ("name", "non_learner"), ("status", "success")];
    assert!(scraped.value("etcd_server_healthchecks_total", &runs) >= 2.0, "{runs:?}");
    let gate = [("name", "InitialCorruptCheck"), ("stage", "ALPHA")];
    assert_eq!(scraped.value("etcd_server_feature_enabled", &gate), 1.0, "the gate kubeadm turns on");
    assert!(member.log().contains("initial corruption check passed"), "{}", member.log());

    let mut flags = certs.client_flags();
    flags.extend(["put".into(), "kubeadm".into(), "ok".into()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let put = tests::etcdctl::run(&client_url, &flags, None).await?;
    assert_eq!(put.clone().ok()?, "OK\n", "{put:?}\n{}", member.log());
    for line in
        ["starting an etcd server", "serving peer traffic", "serving metrics", "now serving peer/client/metrics"]
    {
        assert!(member.log().contains(line), "log line {line:?} missing:\n{}", member.log());
    }
    assert!(member.log().contains("serving client traffic securely"));
    Ok((member, dir))
}

/// A member cut off from its quorum (the other two paused) stays live but is no longer ready, and says
/// which check failed; it is ready again once they are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_from_its_quorum_is_live_but_not_ready() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(3).await?;
    cluster.leader().await?;
    let url = cluster.member(0).client_url();
    assert_eq!(http_until(&url, "/readyz", 200, START_TIMEOUT).await?.body, "ok\n");
    cluster.member_mut(1).pause()?;
    cluster.member_mut(2).pause()?;
    let unready = http_until(&url, "/readyz", 503, START_TIMEOUT).await?;
    assert!(unready.body.contains("[-]linearizable_read failed: etcdserver: "), "{:?}", unready.body);
    assert!(unready.body.contains("[+]serializable_read ok\n"), "{:?}", unready.body);
    assert!(unready.body.contains("[+]data_corruption ok\n"), "{:?}", unready.body);
    let live = http::get(&url, "/livez").await?;
    assert_eq!((live.status, live.body.as_str()), (200, "ok\n"), "restarting would not bring the quorum back");
    assert_eq!(http::get(&url, "/readyz?exclude=linearizable_read").await?.status, 200);
    cluster.member_mut(1).resume()?;
    cluster.member_mut(2).resume()?;
    http_until(&url, "/readyz", 200, START_TIMEOUT).await?;
    Ok(())
}

/// The same member from an etcd YAML config file (which wins over flags and variables, as in etcd), and
/// from `ETCD_*` variables alone, as a systemd unit sets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_or_etcd_variables_start_a_member() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let [client, peer] = free_ports(2)?[..] else { unreachable!("two ports") };
    let config = format!(
        "name: from-file\ndata-dir: {data}\nlisten-client-urls: http://127.0.0.1:{client}\n\
         advertise-client-urls: http://127.0.0.1:{client}\nlisten-peer-urls: http://127.0.0.1:{peer}\n\
         initial-advertise-peer-urls: http://127.0.0.1:{peer}\ninitial-cluster: from-file=http://127.0.0.1:{peer}\n\
         initial-cluster-token: file-token\nsnapshot-count: 10000\nlog-outputs: [stderr]\n",
        data = dir.path().join("file.etcd").display()
    );
    std::fs::write(dir.path().join("etcd.yaml"), config)?;
    let args = vec!["--config-file=etcd.yaml".to_string(), "--name=ignored".to_string()];
    let mut member = Spawned::start(&ours()?, dir.path(), &args, &[("ETCD_NAME", "ignored-too")])?;
    member.wait_for_log("ready to serve client requests", START_TIMEOUT).await?;
    let list = tests::etcdctl::run(&format!("127.0.0.1:{client}"), &["member", "list"], None).await?.ok()?;
    assert!(list.contains(", started, from-file, "), "{list}");
    drop(member);

    let env_dir = tempfile::tempdir()?;
    let [client, peer] = free_ports(2)?[..] else { unreachable!("two ports") };
    let (client_url, peer_url) = (format!("http://127.0.0.1:{client}"), format!("http://127.0.0.1:{peer}"));
    let cluster = format!("from-env={peer_url}");
    let env = [
        ("ETCD_NAME", "from-env"),
        ("ETCD_LISTEN_CLIENT_URLS", client_url.as_str()),
        ("ETCD_ADVERTISE_CLIENT_URLS", client_url.as_str()),
        ("ETCD_LISTEN_PEER_URLS", peer_url.as_str()),
        ("ETCD_INITIAL_ADVERTISE_PEER_URLS", peer_url.as_str()),
        ("ETCD_INITIAL_CLUSTER", cluster.as_str()),
        ("ETCD_STRICT_RECONFIG_CHECK", "false"),
        ("ETCD_MAX_WALS", "0"),
        // tokio's multi-threaded runtime, which a member on this 2-core machine does not choose itself.
        ("TOKIO_WORKER_THREADS", "2"),
    ];
    let mut member = Spawned::start(&ours()?, env_dir.path(), &[], &env)?;
    member.wait_for_log("ready to serve client requests", START_TIMEOUT).await?;
    let list = tests::etcdctl::run(&format!("127.0.0.1:{client}"), &["member", "list"], None).await?.ok()?;
    assert!(list.contains(", started, from-env, "), "{list}");
    assert!(env_dir.path().join("from-env.etcd").is_dir(), "the data dir defaults to <name>.etcd");
    // A tuning flag with nothing to act on here is said so in the log.
    assert!(member.log().contains("--max-wals has no effect here"), "{}", member.log());
    assert!(member.log().contains("runtime_threads=2"), "{}", member.log());
    Ok(())
}

/// Bad flags, files and features this member does not have stop it at once with one line naming the
/// problem, never a silent start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_it_cannot_honour_stop_it_with_one_line() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("bad.yaml"), "snapshot-count: [1, [2]]\n")?;
    let cases: [(&[&str], i32, &str); 7] = [
        (&["--no-such-flag"], 2, "raft-node: unexpected argument '--no-such-flag' found"),
        (&["--snapshot-count=many"], 2, "raft-node: invalid value 'many' for '--snapshot-count <SNAPSHOT_COUNT>'"),
        (&["--enable-v2=true"], 1, "raft-node: --enable-v2=true is not supported: the v2 API is not served"),
        (&["--discovery-srv=example.com"], 1, "raft-node: --discovery-srv is not supported: DNS discovery"),
        (&["--config-file=bad.yaml"], 2, "raft-node: the config file bad.yaml has a bad value for \"snapshot-count\""),
        (&["--config-file=missing.yaml"], 2, "raft-node: cannot read the config file missing.yaml"),
        (&["--feature-gates=NoSuchGate=true"], 1, "raft-node: unrecognized feature gate: NoSuchGate"),
    ];
    for (args, code, line) in cases {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut member = Spawned::start(&ours()?, dir.path(), &args, &[])?;
        let exit = member.wait_exit(Duration::from_secs(10)).await?;
        let log = member.log();
        assert_eq!(exit, Some(code), "{args:?}: {log}");
        assert_eq!(log.lines().count(), 1, "{args:?}: one line, not {log:?}");
        assert!(log.starts_with(line), "{args:?}: {log:?}");
        std::fs::remove_file(dir.path().join("raft-node.log")).context("log")?;
    }
    let mut member = Spawned::start(&ours()?, dir.path(), &[], &[("TOKIO_WORKER_THREADS", "many")])?;
    let exit = member.wait_exit(Duration::from_secs(10)).await?;
    let log = member.log();
    assert_eq!(exit, Some(1), "{log}");
    assert_eq!(log, "raft-node: invalid TOKIO_WORKER_THREADS \"many\": want a number of threads, 1 or more\n");
    std::fs::remove_file(dir.path().join("raft-node.log")).context("log")?;
    // An etcd failpoint this member does not have must not look set.
    let mut member = Spawned::start(
        &ours()?,
        dir.path(),
        &[],
        &[("GOFAIL_FAILPOINTS", "raftBeforeSave=sleep(5);raftAfterSave=panic")],
    )?;
    let exit = member.wait_exit(Duration::from_secs(10)).await?;
    let log = member.log();
    assert_eq!(exit, Some(1), "{log}");
    assert_eq!(
        log,
        "raft-node: GOFAIL_FAILPOINTS: failpoint \"raftAfterSave\" is not supported here (raftBeforeSave)\n"
    );
    Ok(())
}

/// `--max-concurrent-streams=2`: a client connection holds two watch streams at most; a third waits until
/// one of them ends (HTTP/2 flow control, as with etcd's gRPC server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_streams_limits_the_streams_of_a_connection() -> anyhow::Result<()> {
    let config = tests::MemberConfig {
        kind: ServerKind::Ours,
        extra_args: vec!["--max-concurrent-streams=2".into()],
        ..tests::MemberConfig::default()
    };
    let member = tests::Member::start_with(config).await?;
    let client = member.client().await?;
    let first = client.watch_client().watch("a", None).await?;
    let _second = client.watch_client().watch("b", None).await?;
    let mut third = client.watch_client();
    let waiting = tokio::time::timeout(Duration::from_secs(1), third.watch("c", None)).await;
    assert!(waiting.is_err(), "a third stream opened beside two");
    // Dropping a stream resets it, which frees its slot.
    drop(first);
    let opened = tokio::time::timeout(Duration::from_secs(5), third.watch("c", None)).await;
    assert!(matches!(opened, Ok(Ok(_))), "the third stream did not open once the first ended");
    Ok(())
}

/// Members on unix sockets only (`unix://` client and peer URLs, as etcd names them: the socket file is
/// the URL's host and path): they elect, replicate, serve etcdctl, and one killed with SIGKILL comes back
/// on the same socket file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_over_unix_sockets_form_a_cluster_and_survive_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster = "u1=unix://u1.peer,u2=unix://u2.peer,u3=unix://u3.peer";
    let args = |n: usize| -> Vec<String> {
        vec![
            format!("--name=u{n}"),
            format!("--listen-client-urls=unix://u{n}.client"),
            format!("--advertise-client-urls=unix://u{n}.client"),
            format!("--listen-peer-urls=unix://u{n}.peer"),
            format!("--initial-advertise-peer-urls=unix://u{n}.peer"),
            format!("--initial-cluster={cluster}"),
        ]
    };
    let binary = ours()?;
    let mut members = Vec::new();
    for n in 1..=3 {
        members.push(Spawned::start(&binary, dir.path(), &args(n), &[])?);
    }
    // The three share the directory's log: all are ready once it says so three times.
    const READY: &str = "ready to serve client requests";
    for member in &mut members {
        member.wait_for_log_count(READY, 3, START_TIMEOUT).await?;
    }
    let endpoint = |n: usize| format!("unix://{}", dir.path().join(format!("u{n}.client")).display());
    assert_eq!(tests::etcdctl::run(&endpoint(1), &["put", "sock", "1"], None).await?.ok()?, "OK\n");
    assert_eq!(tests::etcdctl::run(&endpoint(3), &["get", "sock", "--print-value-only"], None).await?.ok()?, "1\n");
    drop(members.remove(2));
    let mut back = Spawned::start(&binary, dir.path(), &args(3), &[])?;
    back.wait_for_log_count(READY, 4, START_TIMEOUT).await?;
    assert_eq!(tests::etcdctl::run(&endpoint(3), &["get", "sock", "--print-value-only"], None).await?.ok()?, "1\n");
    Ok(())
}

/// `--wal-dir` keeps the Raft log's database on its own path (a disk of its own), and the member keeps its
/// data across a restart; `--listen-client-http-urls` moves the HTTP side (health, gateway) off the client
/// URL, which then serves gRPC only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_dir_and_http_only_client_urls() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let [client, peer, http_port] = free_ports(3)?[..] else { unreachable!("three ports") };
    let args = vec![
        "--name=w1".to_string(),
        "--data-dir=data".into(),
        "--wal-dir=wal".into(),
        format!("--listen-client-urls=http://127.0.0.1:{client}"),
        format!("--advertise-client-urls=http://127.0.0.1:{client}"),
        format!("--listen-client-http-urls=http://127.0.0.1:{http_port}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-cluster=w1=http://127.0.0.1:{peer}"),
    ];
    let mut member = Spawned::start(&ours()?, dir.path(), &args, &[])?;
    member.wait_for_log("ready to serve client requests", START_TIMEOUT).await?;
    let endpoint = format!("127.0.0.1:{client}");
    assert_eq!(tests::etcdctl::run(&endpoint, &["put", "wal", "1"], None).await?.ok()?, "OK\n");
    assert!(std::fs::read_dir(dir.path().join("wal"))?.next().is_some(), "the log's database is in --wal-dir");
    assert!(!dir.path().join("data/member/db").exists(), "and not in the data dir");
    let http_url = format!("http://127.0.0.1:{http_port}");
    assert_eq!(http::get(&http_url, "/health").await?.status, 200);
    let range = http::request(&http_url, "POST", "/v3/kv/range", Some(r#"{"key":"d2Fs"}"#)).await?;
    assert!(range.status == 200 && range.body.contains(r#""value":"MQ==""#), "{range:?}");
    assert_eq!(http::get(&format!("http://127.0.0.1:{client}"), "/health").await?.status, 404, "gRPC only");
    drop(member);
    let mut member = Spawned::start(&ours()?, dir.path(), &args, &[])?;
    // The log file is the first run's too: the restarted member's line is the second.
    member.wait_for_log_count("ready to serve client requests", 2, START_TIMEOUT).await?;
    let value = tests::etcdctl::run(&endpoint, &["get", "wal", "--print-value-only"], None).await?.ok()?;
    assert_eq!(value, "1\n");
    Ok(())
}

/// The gateway under `/v3beta/` as under `/v3/` (etcd 3.4's clients use it), `--host-whitelist` refusing
/// a plain-HTTP request for another host with etcd's 421, and `--cors` echoing an allowed origin only.
/// Passes on etcd 3.4.23 (`KV_TEST_SERVER=etcd`) and ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_paths_host_whitelist_and_cors_answer_as_etcd() -> anyhow::Result<()> {
    let config = tests::MemberConfig {
        extra_args: vec!["--host-whitelist=127.0.0.1,localhost".into(), "--cors=https://ui.example:8443".into()],
        ..tests::MemberConfig::default()
    };
    let member = tests::Member::start_with(config).await?;
    let url = member.client_url();
    member.etcdctl(&["put", "beta", "1"]).await?.ok()?;
    let beta = http::request(&url, "POST", "/v3beta/kv/range", Some(r#"{"key":"YmV0YQ=="}"#)).await?;
    assert!(beta.status == 200 && beta.body.contains(r#""value":"MQ==""#), "{beta:?}");
    let other_host = http::request_with(&url, "GET", "/health", None, &[("Host", "evil.example:2379")]).await?;
    assert_eq!(other_host.status, 421, "{other_host:?}");
    assert!(other_host.body.contains("etcd --host-whitelist \"evil.example\""), "{other_host:?}");
    let allowed = http::request_with(&url, "GET", "/health", None, &[("Origin", "https://ui.example:8443")]).await?;
    assert_eq!(allowed.header("access-control-allow-origin"), Some("https://ui.example:8443"));
    let foreign = http::request_with(&url, "GET", "/health", None, &[("Origin", "https://other.example")]).await?;
    assert_eq!(foreign.header("access-control-allow-origin"), None);
    Ok(())
}

/// etcd 3.6: a peer URL serves the members only; a client RPC sent there is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_rpc_on_a_peer_url_is_refused() -> anyhow::Result<()> {
    let config = tests::MemberConfig { kind: ServerKind::Ours, ..tests::MemberConfig::default() };
    let member = tests::Member::start_with(config).await?;
    member.etcdctl(&["put", "k", "v"]).await?.ok()?;
    let peer = member.peer_url();
    let out = tests::etcdctl::run(&peer, &["--command-timeout=3s", "get", "k"], None).await?;
    assert!(!out.success() && out.stdout.is_empty(), "{out:?}");
    Ok(())
}
