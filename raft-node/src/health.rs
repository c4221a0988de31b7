//! etcd 3.6's `/livez` and `/readyz` (also on the metrics URLs): named checks, each also at its own
//! sub-path (`/readyz/linearizable_read`), `?exclude=NAME` (repeatable; an unknown name is only logged),
//! `?verbose` for the per-check lines on success, GET only.
//!
//! - `/livez` runs `serializable_read`: a local read. A member cut off from its quorum stays live
//!   (restarting it cannot bring the quorum back).
//! - `/readyz` runs `data_corruption` (no CORRUPT alarm), `serializable_read`, `linearizable_read` (a
//!   read index round with the leader) and `non_learner`. NOSPACE is not checked: a full member still
//!   serves reads and deletes.
//!
//! Success is `200 ok`; failure is `503` with one `[-]NAME failed: REASON` line per check (and `[+]NAME
//! ok` for the others). Each run is counted in `etcd_server_healthcheck` and
//! `etcd_server_healthchecks_total`.

use std::time::Duration;

use kv_api::Consensus;
use kv_api::SharedStore;
use proto::etcdserverpb as pb;
use tracing::warn;

use crate::consensus::RaftConsensus;
use crate::metrics::metrics;

/// How long the linearizable read may take before the check fails (etcd bounds it by the probe's own
/// timeout; kubelet's is longer than this).
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// Which endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Livez,
    Readyz,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Livez => "livez",
            Kind::Readyz => "readyz",
        }
    }

    fn checks(self) -> &'static [&'static str] {
        match self {
            Kind::Livez => &["serializable_read"],
            Kind::Readyz => &["data_corruption", "serializable_read", "linearizable_read", "non_learner"],
        }
    }
}

/// A request for `/livez...` or `/readyz...`, read from its path and query.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: Kind,
    checks: Vec<&'static str>,
    pub verbose: bool,
}

impl Request {
    /// The health request a path stands for, if it is one (`None` for other paths and unknown checks).
    pub fn parse(path: &str, query: Option<&str>) -> Option<Request> {
        let (root, check) = match path.strip_prefix('/')?.split_once('/') {
            Some((root, check)) => (root, Some(check)),
            None => (path.strip_prefix('/')?, None),
        };
        let kind = match root {
            "livez" => Kind::Livez,
            "readyz" => Kind::Readyz,
            _ => return None,
        };
        let pairs: Vec<(&str, &str)> = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        let verbose = pairs.iter().any(|(key, _)| *key == "verbose");
        let checks = match check {
            Some(name) => vec![*kind.checks().iter().find(|c| **c == name)?],
            None => {
                let excluded: Vec<&str> = pairs.iter().filter(|(k, _)| *k == "exclude").map(|(_, v)| *v).collect();
                let unknown: Vec<&&str> = excluded.iter().filter(|name| !kind.checks().contains(name)).collect();
                if !unknown.is_empty() {
                    warn!(missing_health_checks = ?unknown, "some health checks cannot be excluded");
                }
                kind.checks().iter().copied().filter(|c| !excluded.contains(c)).collect()
            }
        };
        Some(Request { kind, checks, verbose })
    }

    /// Runs the checks: whether all passed, and one line per check.
    pub async fn run(&self, consensus: &RaftConsensus, store: &SharedStore) -> (bool, String) {
        let mut healthy = true;
        let mut lines = String::new();
        for name in &self.checks {
            let outcome = check(name, consensus, store).await;
            metrics().record_health_check(self.kind.name(), name, outcome.is_ok());
            match outcome {
                Ok(()) => lines.push_str(&format!("[+]{name} ok\n")),
                Err(reason) => {
                    healthy = false;
                    lines.push_str(&format!("[-]{name} failed: {reason}\n"));
                }
            }
        }
        (healthy, lines)
    }
}

async fn check(name: &str, consensus: &RaftConsensus, store: &SharedStore) -> Result<(), String> {
    match name {
        "data_corruption" => match store.read().alarms().get(pb::AlarmType::Corrupt as i32).is_empty() {
            true => Ok(()),
            false => Err("alarm activated: CORRUPT".to_string()),
        },
        "serializable_read" => local_read(store),
        "linearizable_read" => match tokio::time::timeout(READ_TIMEOUT, consensus.read_barrier()).await {
            Ok(Ok(())) => local_read(store),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err(kv_api::Error::Timeout.to_string()),
        },
        "non_learner" => match consensus.is_learner() {
            true => Err("not supported for learner".to_string()),
            false => Ok(()),
        },
        other => Err(format!("unknown check {other}")),
    }
}

/// etcd's read check: a keys-only range of one key over the whole key space, as root.
fn local_read(store: &SharedStore) -> Result<(), String> {
    let request =
        pb::RangeRequest { key: vec![0], range_end: vec![0], keys_only: true, limit: 1, ..Default::default() };
    store.read().range(&request).map(|_| ()).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_pick_the_checks() {
        let all = Request::parse("/readyz", None).expect("readyz");
        assert_eq!(all.checks, ["data_corruption", "serializable_read", "linearizable_read", "non_learner"]);
        assert!(!all.verbose);
        let some = Request::parse("/readyz", Some("verbose&exclude=linearizable_read&exclude=nope")).expect("readyz");
        assert_eq!(some.checks, ["data_corruption", "serializable_read", "non_learner"]);
        assert!(some.verbose);
        let one = Request::parse("/readyz/non_learner", None).expect("sub-path");
        assert_eq!((one.kind, one.checks), (Kind::Readyz, vec!["non_learner"]));
        assert_eq!(Request::parse("/livez", None).expect("livez").checks, ["serializable_read"]);
        assert_eq!(Request::parse("/livez/linearizable_read", None), None, "not a livez check");
        assert_eq!(Request::parse("/livez/", None), None);
        assert_eq!(Request::parse("/health", None), None);
    }
}
