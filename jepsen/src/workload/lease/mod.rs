//! The lease workload: short leases granted, keys put attached to them, some leases revoked, some kept
//! alive, the rest left to expire, and keys read to see which are still there. Checked by
//! [`crate::checker::lease`], whose module doc explains what etcd promises.
//!
//! Requests:
//! - grant: `LeaseGrant` with a client-chosen id (unique in the run) and `--lease-ttl`; the history
//!   keeps the TTL the server granted;
//! - put: `Put` of a fresh key `jepsen/lease/<n>` (value `<n>`) attached to a live lease; each key is
//!   put once, so a read pins the one put it saw, and a key can only disappear with its lease;
//! - revoke: `LeaseRevoke`; "lease not found" is an answer (`found: false`), not an error;
//! - keep-alive: one `LeaseKeepAlive` round trip on a fresh stream (the stream stays open until the
//!   answer arrives, then is dropped);
//! - read: a linearizable `Range` of one recent key.
//!
//! Every lease gets a fate from its id: kept alive (for a few TTLs, then left to expire), revoked once
//! it has a key, or left to expire; puts go to any live lease. So a run has keys that vanish by revoke,
//! by expiry, and keys that outlive their first TTL.
//!
//! After the final heal nothing is kept alive any more; [`Workload::finish`] waits for the longest
//! TTL plus a few election timeouts, then scans the prefix (`final-read`) until it is empty or a
//! second such wait has passed.
//!
//! Client rules as in [`super::register`]: reads that err are `fail`; a request whose connection was
//! refused is `fail`; any other error or a timeout of a grant, put, revoke or keep-alive is `info`,
//! after which the worker continues under a fresh process id. Nothing is retried.
//!
//! This file holds the op mix and the shared pool of leases and keys; the requests themselves are
//! in `api`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::checker::lease::{
    self, CheckOptions, LeaseGrant, LeaseKeepAlive, LeaseOp, LeasePut, LeaseRead, LeaseRevoke,
};
use crate::checker::revision::{self, Access};
use crate::checker::CheckResult;
use crate::error::{Error, Result};
use crate::history::{OpPair, OpType};
use crate::options::{FaultKind, Target, TestOptions};
use crate::recorder::Recorder;
use crate::workload::{FinishContext, WorkerContext, Workload};

mod api;

use api::{perform, Api};

/// Keys are `<KEY_PREFIX><n>`.
pub const KEY_PREFIX: &str = "jepsen/lease/";

/// The op mix, in percent; reads take the rest.
const GRANT_PERCENT: u32 = 10;
const PUT_PERCENT: u32 = 30;
const KEEP_ALIVE_PERCENT: u32 = 15;
const REVOKE_PERCENT: u32 = 7;

/// Below this many live leases the next op is a grant; at this many no more are granted.
const MIN_LEASES: usize = 3;
const MAX_LEASES: usize = 12;

/// Reads pick among the keys put in the last this many TTLs: the ones whose fate is still open
/// (present, just revoked, just expired), whatever the op rate.
const READ_WINDOW_TTLS: u32 = 2;

/// A kept-alive lease is kept alive for this many TTLs, then left to expire (the pool turns over).
const KEEP_ALIVE_ROUNDS: u32 = 4;

/// How long after its TTL a lease stays a put target: puts on just-expired leases exercise the
/// "lease not found" path.
const LINGER: Duration = Duration::from_secs(1);

/// The pause between two final scans, or after a failed one.
const FINAL_READ_PAUSE: Duration = Duration::from_millis(500);

/// What the workload and its checker are told about the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The TTL asked for, in seconds.
    pub ttl: i64,
    /// The members' election timeout: a new leader extends every lease by it.
    pub election_timeout: Duration,
    pub check: CheckOptions,
    pub seed: u64,
}

impl LeaseConfig {
    /// The config for a run; refuses a TTL that does not exceed the election timeout (etcd would
    /// raise it anyway, and a lease must survive one election).
    pub fn from_options(opts: &TestOptions) -> Result<LeaseConfig> {
        let election_timeout = Duration::from_millis(opts.election_timeout);
        if Duration::from_secs(opts.lease_ttl) <= election_timeout {
            return Err(Error::Setup(format!(
                "--lease-ttl {} s must exceed --election-timeout {} ms",
                opts.lease_ttl, opts.election_timeout
            )));
        }
        let ttl = i64::try_from(opts.lease_ttl).map_err(|_| Error::Setup("--lease-ttl is too large".to_string()))?;
        Ok(LeaseConfig { ttl, election_timeout, check: check_options(opts), seed: opts.seed })
    }
}

