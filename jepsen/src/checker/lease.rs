//! The lease checker: what etcd promises about leases, judged on a history of grants, puts attached
//! to leases, revokes, keep-alives and reads (see [`crate::workload::lease`]).
//!
//! # What etcd promises, and what it does not
//!
//! A lease lives in two places. Its existence (grant, revoke, the keys attached to it) is replicated
//! through Raft and applied in log order on every member, so it is as linearizable as any key: a
//! revoke deletes the lease and all its keys in one revision, and a put attached to a lease that is
//! gone fails at apply with "requested lease not found". Its *deadline* is not replicated: only the
//! leader's lessor keeps one, restarts it on a keep-alive (which never goes through Raft), and
//! proposes a revoke once it passes. A new leader cannot know the old deadlines, so on promotion it
//! gives every lease its full TTL plus one election timeout: leadership changes extend leases, never
//! shorten them. The deadline is measured on the leader's monotonic clock; every member and the
//! harness run on one machine, so the clocks advance at the same rate.
//!
//! From this the checker derives rules that hold for any correct etcd, and only those:
//!
//! 1. **A lease that is gone stays gone** ([`AnomalyKind::AliveAfterRevoke`]). A lease is certainly
//!    gone once a revoke of it completed `ok` (whether or not it still existed), a put attached to
//!    it failed with "lease not found", or a linearizable read found absent a key attached to it
//!    whose put had completed `ok` before the read began (nothing else deletes these keys: each is
//!    put once and never deleted). Every op invoked after that moment must agree: no read finds one
//!    of its keys, no put attached to it succeeds, no revoke finds it.
//! 2. **A lease does not expire early** ([`AnomalyKind::ExpiredEarly`]). The leader starts the
//!    countdown when it applies the grant, after the grant was invoked; a later leader starts it
//!    afresh (and longer) when promoted. So while nobody revoked the lease, it lives at least until
//!    `anchor + TTL`, where the anchor is the grant's invocation — or the invocation of the latest
//!    `ok` keep-alive invoked before the observation, when keep-alives are trusted (below). An
//!    observation that the lease is gone (rule 1's reads and puts) which *completes* before that, with
//!    no revoke of the lease invoked before it completed, is an early expiry: a lost write. The TTL is
//!    the one the grant answered (etcd raises small TTLs to its minimum, 1.5 election timeouts).
//! 3. **Leases do expire** ([`AnomalyKind::NotExpired`]). After the final heal the workload stops
//!    keeping anything alive, waits for the longest TTL plus a few election timeouts and reads every
//!    key (`final-read`, a prefix scan, repeated while keys remain). A key present in the last final
//!    read outlived its lease.
//! 4. **Only written values are read** ([`AnomalyKind::Unexpected`]): a read returns the value and
//!    lease its key's one put wrote, never a key whose put certainly failed or was not yet invoked.
//!
//! # Keep-alives are weaker evidence than they look
//!
//! A keep-alive is answered by whichever member *believes* it leads, from its local lessor, without
//! asking a quorum (etcd 3.4; newer releases check leadership first, etcd #15247 fixed by #16822). So
//! keep-alive answers are never taken as proof that a lease exists or is gone — an old leader answers
//! "TTL 0" for a lease granted after it lost leadership, and renews one the new leader already
//! revoked. They are used only as renewal anchors for rule 2, and only where that is sound:
//!
//! - *Partitions*: an isolated leader steps down after at most two election timeouts (CheckQuorum),
//!   while the new one is elected at least one election timeout after the last heartbeat and extends
//!   every lease by one more. A renewal by the isolated leader is therefore covered by the new
//!   leader's deadline, up to about one heartbeat interval — which is the `slack` subtracted from the
//!   keep-alive anchor.
//! - *Crashes*: a killed leader renews nothing more, and the next leader's promotion extends.
//! - *Pauses* (SIGSTOP): a stopped leader learns nothing while it is stopped. Resumed, it still acts as
//!   leader for a moment: it answers keep-alives the new leader never hears of, and (etcd 3.4, the
//!   same issue) proposes revokes for leases that expired *by its own stale deadlines*; those are
//!   forwarded to the new leader and committed, cutting short leases the new leader had renewed. So
//!   with pauses in an etcd 3.4 run, keep-alives are not trusted at all and only the grant anchors
//!   rule 2 (the workload decides; see `workload::lease::check_options`).
//!   That is still sound: the stale leader's own deadline for a lease is never earlier than the grant's
//!   apply plus the TTL (it applied the grant as leader, or was promoted later). This is not
//!   hypothetical: with keep-alives trusted, `--target etcd --nemesis pause-leader` (Debian's 3.4.23,
//!   seeds 1 and 4) shows leases revoked 0.2–2.4 s before their last keep-alive's TTL ran out, right
//!   after the paused leader resumed. Our server did the same until it learned to confirm its
//!   leadership with a quorum before renewing or revoking (as etcd 3.4.31 does): on ours, keep-alives
//!   are trusted under pauses too, and `jepsen/tests/lease.rs` holds that regression test.
//!
//! Rule 3 needs no such care: the final reads come after every fault is healed, the members agree,
//! and nobody keeps anything alive any more.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::{OpPair, OpType};

