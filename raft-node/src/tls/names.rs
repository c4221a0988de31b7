//! The names in a client certificate, and etcd's rules on them: `--peer-cert-allowed-cn` (the Common
//! Name must be one of the list), `--peer-cert-allowed-hostname` and `--client-cert-allowed-hostname`
//! (a DNS or IP SAN, or the Common Name, must be one of the list).

use std::net::IpAddr;

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// The names a certificate carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertNames {
    pub common_name: Option<String>,
    /// DNS names and IP addresses of the Subject Alternative Name extension.
    pub hosts: Vec<String>,
    /// The IP addresses alone.
    pub ips: Vec<IpAddr>,
}

impl CertNames {
    /// The names of a DER certificate (none of a certificate that does not parse: the handshake verified
    /// it already).
    pub fn of(cert: &CertificateDer<'_>) -> CertNames {
        let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(cert.as_ref()) else {
            return CertNames::default();
        };
        let common_name = cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()).map(str::to_string);
        let (mut hosts, mut ips) = (Vec::new(), Vec::new());
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => hosts.push(dns.to_string()),
                    GeneralName::IPAddress(bytes) => {
                        let ip = match bytes.len() {
                            4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                            16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                            _ => None,
                        };
                        if let Some(ip) = ip {
                            hosts.push(ip.to_string());
                            ips.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
        CertNames { common_name, hosts, ips }
    }

    /// etcd's check of a peer's client certificate against the address it connects from (unless
    /// `--experimental-peer-skip-client-san-verification`): an IP SAN equal to it, or a DNS SAN that
    /// resolves to it; a certificate with neither passes.
    pub async fn check_address(&self, remote: IpAddr) -> Result<(), String> {
        let dns: Vec<&String> = self.hosts.iter().filter(|h| h.parse::<IpAddr>().is_err()).collect();
        if self.ips.contains(&remote) || (self.ips.is_empty() && dns.is_empty()) {
            return Ok(());
        }
        for name in &dns {
            if let Ok(mut addrs) = tokio::net::lookup_host((name.as_str(), 0)).await {
                if addrs.any(|addr| addr.ip() == remote) {
                    return Ok(());
                }
            }
        }
        Err(format!("tls: {remote:?} does not match any of the certificate's addresses {:?}", self.hosts))
    }
}

/// Which client certificates a listener takes, by name (nothing asked: any verified one).
#[derive(Clone, Debug, Default)]
pub struct NameRule {
    pub allowed_cn: Vec<String>,
    pub allowed_hostnames: Vec<String>,
    /// Peers: the certificate must name the address the peer connects from ([`CertNames::check_address`]).
    pub check_address: bool,
}

impl NameRule {
    /// etcd's check of a verified client certificate; `names` is `None` when the client sent none.
    pub fn check(&self, names: Option<&CertNames>) -> Result<(), String> {
        let allowed_cn: Vec<&String> = self.allowed_cn.iter().filter(|cn| !cn.is_empty()).collect();
        let allowed_hosts: Vec<&String> = self.allowed_hostnames.iter().filter(|h| !h.is_empty()).collect();
        if allowed_cn.is_empty() && allowed_hosts.is_empty() {
            return Ok(());
        }
        let Some(names) = names else {
            return Err("a client certificate is required".to_string());
        };
        let cn = names.common_name.as_deref().unwrap_or_default();
        if !allowed_cn.is_empty() && !allowed_cn.iter().any(|allowed| *allowed == cn) {
            return Err(format!("CommonName authentication failed: {cn:?} is not one of {allowed_cn:?}"));
        }
        if !allowed_hosts.is_empty() {
            let matches = |allowed: &&String| names.hosts.iter().any(|h| h == *allowed) || cn == allowed.as_str();
            if !allowed_hosts.iter().any(matches) {
                return Err(format!(
                    "hostname authentication failed: {:?} match none of {allowed_hosts:?}",
                    names.hosts
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(cn: &str, hosts: &[&str]) -> CertNames {
        let ips = hosts.iter().filter_map(|h| h.parse().ok()).collect();
        CertNames { common_name: Some(cn.into()), hosts: hosts.iter().map(|h| h.to_string()).collect(), ips }
    }

    #[test]
    fn allowed_names_are_checked_as_etcd_checks_them() {
        let anything = NameRule::default();
        assert!(anything.check(None).is_ok());
        let cn = NameRule { allowed_cn: vec!["etcd-peer".into()], ..NameRule::default() };
        assert!(cn.check(Some(&names("etcd-peer", &[]))).is_ok());
        assert!(cn.check(Some(&names("intruder", &[]))).is_err());
        assert!(cn.check(None).is_err());
        let host = NameRule { allowed_hostnames: vec!["m1.example".into()], ..NameRule::default() };
        assert!(host.check(Some(&names("x", &["127.0.0.1", "m1.example"]))).is_ok());
        assert!(host.check(Some(&names("m1.example", &[]))).is_ok());
        assert!(host.check(Some(&names("x", &["m2.example"]))).is_err());
    }

    #[tokio::test]
    async fn a_peer_certificate_must_name_the_address_it_comes_from() {
        let local = "127.0.0.1".parse().expect("ip");
        assert!(names("m", &["127.0.0.1"]).check_address(local).await.is_ok());
        assert!(names("m", &["localhost"]).check_address(local).await.is_ok(), "a DNS name resolving to it");
        assert!(names("m", &[]).check_address(local).await.is_ok(), "no SAN at all passes, as in etcd");
        assert!(names("m", &["10.1.2.3"]).check_address(local).await.is_err());
    }
}