/// Whether keep-alives can anchor the early-expiry rule in this run, and with how much slack (see
/// [`crate::checker::lease`]): with two heartbeats (an isolated etcd leader may renew until it steps
/// down, which can be about one heartbeat after the new leader's extension ran out), plus any link
/// delay. Not on etcd 3.4 with process pauses: its resumed leader renews and revokes from stale
/// state (etcd #15247, fixed in 3.4.31); ours confirms its leadership with a quorum before either,
/// so on ours keep-alives are trusted under pauses too.
pub fn check_options(opts: &TestOptions) -> CheckOptions {
    let pauses = opts.nemesis.iter().any(|f| matches!(f, FaultKind::PauseOne | FaultKind::PauseLeader));
    if pauses && opts.target == Target::Etcd {
        return CheckOptions::GRANTS_ONLY;
    }
    let mut slack = Duration::from_millis(2 * opts.heartbeat_interval);
    if opts.nemesis.contains(&FaultKind::Delay) {
        slack += Duration::from_millis(opts.delay_ms + opts.delay_jitter_ms);
    }
    CheckOptions { keep_alive_slack: Some(slack) }
}

pub struct LeaseWorkload {
    config: LeaseConfig,
    pool: Mutex<Pool>,
}

/// The leases and keys the workers share.
#[derive(Default)]
struct Pool {
    next_lease: i64,
    next_key: u64,
    leases: Vec<Live>,
    /// Every key whose put was invoked, with the time its put was chosen, in order.
    keys: Vec<(String, Instant)>,
    /// The longest TTL any grant answered, in seconds.
    max_ttl: i64,
    /// Counts for the report's notes.
    granted: u64,
    revoked: u64,
    kept_alive: u64,
}

/// A lease granted `ok` that may still be alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Live {
    id: i64,
    ttl: i64,
    fate: Fate,
    granted: Instant,
    /// The invocation of the grant or of the latest `ok` keep-alive.
    renewed: Instant,
    keys: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    KeepAlive,
    Revoke,
    Expire,
}

impl Fate {
    fn of(id: i64) -> Fate {
        match id.rem_euclid(3) {
            0 => Fate::KeepAlive,
            1 => Fate::Revoke,
            _ => Fate::Expire,
        }
    }
}

impl Live {
    fn deadline(&self) -> Instant {
        self.renewed + secs(self.ttl)
    }
}

impl LeaseWorkload {
    pub fn new(config: LeaseConfig) -> LeaseWorkload {
        let pool = Pool { next_lease: 1, max_ttl: config.ttl, ..Pool::default() };
        LeaseWorkload { config, pool: Mutex::new(pool) }
    }

    /// How the revision checker treats an `ok` completion: reads observe a revision, puts create
    /// one; lease calls are left out (a grant creates no revision, a revoke only when it had keys,
    /// and a keep-alive's header comes from whichever member the client asked).
    pub fn access(op: &LeaseOp) -> Access {
        match op {
            LeaseOp::Read(_) | LeaseOp::FinalRead(_) => Access::Read,
            LeaseOp::Put(_) => Access::Write,
            LeaseOp::Grant(_) | LeaseOp::Revoke(_) | LeaseOp::KeepAlive(_) => Access::Ignore,
        }
    }

    /// The next op for a worker, given the time.
    fn next_op(&self, rng: &mut StdRng, now: Instant) -> LeaseOp {
        let mut pool = self.lock();
        pool.retire(now);
        if pool.leases.len() < MIN_LEASES {
            return pool.grant(self.config.ttl);
        }
        let roll = rng.gen_range(0..100);
        let mut bound = GRANT_PERCENT;
        if roll < bound && pool.leases.len() < MAX_LEASES {
            return pool.grant(self.config.ttl);
        }
        bound += PUT_PERCENT;
        if roll < bound {
            return pool.put(rng, now);
        }
        bound += KEEP_ALIVE_PERCENT;
        if roll < bound {
            let oldest = pool.leases.iter().filter(|l| l.fate == Fate::KeepAlive).min_by_key(|l| l.renewed);
            if let Some(lease) = oldest {
                return LeaseOp::KeepAlive(LeaseKeepAlive { lease: lease.id, ttl: None });
            }
        }
        bound += REVOKE_PERCENT;
        if roll < bound {
            if let Some(at) = pool.leases.iter().position(|l| l.fate == Fate::Revoke && l.keys > 0) {
                let lease = pool.leases.remove(at);
                pool.revoked += 1;
                return LeaseOp::Revoke(LeaseRevoke { lease: lease.id, found: None });
            }
        }
        pool.read(rng, now, secs(self.config.ttl) * READ_WINDOW_TTLS)
    }

