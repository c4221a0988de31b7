//! The MVCC store against a naive model that keeps the whole key space at every revision, driven by seeded
//! random operations: puts, deletes, txns (nested, with compares over ranges), compactions, commits, reopens
//! and snapshot installs, with random ranges read at random revisions after every step.
//!
//! On a mismatch the test panics with the seed and the step number; `MODEL_SEED=<n>` replays one seed.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use kv_api::revision::Revision;
use kv_api::validate::{self, Limits};
use kv_api::{Bucket, Command, CommandResponse, Error, MemBackend, MvccStore};
use proto::etcdserverpb as pb;
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use proto::etcdserverpb::request_op::Request;
use proto::etcdserverpb::response_op::Response;
use proto::mvccpb::KeyValue;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const SEEDS: [u64; 6] = [1, 2, 3, 42, 1234, 98765];
const STEPS: usize = 2500;
/// Few, short keys, so that ranges overlap and keys collide often. At most 12, so that etcd's sort (an
/// insertion sort below 12 elements) is stable and ties come out in key order, as the store does.
const KEYS: [&str; 10] = ["a", "a/1", "a/2", "b", "b/1", "c", "c/1", "d", "e", "f"];
/// Never written, for ranges and compares that start or end between keys.
const GAPS: [&str; 4] = ["0", "a/", "b/0", "z"];
const VALUES: [&str; 4] = ["", "x", "y", "z"];

type State = BTreeMap<Vec<u8>, KeyValue>;

fn header(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { revision, ..Default::default() })
}

/// etcd's key-range forms: empty end is one key, `\0` end is every key from `start`, else `[start, end)`.
fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    match end {
        [] => key == start,
        [0] => key >= start,
        end => key >= start && key < end,
    }
}

fn kvs_in<'s>(state: &'s State, start: &'s [u8], end: &'s [u8]) -> impl Iterator<Item = &'s KeyValue> + 's {
    state.values().filter(move |kv| in_range(&kv.key, start, end))
}

/// The whole key space after every revision: `states[r]` is the store as a read at `r` sees it.
struct Model {
    states: Vec<State>,
    /// Number of changes (puts and deleted keys) each revision made.
    changes: Vec<usize>,
    compacted: i64,
}

impl Model {
    fn new() -> Self {
        // Revision 0 does not exist; an empty store is at revision 1.
        Self {
            states: vec![State::new(), State::new()],
            changes: vec![0, 0],
            // As etcd: -1 until the first compaction.
            compacted: -1,
        }
    }

    fn current(&self) -> i64 {
        self.states.len() as i64 - 1
    }

    fn state(&self, rev: i64) -> &State {
        &self.states[usize::try_from(rev).expect("a revision")]
    }

