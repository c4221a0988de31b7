//! TLS with etcd's flags: the `https://` client and peer listeners, and this member's connections to
//! `https://` peers.
//!
//! The rules are etcd's:
//! - an `https://` listen URL needs a certificate and key (`--cert-file`/`--key-file` for clients,
//!   `--peer-cert-file`/`--peer-key-file` for peers), or the member does not start;
//! - `--client-cert-auth` (`--peer-client-cert-auth`) makes the listener require a client certificate
//!   signed by `--trusted-ca-file` (`--peer-trusted-ca-file`); without it no client certificate is asked
//!   for, whatever CA file is given;
//! - a member dials an `https://` peer presenting its peer certificate as client certificate, and
//!   checks the peer's certificate against `--peer-trusted-ca-file` (the system roots when none is given)
//!   and the host of the peer URL.
//!
//! Handshakes are done here (rustls), not by tonic: the client listener rewrites HTTP/2 header blocks
//! ([`crate::authority`]), which must see the decrypted stream.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

mod accept;
pub mod auto;
pub mod names;
pub mod policy;

pub use accept::{accept, TlsConn, TlsConnectInfo};
use names::NameRule;
use policy::TlsPolicy;

/// What an `https://` listener needs: the handshake's configuration and the rule on client certificate
/// names.
#[derive(Clone)]
pub struct TlsListen {
    acceptor: TlsAcceptor,
    rule: NameRule,
}

/// etcd's TLS flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TlsFlags {
    /// Path to the client server TLS cert file.
    #[arg(long, env = "ETCD_CERT_FILE")]
    pub cert_file: Option<PathBuf>,

    /// Path to the client server TLS key file.
    #[arg(long, env = "ETCD_KEY_FILE")]
    pub key_file: Option<PathBuf>,

    /// Enable client cert authentication.
    #[arg(
        long,
        env = "ETCD_CLIENT_CERT_AUTH",
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub client_cert_auth: bool,

    /// Path to the client server TLS trusted CA cert file.
    #[arg(long, env = "ETCD_TRUSTED_CA_FILE")]
    pub trusted_ca_file: Option<PathBuf>,

    /// Path to the peer server TLS cert file.
    #[arg(long, env = "ETCD_PEER_CERT_FILE")]
    pub peer_cert_file: Option<PathBuf>,

    /// Path to the peer server TLS key file.
    #[arg(long, env = "ETCD_PEER_KEY_FILE")]
    pub peer_key_file: Option<PathBuf>,

    /// Enable peer client cert authentication.
    #[arg(
        long,
        env = "ETCD_PEER_CLIENT_CERT_AUTH",
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub peer_client_cert_auth: bool,

    /// Path to the peer server TLS trusted CA file.
    #[arg(long, env = "ETCD_PEER_TRUSTED_CA_FILE")]
    pub peer_trusted_ca_file: Option<PathBuf>,

    /// Path to an explicit peer client TLS cert file otherwise cert file will be used when client auth is
    /// required (etcd dials its own gateway with it; here nothing dials clients, so it is only checked).
    #[arg(long, env = "ETCD_CLIENT_CERT_FILE")]
    pub client_cert_file: Option<PathBuf>,

    /// Path to an explicit peer client TLS key file otherwise key file will be used when client auth is
    /// required.
    #[arg(long, env = "ETCD_CLIENT_KEY_FILE")]
    pub client_key_file: Option<PathBuf>,

    /// Path to the client certificate revocation list file.
    #[arg(long, env = "ETCD_CLIENT_CRL_FILE")]
    pub client_crl_file: Option<PathBuf>,

    /// Comma-separated list of SAN hostnames for client cert authentication.
    #[arg(long, env = "ETCD_CLIENT_CERT_ALLOWED_HOSTNAME", value_delimiter = ',')]
    pub client_cert_allowed_hostname: Vec<String>,

    /// Client TLS using generated certificates.
    #[arg(long, env = "ETCD_AUTO_TLS", default_value = "false", num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = crate::config::boolean::parse_bool)]
    pub auto_tls: bool,

    /// Comma-separated list of allowed CNs for inter-peer TLS authentication.
    #[arg(long, env = "ETCD_PEER_CERT_ALLOWED_CN", value_delimiter = ',')]
    pub peer_cert_allowed_cn: Vec<String>,

    /// Comma-separated list of allowed SAN hostnames for inter-peer TLS authentication.
    #[arg(long, env = "ETCD_PEER_CERT_ALLOWED_HOSTNAME", value_delimiter = ',')]
    pub peer_cert_allowed_hostname: Vec<String>,

    /// Peer TLS using self-generated certificates if --peer-key-file and --peer-cert-file are not provided.
    #[arg(long, env = "ETCD_PEER_AUTO_TLS", default_value = "false", num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, value_parser = crate::config::boolean::parse_bool)]
    pub peer_auto_tls: bool,

    /// Path to an explicit peer client TLS cert file otherwise peer cert file will be used when client auth
    /// is required.
    #[arg(long, env = "ETCD_PEER_CLIENT_CERT_FILE")]
    pub peer_client_cert_file: Option<PathBuf>,

    /// Path to an explicit peer client TLS key file otherwise peer key file will be used when client auth is
    /// required.
    #[arg(long, env = "ETCD_PEER_CLIENT_KEY_FILE")]
    pub peer_client_key_file: Option<PathBuf>,

    /// The validity period of the client and peer certificates that are automatically generated when you
    /// specify --auto-tls and --peer-auto-tls, in years.
    #[arg(long, env = "ETCD_SELF_SIGNED_CERT_VALIDITY", default_value_t = 1)]
    pub self_signed_cert_validity: u32,

    /// Path to the peer certificate revocation list file.
    #[arg(long, env = "ETCD_PEER_CRL_FILE")]
    pub peer_crl_file: Option<PathBuf>,

    /// Comma-separated list of supported TLS cipher suites between client/server and peers (empty: the
    /// library's defaults).
    #[arg(long, env = "ETCD_CIPHER_SUITES", value_delimiter = ',')]
    pub cipher_suites: Vec<String>,

    /// Minimum TLS version supported. Possible values: TLS1.2, TLS1.3.
    #[arg(long, env = "ETCD_TLS_MIN_VERSION", default_value = "TLS1.2")]
    pub tls_min_version: String,

    /// Set by `--peer-auto-tls` once it made the peer certificate: peers' self-signed certificates are
    /// accepted unchecked, as etcd does.
    #[arg(skip)]
    pub peer_trust_any: bool,

    /// Set from `--peer-skip-client-san-verification` (3.5: `--experimental-...`) by the settings.
    #[arg(skip)]
    pub skip_peer_san_check: bool,

    /// Maximum TLS version supported. Possible values: TLS1.2, TLS1.3 (empty: the newest).
    #[arg(long, env = "ETCD_TLS_MAX_VERSION", default_value = "")]
    pub tls_max_version: String,
}

