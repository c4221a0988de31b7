//! etcd's TLS policy flags on a real member, checked from the outside with Debian's `openssl s_client`,
//! `curl` and `etcdctl`: a revoked client certificate refused through `--client-crl-file`, a peer whose
//! certificate names another CN refused by `--peer-cert-allowed-cn`, `--cipher-suites` and
//! `--tls-max-version` honoured, and the client certificate's Common Name taken as the user.

use std::process::Stdio;
use std::time::Duration;

use tests::spawned::{free_ports, Spawned};
use tests::tls::{member_tls_flags, Certs};
use tests::ServerKind;

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One member with TLS on its client and peer URLs, certificate auth on both, and `extra` flags.
async fn tls_member(certs: &Certs, extra: &[String]) -> anyhow::Result<(Spawned, tempfile::TempDir, u16, u16)> {
    let dir = tempfile::tempdir()?;
    let [client, peer] = free_ports(2)?[..] else { unreachable!("two ports") };
    let mut args = vec![
        "--name=m1".to_string(),
        format!("--listen-client-urls=https://127.0.0.1:{client}"),
        format!("--advertise-client-urls=https://127.0.0.1:{client}"),
        format!("--listen-peer-urls=https://127.0.0.1:{peer}"),
        format!("--initial-advertise-peer-urls=https://127.0.0.1:{peer}"),
        format!("--initial-cluster=m1=https://127.0.0.1:{peer}"),
    ];
    args.extend(member_tls_flags(certs));
    args.extend(extra.iter().cloned());
    let mut member = Spawned::start(&ServerKind::Ours.binary()?, dir.path(), &args, &[])?;
    member.wait_for_log("ready to serve client requests", START_TIMEOUT).await?;
    Ok((member, dir, client, peer))
}

async fn etcdctl(certs: &Certs, client: u16, cert: &str, args: &[&str]) -> anyhow::Result<tests::CtlOutput> {
    let mut all = vec![
        format!("--cacert={}", certs.path("ca.crt")),
        format!("--cert={}", certs.path(&format!("{cert}.crt"))),
        format!("--key={}", certs.path(&format!("{cert}.key"))),
        "--dial-timeout=2s".to_string(),
        "--command-timeout=3s".to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    tests::etcdctl::run(&format!("https://127.0.0.1:{client}"), &all, None).await
}

/// Whether curl, presenting the member certificate, gets an HTTP/2 answer from the port.
async fn curl_h2(certs: &Certs, port: u16) -> anyhow::Result<bool> {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--http2", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}"])
        .args([
            "--cacert",
            &certs.path("ca.crt"),
            "--cert",
            &certs.path("member.crt"),
            "--key",
            &certs.path("member.key"),
        ])
        .arg(format!("https://127.0.0.1:{port}/"))
        .output()
        .await?;
    Ok(out.status.success())
}