    /// A range seen from a store at revision `current`, whose newest state is `newest` (the working state
    /// inside a write txn).
    fn range_in(&self, req: &pb::RangeRequest, current: i64, newest: &State) -> Result<pb::RangeResponse, Error> {
        if req.revision > current {
            return Err(Error::FutureRevision);
        }
        let at = if req.revision <= 0 { current } else { req.revision };
        if at < self.compacted {
            return Err(Error::Compacted);
        }
        let state = if at == current { newest } else { self.state(at) };
        let all: Vec<KeyValue> = kvs_in(state, &req.key, &req.range_end).cloned().collect();
        let count = all.len() as i64;
        let mut kvs = if req.count_only { Vec::new() } else { all };
        let filtered = req.min_mod_revision != 0
            || req.max_mod_revision != 0
            || req.min_create_revision != 0
            || req.max_create_revision != 0;
        // etcd fetches only limit + 1 keys unless an order or a filter is given...
        if !filtered && req.sort_order() == SortOrder::None && req.limit > 0 {
            kvs.truncate(req.limit as usize + 1);
        }
        kvs.retain(|kv| {
            (req.min_mod_revision == 0 || kv.mod_revision >= req.min_mod_revision)
                && (req.max_mod_revision == 0 || kv.mod_revision <= req.max_mod_revision)
                && (req.min_create_revision == 0 || kv.create_revision >= req.min_create_revision)
                && (req.max_create_revision == 0 || kv.create_revision <= req.max_create_revision)
        });
        // ... and sorts ascending when the target is not the key, even with no order.
        let order = match (req.sort_order(), req.sort_target()) {
            (SortOrder::None, SortTarget::Key) => SortOrder::None,
            (SortOrder::None, _) => SortOrder::Ascend,
            (order, _) => order,
        };
        let field = |kv: &KeyValue| -> (i64, Vec<u8>) {
            match req.sort_target() {
                SortTarget::Key => (0, kv.key.clone()),
                SortTarget::Version => (kv.version, Vec::new()),
                SortTarget::Create => (kv.create_revision, Vec::new()),
                SortTarget::Mod => (kv.mod_revision, Vec::new()),
                SortTarget::Value => (0, kv.value.clone()),
            }
        };
        match order {
            SortOrder::Ascend => kvs.sort_by_key(field),
            SortOrder::Descend => kvs.sort_by_key(|kv| std::cmp::Reverse(field(kv))),
            SortOrder::None => {}
        }
        let mut more = false;
        if req.limit > 0 && kvs.len() > req.limit as usize {
            kvs.truncate(req.limit as usize);
            more = true;
        }
        if req.keys_only {
            kvs.iter_mut().for_each(|kv| kv.value.clear());
        }
        Ok(pb::RangeResponse { header: header(current), kvs, more, count })
    }

    fn range(&self, req: &pb::RangeRequest) -> Result<pb::RangeResponse, Error> {
        let current = self.current();
        self.range_in(req, current, self.state(current))
    }

    fn compact(&mut self, rev: i64) -> Result<pb::CompactionResponse, Error> {
        if rev <= self.compacted {
            return Err(Error::Compacted);
        }
        if rev > self.current() {
            return Err(Error::FutureRevision);
        }
        self.compacted = rev;
        Ok(pb::CompactionResponse { header: header(self.current()) })
    }

    /// Main revisions of the entries the key bucket must hold: the value of each key alive at the compacted
    /// revision, and every change after it.
    fn stored_revisions(&self) -> Vec<i64> {
        let floor = self.compacted.max(0);
        let mut revs: Vec<i64> = self.state(floor).values().map(|kv| kv.mod_revision).collect();
        for rev in floor + 1..=self.current() {
            revs.extend(std::iter::repeat_n(rev, self.changes[rev as usize]));
        }
        revs.sort_unstable();
        revs
    }

    fn holds(state: &State, cmp: &pb::Compare) -> bool {
        let kvs: Vec<&KeyValue> = kvs_in(state, &cmp.key, &cmp.range_end).collect();
        if kvs.is_empty() {
            // A missing key is a zero KeyValue, except that a value compare on it always fails.
            return cmp.target() != CompareTarget::Value && Self::compare_kv(cmp, &KeyValue::default());
        }
        kvs.into_iter().all(|kv| Self::compare_kv(cmp, kv))
    }

    fn compare_kv(cmp: &pb::Compare, kv: &KeyValue) -> bool {
        use CompareTarget as T;
        use TargetUnion as U;
        // An operand of another kind than the target counts as zero (or as an empty value).
        let int = match (cmp.target(), &cmp.target_union) {
            (T::Version, Some(U::Version(v)))
            | (T::Create, Some(U::CreateRevision(v)))
            | (T::Mod, Some(U::ModRevision(v)))
            | (T::Lease, Some(U::Lease(v))) => *v,
            _ => 0,
        };
        let ordering = match (cmp.target(), &cmp.target_union) {
            (T::Value, Some(U::Value(v))) => kv.value.cmp(v),
            (T::Value, _) => kv.value.cmp(&Vec::new()),
            (T::Version, _) => kv.version.cmp(&int),
            (T::Create, _) => kv.create_revision.cmp(&int),
            (T::Mod, _) => kv.mod_revision.cmp(&int),
            (T::Lease, _) => kv.lease.cmp(&int),
        };
        match cmp.result() {
            CompareResult::Equal => ordering.is_eq(),
            CompareResult::NotEqual => ordering.is_ne(),
            CompareResult::Greater => ordering.is_gt(),
            CompareResult::Less => ordering.is_lt(),
        }
    }

