//! The lease history indexed for the rules: grants, puts by key, revokes and renewals by lease,
//! reads in history order, and the evidence (revokes, refused puts, absent reads) that a lease was
//! gone.

use std::collections::{BTreeMap, HashMap};

use super::op::{answers, LeaseKeepAlive, LeaseOp, Stored};
use super::Report;
use crate::checker::AnomalyKind;
use crate::history::{OpPair, OpType};

/// One op's place in time: its index in the history, invocation, and completion when determinate.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub(super) index: usize,
    pub(super) start_ns: u64,
    pub(super) end_ns: Option<u64>,
}

impl Span {
    pub(super) fn of<P>(pair: &OpPair<P>) -> Span {
        Span { index: pair.index, start_ns: pair.start_ns(), end_ns: pair.end_ns() }
    }
}

pub(super) struct Grant {
    pub(super) span: Span,
    pub(super) ttl_ns: u64,
    pub(super) ttl_s: i64,
}

pub(super) struct Put {
    pub(super) span: Span,
    pub(super) outcome: OpType,
    pub(super) value: String,
    pub(super) lease: i64,
    pub(super) lease_not_found: bool,
}

pub(super) struct Revoke {
    pub(super) span: Span,
    /// `ok` only.
    pub(super) found: Option<bool>,
}

pub(super) struct Read {
    pub(super) span: Span,
    pub(super) key: String,
    pub(super) prefix: bool,
    pub(super) is_final: bool,
    /// `ok` only.
    pub(super) found: Option<Vec<Stored>>,
}

impl Read {
    pub(super) fn covers(&self, key: &str) -> bool {
        if self.prefix {
            key.starts_with(&self.key)
        } else {
            key == self.key
        }
    }

    pub(super) fn what(&self) -> &'static str {
        if self.is_final {
            "final read"
        } else {
            "read"
        }
    }
}

/// Evidence that a lease was gone no later than `end_ns`.
pub(super) struct Gone {
    pub(super) lease: i64,
    pub(super) end_ns: u64,
    /// Who saw it: e.g. "op 12 (read of jepsen/lease/3 found it absent)".
    pub(super) by: String,
    /// Revokes explain themselves; the other observations must respect the TTL (rule 2).
    pub(super) from_revoke: bool,
}

/// The history sorted by what the rules need.
#[derive(Default)]
pub(super) struct History {
    pub(super) grants: HashMap<i64, Grant>,
    pub(super) puts: BTreeMap<String, Put>,
    pub(super) revokes: HashMap<i64, Vec<Revoke>>,
    /// Invocation times of `ok` keep-alives that answered a positive TTL, per lease.
    pub(super) renewals: HashMap<i64, Vec<u64>>,
    pub(super) reads: Vec<Read>,
}

impl History {
    pub(super) fn index(pairs: &[OpPair<LeaseOp>], report: &mut Report) -> History {
        let mut history = History::default();
        for pair in pairs {
            let span = Span::of(pair);
            let completion = pair.completion.as_ref().filter(|c| c.kind != OpType::Info).map(|c| &c.payload);
            if let Some(done) = completion {
                if !answers(&pair.invoke.payload, done) {
                    let text =
                        format!("op {}: completion {done:?} does not answer {:?}", pair.index, pair.invoke.payload);
                    report.push(AnomalyKind::Malformed, text);
                    continue;
                }
            }
            let ok = pair.ok_payload();
            match &pair.invoke.payload {
                LeaseOp::Grant(grant) => {
                    if let Some(LeaseOp::Grant(done)) = ok {
                        let ttl_s = done.granted_ttl.unwrap_or(grant.ttl);
                        let ttl_ns = u64::try_from(ttl_s).unwrap_or(0).saturating_mul(1_000_000_000);
                        history.grants.insert(grant.lease, Grant { span, ttl_ns, ttl_s });
                    }
                }
                LeaseOp::Put(put) => {
                    let lease_not_found = matches!(completion, Some(LeaseOp::Put(done)) if done.lease_not_found);
                    let entry = Put {
                        span,
                        outcome: pair.outcome(),
                        value: put.value.clone(),
                        lease: put.lease,
                        lease_not_found: lease_not_found && pair.outcome() == OpType::Fail,
                    };
                    if let Some(first) = history.puts.insert(put.key.clone(), entry) {
                        let text = format!(
                            "op {}: key {} was put twice (first by op {})",
                            pair.index, put.key, first.span.index
                        );
                        report.push(AnomalyKind::Malformed, text);
                    }
                }
                LeaseOp::Revoke(revoke) => {
                    let found = match ok {
                        Some(LeaseOp::Revoke(done)) => done.found,
                        _ => None,
                    };
                    history.revokes.entry(revoke.lease).or_default().push(Revoke { span, found });
                }
                LeaseOp::KeepAlive(keep_alive) => {
                    if let Some(LeaseOp::KeepAlive(LeaseKeepAlive { ttl: Some(ttl), .. })) = ok {
                        if *ttl > 0 {
                            history.renewals.entry(keep_alive.lease).or_default().push(span.start_ns);
                        }
                    }
                }
                LeaseOp::Read(read) | LeaseOp::FinalRead(read) => {
                    let found = match ok {
                        Some(LeaseOp::Read(done) | LeaseOp::FinalRead(done)) => done.found.clone(),
                        _ => None,
                    };
                    let is_final = matches!(pair.invoke.payload, LeaseOp::FinalRead(_));
                    history.reads.push(Read { span, key: read.key.clone(), prefix: read.prefix, is_final, found });
                }
            }
        }
        history
    }

    /// Rule 1's evidence that a lease is gone, from revokes, failed puts and absent reads.
    pub(super) fn gone_observations(&self) -> Vec<Gone> {
        let mut gone = Vec::new();
        for (lease, revokes) in &self.revokes {
            for revoke in revokes {
                if let (Some(found), Some(end_ns)) = (revoke.found, revoke.span.end_ns) {
                    let by =
                        format!("op {} (revoke, {})", revoke.span.index, if found { "ok" } else { "lease not found" });
                    gone.push(Gone { lease: *lease, end_ns, by, from_revoke: true });
                }
            }
        }
        for (key, put) in &self.puts {
            if let (true, Some(end_ns)) = (put.lease_not_found, put.span.end_ns) {
                let by = format!("op {} (put of {key} failed: lease not found)", put.span.index);
                gone.push(Gone { lease: put.lease, end_ns, by, from_revoke: false });
            }
        }
        for read in &self.reads {
            let (Some(found), Some(end_ns)) = (&read.found, read.span.end_ns) else { continue };
            for (key, put) in self.puts_covered(read) {
                let written_before =
                    put.outcome == OpType::Ok && put.span.end_ns.is_some_and(|e| e < read.span.start_ns);
                if written_before && !found.iter().any(|s| &s.key == key) {
                    let by = format!("op {} ({} found {key} absent)", read.span.index, read.what());
                    gone.push(Gone { lease: put.lease, end_ns, by, from_revoke: false });
                }
            }
        }
        gone.sort_by_key(|g| g.end_ns);
        gone
    }

    /// The puts of the keys `read` covers.
    pub(super) fn puts_covered<'a>(&'a self, read: &'a Read) -> impl Iterator<Item = (&'a String, &'a Put)> + 'a {
        let range: Box<dyn Iterator<Item = (&String, &Put)>> = if read.prefix {
            Box::new(self.puts.range(read.key.clone()..).take_while(|(k, _)| k.starts_with(&read.key)))
        } else {
            Box::new(self.puts.get_key_value(&read.key).into_iter())
        };
        range.filter(|(k, _)| read.covers(k))
    }
}