/// Whether `openssl s_client` with `options` completes a handshake with the port.
async fn handshake(certs: &Certs, port: u16, options: &[&str]) -> anyhow::Result<bool> {
    let out = tokio::process::Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-CAfile", &certs.path("ca.crt")])
        .args(["-cert", &certs.path("client.crt"), "-key", &certs.path("client.key")])
        .args(options)
        .stdin(Stdio::null())
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(out.status.success() && text.contains("Verify return code: 0 (ok)") && !text.contains("Cipher is (NONE)"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_client_certificate_is_refused() -> anyhow::Result<()> {
    let certs = Certs::make()?;
    let crl = certs.revoke_client()?;
    let (member, _dir, client, _) = tls_member(&certs, &[format!("--client-crl-file={crl}")]).await?;
    let revoked = etcdctl(&certs, client, "client", &["put", "k", "v"]).await?;
    assert!(!revoked.success(), "the revoked certificate wrote: {revoked:?}");
    // The member certificate is not on the list.
    assert_eq!(etcdctl(&certs, client, "member", &["put", "k", "v"]).await?.ok()?, "OK\n");
    assert!(member.log().contains("rejected connection"), "{}", member.log());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_certificate_names_another_cn_is_refused() -> anyhow::Result<()> {
    let certs = Certs::make()?;
    // The member certificate's CN is "member".
    let (mut refusing, _dir, _, peer) = tls_member(&certs, &["--peer-cert-allowed-cn=etcd-peer".to_string()]).await?;
    assert!(!curl_h2(&certs, peer).await?, "a peer with CN member got through");
    refusing.wait_for_log("CommonName authentication failed", Duration::from_secs(5)).await?;
    let (_accepting, _dir2, _, peer) = tls_member(&certs, &["--peer-cert-allowed-cn=member".to_string()]).await?;
    assert!(curl_h2(&certs, peer).await?, "the allowed CN was refused");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cipher_suites_and_the_maximum_version_are_honoured() -> anyhow::Result<()> {
    let certs = Certs::make()?;
    let flags =
        ["--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".to_string(), "--tls-max-version=TLS1.2".into()];
    let (_member, _dir, client, _) = tls_member(&certs, &flags).await?;
    assert!(handshake(&certs, client, &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"]).await?);
    assert!(
        !handshake(&certs, client, &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"]).await?,
        "a suite not listed"
    );
    assert!(!handshake(&certs, client, &["-tls1_3"]).await?, "TLS 1.3 above --tls-max-version");
    // And a bad name stops the member with etcd's error.
    let dir = tempfile::tempdir()?;
    let mut bad = Spawned::start(&ServerKind::Ours.binary()?, dir.path(), &["--cipher-suites=TLS_BOGUS".into()], &[])?;
    assert_eq!(bad.wait_exit(Duration::from_secs(10)).await?, Some(1));
    assert!(bad.log().contains("unexpected TLS cipher suite \"TLS_BOGUS\""), "{}", bad.log());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificates_common_name_is_the_user_without_a_token() -> anyhow::Result<()> {
    let certs = Certs::make()?;
    let (_member, _dir, client, _) = tls_member(&certs, &[]).await?;
    // The client certificate's CN is "client": a user that may read cn/ only.
    for args in [
        &["user", "add", "root:rootpw"][..],
        &["user", "add", "client:clientpw"],
        &["role", "add", "cn-reader"],
        &["role", "grant-permission", "cn-reader", "read", "cn/", "--prefix"],
        &["user", "grant-role", "client", "cn-reader"],
        &["put", "cn/a", "1"],
        &["auth", "enable"],
    ] {
        // Auth is off until the last step: no user needed yet.
        let out = etcdctl(&certs, client, "client", args).await?;
        assert!(out.success(), "{args:?}: {out:?}");
    }
    assert_eq!(etcdctl(&certs, client, "client", &["get", "cn/a", "--print-value-only"]).await?.ok()?, "1\n");
    let denied = etcdctl(&certs, client, "client", &["put", "cn/a", "2"]).await?;
    assert_eq!(denied.error_line(), Some("Error: etcdserver: permission denied"), "{denied:?}");
    // The member certificate's CN ("member") is no user.
    let unknown = etcdctl(&certs, client, "member", &["get", "cn/a"]).await?;
    assert_eq!(unknown.error_line(), Some("Error: etcdserver: permission denied"), "{unknown:?}");
    // Through the JSON gateway too (base64 of "cn/a"), with the certificate and no token.
    let gateway = |body: &'static str, path: &'static str| {
        let (ca, cert, key) = (certs.path("ca.crt"), certs.path("client.crt"), certs.path("client.key"));
        async move {
            let out = tokio::process::Command::new("curl")
                .args(["-sS", "--max-time", "5", "--cacert", &ca, "--cert", &cert, "--key", &key, "-d", body])
                .arg(format!("https://127.0.0.1:{client}{path}"))
                .output()
                .await?;
            anyhow::Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    let read = gateway(r#"{"key":"Y24vYQ=="}"#, "/v3/kv/range").await?;
    assert!(read.contains(r#""value":"MQ==""#), "{read}");
    let write = gateway(r#"{"key":"Y24vYQ==","value":"Mg=="}"#, "/v3/kv/put").await?;
    assert!(write.contains("etcdserver: permission denied"), "{write}");
    Ok(())
}

/// `--auto-tls` and `--peer-auto-tls`: three members with no certificate files serve TLS on every URL
/// with certificates they made in their data dirs, replicate to each other over it, and etcdctl talks to
/// them with `--insecure-transport=false --insecure-skip-tls-verify`, as with etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_tls_members_make_their_certificates_and_use_them_between_peers() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ports = free_ports(6)?;
    let url = |port: u16| format!("https://127.0.0.1:{port}");
    let cluster: Vec<String> = (0..3).map(|i| format!("a{i}={}", url(ports[3 + i]))).collect();
    let mut members = Vec::new();
    for i in 0..3 {
        let args = vec![
            format!("--name=a{i}"),
            format!("--data-dir=a{i}.etcd"),
            format!("--listen-client-urls={}", url(ports[i])),
            format!("--advertise-client-urls={}", url(ports[i])),
            format!("--listen-peer-urls={}", url(ports[3 + i])),
            format!("--initial-advertise-peer-urls={}", url(ports[3 + i])),
            format!("--initial-cluster={}", cluster.join(",")),
            "--auto-tls".into(),
            "--peer-auto-tls".into(),
        ];
        let member_dir = dir.path().join(format!("m{i}"));
        std::fs::create_dir_all(&member_dir)?;
        members.push(Spawned::start(&ServerKind::Ours.binary()?, &member_dir, &args, &[])?);
    }
    for member in &mut members {
        member.wait_for_log("ready to serve client requests", START_TIMEOUT).await?;
    }
    let ctl = |i: usize, args: &'static [&'static str]| {
        let endpoint = url(ports[i]);
        async move {
            let mut all = vec!["--insecure-transport=false", "--insecure-skip-tls-verify", "--dial-timeout=3s"];
            all.extend_from_slice(args);
            tests::etcdctl::run(&endpoint, &all, None).await
        }
    };
    assert_eq!(ctl(0, &["put", "auto", "tls"]).await?.ok()?, "OK\n");
    assert_eq!(ctl(2, &["get", "auto", "--print-value-only"]).await?.ok()?, "tls\n");
    for (i, member) in members.iter().enumerate() {
        for side in ["client", "peer"] {
            let cert = member.dir().join(format!("a{i}.etcd/fixtures/{side}/cert.pem"));
            assert!(cert.is_file(), "{} missing", cert.display());
        }
    }
    // Without the flag to skip verification, the self-signed certificate is refused by etcdctl.
    let args = ["--insecure-transport=false", "--dial-timeout=2s", "get", "auto"];
    let checked = tests::etcdctl::run(&url(ports[1]), &args, None).await?;
    assert!(!checked.success(), "{checked:?}");
    Ok(())
}