    /// Applies a write; errors leave the model unchanged.
    fn apply(&mut self, cmd: &Command) -> Result<CommandResponse, Error> {
        match cmd {
            Command::Put(req) => {
                let txn = pb::TxnRequest {
                    success: vec![pb::RequestOp { request: Some(Request::RequestPut(req.clone())) }],
                    ..Default::default()
                };
                let mut resp = self.txn(&txn)?;
                match resp.responses.pop().and_then(|r| r.response) {
                    Some(Response::ResponsePut(put)) => Ok(CommandResponse::Put(put)),
                    other => panic!("model: a put answered {other:?}"),
                }
            }
            Command::DeleteRange(req) => {
                let mut writer = Writer::new(self);
                let resp = writer.delete(req);
                writer.finish();
                Ok(CommandResponse::DeleteRange(resp))
            }
            Command::Txn(req) => self.txn(req).map(CommandResponse::Txn),
            Command::Compact(req) => self.compact(req.revision).map(CommandResponse::Compact),
            Command::LeaseGrant(_)
            | Command::LeaseRevoke(_)
            | Command::Alarm(_)
            | Command::Downgrade(_)
            | Command::Auth(_)
            | Command::AsUser(..) => {
                unreachable!("the model generates no lease, alarm, downgrade or auth commands")
            }
        }
    }

    fn txn(&mut self, req: &pb::TxnRequest) -> Result<pb::TxnResponse, Error> {
        let before = self.state(self.current());
        let mut path = Vec::new();
        compare_path(before, req, &mut path);
        // etcd checks the puts first: ignore_value/ignore_lease need their key. Replaying the path's deletes
        // also catches a key removed by an earlier from-key delete (where etcd would panic).
        let mut alive: Vec<Vec<u8>> = before.keys().cloned().collect();
        check_puts(req, &mut path.iter().copied(), &mut alive)?;
        // Then the ranges' revisions, against the store before the txn.
        check_ranges(req, &mut path.iter().copied(), self.current(), self.compacted)?;
        let mut writer = Writer::new(self);
        let mut resp = writer.run(req, &mut path.iter().copied());
        resp.header = header(writer.finish());
        Ok(resp)
    }
}

fn branch(req: &pb::TxnRequest, succeeded: bool) -> &[pb::RequestOp] {
    if succeeded {
        &req.success
    } else {
        &req.failure
    }
}

/// The branch of every txn on the way, in the order ops reach them, all compared before any write.
fn compare_path(state: &State, req: &pb::TxnRequest, path: &mut Vec<bool>) {
    let succeeded = req.compare.iter().all(|c| Model::holds(state, c));
    path.push(succeeded);
    for op in branch(req, succeeded) {
        if let Some(Request::RequestTxn(inner)) = &op.request {
            compare_path(state, inner, path);
        }
    }
}

fn check_puts(
    req: &pb::TxnRequest,
    path: &mut impl Iterator<Item = bool>,
    alive: &mut Vec<Vec<u8>>,
) -> Result<(), Error> {
    let succeeded = path.next().expect("a path entry per txn");
    for op in branch(req, succeeded) {
        match &op.request {
            Some(Request::RequestPut(put)) => {
                if (put.ignore_value || put.ignore_lease) && !alive.contains(&put.key) {
                    return Err(Error::KeyNotFound);
                }
                alive.push(put.key.clone());
            }
            Some(Request::RequestDeleteRange(del)) => alive.retain(|key| !in_range(key, &del.key, &del.range_end)),
            Some(Request::RequestTxn(inner)) => check_puts(inner, path, alive)?,
            _ => {}
        }
    }
    Ok(())
}

