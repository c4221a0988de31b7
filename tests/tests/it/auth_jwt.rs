//! `--auth-token jwt,...`: a token signed by the member that logged the user in is accepted by every
//! other member, including one restarted since (nothing is shared but the public key), carries etcd's
//! claims, and a token whose claims were changed is refused. Passes on etcd 3.4.23 (`KV_TEST_SERVER=etcd`)
//! and ours.

use anyhow::Context;
use base64::Engine;
use tests::http::request_with;
use tests::{Cluster, ClusterConfig};

/// An RSA key pair made with openssl; answers the directory holding `priv.pem` and `pub.pem`.
fn rsa_keys() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for step in ["openssl genrsa -out priv.pem 2048", "openssl rsa -in priv.pem -pubout -out pub.pem"] {
        let out = std::process::Command::new("sh").arg("-c").arg(step).current_dir(dir.path()).output()?;
        anyhow::ensure!(out.status.success(), "{step}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(dir)
}

fn claims(token: &str) -> anyhow::Result<serde_json::Value> {
    let payload = token.split('.').nth(1).context("a JWT has three parts")?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload)?;
    Ok(serde_json::from_slice(&bytes)?)
}

#[tokio::test]
async fn a_jwt_from_one_member_is_accepted_by_every_other_even_after_a_restart() -> anyhow::Result<()> {
    let keys = rsa_keys()?;
    let flag = format!(
        "--auth-token=jwt,pub-key={},priv-key={},sign-method=RS256,ttl=10m",
        keys.path().join("pub.pem").display(),
        keys.path().join("priv.pem").display()
    );
    let mut config = ClusterConfig::new(3);
    config.extra_args = vec![flag];
    let mut cluster = Cluster::start_with(config).await?;
    cluster.leader().await?;
    for args in [&["user", "add", "root:rootpw"][..], &["auth", "enable"]] {
        let out = cluster.member(0).etcdctl(args).await?;
        anyhow::ensure!(out.success(), "{args:?}: {out:?}");
    }
    let login = r#"{"name":"root","password":"rootpw"}"#;
    let answer =
        request_with(&cluster.member(0).client_url(), "POST", "/v3/auth/authenticate", Some(login), &[]).await?;
    assert_eq!(answer.status, 200, "{answer:?}");
    let token =
        serde_json::from_str::<serde_json::Value>(&answer.body)?["token"].as_str().context("token")?.to_string();
    let claims = claims(&token)?;
    assert_eq!(claims["username"], "root", "{claims}");
    assert!(claims["revision"].is_u64() && claims["exp"].is_u64(), "{claims}");

    // base64 of "jwt" and "ok".
    let put = r#"{"key":"and0","value":"b2s="}"#;
    cluster.set_credentials("root", "rootpw");
    cluster.member_mut(2).kill9()?;
    cluster.member_mut(2).restart().await?;
    for member in [1, 2] {
        let url = cluster.member(member).client_url();
        let written = request_with(&url, "POST", "/v3/kv/put", Some(put), &[("Authorization", &token)]).await?;
        assert_eq!(written.status, 200, "member {member}: {written:?}");
    }
    // The same claims under a user the signature does not cover.
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    let forged = claims.to_string().replace("\"root\"", "\"mallory\"");
    parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged);
    let forged = parts.join(".");
    let url = cluster.member(1).client_url();
    let refused = request_with(&url, "POST", "/v3/kv/put", Some(put), &[("Authorization", &forged)]).await?;
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(refused.body.contains("etcdserver: invalid auth token"), "{refused:?}");
    Ok(())
}
