//! Revisions never go back in real time.
//!
//! If op `a` completed before op `b` was invoked, `b`'s header revision is at least `a`'s, and
//! strictly greater when `b` is a write (it created a revision after `a` observed one). Two writes
//! never share a revision. This crosses keys and members, so it catches a member that answers from
//! an old state after a crash or partition (etcd #14370, #17780) even where per-key checks cannot.
//!
//! Only linearizable requests belong here: serializable reads may lag by design.

use std::collections::HashMap;

use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::OpPair;

/// How an `ok` completion takes part in the revision check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Not checked (serializable reads, ops without a header).
    Ignore,
    /// Observed a revision without creating one (reads, failed compares, no-op deletes).
    Read,
    /// Created the revision in its header (puts, effective deletes, txns that wrote).
    Write,
}

struct Observation {
    index: usize,
    start_ns: u64,
    end_ns: u64,
    revision: i64,
    access: Access,
}

/// Checks the header revisions of `ok` ops; `access` classifies an op by its completion payload.
pub fn check<P>(pairs: &[OpPair<P>], access: impl Fn(&P) -> Access) -> CheckResult {
    let mut seen: Vec<Observation> = pairs
        .iter()
        .filter_map(|pair| {
            let access = access(pair.ok_payload()?);
            (access != Access::Ignore).then_some(Observation {
                index: pair.index,
                start_ns: pair.start_ns(),
                end_ns: pair.end_ns()?,
                revision: pair.revision()?,
                access,
            })
        })
        .collect();
    let mut anomalies = Vec::new();

    let mut writers: HashMap<i64, usize> = HashMap::new();
    for o in seen.iter().filter(|o| o.access == Access::Write) {
        if let Some(first) = writers.insert(o.revision, o.index) {
            anomalies.push(Anomaly::new(
                AnomalyKind::DuplicateRevision,
                format!("writes op {first} and op {} both report revision {}", o.index, o.revision),
            ));
        }
    }

    // Sweep in invocation order, folding in every op that completed strictly earlier.
    seen.sort_by_key(|o| (o.start_ns, o.index));
    // Latest completion first, so `pop` yields the earliest.
    let mut by_end: Vec<&Observation> = seen.iter().collect();
    by_end.sort_by_key(|o| std::cmp::Reverse((o.end_ns, o.index)));
    let mut highest: Option<&Observation> = None;
    for b in &seen {
        while by_end.last().is_some_and(|a| a.end_ns < b.start_ns) {
            if let Some(a) = by_end.pop() {
                if highest.is_none_or(|h| a.revision > h.revision) {
                    highest = Some(a);
                }
            }
        }
        let Some(a) = highest else { continue };
        let went_back = match b.access {
            Access::Write => b.revision <= a.revision,
            _ => b.revision < a.revision,
        };
        if went_back {
            let what = if b.access == Access::Write { "write" } else { "read" };
            anomalies.push(Anomaly::new(
                AnomalyKind::RevisionWentBack,
                format!(
                    "{what} op {} (invoked at {} ns) got revision {}, but op {} had seen revision {} when it \
                     completed at {} ns",
                    b.index, b.start_ns, b.revision, a.index, a.revision, a.end_ns
                ),
            ));
        }
    }
    CheckResult::from_anomalies("revision", anomalies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{pair, Op, OpType};
    use crate::Validity;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Req {
        Get,
        Put,
        StaleGet,
    }

    fn access(req: &Req) -> Access {
        match req {
            Req::Get => Access::Read,
            Req::Put => Access::Write,
            Req::StaleGet => Access::Ignore,
        }
    }

    /// (process, request, invoke, completion, revision); a `None` revision leaves the op indeterminate.
    type Spec = (u64, Req, u64, u64, Option<i64>);

    fn run(spec: &[Spec]) -> CheckResult {
        let mut ops = Vec::new();
        for &(p, req, t0, t1, rev) in spec {
            ops.push(Op::invoke(p, req, t0));
            ops.push(match rev {
                Some(rev) => Op::new(p, OpType::Ok, req, t1).with_revision(rev),
                None => Op::new(p, OpType::Info, req, t1),
            });
        }
        ops.sort_by_key(|op| (op.time_ns, op.kind != OpType::Invoke));
        check(&pair(ops).expect("well formed"), access)
    }

    #[test]
    fn table() {
        use Req::{Get, Put, StaleGet};
        type Case = (&'static str, Vec<Spec>, Option<AnomalyKind>);
        let cases: Vec<Case> = vec![
            ("monotonic", vec![(0, Put, 0, 1, Some(2)), (1, Get, 2, 3, Some(2)), (0, Put, 4, 5, Some(3))], None),
            ("concurrent may disagree", vec![(0, Put, 0, 10, Some(3)), (1, Get, 1, 9, Some(2))], None),
            ("touching is concurrent", vec![(0, Get, 0, 5, Some(3)), (1, Get, 5, 6, Some(2))], None),
            ("serializable reads ignored", vec![(0, Put, 0, 1, Some(5)), (1, StaleGet, 2, 3, Some(1))], None),
            ("indeterminate ignored", vec![(0, Put, 0, 1, Some(5)), (1, Put, 0, 3, None)], None),
            (
                "read went back",
                vec![(0, Put, 0, 1, Some(5)), (1, Get, 2, 3, Some(4))],
                Some(AnomalyKind::RevisionWentBack),
            ),
            (
                "went back behind a later op",
                vec![(0, Get, 0, 1, Some(7)), (1, Get, 0, 2, Some(3)), (2, Get, 4, 5, Some(6))],
                Some(AnomalyKind::RevisionWentBack),
            ),
            (
                "write did not advance",
                vec![(0, Get, 0, 1, Some(5)), (1, Put, 2, 3, Some(5))],
                Some(AnomalyKind::RevisionWentBack),
            ),
            (
                "two writes one revision",
                vec![(0, Put, 0, 10, Some(5)), (1, Put, 1, 9, Some(5))],
                Some(AnomalyKind::DuplicateRevision),
            ),
        ];
        for (name, spec, want) in cases {
            let result = run(&spec);
            match want {
                None => assert!(result.is_valid(), "{name}: {result}"),
                Some(kind) => {
                    assert_eq!(result.valid, Validity::Invalid, "{name}: {result}");
                    assert!(result.has(kind), "{name}: {result}");
                }
            }
        }
    }

    #[test]
    fn report_names_both_ops() {
        let result = run(&[(0, Req::Put, 0, 1, Some(5)), (1, Req::Get, 2, 3, Some(4))]);
        assert_eq!(
            result.anomalies[0].description,
            "read op 2 (invoked at 2 ns) got revision 4, but op 0 had seen revision 5 when it completed at 1 ns"
        );
    }
}