fn check_ranges(
    req: &pb::TxnRequest,
    path: &mut impl Iterator<Item = bool>,
    current: i64,
    compacted: i64,
) -> Result<(), Error> {
    let succeeded = path.next().expect("a path entry per txn");
    for op in branch(req, succeeded) {
        match &op.request {
            Some(Request::RequestRange(range)) if range.revision > current => return Err(Error::FutureRevision),
            Some(Request::RequestRange(range)) if range.revision != 0 && range.revision < compacted => {
                return Err(Error::Compacted)
            }
            Some(Request::RequestTxn(inner)) => check_ranges(inner, path, current, compacted)?,
            _ => {}
        }
    }
    Ok(())
}

/// One write in progress: every change takes revision `begin + 1`.
struct Writer<'m> {
    model: &'m mut Model,
    begin: i64,
    state: State,
    changes: usize,
}

impl<'m> Writer<'m> {
    fn new(model: &'m mut Model) -> Self {
        let begin = model.current();
        let state = model.state(begin).clone();
        Self { model, begin, state, changes: 0 }
    }

    /// Reads inside the write see its changes once it made some.
    fn read_rev(&self) -> i64 {
        if self.changes > 0 {
            self.begin + 1
        } else {
            self.begin
        }
    }

    /// Ends the write; returns the store's revision after it.
    fn finish(self) -> i64 {
        if self.changes > 0 {
            self.model.states.push(self.state);
            self.model.changes.push(self.changes);
        }
        self.model.current()
    }

    fn put(&mut self, req: &pb::PutRequest) -> pb::PutResponse {
        let rev = self.begin + 1;
        let prev = self.state.get(&req.key).cloned();
        let old = || prev.clone().expect("checked before the txn ran");
        let kv = KeyValue {
            key: req.key.clone(),
            create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
            mod_revision: rev,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value: if req.ignore_value { old().value } else { req.value.clone() },
            lease: if req.ignore_lease { old().lease } else { req.lease },
        };
        self.state.insert(req.key.clone(), kv);
        self.changes += 1;
        pb::PutResponse { header: header(rev), prev_kv: prev.filter(|_| req.prev_kv) }
    }

    fn delete(&mut self, req: &pb::DeleteRangeRequest) -> pb::DeleteRangeResponse {
        let victims: Vec<KeyValue> = kvs_in(&self.state, &req.key, &req.range_end).cloned().collect();
        for kv in &victims {
            self.state.remove(&kv.key);
        }
        self.changes += victims.len();
        pb::DeleteRangeResponse {
            header: header(self.read_rev()),
            deleted: victims.len() as i64,
            prev_kvs: if req.prev_kv { victims } else { Vec::new() },
        }
    }

    fn run(&mut self, req: &pb::TxnRequest, path: &mut impl Iterator<Item = bool>) -> pb::TxnResponse {
        let succeeded = path.next().expect("a path entry per txn");
        let mut responses = Vec::new();
        for op in branch(req, succeeded) {
            let response = match op.request.as_ref().expect("validated ops are set") {
                Request::RequestRange(r) => {
                    let resp = self.model.range_in(r, self.read_rev(), &self.state);
                    Response::ResponseRange(resp.expect("checked before the txn ran"))
                }
                Request::RequestPut(r) => Response::ResponsePut(self.put(r)),
                Request::RequestDeleteRange(r) => Response::ResponseDeleteRange(self.delete(r)),
                Request::RequestTxn(r) => {
                    let mut inner = self.run(r, path);
                    inner.header = Some(pb::ResponseHeader::default());
                    Response::ResponseTxn(inner)
                }
            };
            responses.push(pb::ResponseOp { response: Some(response) });
        }
        pb::TxnResponse { header: None, succeeded, responses }
    }
}

/// Random requests over the small key space.
struct Gen {
    rng: StdRng,
}

impl Gen {
    fn key(&mut self) -> Vec<u8> {
        let pool: &[&str] = if self.rng.gen_bool(0.9) { &KEYS } else { &GAPS };
        pool.choose(&mut self.rng).expect("non-empty").as_bytes().to_vec()
    }

