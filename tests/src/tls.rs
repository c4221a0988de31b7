//! TLS for tests: certificates made with `openssl`, and a three-member cluster whose client and peer
//! URLs are all `https://` with etcd's TLS flags.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::etcdctl::{self, CtlOutput};
use crate::process::{self, free_ports};
use crate::server::ServerKind;

/// A CA, a member certificate for 127.0.0.1 (usable as server and as client certificate, as peers need)
/// and a client certificate, all signed by the CA; and a second CA that signed nothing here.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    /// Makes the certificates, or says why `openssl` could not.
    pub fn make() -> anyhow::Result<Certs> {
        let dir = tempfile::tempdir()?;
        let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
        let steps = [
            format!("openssl req -x509 {key} -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca"),
            format!("openssl req -x509 {key} -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca"),
            format!("openssl req {key} -keyout member.key -out member.csr -subj /CN=member"),
            "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > member.ext".into(),
            "openssl x509 -req -in member.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out member.crt -days 2 \
             -extfile member.ext"
                .into(),
            format!("openssl req {key} -keyout client.key -out client.csr -subj /CN=client"),
            "printf 'extendedKeyUsage=clientAuth\\n' > client.ext".into(),
            "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 \
             -extfile client.ext"
                .into(),
        ];
        for step in steps {
            let out = Command::new("sh").arg("-c").arg(&step).current_dir(dir.path()).output().context("run sh")?;
            if !out.status.success() {
                bail!("{step}: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
        Ok(Certs { dir })
    }

    /// A certificate revocation list from the CA that revokes `client.crt` (`crl.pem`), made with
    /// `openssl ca`; answers its path.
    pub fn revoke_client(&self) -> anyhow::Result<String> {
        let config = "[ca]\ndefault_ca = ca_default\n[ca_default]\ndatabase = index.txt\ndefault_md = sha256\n\
                      default_crl_days = 2\ncrlnumber = crlnumber\n";
        std::fs::write(self.dir.path().join("ca.cnf"), config)?;
        std::fs::write(self.dir.path().join("index.txt"), "")?;
        // With a CRL number the list is a version 2 CRL, as CAs write them.
        std::fs::write(self.dir.path().join("crlnumber"), "01\n")?;
        let steps = [
            "openssl ca -config ca.cnf -keyfile ca.key -cert ca.crt -revoke client.crt",
            "openssl ca -config ca.cnf -keyfile ca.key -cert ca.crt -gencrl -out crl.pem",
        ];
        for step in steps {
            let out = Command::new("sh").arg("-c").arg(step).current_dir(self.dir.path()).output().context("run sh")?;
            if !out.status.success() {
                bail!("{step}: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
        Ok(self.path("crl.pem"))
    }

    /// The path of one of the files: `ca.crt`, `other-ca.crt`, `member.crt`, `member.key`, `client.crt`,
    /// `client.key`.
    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// etcdctl's flags for a client with the client certificate.
    pub fn client_flags(&self) -> Vec<String> {
        vec![
            format!("--cacert={}", self.path("ca.crt")),
            format!("--cert={}", self.path("client.crt")),
            format!("--key={}", self.path("client.key")),
        ]
    }
}

/// Three members with `https://` client and peer URLs, `--client-cert-auth` and `--peer-client-cert-auth`,
/// killed on drop.
pub struct TlsCluster {
    children: Vec<Child>,
    client_ports: Vec<u16>,
    dir: tempfile::TempDir,
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl TlsCluster {
    /// Starts the members and waits until a put through the first one succeeds.
    pub async fn start(kind: ServerKind, certs: &Certs) -> anyhow::Result<TlsCluster> {
        let dir = tempfile::Builder::new().prefix("kv-tls-").tempdir()?;
        let ports = free_ports(6)?;
        let (client_ports, peer_ports) = (ports[..3].to_vec(), ports[3..].to_vec());
        let https = |port: u16| process::url(port).replace("http://", "https://");
        let initial_cluster =
            (0..3).map(|i| format!("n{}={}", i + 1, https(peer_ports[i]))).collect::<Vec<_>>().join(",");
        let token = format!("tls-{}", ports[0]);
        let mut cluster = TlsCluster { children: Vec::new(), client_ports: client_ports.clone(), dir };
        for i in 0..3 {
            let name = format!("n{}", i + 1);
            let log = process::open_append(&cluster.dir.path().join(format!("{name}.log")))?;
            let child = Command::new(kind.binary()?)
                .arg(format!("--name={name}"))
                .arg(format!("--data-dir={}", cluster.dir.path().join(&name).display()))
                .arg(format!("--listen-client-urls={}", https(client_ports[i])))
                .arg(format!("--advertise-client-urls={}", https(client_ports[i])))
                .arg(format!("--listen-peer-urls={}", https(peer_ports[i])))
                .arg(format!("--initial-advertise-peer-urls={}", https(peer_ports[i])))
                .arg(format!("--initial-cluster={initial_cluster}"))
                .arg(format!("--initial-cluster-token={token}"))
                .args(member_tls_flags(certs))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("spawn member")?;
            cluster.children.push(child);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = cluster.etcdctl(0, &certs.client_flags(), &["put", "tls-probe", "1"]).await?;
            if out.success() {
                return Ok(cluster);
            }
            if Instant::now() > deadline {
                bail!("the TLS cluster did not serve a put in 30 s: {out:?}\n{}", cluster.logs());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `https://127.0.0.1:<client port>` of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        process::url(self.client_ports[i]).replace("http://", "https://")
    }

    /// Runs etcdctl against member `i` with `flags` (TLS flags) then `args`.
    pub async fn etcdctl(&self, i: usize, flags: &[String], args: &[&str]) -> anyhow::Result<CtlOutput> {
        let all: Vec<&str> = flags.iter().map(String::as_str).chain(args.iter().copied()).collect();
        etcdctl::run(&self.endpoint(i), &all, None).await
    }

    /// Every member's log, for failure messages.
    pub fn logs(&self) -> String {
        (1..=3)
            .map(|i| {
                let path = self.dir.path().join(format!("n{i}.log"));
                format!("--- n{i}\n{}", process::tail(&std::fs::read_to_string(path).unwrap_or_default(), 20))
            })
            .collect()
    }
}

/// The TLS flags of a member with client and peer certificate auth, as the TLS cluster and kubeadm set them.
pub fn member_tls_flags(certs: &Certs) -> Vec<String> {
    let file = |flag: &str, name: &str| format!("--{flag}={}", certs.path(name));
    vec![
        file("cert-file", "member.crt"),
        file("key-file", "member.key"),
        file("trusted-ca-file", "ca.crt"),
        "--client-cert-auth".into(),
        file("peer-cert-file", "member.crt"),
        file("peer-key-file", "member.key"),
        file("peer-trusted-ca-file", "ca.crt"),
        "--peer-client-cert-auth".into(),
    ]
}
