//! Convergence after heal: every member reports the same revision, compact revision and `HashKV`.
//!
//! The runner waits for the cluster to quiesce after the last fault, asks each member for its
//! `Status`/`HashKV` at the same revision (etcd's `CheckEndOfTestHashKV`), and passes the answers here.

use serde::{Deserialize, Serialize};

use crate::checker::{Anomaly, AnomalyKind, CheckResult};

/// One member's answer to the end-of-run probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberState {
    pub member: String,
    /// The revision the hash was computed at (the member's current revision once quiet).
    pub revision: i64,
    pub compact_revision: i64,
    /// `HashKV`'s hash.
    pub hash: u32,
}

/// Checks that the members agree; `unreachable` names members that did not answer the probe, which
/// leaves the verdict `Unknown` unless the others already disagree.
pub fn check(members: &[MemberState], unreachable: &[String]) -> CheckResult {
    let mut anomalies = Vec::new();
    if members.is_empty() {
        anomalies.push(Anomaly::new(AnomalyKind::Unreachable, "no member answered"));
    }
    for member in unreachable {
        anomalies.push(Anomaly::new(AnomalyKind::Unreachable, format!("{member} did not answer")));
    }
    type Field = fn(&MemberState) -> i64;
    let fields: [(&str, Field); 3] =
        [("revision", |m| m.revision), ("compact revision", |m| m.compact_revision), ("hash", |m| i64::from(m.hash))];
    // Hashes only mean something at equal revisions, so report the first field that differs.
    for (name, field) in fields {
        if let Some(first) = members.first() {
            if members.iter().any(|m| field(m) != field(first)) {
                let values: Vec<String> = members.iter().map(|m| format!("{}={}", m.member, field(m))).collect();
                anomalies.push(Anomaly::new(AnomalyKind::Diverged, format!("{name} differs: {}", values.join(", "))));
                break;
            }
        }
    }
    CheckResult::from_anomalies("convergence", anomalies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Validity;

    fn m(member: &str, revision: i64, hash: u32) -> MemberState {
        MemberState { member: member.to_string(), revision, compact_revision: 1, hash }
    }

    #[test]
    fn table() {
        type Case = (&'static str, Vec<MemberState>, Vec<String>, Validity, &'static str);
        let cases: Vec<Case> = vec![
            ("agree", vec![m("n1", 9, 7), m("n2", 9, 7), m("n3", 9, 7)], vec![], Validity::Valid, ""),
            (
                "one lags",
                vec![m("n1", 9, 7), m("n2", 8, 5), m("n3", 9, 7)],
                vec![],
                Validity::Invalid,
                "revision differs: n1=9, n2=8, n3=9",
            ),
            (
                "divergent hash",
                vec![m("n1", 9, 7), m("n2", 9, 7), m("n3", 9, 6)],
                vec![],
                Validity::Invalid,
                "hash differs: n1=7, n2=7, n3=6",
            ),
            (
                "unreachable",
                vec![m("n1", 9, 7), m("n2", 9, 7)],
                vec!["n3".to_string()],
                Validity::Unknown,
                "n3 did not answer",
            ),
            ("nobody", vec![], vec![], Validity::Unknown, "no member answered"),
        ];
        for (name, members, unreachable, want, text) in cases {
            let result = check(&members, &unreachable);
            assert_eq!(result.valid, want, "{name}: {result}");
            assert!(
                result.anomalies.iter().all(|a| a.description.contains(text)) || text.is_empty(),
                "{name}: {result}"
            );
            if text.is_empty() {
                assert!(result.anomalies.is_empty(), "{name}: {result}");
            }
        }
    }
}