    /// Updates the pool from an op's completion; `invoked` is when the op was invoked.
    fn observe(&self, op: &LeaseOp, kind: OpType, invoked: Instant) {
        let mut pool = self.lock();
        match (op, kind) {
            (LeaseOp::Grant(grant), OpType::Ok) => {
                let ttl = grant.granted_ttl.unwrap_or(grant.ttl);
                pool.max_ttl = pool.max_ttl.max(ttl);
                pool.granted += 1;
                let fate = Fate::of(grant.lease);
                pool.leases.push(Live { id: grant.lease, ttl, fate, granted: invoked, renewed: invoked, keys: 0 });
            }
            (LeaseOp::Put(put), OpType::Ok) => {
                if let Some(lease) = pool.leases.iter_mut().find(|l| l.id == put.lease) {
                    lease.keys += 1;
                }
            }
            (LeaseOp::Put(put), OpType::Fail) if put.lease_not_found => pool.leases.retain(|l| l.id != put.lease),
            (LeaseOp::KeepAlive(LeaseKeepAlive { lease, ttl: Some(ttl) }), OpType::Ok) => {
                if *ttl > 0 {
                    pool.kept_alive += 1;
                    if let Some(live) = pool.leases.iter_mut().find(|l| l.id == *lease) {
                        live.renewed = invoked;
                    }
                } else {
                    pool.leases.retain(|l| l.id != *lease);
                }
            }
            _ => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long after the workers stop every lease must be gone: the longest TTL, plus two election
    /// timeouts (a last leader change extends by one), plus a second for the lessor's tick and the
    /// revoke's commit.
    fn expiry_bound(&self) -> Duration {
        secs(self.lock().max_ttl) + 2 * self.config.election_timeout + Duration::from_secs(1)
    }
}

impl Pool {
    /// Forgets leases that surely expired, and stops keeping alive the ones kept long enough.
    fn retire(&mut self, now: Instant) {
        self.leases.retain(|l| l.deadline() + LINGER > now);
        for lease in &mut self.leases {
            if lease.fate == Fate::KeepAlive && now > lease.granted + secs(lease.ttl) * KEEP_ALIVE_ROUNDS {
                lease.fate = Fate::Expire;
            }
        }
    }

    fn grant(&mut self, ttl: i64) -> LeaseOp {
        let lease = self.next_lease;
        self.next_lease += 1;
        LeaseOp::Grant(LeaseGrant { lease, ttl, granted_ttl: None })
    }

    fn put(&mut self, rng: &mut StdRng, now: Instant) -> LeaseOp {
        let lease = self.leases[rng.gen_range(0..self.leases.len())].id;
        let n = self.next_key;
        self.next_key += 1;
        let key = format!("{KEY_PREFIX}{n}");
        self.keys.push((key.clone(), now));
        LeaseOp::Put(LeasePut { key, value: n.to_string(), lease, lease_not_found: false })
    }

    /// A read of a key put within `window` (the latest key when there is none).
    fn read(&mut self, rng: &mut StdRng, now: Instant, window: Duration) -> LeaseOp {
        if self.keys.is_empty() {
            return self.put(rng, now);
        }
        // Keys are in put order (up to workers racing for the lock), so the recent ones are a suffix.
        let from = self.keys.partition_point(|(_, at)| *at + window < now).min(self.keys.len() - 1);
        let key = self.keys[rng.gen_range(from..self.keys.len())].0.clone();
        LeaseOp::Read(LeaseRead { key, prefix: false, found: None })
    }
}

impl Workload for LeaseWorkload {
    type Op = LeaseOp;

    async fn run_worker(self: Arc<Self>, ctx: WorkerContext, recorder: Arc<Recorder<LeaseOp>>) {
        let mut rng =
            StdRng::seed_from_u64(self.config.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(ctx.index as u64));
        let mut process = recorder.fresh_process();
        let mut api = Api::new(&ctx.channel);
        while ctx.pace(&mut rng).await {
            let invoked = Instant::now();
            let op = self.next_op(&mut rng, invoked);
            let kind = perform(&mut api, &recorder, process, &ctx.member, op, ctx.op_timeout, |done, kind| {
                self.observe(done, kind, invoked)
            })
            .await;
            if kind == OpType::Info {
                process = recorder.fresh_process();
            }
        }
    }

    async fn finish(&self, ctx: &FinishContext, recorder: &Recorder<LeaseOp>) -> Result<()> {
        let bound = self.expiry_bound();
        info!(wait_secs = bound.as_secs_f64(), "waiting for every lease to expire");
        tokio::time::sleep(bound).await;
        let deadline = Instant::now() + bound;
        let process = recorder.fresh_process();
        let mut attempt = 0usize;
        while let Some((member, channel)) = ctx.members.get(attempt % ctx.members.len().max(1)) {
            let mut api = Api::new(channel);
            let scan = LeaseOp::FinalRead(LeaseRead { key: KEY_PREFIX.to_string(), prefix: true, found: None });
            let mut left = None;
            let kind = perform(&mut api, recorder, process, member, scan, ctx.op_timeout, |done, _| {
                if let LeaseOp::FinalRead(LeaseRead { found: Some(found), .. }) = done {
                    left = Some(found.len());
                }
            })
            .await;
            match (kind, left) {
                (OpType::Ok, Some(0)) => return Ok(()),
                (OpType::Ok, _) => {}
                // A read that erred is `fail` (never `info`), so the process carries on; another
                // member may answer.
                _ => attempt += 1,
            }
            if Instant::now() >= deadline {
                warn!(still_present = ?left, "no final read found every leased key gone");
                break;
            }
            tokio::time::sleep(FINAL_READ_PAUSE).await;
        }
        Ok(())
    }

    fn check(&self, pairs: &[OpPair<LeaseOp>], _budget: Duration) -> Vec<CheckResult> {
        vec![lease::check(pairs, self.config.check), revision::check(pairs, LeaseWorkload::access)]
    }

    fn notes(&self) -> Vec<String> {
        let wait = self.expiry_bound();
        let pool = self.lock();
        let trust = match self.config.check.keep_alive_slack {
            Some(slack) => format!("ok keep-alives restart the countdown (less {} ms of slack)", slack.as_millis()),
            None => {
                "keep-alives are not trusted (process pauses on etcd 3.4, etcd #15247), only grants start the countdown"
                    .to_string()
            }
        };
        vec![format!(
            "lease: TTL {} s; {} leases granted, {} revokes sent, {} keep-alives renewed; {trust}; final reads \
             after {:.1} s",
            self.config.ttl,
            pool.granted,
            pool.revoked,
            pool.kept_alive,
            wait.as_secs_f64()
        )]
    }
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> LeaseWorkload {
        let config =
            LeaseConfig { ttl: 3, election_timeout: Duration::from_secs(1), check: CheckOptions::GRANTS_ONLY, seed: 5 };
        LeaseWorkload::new(config)
    }

    fn granted(workload: &LeaseWorkload, op: &LeaseOp, at: Instant) -> i64 {
        let LeaseOp::Grant(grant) = op else { panic!("expected a grant, got {op:?}") };
        let done = LeaseOp::Grant(LeaseGrant { granted_ttl: Some(grant.ttl), ..grant.clone() });
        workload.observe(&done, OpType::Ok, at);
        grant.lease
    }

    #[test]
    fn grants_first_then_a_mix_on_unique_keys() {
        let workload = workload();
        let mut rng = StdRng::seed_from_u64(1);
        let now = Instant::now();
        for want in 1..=3 {
            let op = workload.next_op(&mut rng, now);
            assert_eq!(granted(&workload, &op, now), want);
        }
        let mut keys = std::collections::HashSet::new();
        let mut kinds = std::collections::HashSet::new();
        for _ in 0..300 {
            let op = workload.next_op(&mut rng, now);
            match &op {
                LeaseOp::Grant(_) => {
                    granted(&workload, &op, now);
                }
                LeaseOp::Put(put) => {
                    assert!(keys.insert(put.key.clone()), "{} put twice", put.key);
                    assert_eq!(put.key, format!("{KEY_PREFIX}{}", put.value));
                    workload.observe(&op, OpType::Ok, now);
                }
                LeaseOp::Read(read) => assert!(keys.contains(&read.key), "read of {} before its put", read.key),
                _ => {}
            }
            kinds.insert(std::mem::discriminant(&op));
        }
        assert_eq!(kinds.len(), 5, "grant, put, keep-alive, revoke and read all occur");
        assert!(workload.lock().leases.len() <= MAX_LEASES);
    }

    #[test]
    fn reads_pick_keys_put_within_two_ttls() {
        let mut pool = Pool { next_lease: 1, ..Pool::default() };
        let t0 = Instant::now();
        pool.leases.push(Live { id: 1, ttl: 3, fate: Fate::Expire, granted: t0, renewed: t0, keys: 0 });
        let mut rng = StdRng::seed_from_u64(3);
        for at in [t0, t0 + Duration::from_secs(1), t0 + Duration::from_secs(9), t0 + Duration::from_secs(10)] {
            pool.put(&mut rng, at);
        }
        let window = Duration::from_secs(6);
        let read: std::collections::HashSet<String> = (0..50)
            .map(|_| match pool.read(&mut rng, t0 + Duration::from_secs(12), window) {
                LeaseOp::Read(read) => read.key,
                other => panic!("expected a read, got {other:?}"),
            })
            .collect();
        let want: std::collections::HashSet<String> = [2, 3].iter().map(|n| format!("{KEY_PREFIX}{n}")).collect();
        assert_eq!(read, want);
        // Long after the last put, the latest key is still read.
        let late = pool.read(&mut rng, t0 + Duration::from_secs(60), window);
        assert!(matches!(&late, LeaseOp::Read(r) if r.key.ends_with("/3")), "{late:?}");
    }

    #[test]
    fn leases_leave_the_pool_when_gone() {
        let workload = workload();
        let mut rng = StdRng::seed_from_u64(2);
        let t0 = Instant::now();
        let ids: Vec<i64> = (0..3).map(|_| granted(&workload, &workload.next_op(&mut rng, t0), t0)).collect();
        // A keep-alive answering TTL 0 and a put refused for lack of a lease drop their leases.
        workload.observe(&LeaseOp::KeepAlive(LeaseKeepAlive { lease: ids[0], ttl: Some(0) }), OpType::Ok, t0);
        let refused = LeasePut { key: "k".to_string(), value: "0".to_string(), lease: ids[1], lease_not_found: true };
        workload.observe(&LeaseOp::Put(refused), OpType::Fail, t0);
        let left: Vec<i64> = workload.lock().leases.iter().map(|l| l.id).collect();
        assert_eq!(left, vec![ids[2]]);
        // A lease past its TTL (and the linger) is retired without being asked.
        workload.lock().retire(t0 + Duration::from_secs(5));
        assert!(workload.lock().leases.is_empty());
    }

    #[test]
    fn keep_alives_renew_until_the_lease_has_lived_a_few_ttls() {
        let workload = workload();
        let t0 = Instant::now();
        let keep = LeaseOp::Grant(LeaseGrant { lease: 3, ttl: 3, granted_ttl: Some(3) });
        workload.observe(&keep, OpType::Ok, t0);
        let later = t0 + Duration::from_secs(2);
        workload.observe(&LeaseOp::KeepAlive(LeaseKeepAlive { lease: 3, ttl: Some(3) }), OpType::Ok, later);
        let mut pool = workload.lock();
        assert_eq!((pool.leases[0].fate, pool.leases[0].renewed), (Fate::KeepAlive, later));
        pool.retire(t0 + Duration::from_secs(4));
        assert_eq!(pool.leases[0].fate, Fate::KeepAlive);
        pool.leases[0].renewed = t0 + Duration::from_secs(12);
        pool.retire(t0 + Duration::from_secs(13));
        assert_eq!(pool.leases[0].fate, Fate::Expire, "kept alive for four TTLs, then let go");
    }

    #[test]
    fn pauses_withdraw_trust_in_keep_alives_on_etcd_only() {
        let parse =
            |nemesis: &str| TestOptions::parse(&["--workload", "lease", "--nemesis", nemesis]).expect("valid flags");
        assert_eq!(
            check_options(&parse("partition-leader,kill-all")).keep_alive_slack,
            Some(Duration::from_millis(200))
        );
        assert!(check_options(&parse("kill-leader,pause-leader")).keep_alive_slack.is_some(), "ours is trusted");
        let etcd = |nemesis: &str| {
            TestOptions::parse(&["--workload", "lease", "--target", "etcd", "--nemesis", nemesis]).expect("valid flags")
        };
        assert_eq!(check_options(&etcd("kill-leader,pause-leader")), CheckOptions::GRANTS_ONLY);
        assert!(check_options(&etcd("kill-leader")).keep_alive_slack.is_some());
        let short = TestOptions::parse(&["--lease-ttl", "1"]).expect("valid flags");
        assert!(LeaseConfig::from_options(&short).is_err(), "a 1 s TTL does not exceed a 1 s election timeout");
    }
}
