//! TLS on every URL (`https://` client and peer URLs, `--client-cert-auth`, `--peer-client-cert-auth`):
//! etcdctl with `--cacert/--cert/--key` works on every member, and is refused without a client
//! certificate or when it does not trust the member's CA. Validated against real etcd with
//! `KV_TEST_SERVER=etcd`.

use tests::server::ServerKind;
use tests::tls::{Certs, TlsCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_with_client_certificates_works_and_without_is_refused() -> anyhow::Result<()> {
    let certs = Certs::make()?;
    let cluster = TlsCluster::start(ServerKind::from_env(), &certs).await?;
    let good = certs.client_flags();

    // A write through one member reaches the others: the peers replicate over TLS.
    let put = cluster.etcdctl(0, &good, &["put", "secure-key", "secure-value"]).await?;
    assert_eq!(put.clone().ok()?, "OK\n", "{put:?}");
    for i in 0..3 {
        let got = cluster.etcdctl(i, &good, &["get", "secure-key", "--print-value-only"]).await?;
        assert_eq!(got.clone().ok()?, "secure-value\n", "member {i}: {got:?}\n{}", cluster.logs());
    }
    // `--cluster` dials every member at its advertised https:// client URL (etcdctl 3.4 prints health
    // on stderr).
    let health = cluster.etcdctl(1, &good, &["endpoint", "health", "--cluster"]).await?;
    assert!(health.success(), "{health:?}");
    let status = health.stderr;
    assert_eq!(status.lines().filter(|line| line.contains("is healthy")).count(), 3, "{status}");
    for i in 0..3 {
        assert!(status.contains(&cluster.endpoint(i)), "{status}");
    }

    let timeout = "--command-timeout=3s".to_string();
    let refused = [
        // No client certificate: the member requires one.
        ("no client certificate", vec![format!("--cacert={}", certs.path("ca.crt")), timeout.clone()]),
        // The member's certificate is not signed by a CA the client trusts.
        (
            "untrusted server",
            vec![
                format!("--cacert={}", certs.path("other-ca.crt")),
                format!("--cert={}", certs.path("client.crt")),
                format!("--key={}", certs.path("client.key")),
                timeout.clone(),
            ],
        ),
    ];
    for (case, flags) in refused {
        let out = cluster.etcdctl(2, &flags, &["get", "secure-key"]).await?;
        assert_eq!(out.code, Some(1), "{case}: {out:?}");
        assert!(out.stdout.is_empty(), "{case}: {out:?}");
    }
    // Plain text to a TLS port is no gRPC connection either.
    let plain = tests::etcdctl::run(
        &cluster.endpoint(0).replace("https://", "http://"),
        &["--command-timeout=3s", "get", "secure-key"],
        None,
    )
    .await?;
    assert_eq!(plain.code, Some(1), "{plain:?}");
    assert!(plain.stdout.is_empty(), "{plain:?}");
    Ok(())
}
