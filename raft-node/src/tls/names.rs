//! The names in a client certificate, and etcd's rules on them: `--peer-cert-allowed-cn` (the Common
//! Name must be one of the list), `--peer-cert-allowed-hostname` and `--client-cert-allowed-hostname`
//! (a DNS or IP SAN, or the Common Name, must be one of the list).

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// The names a certificate carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertNames {
    pub common_name: Option<String>,
    /// DNS names and IP addresses of the Subject Alternative Name extension.
    pub hosts: Vec<String>,
}

impl CertNames {
    /// The names of a DER certificate (none of a certificate that does not parse: the handshake verified
    /// it already).
    pub fn of(cert: &CertificateDer<'_>) -> CertNames {
        let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(cert.as_ref()) else {
            return CertNames::default();
        };
        let common_name = cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()).map(str::to_string);
        let mut hosts = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => hosts.push(dns.to_string()),
                    GeneralName::IPAddress(ip) => match ip.len() {
                        4 => hosts
                            .push(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap_or_default()).to_string()),
                        16 => hosts
                            .push(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap_or_default()).to_string()),
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        CertNames { common_name, hosts }
    }
}

/// Which client certificates a listener takes, by name (nothing asked: any verified one).
#[derive(Clone, Debug, Default)]
pub struct NameRule {
    pub allowed_cn: Vec<String>,
    pub allowed_hostnames: Vec<String>,
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
        CertNames { common_name: Some(cn.into()), hosts: hosts.iter().map(|h| h.to_string()).collect() }
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
}
