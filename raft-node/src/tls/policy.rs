//! etcd's TLS policy flags: `--cipher-suites`, `--tls-min-version` and `--tls-max-version`, turned into
//! a rustls crypto provider and protocol versions, with etcd's errors for names and combinations it
//! refuses.

use std::sync::Arc;

use rustls::crypto::{ring, CryptoProvider};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

/// Go's names of the TLS 1.2 suites this member can offer (ring's), each with its suite.
fn tls12_suites() -> [(&'static [&'static str], SupportedCipherSuite); 6] {
    use ring::cipher_suite as s;
    [
        (&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"], s::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
        (&["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"], s::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
        (
            &["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"],
            s::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
        (&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"], s::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
        (&["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"], s::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
        (
            &["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"],
            s::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
    ]
}

/// Suites Go knows and etcd would take, but that this member does not offer (CBC, RSA key exchange,
/// 3DES, RC4), and the TLS 1.3 suites (not configurable in Go either).
const KNOWN_ELSEWHERE: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// A TLS policy flag the member cannot start with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("unexpected TLS cipher suite {0:?}")]
    UnknownSuite(String),
    #[error("TLS cipher suite {0:?} is not offered here (only ECDHE with AES-GCM or ChaCha20-Poly1305)")]
    SuiteNotOffered(String),
    #[error("unexpected TLS version {0:?} (supported: TLS1.2, TLS1.3)")]
    UnknownVersion(String),
    #[error("TLS version {0:?} is not supported here (TLS1.2 is the oldest)")]
    VersionTooOld(String),
    #[error("--tls-min-version {min} is above --tls-max-version {max}")]
    MinAboveMax { min: String, max: String },
    #[error("cipher suites cannot be configured when only TLS1.3 is enabled")]
    SuitesWithTls13Only,
}

/// What every listener and dialer of this member uses: the provider (with the chosen TLS 1.2 suites)
/// and the protocol versions.
#[derive(Clone, Debug)]
pub struct TlsPolicy {
    pub provider: Arc<CryptoProvider>,
    pub versions: Vec<&'static SupportedProtocolVersion>,
}

impl Default for TlsPolicy {
    fn default() -> Self {
        TlsPolicy { provider: Arc::new(ring::default_provider()), versions: rustls::DEFAULT_VERSIONS.to_vec() }
    }
}

/// A version flag: 12 or 13 (empty: `default`).
fn version(text: &str, default: u8) -> Result<u8, PolicyError> {
    match text {
        "" => Ok(default),
        "TLS1.2" => Ok(12),
        "TLS1.3" => Ok(13),
        "TLS1.0" | "TLS1.1" => Err(PolicyError::VersionTooOld(text.to_string())),
        other => Err(PolicyError::UnknownVersion(other.to_string())),
    }
}

impl TlsPolicy {
    pub fn from_flags(cipher_suites: &[String], min: &str, max: &str) -> Result<TlsPolicy, PolicyError> {
        let (low, high) = (version(min, 12)?, version(max, 13)?);
        if low > high {
            return Err(PolicyError::MinAboveMax { min: min.to_string(), max: max.to_string() });
        }
        let names: Vec<&str> = cipher_suites.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
        if !names.is_empty() && low == 13 {
            return Err(PolicyError::SuitesWithTls13Only);
        }
        let mut provider = ring::default_provider();
        if !names.is_empty() {
            let known = tls12_suites();
            let mut chosen: Vec<SupportedCipherSuite> = provider
                .cipher_suites
                .iter()
                .filter(|suite| suite.version() == &rustls::version::TLS13)
                .copied()
                .collect();
            for name in names {
                match known.iter().find(|(aliases, _)| aliases.contains(&name)) {
                    Some((_, suite)) if !chosen.contains(suite) => chosen.push(*suite),
                    Some(_) => {}
                    None if KNOWN_ELSEWHERE.contains(&name)
                        || name.starts_with("TLS_AES_")
                        || name.starts_with("TLS_CHACHA20_") =>
                    {
                        return Err(PolicyError::SuiteNotOffered(name.to_string()));
                    }
                    None => return Err(PolicyError::UnknownSuite(name.to_string())),
                }
            }
            provider.cipher_suites = chosen;
        }
        let versions = [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (low..=high).contains(v))
            .map(|(_, version)| version)
            .collect();
        Ok(TlsPolicy { provider: Arc::new(provider), versions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(policy: &TlsPolicy) -> Vec<String> {
        policy.provider.cipher_suites.iter().map(|s| format!("{:?}", s.suite())).collect()
    }

    #[test]
    fn suites_and_versions_follow_the_flags() {
        let default = TlsPolicy::from_flags(&[], "TLS1.2", "").expect("defaults");
        assert_eq!(default.versions.len(), 2);
        let one = TlsPolicy::from_flags(&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into()], "TLS1.2", "TLS1.2")
            .expect("one suite");
        assert_eq!(one.versions, vec![&rustls::version::TLS12]);
        let tls12: Vec<String> = names(&one).into_iter().filter(|n| !n.starts_with("TLS13")).collect();
        assert_eq!(tls12, ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]);
        let err = TlsPolicy::from_flags(&["TLS_BOGUS".into()], "", "").expect_err("unknown");
        assert_eq!(err.to_string(), "unexpected TLS cipher suite \"TLS_BOGUS\"");
        assert!(matches!(
            TlsPolicy::from_flags(&["TLS_RSA_WITH_AES_128_CBC_SHA".into()], "", ""),
            Err(PolicyError::SuiteNotOffered(_))
        ));
        assert!(matches!(
            TlsPolicy::from_flags(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()], "TLS1.3", ""),
            Err(PolicyError::SuitesWithTls13Only)
        ));
        assert!(matches!(TlsPolicy::from_flags(&[], "TLS1.3", "TLS1.2"), Err(PolicyError::MinAboveMax { .. })));
        assert!(matches!(TlsPolicy::from_flags(&[], "TLS1.0", ""), Err(PolicyError::VersionTooOld(_))));
    }
}