/// At most this many anomalies of one kind are described; the rest are counted.
const MAX_REPORTED: usize = 10;

/// The lease workload's `f` and `value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "kebab-case")]
pub enum LeaseOp {
    Grant(LeaseGrant),
    Put(LeasePut),
    Revoke(LeaseRevoke),
    KeepAlive(LeaseKeepAlive),
    /// A linearizable read during the run.
    Read(LeaseRead),
    /// A linearizable prefix scan after the run, once every lease should have expired.
    FinalRead(LeaseRead),
}

/// LeaseGrant with a client-chosen id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub lease: i64,
    /// The TTL asked for, in seconds.
    pub ttl: i64,
    /// The TTL the server granted (`ok` only): etcd raises small ones to its minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_ttl: Option<i64>,
}

/// A Put attached to a lease; every key is put once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasePut {
    pub key: String,
    pub value: String,
    pub lease: i64,
    /// The put failed because the lease was gone ("requested lease not found"): certainly no effect,
    /// and proof that the lease was gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lease_not_found: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRevoke {
    pub lease: i64,
    /// `ok` only: whether the lease still existed (false: "requested lease not found").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<bool>,
}

/// One LeaseKeepAlive request and its answer on a fresh stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseKeepAlive {
    pub lease: i64,
    /// `ok` only: the TTL the answer gave; 0 when the answering member did not know the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
}

/// A read of one key, or with `prefix` of every key under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRead {
    pub key: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefix: bool,
    /// `ok` only: the keys that were there; a key read and not listed was absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<Vec<Stored>>,
}

/// A key as a read found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    pub key: String,
    pub value: String,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

/// What the checker may assume about the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// `Some(slack)`: an `ok` keep-alive restarts its lease's countdown no later than its invocation
    /// minus `slack` (runs without process pauses). `None`: keep-alives anchor nothing (pauses).
    pub keep_alive_slack: Option<Duration>,
}

impl CheckOptions {
    /// Keep-alives not trusted: only grants anchor the early-expiry rule.
    pub const GRANTS_ONLY: CheckOptions = CheckOptions { keep_alive_slack: None };
}

/// Checks a lease history; see the module doc for the rules.
pub fn check(pairs: &[OpPair<LeaseOp>], options: CheckOptions) -> CheckResult {
    let mut report = Report::default();
    let history = History::index(pairs, &mut report);
    let gone = history.gone_observations();
    history.check_gone_stays_gone(&gone, &mut report);
    history.check_early_expiry(&gone, options, &mut report);
    history.check_values(&mut report);
    history.check_final_reads(&mut report);
    if history.reads.iter().all(|r| r.found.is_none()) {
        report.push(AnomalyKind::NothingRead, "no read succeeded, so nothing could be checked".to_string());
    }
    report.finish()
}

/// Anomalies, at most [`MAX_REPORTED`] described per kind.
#[derive(Default)]
struct Report {
    anomalies: Vec<Anomaly>,
    counts: BTreeMap<String, (AnomalyKind, usize)>,
}

impl Report {
    fn push(&mut self, kind: AnomalyKind, description: String) {
        let count = &mut self.counts.entry(format!("{kind:?}")).or_insert((kind, 0)).1;
        *count += 1;
        if *count <= MAX_REPORTED {
            self.anomalies.push(Anomaly::new(kind, description));
        }
    }

    fn finish(mut self) -> CheckResult {
        for (kind, count) in self.counts.into_values() {
            if count > MAX_REPORTED {
                let more = count - MAX_REPORTED;
                self.anomalies.push(Anomaly::new(kind, format!("... and {more} more of this kind")));
            }
        }
        CheckResult::from_anomalies("lease", self.anomalies)
    }
}

