//! The four lease rules of the module doc, each checked on the indexed history.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::index::{Gone, History};
use super::{CheckOptions, Report};
use crate::checker::AnomalyKind;
use crate::history::OpType;

impl History {
    /// Rule 1: nothing invoked after a lease was seen gone sees it alive.
    pub(super) fn check_gone_stays_gone(&self, gone: &[Gone], report: &mut Report) {
        let mut first: HashMap<i64, &Gone> = HashMap::new();
        for g in gone {
            first.entry(g.lease).or_insert(g);
        }
        let after = |lease: i64, start_ns: u64| first.get(&lease).copied().filter(|g| g.end_ns < start_ns);
        for read in &self.reads {
            for stored in read.found.iter().flatten() {
                let Some(put) = self.puts.get(&stored.key) else { continue };
                if let Some(g) = after(put.lease, read.span.start_ns) {
                    report.push(
                        AnomalyKind::AliveAfterRevoke,
                        format!(
                            "op {} ({}, invoked at {}) found {} of lease {}, which {} had shown gone at {}",
                            read.span.index,
                            read.what(),
                            secs(read.span.start_ns),
                            stored.key,
                            put.lease,
                            g.by,
                            secs(g.end_ns)
                        ),
                    );
                }
            }
        }
        for (key, put) in &self.puts {
            if put.outcome != OpType::Ok {
                continue;
            }
            if let Some(g) = after(put.lease, put.span.start_ns) {
                report.push(
                    AnomalyKind::AliveAfterRevoke,
                    format!(
                        "op {} put {key} attached to lease {} at {}, after {} had shown the lease gone at {}",
                        put.span.index,
                        put.lease,
                        secs(put.span.start_ns),
                        g.by,
                        secs(g.end_ns)
                    ),
                );
            }
        }
        for (lease, revokes) in &self.revokes {
            for revoke in revokes.iter().filter(|r| r.found == Some(true)) {
                if let Some(g) = after(*lease, revoke.span.start_ns) {
                    report.push(
                        AnomalyKind::AliveAfterRevoke,
                        format!(
                            "op {} revoked lease {lease} at {}, after {} had shown it gone at {}",
                            revoke.span.index,
                            secs(revoke.span.start_ns),
                            g.by,
                            secs(g.end_ns)
                        ),
                    );
                }
            }
        }
    }

    /// Rule 2: a lease nobody revoked is not seen gone before its anchor plus its TTL.
    pub(super) fn check_early_expiry(&self, gone: &[Gone], options: CheckOptions, report: &mut Report) {
        let mut reported: HashSet<i64> = HashSet::new();
        for g in gone.iter().filter(|g| !g.from_revoke) {
            if reported.contains(&g.lease) {
                continue;
            }
            let Some(grant) = self.grants.get(&g.lease) else { continue };
            let revoked_before =
                self.revokes.get(&g.lease).is_some_and(|rs| rs.iter().any(|r| r.span.start_ns < g.end_ns));
            if revoked_before {
                continue;
            }
            let mut anchor = grant.span.start_ns;
            let mut anchored_by = format!("granted (op {}) at {}", grant.span.index, secs(anchor));
            if let Some(slack) = options.keep_alive_slack {
                let slack_ns = u64::try_from(slack.as_nanos()).unwrap_or(u64::MAX);
                let latest = self.renewals.get(&g.lease).and_then(|r| r.iter().filter(|&&t| t < g.end_ns).max());
                if let Some(&renewed) = latest {
                    let renewed = renewed.saturating_sub(slack_ns);
                    if renewed > anchor {
                        anchor = renewed;
                        let _ = write!(
                            anchored_by,
                            ", kept alive at {} (less {} ms of slack)",
                            secs(renewed + slack_ns),
                            slack.as_millis()
                        );
                    }
                }
            }
            let expires_ns = anchor.saturating_add(grant.ttl_ns);
            if g.end_ns < expires_ns {
                reported.insert(g.lease);
                report.push(
                    AnomalyKind::ExpiredEarly,
                    format!(
                        "lease {} (TTL {} s) {anchored_by}, so it could not expire before {}; but {} showed it \
                         gone at {}, {:.3} s early, and no revoke of it was invoked before",
                        g.lease,
                        grant.ttl_s,
                        secs(expires_ns),
                        g.by,
                        secs(g.end_ns),
                        (expires_ns - g.end_ns) as f64 / 1e9
                    ),
                );
            }
        }
    }

    /// Rule 4: every key read is one that was put, with the value and lease of that put.
    pub(super) fn check_values(&self, report: &mut Report) {
        for read in &self.reads {
            let Some(found) = &read.found else { continue };
            for stored in found {
                let index = read.span.index;
                let what = read.what();
                let problem = match self.puts.get(&stored.key) {
                    _ if !read.covers(&stored.key) => Some(format!("{} is outside the range read", stored.key)),
                    None => Some(format!("{} was never put", stored.key)),
                    Some(put) if put.outcome == OpType::Fail => {
                        Some(format!("the put of {} (op {}) certainly failed", stored.key, put.span.index))
                    }
                    Some(put) if read.span.end_ns.is_some_and(|end| end < put.span.start_ns) => {
                        Some(format!("the put of {} (op {}) was invoked only later", stored.key, put.span.index))
                    }
                    Some(put) if put.value != stored.value || put.lease != stored.lease => Some(format!(
                        "{} holds {:?} on lease {}, but op {} put {:?} on lease {}",
                        stored.key, stored.value, stored.lease, put.span.index, put.value, put.lease
                    )),
                    Some(_) => None,
                };
                if let Some(problem) = problem {
                    report.push(AnomalyKind::Unexpected, format!("op {index} ({what}): {problem}"));
                }
            }
        }
    }

    /// Rule 3: the last final read finds nothing.
    pub(super) fn check_final_reads(&self, report: &mut Report) {
        let last = self.reads.iter().filter(|r| r.is_final && r.found.is_some()).max_by_key(|r| r.span.end_ns);
        let Some(last) = last else {
            if !self.puts.is_empty() {
                let text = "no final read succeeded, so whether the leases expired after the run is unknown";
                report.push(AnomalyKind::NothingRead, text.to_string());
            }
            return;
        };
        for stored in last.found.iter().flatten() {
            report.push(
                AnomalyKind::NotExpired,
                format!(
                    "{} (lease {}) was still present in the last final read (op {}, at {}), long after every \
                     lease should have expired",
                    stored.key,
                    stored.lease,
                    last.span.index,
                    secs(last.span.end_ns.unwrap_or(last.span.start_ns))
                ),
            );
        }
    }
}

/// A run time for descriptions: seconds since the start.
fn secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}