/// The files of one side (clients or peers).
#[derive(Clone, Debug)]
pub struct TlsFiles<'a> {
    cert: Option<&'a Path>,
    key: Option<&'a Path>,
    trusted_ca: Option<&'a Path>,
    client_cert_auth: bool,
    crl: Option<&'a Path>,
    /// The names a client certificate must carry (with client certificate auth only, as in etcd).
    rule: NameRule,
}

impl TlsFlags {
    pub fn client(&self) -> TlsFiles<'_> {
        TlsFiles {
            cert: self.cert_file.as_deref(),
            key: self.key_file.as_deref(),
            trusted_ca: self.trusted_ca_file.as_deref(),
            client_cert_auth: self.client_cert_auth,
            crl: self.client_crl_file.as_deref(),
            rule: NameRule {
                allowed_cn: Vec::new(),
                allowed_hostnames: self.client_cert_allowed_hostname.clone(),
                check_address: false,
            },
        }
    }

    pub fn peer(&self) -> TlsFiles<'_> {
        TlsFiles {
            cert: self.peer_cert_file.as_deref(),
            key: self.peer_key_file.as_deref(),
            trusted_ca: self.peer_trusted_ca_file.as_deref(),
            client_cert_auth: self.peer_client_cert_auth,
            crl: self.peer_crl_file.as_deref(),
            rule: NameRule {
                allowed_cn: self.peer_cert_allowed_cn.clone(),
                allowed_hostnames: self.peer_cert_allowed_hostname.clone(),
                check_address: !self.skip_peer_san_check,
            },
        }
    }

    /// These flags with `--auto-tls` and `--peer-auto-tls` applied: a side with the flag, `https://` URLs
    /// and no certificate files of its own gets self-signed ones in `<data_dir>/fixtures/`.
    pub fn with_auto_tls(&self, data_dir: &Path, client_urls: &[String], peer_urls: &[String]) -> anyhow::Result<Self> {
        let mut flags = self.clone();
        let https = |urls: &[String]| urls.iter().any(|u| is_https(u));
        if self.auto_tls && self.cert_file.is_none() && self.key_file.is_none() && https(client_urls) {
            let (cert, key) = auto::self_signed(
                &data_dir.join("fixtures/client"),
                &auto::hosts(client_urls),
                self.self_signed_cert_validity,
            )?;
            (flags.cert_file, flags.key_file) = (Some(cert), Some(key));
        }
        if self.peer_auto_tls && self.peer_cert_file.is_none() && self.peer_key_file.is_none() && https(peer_urls) {
            let (cert, key) = auto::self_signed(
                &data_dir.join("fixtures/peer"),
                &auto::hosts(peer_urls),
                self.self_signed_cert_validity,
            )?;
            (flags.peer_cert_file, flags.peer_key_file) = (Some(cert), Some(key));
            flags.peer_trust_any = true;
        }
        Ok(flags)
    }

    /// `--cipher-suites`, `--tls-min-version` and `--tls-max-version`, for every listener and dialer.
    pub fn policy(&self) -> anyhow::Result<TlsPolicy> {
        Ok(TlsPolicy::from_flags(&self.cipher_suites, &self.tls_min_version, &self.tls_max_version)?)
    }

    /// The acceptor of the client listener at `url`: `None` for `http://`.
    pub fn client_acceptor(&self, url: &str) -> anyhow::Result<Option<TlsListen>> {
        if !is_https(url) {
            return Ok(None);
        }
        let Some((cert, key)) = self.client().cert_and_key() else {
            bail!("TLS key/cert (--cert-file, --key-file) must be provided for client url {url} with HTTPS scheme");
        };
        // The client port serves plain HTTP next to gRPC (`/health`, `/version`, ...).
        self.client().acceptor(cert, key, &[b"h2", b"http/1.1"], &self.policy()?).map(Some)
    }

    /// The acceptor of the peer listener at `url` (which listens on `addr`): `None` for `http://`.
    pub fn peer_acceptor(&self, url: &str, addr: impl std::fmt::Display) -> anyhow::Result<Option<TlsListen>> {
        if !is_https(url) {
            return Ok(None);
        }
        let Some((cert, key)) = self.peer().cert_and_key() else {
            bail!("cannot listen on TLS for {addr}: KeyFile and CertFile are not presented");
        };
        self.peer().acceptor(cert, key, &[b"h2"], &self.policy()?).map(Some)
    }

    /// The configuration this member dials `https://` peers with.
    pub fn peer_connector(&self) -> anyhow::Result<Arc<ClientConfig>> {
        let files = self.peer();
        let policy = self.policy()?;
        let builder = ClientConfig::builder_with_provider(policy.provider.clone())
            .with_protocol_versions(&policy.versions)
            .context("TLS protocol versions")?;
        let builder = if self.peer_trust_any {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(auto::AnyServerCert(policy.provider.clone())))
        } else {
            builder.with_root_certificates(files.roots()?)
        };
        // --peer-client-cert-file/--peer-client-key-file, when given, are what this member presents as a
        // client; its peer server certificate otherwise.
        let client_pair = self.peer_client_cert_file.as_deref().zip(self.peer_client_key_file.as_deref());
        let mut config = match client_pair.or(files.cert_and_key()) {
            Some((cert, key)) => builder
                .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
                .with_context(|| format!("peer certificate {}", cert.display()))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

impl<'a> TlsFiles<'a> {
    fn cert_and_key(&self) -> Option<(&'a Path, &'a Path)> {
        self.cert.zip(self.key)
    }

    fn acceptor(&self, cert: &Path, key: &Path, alpn: &[&[u8]], policy: &TlsPolicy) -> anyhow::Result<TlsListen> {
        let builder = ServerConfig::builder_with_provider(policy.provider.clone())
            .with_protocol_versions(&policy.versions)
            .context("TLS protocol versions")?;
        let builder = if self.client_cert_auth {
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()?), policy.provider.clone());
            if let Some(path) = self.crl {
                // As etcd: a certificate whose serial the list revokes is refused; one the list says
                // nothing of passes (the CA's own certificate is not checked).
                verifier = verifier
                    .with_crls(read_crls(path)?)
                    .only_check_end_entity_revocation()
                    .allow_unknown_revocation_status();
            }
            let verifier = verifier.build().with_context(|| match self.crl {
                Some(crl) => {
                    format!("the trusted CA file or the CRL file {} is not usable (a version 2 CRL)", crl.display())
                }
                None => "the trusted CA file holds no usable certificate".to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder
            .with_single_cert(read_certs(cert)?, read_key(key)?)
            .with_context(|| format!("certificate {} and key {}", cert.display(), key.display()))?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let rule = if self.client_cert_auth { self.rule.clone() } else { NameRule::default() };
        Ok(TlsListen { acceptor: TlsAcceptor::from(Arc::new(config)), rule })
    }

    /// The trusted CA file's certificates, or the system's roots when none is given (as Go does).
    fn roots(&self) -> anyhow::Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        match self.trusted_ca {
            Some(path) => {
                for cert in read_certs(path)? {
                    roots.add(cert).with_context(|| format!("trusted CA file {}", path.display()))?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    // A malformed system certificate is skipped, as Go skips it.
                    let _ = roots.add(cert);
                }
            }
        }
        Ok(roots)
    }
}

pub fn is_https(url: &str) -> bool {
    url.trim().starts_with("https://")
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<_, _>>())
        .with_context(|| format!("reading certificates from {}", path.display()))?;
    if certs.is_empty() {
        bail!("no certificate found in {}", path.display());
    }
    Ok(certs)
}

