//! Seeded random requests over the few keys the model knows.

use proto::etcdserverpb as pb;
use proto::etcdserverpb::compare::{CompareTarget, TargetUnion};
use proto::etcdserverpb::request_op::Request;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::*;

/// Random requests over the small key space.
pub(crate) struct Gen {
    pub(crate) rng: StdRng,
}

impl Gen {
    pub(crate) fn key(&mut self) -> Vec<u8> {
        let pool: &[&str] = if self.rng.gen_bool(0.9) { &KEYS } else { &GAPS };
        pool.choose(&mut self.rng).expect("non-empty").as_bytes().to_vec()
    }

    pub(crate) fn value(&mut self) -> Vec<u8> {
        VALUES.choose(&mut self.rng).expect("non-empty").as_bytes().to_vec()
    }

    /// A `(key, range_end)` pair in one of etcd's forms.
    pub(crate) fn key_range(&mut self) -> (Vec<u8>, Vec<u8>) {
        match self.rng.gen_range(0..10) {
            0..=3 => (self.key(), Vec::new()),
            4 | 5 => {
                let prefix = ["a", "a/", "b", "c", "c/"].choose(&mut self.rng).expect("non-empty").as_bytes();
                let mut end = prefix.to_vec();
                *end.last_mut().expect("non-empty") += 1;
                (prefix.to_vec(), end)
            }
            6 => (self.key(), vec![0]),
            7 => (vec![0], vec![0]),
            _ => (self.key(), self.key()),
        }
    }

    /// A revision in `[lo, hi]`, or 0.
    pub(crate) fn revision(&mut self, lo: i64, hi: i64) -> i64 {
        if lo > hi || self.rng.gen_bool(0.3) {
            0
        } else {
            self.rng.gen_range(lo..=hi)
        }
    }

    pub(crate) fn put(&mut self) -> pb::PutRequest {
        let mut req = pb::PutRequest {
            key: self.key(),
            value: self.value(),
            lease: [0, 0, 0, 1, 2][self.rng.gen_range(0..5)],
            prev_kv: self.rng.gen_bool(0.5),
            ignore_value: self.rng.gen_bool(0.1),
            ignore_lease: self.rng.gen_bool(0.1),
        };
        if req.ignore_value {
            req.value.clear();
        }
        if req.ignore_lease {
            req.lease = 0;
        }
        req
    }

    pub(crate) fn delete(&mut self) -> pb::DeleteRangeRequest {
        let (key, range_end) = if self.rng.gen_bool(0.5) { (self.key(), Vec::new()) } else { self.key_range() };
        pb::DeleteRangeRequest { key, range_end, prev_kv: self.rng.gen_bool(0.5) }
    }

    /// A range with random options at a random revision: mostly readable ones, sometimes compacted or future.
    pub(crate) fn range(&mut self, compacted: i64, current: i64) -> pb::RangeRequest {
        let (key, range_end) = self.key_range();
        let revision = match self.rng.gen_range(0..20) {
            0 => current + self.rng.gen_range(1..3),
            1 if compacted > 1 => self.rng.gen_range(1..compacted),
            _ => self.revision(compacted.max(1), current),
        };
        let mut req = pb::RangeRequest { key, range_end, revision, ..Default::default() };
        if self.rng.gen_bool(0.4) {
            req.limit = self.rng.gen_range(-1..5);
        }
        if self.rng.gen_bool(0.4) {
            req.sort_order = self.rng.gen_range(0..3);
            req.sort_target = self.rng.gen_range(0..5);
        }
        req.keys_only = self.rng.gen_bool(0.15);
        req.count_only = self.rng.gen_bool(0.1);
        let bound = |rng: &mut StdRng| {
            if rng.gen_bool(0.15) {
                rng.gen_range(1..=current + 1)
            } else {
                0
            }
        };
        req.min_mod_revision = bound(&mut self.rng);
        req.max_mod_revision = bound(&mut self.rng);
        req.min_create_revision = bound(&mut self.rng);
        req.max_create_revision = bound(&mut self.rng);
        req
    }

    pub(crate) fn compare(&mut self, current: i64) -> pb::Compare {
        use TargetUnion as U;
        let (key, range_end) = if self.rng.gen_bool(0.7) { (self.key(), Vec::new()) } else { self.key_range() };
        let target = self.rng.gen_range(0..5);
        let rev = self.rng.gen_range(0..=current + 1);
        let mut operand = match CompareTarget::try_from(target).expect("a target") {
            CompareTarget::Version => U::Version(self.rng.gen_range(0..4)),
            CompareTarget::Create => U::CreateRevision(rev),
            CompareTarget::Mod => U::ModRevision(rev),
            CompareTarget::Value => U::Value(self.value()),
            CompareTarget::Lease => U::Lease(self.rng.gen_range(0..3)),
        };
        // Now and then an operand of another kind, which counts as zero.
        if self.rng.gen_bool(0.05) {
            operand = U::Version(1);
        }
        pb::Compare {
            result: self.rng.gen_range(0..4),
            target,
            key,
            range_end,
            target_union: if self.rng.gen_bool(0.03) { None } else { Some(operand) },
        }
    }

    pub(crate) fn txn(&mut self, compacted: i64, current: i64, depth: u32) -> pb::TxnRequest {
        let compare = (0..self.rng.gen_range(0..3)).map(|_| self.compare(current)).collect();
        let ops = |g: &mut Self| -> Vec<pb::RequestOp> {
            (0..g.rng.gen_range(0..4))
                .map(|_| {
                    let request = match g.rng.gen_range(0..20) {
                        0..=6 => Request::RequestPut(g.put()),
                        7..=10 => Request::RequestDeleteRange(g.delete()),
                        11..=16 => {
                            let mut range = g.range(compacted, current);
                            // Inside a txn, mostly revisions that can be read.
                            if g.rng.gen_bool(0.8) {
                                range.revision = g.revision(compacted.max(1), current);
                            }
                            Request::RequestRange(range)
                        }
                        _ if depth < 2 => Request::RequestTxn(g.txn(compacted, current, depth + 1)),
                        _ => Request::RequestPut(g.put()),
                    };
                    pb::RequestOp { request: Some(request) }
                })
                .collect()
        };
        let success = ops(self);
        let failure = ops(self);
        pb::TxnRequest { compare, success, failure }
    }
}
