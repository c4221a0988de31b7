//! `--auto-tls` and `--peer-auto-tls`: self-signed certificates the member makes for itself, as etcd
//! does, when no certificate files are given: an ECDSA P-256 key and a certificate for the hosts of its
//! listen URLs, valid for `--self-signed-cert-validity` years, kept in `<data-dir>/fixtures/client` and
//! `<data-dir>/fixtures/peer` and reused on restart. Peers with `--peer-auto-tls` accept each other's
//! self-signed certificates without checking them (etcd's `InsecureSkipVerify`); clients do the same
//! (`etcdctl --insecure-transport=false --insecure-skip-tls-verify`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tracing::info;

/// The certificate and key files of one side, made now or by an earlier run.
pub fn self_signed(dir: &Path, hosts: &[String], validity_years: u32) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert_path.is_file() && key_path.is_file() {
        return Ok((cert_path, key_path));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut params = rcgen::CertificateParams::new(hosts.to_vec()).context("self-signed certificate hosts")?;
    // etcd's subject: the organization only.
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "etcd");
    let (year, month, day) = crate::date::civil_date(SystemTime::now());
    params.not_before = rcgen::date_time_ymd(year, month, day);
    params.not_after = rcgen::date_time_ymd(year + validity_years.max(1) as i32, month, day.min(28));
    params.extended_key_usages =
        vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate().context("generating a key")?;
    let cert = params.self_signed(&key).context("signing the certificate")?;
    std::fs::write(&cert_path, cert.pem()).with_context(|| format!("writing {}", cert_path.display()))?;
    std::fs::write(&key_path, key.serialize_pem()).with_context(|| format!("writing {}", key_path.display()))?;
    info!(cert = %cert_path.display(), key = %key_path.display(), ?hosts, "created a self-signed certificate");
    Ok((cert_path, key_path))
}

/// The hosts of `urls` (for the certificate's names).
pub fn hosts(urls: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = urls
        .iter()
        .filter_map(|u| url::Url::parse(u).ok())
        .filter_map(|u| u.host_str().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string()))
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Accepts any server certificate (peers with `--peer-auto-tls`), still checking the handshake's
/// signatures with the certificate's key.
#[derive(Debug)]
pub struct AnyServerCert(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_urls() {
        let urls =
            ["https://127.0.0.1:2379".to_string(), "https://localhost:2379".into(), "https://127.0.0.1:1".into()];
        assert_eq!(hosts(&urls), ["127.0.0.1", "localhost"]);
    }

    #[test]
    fn a_certificate_is_made_once_and_reused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = self_signed(dir.path(), &["127.0.0.1".into()], 1).expect("made");
        let first = std::fs::read(&cert).expect("cert");
        assert!(std::fs::read_to_string(&key).expect("key").contains("PRIVATE KEY"));
        self_signed(dir.path(), &["127.0.0.1".into()], 1).expect("reused");
        assert_eq!(std::fs::read(&cert).expect("cert"), first);
    }
}