/// One op's place in time: its index in the history, invocation, and completion when determinate.
#[derive(Clone, Copy, Debug)]
struct Span {
    index: usize,
    start_ns: u64,
    end_ns: Option<u64>,
}

impl Span {
    fn of<P>(pair: &OpPair<P>) -> Span {
        Span { index: pair.index, start_ns: pair.start_ns(), end_ns: pair.end_ns() }
    }
}

struct Grant {
    span: Span,
    ttl_ns: u64,
    ttl_s: i64,
}

struct Put {
    span: Span,
    outcome: OpType,
    value: String,
    lease: i64,
    lease_not_found: bool,
}

struct Revoke {
    span: Span,
    /// `ok` only.
    found: Option<bool>,
}

struct Read {
    span: Span,
    key: String,
    prefix: bool,
    is_final: bool,
    /// `ok` only.
    found: Option<Vec<Stored>>,
}

impl Read {
    fn covers(&self, key: &str) -> bool {
        if self.prefix {
            key.starts_with(&self.key)
        } else {
            key == self.key
        }
    }

    fn what(&self) -> &'static str {
        if self.is_final {
            "final read"
        } else {
            "read"
        }
    }
}

/// Evidence that a lease was gone no later than `end_ns`.
struct Gone {
    lease: i64,
    end_ns: u64,
    /// Who saw it: e.g. "op 12 (read of jepsen/lease/3 found it absent)".
    by: String,
    /// Revokes explain themselves; the other observations must respect the TTL (rule 2).
    from_revoke: bool,
}

/// The history sorted by what the rules need.
#[derive(Default)]
struct History {
    grants: HashMap<i64, Grant>,
    puts: BTreeMap<String, Put>,
    revokes: HashMap<i64, Vec<Revoke>>,
    /// Invocation times of `ok` keep-alives that answered a positive TTL, per lease.
    renewals: HashMap<i64, Vec<u64>>,
    reads: Vec<Read>,
}

