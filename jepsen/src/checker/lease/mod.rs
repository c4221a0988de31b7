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
//!
//! # Layout
//!
//! [`LeaseOp`] and its parts (the history's payload) are in `op`; `index` sorts a history into what
//! the rules need and gathers the evidence that a lease was gone; `rule` checks rules 1 to 4.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checker::{Anomaly, AnomalyKind, CheckResult};
use crate::history::OpPair;

mod index;
mod op;
mod rule;

use index::History;
pub use op::{LeaseGrant, LeaseKeepAlive, LeaseOp, LeasePut, LeaseRead, LeaseRevoke, Stored};

/// At most this many anomalies of one kind are described; the rest are counted.
const MAX_REPORTED: usize = 10;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{pair, Op, OpType};
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
}