    fn value(&mut self) -> Vec<u8> {
        VALUES.choose(&mut self.rng).expect("non-empty").as_bytes().to_vec()
    }

    /// A `(key, range_end)` pair in one of etcd's forms.
    fn key_range(&mut self) -> (Vec<u8>, Vec<u8>) {
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
    fn revision(&mut self, lo: i64, hi: i64) -> i64 {
        if lo > hi || self.rng.gen_bool(0.3) {
            0
        } else {
            self.rng.gen_range(lo..=hi)
        }
    }

    fn put(&mut self) -> pb::PutRequest {
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

    fn delete(&mut self) -> pb::DeleteRangeRequest {
        let (key, range_end) = if self.rng.gen_bool(0.5) { (self.key(), Vec::new()) } else { self.key_range() };
        pb::DeleteRangeRequest { key, range_end, prev_kv: self.rng.gen_bool(0.5) }
    }

    /// A range with random options at a random revision: mostly readable ones, sometimes compacted or future.
    fn range(&mut self, compacted: i64, current: i64) -> pb::RangeRequest {
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

    fn compare(&mut self, current: i64) -> pb::Compare {
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

    fn txn(&mut self, compacted: i64, current: i64, depth: u32) -> pb::TxnRequest {
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

/// Where a run is, for failure messages.
struct Ctx {
    seed: u64,
    step: usize,
}

impl Ctx {
    fn check<T: PartialEq + Debug>(&self, what: &str, request: &dyn Debug, store: &T, model: &T) {
        if store == model {
            return;
        }
        let (s, m) = (format!("{store:#?}"), format!("{model:#?}"));
        let (s_lines, m_lines): (Vec<&str>, Vec<&str>) = (s.lines().collect(), m.lines().collect());
        let first = s_lines.iter().zip(&m_lines).position(|(a, b)| a != b).unwrap_or(s_lines.len().min(m_lines.len()));
        let context = m_lines[first.saturating_sub(6)..first.min(m_lines.len())].join("\n");
        panic!(
            "seed {} step {}: {what} differs (replay with MODEL_SEED={})\nrequest: {request:?}\n\
             first difference, after:\n{context}\n  store: {}\n  model: {}\n\nstore: {s}\nmodel: {m}",
            self.seed,
            self.step,
            self.seed,
            s_lines.get(first).unwrap_or(&"<end>"),
            m_lines.get(first).unwrap_or(&"<end>"),
        );
    }
}

fn stored_revisions(store: &MvccStore) -> Vec<i64> {
    let mut revs: Vec<i64> = store
        .export()
        .expect("export")
        .into_iter()
        .filter(|(bucket, _, _)| *bucket == Bucket::Key)
        .map(|(_, key, _)| Revision::from_bytes(&key).expect("a revision key").main)
        .collect();
    revs.sort_unstable();
    revs
}

#[derive(Default, Debug)]
struct Tally {
    writes: usize,
    errors: usize,
    rejected_txns: usize,
    reads: usize,
    compactions: usize,
    reopens: usize,
}

fn run(seed: u64) -> Tally {
    let mut gen = Gen { rng: StdRng::seed_from_u64(seed) };
    let mut backend = Arc::new(MemBackend::default());
    let mut store = MvccStore::open(backend.clone()).expect("open");
    // The leases the generated puts use (granting takes no revision, so the model need not know).
    for id in [1, 2] {
        store.apply(&Command::LeaseGrant(pb::LeaseGrantRequest { ttl: 60, id })).expect("grant a lease");
    }
    let mut model = Model::new();
    let mut tally = Tally::default();
    let limits = Limits::default();
    for step in 0..STEPS {
        let ctx = Ctx { seed, step };
        let (compacted, current) = (model.compacted, model.current());
        let cmd = match gen.rng.gen_range(0..100) {
            0..=34 => Command::Put(gen.put()),
            35..=49 => Command::DeleteRange(gen.delete()),
            50..=94 => Command::Txn(gen.txn(compacted, current, 0)),
            _ => Command::Compact(pb::CompactionRequest {
                revision: gen.rng.gen_range((compacted - 1).max(1)..=current + 1),
                physical: gen.rng.gen_bool(0.5),
            }),
        };
        // What the server checks before proposing; a refused request never reaches the store.
        let valid = match &cmd {
            Command::Put(req) => validate::check_put(req),
            Command::DeleteRange(req) => validate::check_delete(req),
            Command::Txn(req) => validate::check_txn(req, &limits),
            Command::Compact(_)
            | Command::LeaseGrant(_)
            | Command::LeaseRevoke(_)
            | Command::Alarm(_)
            | Command::Downgrade(_)
            | Command::Auth(_)
            | Command::AsUser(..) => Ok(()),
        };
        match valid {
            Ok(()) => {}
            Err(Error::DuplicateKey) => {
                tally.rejected_txns += 1;
                continue;
            }
            Err(err) => panic!("seed {seed} step {step}: generated an invalid request ({err}): {cmd:?}"),
        }

        let want = model.apply(&cmd);
        let got = match &cmd {
            // A read-only txn is served without consensus; both ways must answer the same.
            Command::Txn(req) if kv_api::command::is_read_only(req) && gen.rng.gen_bool(0.5) => {
                store.txn_read_only(req).map(CommandResponse::Txn)
            }
            cmd => store.apply(cmd),
        };
        ctx.check("response", &cmd, &got, &want);
        tally.writes += 1;
        tally.errors += usize::from(want.is_err());
        tally.compactions += usize::from(matches!((&cmd, &want), (Command::Compact(_), Ok(_))));
        ctx.check("current revision", &cmd, &store.current_revision(), &model.current());
        ctx.check("compacted revision", &cmd, &store.compacted_revision(), &model.compacted);
        let live = model.state(model.current()).len() as i64;
        ctx.check("live keys", &cmd, &store.live_keys(), &live);

        if gen.rng.gen_bool(0.3) {
            store.commit().expect("commit");
            ctx.check("stored revisions", &"commit", &stored_revisions(&store), &model.stored_revisions());
            match gen.rng.gen_range(0..100) {
                0..=1 => {
                    store = MvccStore::open(backend.clone()).expect("reopen");
                    tally.reopens += 1;
                }
                2 => {
                    // A snapshot installed on another member.
                    let entries = store.export().expect("export");
                    backend = Arc::new(MemBackend::default());
                    store = MvccStore::open(backend.clone()).expect("open");
                    store.install(entries).expect("install");
                    tally.reopens += 1;
                }
                _ => {}
            }
            ctx.check("current revision after reopen", &"reopen", &store.current_revision(), &model.current());
            ctx.check("compacted revision after reopen", &"reopen", &store.compacted_revision(), &model.compacted);
            let live = model.state(model.current()).len() as i64;
            ctx.check("live keys after reopen", &"reopen", &store.live_keys(), &live);
        }

        for _ in 0..2 {
            let req = gen.range(model.compacted, model.current());
            ctx.check("range", &req, &store.range(&req), &model.range(&req));
            tally.reads += 1;
        }
    }
    tally
}

#[test]
fn store_matches_the_model() {
    let seeds: Vec<u64> = match std::env::var("MODEL_SEED") {
        Ok(seed) => vec![seed.parse().expect("MODEL_SEED is a number")],
        Err(_) => SEEDS.to_vec(),
    };
    for seed in seeds {
        let tally = run(seed);
        eprintln!("seed {seed}: {tally:?}");
        // The generator must exercise what it is meant to.
        assert!(tally.writes > STEPS / 2, "seed {seed}: {tally:?}");
        assert!(tally.errors > 10, "seed {seed}: {tally:?}");
        assert!(tally.compactions > 10, "seed {seed}: {tally:?}");
        assert!(tally.reopens > 3, "seed {seed}: {tally:?}");
    }
}
