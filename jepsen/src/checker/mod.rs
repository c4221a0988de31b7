//! Checkers and the result they share.
//!
//! Each checker takes the part of a run it judges (paired ops, watch streams, member states, logs)
//! and returns a [`CheckResult`]. `Unknown` means the checker could not decide (a deadline expired,
//! nothing was read, the input was malformed); a run passes only when every checker says `Valid`.

use std::fmt;

use serde::{Deserialize, Serialize};

pub mod convergence;
pub mod graph;
pub mod kv_model;
pub mod lease;
pub mod linear;
pub mod list_append;
pub mod liveness;
pub mod logs;
pub mod register;
pub mod revision;
pub mod set_full;
pub mod watch;

/// A checker's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    Valid,
    Unknown,
    Invalid,
}

/// What kind of violation an [`Anomaly`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnomalyKind {
    /// The input breaks the workload's rules, so part of it could not be checked.
    Malformed,
    /// No order of the ops explains what clients saw (stale read, lost or duplicated write, ...).
    NotLinearizable,
    /// The search ran out of time.
    Timeout,
    /// No successful read, so nothing can be said about the writes.
    NothingRead,
    /// An acknowledged write is missing from later reads.
    Lost,
    /// A read missed an element that an earlier-completed op had shown to exist.
    Stale,
    /// A read returned something nobody wrote (or a write that certainly failed).
    Unexpected,
    /// A read (or a txn's compare) disagrees with the store's state at its own header revision.
    InconsistentRead,
    /// A read returned one write more than once: a duplicate apply.
    Duplicated,
    /// Two reads of one key disagree about the order of its writes.
    IncompatibleOrder,
    /// A transaction did not see its own earlier writes.
    Internal,
    /// A dependency cycle among transactions (G0, G1c, G-single, G2, optionally real-time).
    Cycle,
    /// Watch events whose revisions go back.
    WatchUnordered,
    /// The same event delivered twice on one stream.
    WatchDuplicate,
    /// One revision's events split across two responses.
    WatchSplitRevision,
    /// An event at or below an earlier progress notification, or notifications going back.
    WatchBookmark,
    /// A matching event missing from the stream, or an event that never happened.
    WatchGap,
    /// The stream did not start at the first matching event at or after its start revision.
    WatchResume,
    /// An event outside the watched key range.
    WatchFilter,
    /// `IsCreate` disagrees with whether the key existed before.
    WatchIsCreate,
    /// `prev_kv` disagrees with the key's value at the previous revision.
    WatchPrevKv,
    /// A revision observed after another op completed is lower than that op's revision.
    RevisionWentBack,
    /// Two acknowledged writes claim the same revision.
    DuplicateRevision,
    /// Members disagree on revision or hash after heal.
    Diverged,
    /// A member did not answer the convergence probe.
    Unreachable,
    /// A panic or fatal error in a member's log.
    Panic,
    /// No write succeeded within the allowed time after the last fault was healed.
    NotLive,
    /// A lease, or a key attached to it, seen alive after the lease was revoked or seen gone.
    AliveAfterRevoke,
    /// A lease nobody revoked was seen gone before its TTL (from its grant or keep-alive) ran out.
    ExpiredEarly,
    /// A key attached to a lease was still present well after every lease had to expire.
    NotExpired,
}

/// One violation, with a description a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    pub description: String,
}

impl Anomaly {
    pub fn new(kind: AnomalyKind, description: impl Into<String>) -> Self {
        Anomaly { kind, description: description.into() }
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.description)
    }
}

/// A checker's verdict and the anomalies behind it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    pub checker: String,
    pub valid: Validity,
    pub anomalies: Vec<Anomaly>,
}

impl CheckResult {
    /// A result whose validity follows from the anomalies: `Valid` when there are none, `Unknown`
    /// when all are `Malformed`/`Timeout`/`NothingRead`/`Unreachable`, `Invalid` otherwise.
    pub fn from_anomalies(checker: &str, anomalies: Vec<Anomaly>) -> Self {
        let undecided = |a: &Anomaly| {
            matches!(
                a.kind,
                AnomalyKind::Malformed | AnomalyKind::Timeout | AnomalyKind::NothingRead | AnomalyKind::Unreachable
            )
        };
        let valid = if anomalies.is_empty() {
            Validity::Valid
        } else if anomalies.iter().all(undecided) {
            Validity::Unknown
        } else {
            Validity::Invalid
        };
        CheckResult { checker: checker.to_string(), valid, anomalies }
    }

    pub fn is_valid(&self) -> bool {
        self.valid == Validity::Valid
    }

    /// True when some anomaly has this kind.
    pub fn has(&self, kind: AnomalyKind) -> bool {
        self.anomalies.iter().any(|a| a.kind == kind)
    }
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?}", self.checker, self.valid)?;
        for anomaly in &self.anomalies {
            write!(f, "\n  - {anomaly}")?;
        }
        Ok(())
    }
}

/// The overall verdict of several checkers: the worst of them.
pub fn overall(results: &[CheckResult]) -> Validity {
    results.iter().map(|r| r.valid).max().unwrap_or(Validity::Valid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_follows_anomalies() {
        let malformed = Anomaly::new(AnomalyKind::Malformed, "bad op");
        let lost = Anomaly::new(AnomalyKind::Lost, "lost 3");
        let cases = vec![
            (vec![], Validity::Valid),
            (vec![malformed.clone()], Validity::Unknown),
            (vec![malformed, lost], Validity::Invalid),
        ];
        for (anomalies, want) in cases {
            assert_eq!(CheckResult::from_anomalies("t", anomalies).valid, want);
        }
    }

    #[test]
    fn overall_is_the_worst() {
        let ok = CheckResult::from_anomalies("a", vec![]);
        let unknown = CheckResult::from_anomalies("b", vec![Anomaly::new(AnomalyKind::Timeout, "slow")]);
        assert_eq!(overall(&[ok.clone(), unknown.clone()]), Validity::Unknown);
        assert_eq!(overall(&[ok]), Validity::Valid);
        let text = unknown.to_string();
        assert!(text.contains("Timeout: slow"), "{text}");
    }
}
