//! Liveness after heal: once every fault is healed, a write succeeds within a bounded time (Jepsen's
//! final generator, etcd robustness' post-failpoint health check).
//!
//! The runner keeps trying a write (each attempt bounded by the op timeout, never retried inside
//! the client) from the moment of heal and passes the time of the first success here.

use std::time::Duration;

use crate::checker::{Anomaly, AnomalyKind, CheckResult};

/// `first_ok` is how long after heal the first write succeeded, `None` when none did within
/// `window`.
pub fn check(first_ok: Option<Duration>, window: Duration) -> CheckResult {
    let anomalies = match first_ok {
        Some(after) if after <= window => Vec::new(),
        Some(after) => vec![Anomaly::new(
            AnomalyKind::NotLive,
            format!(
                "the first write after heal succeeded only after {:.1} s (allowed {:.1} s)",
                secs(after),
                secs(window)
            ),
        )],
        None => {
            vec![Anomaly::new(AnomalyKind::NotLive, format!("no write succeeded within {:.1} s of heal", secs(window)))]
        }
    };
    CheckResult::from_anomalies("liveness", anomalies)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Validity;

    #[test]
    fn table() {
        let window = Duration::from_secs(10);
        let cases = [
            (Some(Duration::from_millis(300)), Validity::Valid, ""),
            (Some(Duration::from_secs(10)), Validity::Valid, ""),
            (Some(Duration::from_secs(12)), Validity::Invalid, "only after 12.0 s (allowed 10.0 s)"),
            (None, Validity::Invalid, "no write succeeded within 10.0 s of heal"),
        ];
        for (first_ok, want, text) in cases {
            let result = check(first_ok, window);
            assert_eq!(result.valid, want, "{result}");
            assert!(result.anomalies.iter().all(|a| a.description.contains(text)), "{result}");
        }
    }
}