impl History {
    fn index(pairs: &[OpPair<LeaseOp>], report: &mut Report) -> History {
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
    fn gone_observations(&self) -> Vec<Gone> {
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
    fn puts_covered<'a>(&'a self, read: &'a Read) -> impl Iterator<Item = (&'a String, &'a Put)> + 'a {
        let range: Box<dyn Iterator<Item = (&String, &Put)>> = if read.prefix {
            Box::new(self.puts.range(read.key.clone()..).take_while(|(k, _)| k.starts_with(&read.key)))
        } else {
            Box::new(self.puts.get_key_value(&read.key).into_iter())
        };
        range.filter(|(k, _)| read.covers(k))
    }

    /// Rule 1: nothing invoked after a lease was seen gone sees it alive.
    fn check_gone_stays_gone(&self, gone: &[Gone], report: &mut Report) {
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
    fn check_early_expiry(&self, gone: &[Gone], options: CheckOptions, report: &mut Report) {
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
    fn check_values(&self, report: &mut Report) {
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
    fn check_final_reads(&self, report: &mut Report) {
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

/// Whether a determinate completion answers its invocation (same kind of op, same lease or key).
fn answers(invoke: &LeaseOp, done: &LeaseOp) -> bool {
    match (invoke, done) {
        (LeaseOp::Grant(a), LeaseOp::Grant(b)) => a.lease == b.lease,
        (LeaseOp::Put(a), LeaseOp::Put(b)) => (&a.key, &a.value, a.lease) == (&b.key, &b.value, b.lease),
        (LeaseOp::Revoke(a), LeaseOp::Revoke(b)) => a.lease == b.lease,
        (LeaseOp::KeepAlive(a), LeaseOp::KeepAlive(b)) => a.lease == b.lease,
        (LeaseOp::Read(a), LeaseOp::Read(b)) | (LeaseOp::FinalRead(a), LeaseOp::FinalRead(b)) => {
            (&a.key, a.prefix) == (&b.key, b.prefix)
        }
        _ => false,
    }
}

/// A run time for descriptions: seconds since the start.
fn secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{pair, Op};
    use crate::Validity;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;
    const TRUSTING: CheckOptions = CheckOptions { keep_alive_slack: Some(Duration::from_millis(200)) };

    /// Builds histories op by op; each op gets its own process.
    #[derive(Default)]
    struct Builder {
        ops: Vec<Op<LeaseOp>>,
        process: u64,
    }

    impl Builder {
        /// An op invoked at `t0` that completes at `t1` as `kind` with `done` (`None`: never completes).
        fn op(&mut self, invoke: LeaseOp, t0: u64, done: Option<(OpType, LeaseOp, u64)>) -> &mut Self {
            self.process += 1;
            self.ops.push(Op::invoke(self.process, invoke, t0));
            if let Some((kind, payload, t1)) = done {
                self.ops.push(Op::new(self.process, kind, payload, t1));
            }
            self
        }

        fn grant(&mut self, lease: i64, ttl: i64, t0: u64, t1: u64) -> &mut Self {
            let invoke = LeaseOp::Grant(LeaseGrant { lease, ttl, granted_ttl: None });
            let done = LeaseOp::Grant(LeaseGrant { lease, ttl, granted_ttl: Some(ttl) });
            self.op(invoke, t0, Some((OpType::Ok, done, t1)))
        }

        fn put(&mut self, key: &str, lease: i64, t0: u64, t1: u64, kind: OpType) -> &mut Self {
            let put = LeasePut { key: key.to_string(), value: value(key), lease, lease_not_found: false };
            self.op(LeaseOp::Put(put.clone()), t0, Some((kind, LeaseOp::Put(put), t1)))
        }

        fn put_lease_not_found(&mut self, key: &str, lease: i64, t0: u64, t1: u64) -> &mut Self {
            let put = LeasePut { key: key.to_string(), value: value(key), lease, lease_not_found: false };
            let done = LeasePut { lease_not_found: true, ..put.clone() };
            self.op(LeaseOp::Put(put), t0, Some((OpType::Fail, LeaseOp::Put(done), t1)))
        }

        fn revoke(&mut self, lease: i64, t0: u64, t1: u64, found: bool) -> &mut Self {
            let done = LeaseOp::Revoke(LeaseRevoke { lease, found: Some(found) });
            self.op(LeaseOp::Revoke(LeaseRevoke { lease, found: None }), t0, Some((OpType::Ok, done, t1)))
        }

        fn keep_alive(&mut self, lease: i64, t0: u64, t1: u64, ttl: i64) -> &mut Self {
            let done = LeaseOp::KeepAlive(LeaseKeepAlive { lease, ttl: Some(ttl) });
            self.op(LeaseOp::KeepAlive(LeaseKeepAlive { lease, ttl: None }), t0, Some((OpType::Ok, done, t1)))
        }

        /// A read of `key` that found it on `lease` (`Some`) or absent (`None`).
        fn read(&mut self, key: &str, t0: u64, t1: u64, lease: Option<i64>) -> &mut Self {
            let found = lease.map(|lease| Stored { key: key.to_string(), value: value(key), lease });
            let read = LeaseRead { key: key.to_string(), prefix: false, found: None };
            let done = LeaseRead { found: Some(found.into_iter().collect()), ..read.clone() };
            self.op(LeaseOp::Read(read), t0, Some((OpType::Ok, LeaseOp::Read(done), t1)))
        }

        fn read_value(&mut self, key: &str, t0: u64, t1: u64, value: &str, lease: i64) -> &mut Self {
            let read = LeaseRead { key: key.to_string(), prefix: false, found: None };
            let stored = Stored { key: key.to_string(), value: value.to_string(), lease };
            let done = LeaseRead { found: Some(vec![stored]), ..read.clone() };
            self.op(LeaseOp::Read(read), t0, Some((OpType::Ok, LeaseOp::Read(done), t1)))
        }

        /// A final prefix scan over `k` that found these keys (each with the lease given).
        fn final_read(&mut self, t0: u64, t1: u64, present: &[(&str, i64)]) -> &mut Self {
            let read = LeaseRead { key: "k".to_string(), prefix: true, found: None };
            let found = present
                .iter()
                .map(|(key, lease)| Stored { key: key.to_string(), value: value(key), lease: *lease })
                .collect();
            let done = LeaseRead { found: Some(found), ..read.clone() };
            self.op(LeaseOp::FinalRead(read), t0, Some((OpType::Ok, LeaseOp::FinalRead(done), t1)))
        }

        fn check(&self, options: CheckOptions) -> CheckResult {
            let mut ops = self.ops.clone();
            ops.sort_by_key(|op| (op.time_ns, op.kind != OpType::Invoke));
            check(&pair(ops).expect("well-formed history"), options)
        }
    }

    fn value(key: &str) -> String {
        format!("v-{key}")
    }

    /// Three leases with a 3 s TTL: one revoked, one kept alive past its first TTL, one left to expire.
    fn valid() -> Builder {
        let mut b = Builder::default();
        b.grant(1, 3, 0, 10 * MS)
            .grant(2, 3, 0, 10 * MS)
            .grant(3, 3, 0, 10 * MS)
            .put("k1", 1, 20 * MS, 30 * MS, OpType::Ok)
            .put("k2", 2, 20 * MS, 30 * MS, OpType::Ok)
            .put("k3", 3, 20 * MS, 30 * MS, OpType::Ok)
            .put("k4", 3, 20 * MS, 30 * MS, OpType::Info)
            .read("k1", S, S + 5 * MS, Some(1))
            .revoke(1, 2 * S, 2 * S + 5 * MS, true)
            .read("k1", 2 * S + 10 * MS, 2 * S + 15 * MS, None)
            .keep_alive(2, 2 * S, 2 * S + 5 * MS, 3)
            // Lease 3 expires on time; its info put never took effect, or went with it.
            .read("k3", 3 * S + 100 * MS, 3 * S + 105 * MS, None)
            .read("k4", 3 * S + 200 * MS, 3 * S + 205 * MS, None)
            // Lease 2 lives on thanks to the keep-alive, then expires.
            .read("k2", 4 * S, 4 * S + 5 * MS, Some(2))
            .read("k2", 5 * S + 300 * MS, 5 * S + 305 * MS, None)
            .put_lease_not_found("k5", 3, 6 * S, 6 * S + 5 * MS)
            .revoke(3, 7 * S, 7 * S + 5 * MS, false)
            .final_read(20 * S, 20 * S + 5 * MS, &[]);
        b
    }

    fn kinds(result: &CheckResult) -> Vec<AnomalyKind> {
        result.anomalies.iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_valid_history_passes_with_and_without_trusting_keep_alives() {
        for options in [TRUSTING, CheckOptions::GRANTS_ONLY] {
            let result = valid().check(options);
            assert_eq!(result.valid, Validity::Valid, "{result}");
        }
    }

    #[test]
    fn concurrent_ops_are_given_the_benefit_of_the_doubt() {
        let mut b = Builder::default();
        b.grant(1, 3, 0, 10 * MS)
            .put("k1", 1, 20 * MS, 30 * MS, OpType::Ok)
            // A read concurrent with the revoke may see the key; one concurrent with the put may not.
            .read("k1", 25 * MS, 35 * MS, None)
            .revoke(1, S, S + 50 * MS, true)
            .read("k1", S + 10 * MS, S + 60 * MS, Some(1))
            // Absent before the TTL is fine once a revoke was invoked, even if it is indeterminate.
            .grant(2, 3, 0, 10 * MS)
            .put("k2", 2, 20 * MS, 30 * MS, OpType::Ok)
            .op(LeaseOp::Revoke(LeaseRevoke { lease: 2, found: None }), S, None)
            .read("k2", S + 100 * MS, S + 105 * MS, None)
            .final_read(20 * S, 20 * S + 5 * MS, &[]);
        let result = b.check(TRUSTING);
        assert_eq!(result.valid, Validity::Valid, "{result}");
    }

    #[test]
    fn each_anomaly_is_caught() {
        type Case = (&'static str, fn(&mut Builder), CheckOptions, AnomalyKind);
        let cases: Vec<Case> = vec![
            (
                "read after revoke",
                |b| {
                    b.read("k1", 3 * S, 3 * S + 5 * MS, Some(1));
                },
                TRUSTING,
                AnomalyKind::AliveAfterRevoke,
            ),
            (
                "read after an absent read",
                |b| {
                    b.read("k3", 3 * S + 200 * MS, 3 * S + 210 * MS, Some(3));
                },
                TRUSTING,
                AnomalyKind::AliveAfterRevoke,
            ),
            (
                "put accepted on a revoked lease",
                |b| {
                    b.put("k9", 1, 3 * S, 3 * S + 5 * MS, OpType::Ok);
                },
                TRUSTING,
                AnomalyKind::AliveAfterRevoke,
            ),
            (
                "revoke found a lease already seen gone",
                |b| {
                    b.revoke(1, 3 * S, 3 * S + 5 * MS, true);
                },
                TRUSTING,
                AnomalyKind::AliveAfterRevoke,
            ),
            (
                "early expiry after the grant",
                |b| {
                    b.read("k3", 2 * S + 900 * MS, 2 * S + 950 * MS, None);
                },
                CheckOptions::GRANTS_ONLY,
                AnomalyKind::ExpiredEarly,
            ),
            (
                "early expiry after a keep-alive",
                |b| {
                    b.read("k2", 4 * S + 500 * MS, 4 * S + 505 * MS, None);
                },
                TRUSTING,
                AnomalyKind::ExpiredEarly,
            ),
            (
                "early expiry seen by a put",
                |b| {
                    b.grant(7, 5, 0, 10 * MS).put_lease_not_found("k7", 7, 2 * S, 2 * S + 5 * MS);
                },
                TRUSTING,
                AnomalyKind::ExpiredEarly,
            ),
            (
                "not expired after the run",
                |b| {
                    b.final_read(21 * S, 21 * S + 5 * MS, &[("k2", 2)]);
                },
                TRUSTING,
                AnomalyKind::NotExpired,
            ),
            (
                "value never written",
                |b| {
                    b.read_value("k2", S, S + 5 * MS, "v-other", 2);
                },
                TRUSTING,
                AnomalyKind::Unexpected,
            ),
            (
                "key never put",
                |b| {
                    b.read_value("k8", S, S + 5 * MS, "v-k8", 2);
                },
                TRUSTING,
                AnomalyKind::Unexpected,
            ),
            (
                "key on the wrong lease",
                |b| {
                    b.read("k2", S, S + 5 * MS, Some(3));
                },
                TRUSTING,
                AnomalyKind::Unexpected,
            ),
        ];
        for (name, add, options, want) in cases {
            let mut b = valid();
            add(&mut b);
            let result = b.check(options);
            assert_eq!(result.valid, Validity::Invalid, "{name}: {result}");
            assert!(result.has(want), "{name}: {result}");
        }
    }

    #[test]
    fn untrusted_keep_alives_anchor_nothing() {
        // The same absent read is early with the keep-alive as anchor, and on time without it.
        let mut b = valid();
        b.read("k2", 4 * S + 500 * MS, 4 * S + 505 * MS, None);
        assert!(b.check(TRUSTING).has(AnomalyKind::ExpiredEarly));
        let result = b.check(CheckOptions::GRANTS_ONLY);
        assert_eq!(result.valid, Validity::Valid, "{result}");
    }

    #[test]
    fn keep_alive_slack_is_granted() {
        // Kept alive at 2 s with a 3 s TTL and 200 ms of slack: gone at 4.85 s passes, at 4.7 s it is early.
        for (read_at, want) in [(4 * S + 850 * MS, Validity::Valid), (4 * S + 700 * MS, Validity::Invalid)] {
            let mut b = valid();
            b.read("k2", read_at - 50 * MS, read_at, None);
            assert_eq!(b.check(TRUSTING).valid, want, "read completing at {read_at}");
        }
    }

    #[test]
    fn a_missing_final_read_is_unknown() {
        let mut b = Builder::default();
        b.grant(1, 3, 0, 10 * MS).put("k1", 1, 20 * MS, 30 * MS, OpType::Ok).read("k1", S, S + 5 * MS, Some(1));
        let result = b.check(TRUSTING);
        assert_eq!((result.valid, kinds(&result)), (Validity::Unknown, vec![AnomalyKind::NothingRead]), "{result}");
    }

    #[test]
    fn anomalies_are_capped_per_kind() {
        let mut b = valid();
        let present: Vec<(String, i64)> = (0..15).map(|n| (format!("k-extra-{n}"), 2)).collect();
        let refs: Vec<(&str, i64)> = present.iter().map(|(k, l)| (k.as_str(), *l)).collect();
        b.final_read(21 * S, 21 * S + 5 * MS, &refs);
        let result = b.check(TRUSTING);
        let unexpected = result.anomalies.iter().filter(|a| a.kind == AnomalyKind::Unexpected).count();
        assert_eq!(unexpected, MAX_REPORTED + 1, "{result}");
        assert!(result.anomalies.iter().any(|a| a.description.contains("and 5 more")), "{result}");
    }

    #[test]
    fn payloads_keep_jepsen_shape() {
        let op = Op::invoke(3, LeaseOp::KeepAlive(LeaseKeepAlive { lease: 7, ttl: None }), 5);
        let text = serde_json::to_string(&op).expect("encode");
        assert_eq!(text, r#"{"process":3,"type":"invoke","f":"keep-alive","value":{"lease":7},"time_ns":5}"#);
        let back: Op<LeaseOp> = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, op);
    }
}
