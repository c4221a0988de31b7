//! The naive model: the whole key space at every revision, and what a request does to it.

use kv_api::{Command, CommandResponse, Error};
use proto::etcdserverpb as pb;
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use proto::etcdserverpb::request_op::Request;
use proto::etcdserverpb::response_op::Response;
use proto::mvccpb::KeyValue;

use crate::*;

pub(crate) fn header(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { revision, ..Default::default() })
}

/// etcd's key-range forms: empty end is one key, `\0` end is every key from `start`, else `[start, end)`.
pub(crate) fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    match end {
        [] => key == start,
        [0] => key >= start,
        end => key >= start && key < end,
    }
}

pub(crate) fn kvs_in<'s>(state: &'s State, start: &'s [u8], end: &'s [u8]) -> impl Iterator<Item = &'s KeyValue> + 's {
    state.values().filter(move |kv| in_range(&kv.key, start, end))
}

/// The whole key space after every revision: `states[r]` is the store as a read at `r` sees it.
pub(crate) struct Model {
    pub(crate) states: Vec<State>,
    /// Number of changes (puts and deleted keys) each revision made.
    pub(crate) changes: Vec<usize>,
    pub(crate) compacted: i64,
}

impl Model {
    pub(crate) fn new() -> Self {
        // Revision 0 does not exist; an empty store is at revision 1.
        Self {
            states: vec![State::new(), State::new()],
            changes: vec![0, 0],
            // As etcd: -1 until the first compaction.
            compacted: -1,
        }
    }

    pub(crate) fn current(&self) -> i64 {
        self.states.len() as i64 - 1
    }

    pub(crate) fn state(&self, rev: i64) -> &State {
        &self.states[usize::try_from(rev).expect("a revision")]
    }

    /// A range seen from a store at revision `current`, whose newest state is `newest` (the working state
    /// inside a write txn).
    pub(crate) fn range_in(
        &self,
        req: &pb::RangeRequest,
        current: i64,
        newest: &State,
    ) -> Result<pb::RangeResponse, Error> {
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

    pub(crate) fn range(&self, req: &pb::RangeRequest) -> Result<pb::RangeResponse, Error> {
        let current = self.current();
        self.range_in(req, current, self.state(current))
    }

    pub(crate) fn compact(&mut self, rev: i64) -> Result<pb::CompactionResponse, Error> {
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
    pub(crate) fn stored_revisions(&self) -> Vec<i64> {
        let floor = self.compacted.max(0);
        let mut revs: Vec<i64> = self.state(floor).values().map(|kv| kv.mod_revision).collect();
        for rev in floor + 1..=self.current() {
            revs.extend(std::iter::repeat_n(rev, self.changes[rev as usize]));
        }
        revs.sort_unstable();
        revs
    }

    pub(crate) fn holds(state: &State, cmp: &pb::Compare) -> bool {
        let kvs: Vec<&KeyValue> = kvs_in(state, &cmp.key, &cmp.range_end).collect();
        if kvs.is_empty() {
            // A missing key is a zero KeyValue, except that a value compare on it always fails.
            return cmp.target() != CompareTarget::Value && Self::compare_kv(cmp, &KeyValue::default());
        }
        kvs.into_iter().all(|kv| Self::compare_kv(cmp, kv))
    }

    pub(crate) fn compare_kv(cmp: &pb::Compare, kv: &KeyValue) -> bool {
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
    pub(crate) fn apply(&mut self, cmd: &Command) -> Result<CommandResponse, Error> {
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

    pub(crate) fn txn(&mut self, req: &pb::TxnRequest) -> Result<pb::TxnResponse, Error> {
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

pub(crate) fn branch(req: &pb::TxnRequest, succeeded: bool) -> &[pb::RequestOp] {
    if succeeded {
        &req.success
    } else {
        &req.failure
    }
}

/// The branch of every txn on the way, in the order ops reach them, all compared before any write.
pub(crate) fn compare_path(state: &State, req: &pb::TxnRequest, path: &mut Vec<bool>) {
    let succeeded = req.compare.iter().all(|c| Model::holds(state, c));
    path.push(succeeded);
    for op in branch(req, succeeded) {
        if let Some(Request::RequestTxn(inner)) = &op.request {
            compare_path(state, inner, path);
        }
    }
}

pub(crate) fn check_puts(
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

pub(crate) fn check_ranges(
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
pub(crate) struct Writer<'m> {
    pub(crate) model: &'m mut Model,
    pub(crate) begin: i64,
    pub(crate) state: State,
    pub(crate) changes: usize,
}

impl<'m> Writer<'m> {
    pub(crate) fn new(model: &'m mut Model) -> Self {
        let begin = model.current();
        let state = model.state(begin).clone();
        Self { model, begin, state, changes: 0 }
    }

    /// Reads inside the write see its changes once it made some.
    pub(crate) fn read_rev(&self) -> i64 {
        if self.changes > 0 {
            self.begin + 1
        } else {
            self.begin
        }
    }

    /// Ends the write; returns the store's revision after it.
    pub(crate) fn finish(self) -> i64 {
        if self.changes > 0 {
            self.model.states.push(self.state);
            self.model.changes.push(self.changes);
        }
        self.model.current()
    }

    pub(crate) fn put(&mut self, req: &pb::PutRequest) -> pb::PutResponse {
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

    pub(crate) fn delete(&mut self, req: &pb::DeleteRangeRequest) -> pb::DeleteRangeResponse {
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

    pub(crate) fn run(&mut self, req: &pb::TxnRequest, path: &mut impl Iterator<Item = bool>) -> pb::TxnResponse {
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