fn read_crls(path: &Path) -> anyhow::Result<Vec<CertificateRevocationListDer<'static>>> {
    let crls: Vec<_> = CertificateRevocationListDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<_, _>>())
        .with_context(|| format!("reading certificate revocation lists from {}", path.display()))?;
    if crls.is_empty() {
        bail!("no certificate revocation list found in {}", path.display());
    }
    Ok(crls)
}

fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).with_context(|| format!("reading a private key from {}", path.display()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use std::net::SocketAddr;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        tls: TlsFlags,
    }

    fn parse(args: &[&str]) -> TlsFlags {
        Flags::try_parse_from(std::iter::once("raft-node").chain(args.iter().copied())).expect("valid flags").tls
    }

    #[test]
    fn bool_flags_take_etcds_forms() {
        assert!(!parse(&[]).client_cert_auth);
        assert!(parse(&["--client-cert-auth"]).client_cert_auth);
        assert!(parse(&["--client-cert-auth=true"]).client_cert_auth);
        assert!(!parse(&["--client-cert-auth=false"]).client_cert_auth);
        assert!(parse(&["--peer-client-cert-auth"]).peer_client_cert_auth);
    }

    #[test]
    fn https_listeners_need_a_certificate_and_key_as_in_etcd() {
        let flags = parse(&[]);
        assert!(flags.client_acceptor("http://127.0.0.1:2379").expect("plain").is_none());
        let err = flags.client_acceptor("https://127.0.0.1:2379").err().expect("refused").to_string();
        assert_eq!(
            err,
            "TLS key/cert (--cert-file, --key-file) must be provided for client url https://127.0.0.1:2379 with \
             HTTPS scheme"
        );
        let addr: SocketAddr = "127.0.0.1:2380".parse().expect("addr");
        let err = flags.peer_acceptor("https://127.0.0.1:2380", addr).err().expect("refused").to_string();
        assert_eq!(err, "cannot listen on TLS for 127.0.0.1:2380: KeyFile and CertFile are not presented");
        // A key without its certificate is no pair either.
        let flags = parse(&["--key-file=/nonexistent.key"]);
        assert!(flags.client_acceptor("https://127.0.0.1:2379").is_err());
    }

    #[test]
    fn missing_files_are_named_in_the_error() {
        let flags = parse(&["--cert-file=/nonexistent/server.crt", "--key-file=/nonexistent/server.key"]);
        let err = format!("{:#}", flags.client_acceptor("https://127.0.0.1:2379").err().expect("refused"));
        assert!(err.contains("/nonexistent/server.crt"), "{err}");
    }
}
