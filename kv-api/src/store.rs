//! The MVCC store: every revision of every key, on a [`Backend`], with the key index in memory.
//!
//! Writes happen only through [`MvccStore::apply`], called by the state machine in log order. Changes are
//! staged in a batch (readable at once through an overlay) and reach the backend in one atomic
//! [`MvccStore::commit`], together with whatever bookkeeping the caller staged with
//! [`MvccStore::stage_meta`] — the applied log id, so that data and applied id never disagree.

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;
use proto::etcdserverpb as pb;
use proto::mvccpb::event::EventType;
use proto::mvccpb::{Event, KeyValue};

use crate::alarm::{self, AlarmTable};
use crate::auth::{AuthStore, Caller};
use crate::backend::{Backend, BackendError, Bucket, WriteBatch};
use crate::command::{Command, CommandResponse};
use crate::error::{Error, Result};
use crate::index::{KeyRange, TreeIndex};
use crate::lease::{Lease, LeaseId, LeaseTable, MAX_LEASE_TTL};
use crate::range;
use crate::revision::Revision;
use crate::stats;
use crate::txn;

pub const META_COMPACT_REV: &[u8] = b"compact_rev";
/// The enabled downgrade's target version (`3.5.0`), empty when none is.
pub(crate) const META_DOWNGRADE: &[u8] = b"downgrade";
const NEVER_COMPACTED: i64 = -1;
const ENTRY_PUT: u8 = 0;
const ENTRY_TOMBSTONE: u8 = 1;

impl From<BackendError> for Error {
    fn from(err: BackendError) -> Self {
        Error::Internal(err.to_string())
    }
}

/// Encodes a revision's entry for the key bucket: a kind byte, then the `KeyValue`.
pub(crate) fn encode_entry(tombstone: bool, kv: &KeyValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + kv.encoded_len());
    out.push(if tombstone { ENTRY_TOMBSTONE } else { ENTRY_PUT });
    kv.encode(&mut out).expect("a Vec grows as needed");
    out
}

pub(crate) fn decode_entry(bytes: &[u8]) -> Result<(bool, KeyValue)> {
    let (kind, rest) = bytes.split_first().ok_or_else(|| Error::Internal("empty key bucket entry".into()))?;
    let kv = KeyValue::decode(rest).map_err(|e| Error::Internal(format!("corrupt key bucket entry: {e}")))?;
    Ok((*kind == ENTRY_TOMBSTONE, kv))
}

/// The write in progress inside one `apply`.
#[derive(Clone, Copy, Debug, Default)]
struct WriteTxn {
    /// Store revision when the request began; its changes take `begin + 1`.
    begin: i64,
    /// Changes made so far; the next one takes sub-revision `changes`.
    changes: i64,
}

impl WriteTxn {
    /// The revision reads inside the request see: its own changes once it made some.
    fn read_rev(&self) -> i64 {
        if self.changes > 0 {
            self.begin + 1
        } else {
            self.begin
        }
    }
}

/// The MVCC key-value store of one member.
pub struct MvccStore {
    backend: Arc<dyn Backend>,
    index: TreeIndex,
    /// Revision of the newest change (1 on an empty store).
    current: i64,
    /// Revisions below this are gone; reads at it still work. -1 until the first compaction, as in etcd
    /// (so `Compact(0)` succeeds once and a txn range at revision -1 is not "compacted").
    compacted: i64,
    batch: WriteBatch,
    /// Values staged in `batch`, readable before the commit.
    staged: HashMap<Revision, KeyValue>,
    /// Leases and the keys attached to them.
    leases: LeaseTable,
    /// Changes made since the watchers were last told, in revision order (see [`MvccStore::take_events`]).
    events: Vec<Event>,
    /// Active alarms (NOSPACE refuses what takes space; CORRUPT refuses everything).
    alarms: AlarmTable,
    /// Users, roles and the auth flags (tokens too, member-local).
    auth: AuthStore,
    /// Keys alive at the current revision (etcd's `keys_total`), kept as writes apply.
    live_keys: i64,
    /// The downgrade target while one is enabled ([`crate::downgrade`]).
    downgrade: Option<crate::downgrade::MinorVersion>,
}

impl std::fmt::Debug for MvccStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MvccStore").field("current", &self.current).field("compacted", &self.compacted).finish()
    }
}

impl MvccStore {
    /// Opens the store on `backend`, rebuilding the key index from the revisions it holds.
    pub fn open(backend: Arc<dyn Backend>) -> Result<Self> {
        let mut store = Self {
            backend,
            index: TreeIndex::default(),
            current: 1,
            compacted: NEVER_COMPACTED,
            batch: WriteBatch::default(),
            staged: HashMap::new(),
            events: Vec::new(),
            leases: LeaseTable::default(),
            alarms: AlarmTable::default(),
            auth: AuthStore::default(),
            live_keys: 0,
            downgrade: None,
        };
        store.load()?;
        Ok(store)
    }

    fn load(&mut self) -> Result<()> {
        self.index.clear();
        self.staged.clear();
        self.events.clear();
        self.batch = WriteBatch::default();
        self.compacted = match self.backend.get(Bucket::Meta, META_COMPACT_REV)? {
            Some(bytes) => decode_i64(&bytes)?,
            None => NEVER_COMPACTED,
        };
        let mut newest = 1;
        // The lease of each key's newest value, to attach keys to their leases once all are known.
        let mut key_leases: HashMap<Vec<u8>, LeaseId> = HashMap::new();
        let index = &mut self.index;
        try_scan(&*self.backend, Bucket::Key, |key, value| {
            let rev = Revision::from_bytes(key).ok_or_else(|| Error::Internal("corrupt revision key".into()))?;
            let (tombstone, kv) = decode_entry(value)?;
            if tombstone {
                index.restore_tombstone(&kv.key, rev);
                key_leases.remove(&kv.key);
            } else {
                index.restore(&kv.key, Revision::new(kv.create_revision, 0), rev, kv.version);
                key_leases.insert(kv.key, kv.lease);
            }
            newest = rev.main;
            Ok(())
        })?;
        // Compaction may have removed the newest tombstones; the revision never goes back below it.
        self.current = newest.max(self.compacted).max(1);
        self.live_keys = self.index.range(KeyRange::new(&[0], &[0]), self.current).count() as i64;

        self.leases.clear();
        let leases = &mut self.leases;
        try_scan(&*self.backend, Bucket::Lease, |id, ttl| {
            leases.grant(decode_i64(id)?, decode_i64(ttl)?);
            Ok(())
        })?;
        for (key, lease) in key_leases {
            self.leases.attach(&key, lease);
        }

        self.alarms.clear();
        let alarms = &mut self.alarms;
        try_scan(&*self.backend, Bucket::Alarm, |key, _| {
            let (member_id, alarm) = alarm::from_key(key).ok_or_else(|| Error::Internal("corrupt alarm key".into()))?;
            alarms.activate(member_id, alarm);
            Ok(())
        })?;
        self.downgrade =
            self.backend.get(Bucket::Meta, META_DOWNGRADE)?.and_then(|bytes| crate::downgrade::decode(&bytes));
        self.auth.load(&*self.backend)
    }

    /// The downgrade target while a downgrade is enabled.
    pub fn downgrade_target(&self) -> Option<crate::downgrade::MinorVersion> {
        self.downgrade
    }

    /// The active alarms.
    pub fn alarms(&self) -> &AlarmTable {
        &self.alarms
    }

    /// Users, roles, the auth flags and this member's tokens.
    pub fn auth(&self) -> &AuthStore {
        &self.auth
    }

    pub fn auth_mut(&mut self) -> &mut AuthStore {
        &mut self.auth
    }

    /// A lease and its keys.
    pub fn lease(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(id)
    }

    /// Every lease id with its granted TTL.
    pub fn leases(&self) -> Vec<(LeaseId, i64)> {
        self.leases.list()
    }

    pub fn current_revision(&self) -> i64 {
        self.current
    }

    /// How many keys are alive at the current revision.
    pub fn live_keys(&self) -> i64 {
        self.live_keys
    }

    pub fn compacted_revision(&self) -> i64 {
        self.compacted
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    pub(crate) fn index(&self) -> &TreeIndex {
        &self.index
    }

    /// Serves a Range at the current revision.
    pub fn range(&self, req: &pb::RangeRequest) -> Result<pb::RangeResponse> {
        self.range_at(req, self.current)
    }

    /// Range seen from a store whose newest revision is `current`.
    fn range_at(&self, req: &pb::RangeRequest, current: i64) -> Result<pb::RangeResponse> {
        stats::count(&stats::RANGES);
        let at = match req.revision {
            rev if rev > current => return Err(Error::FutureRevision),
            rev if rev <= 0 => current,
            rev => rev,
        };
        if at < self.compacted {
            return Err(Error::Compacted);
        }
        let keys = self.index.range(KeyRange::new(&req.key, &req.range_end), at);
        let plan = range::Plan::of(req);
        let mut count = 0i64;
        let mut kvs = Vec::new();
        for (_, found) in keys {
            count += 1;
            if !req.count_only && plan.fetch.is_none_or(|n| kvs.len() < n) {
                kvs.push(self.kv_at(found.modified)?);
            }
        }
        let mut resp = range::finish(req, kvs);
        resp.count = count;
        resp.header = Some(revision_header(current));
        Ok(resp)
    }

    /// The value stored at `rev`.
    fn kv_at(&self, rev: Revision) -> Result<KeyValue> {
        if let Some(kv) = self.staged.get(&rev) {
            return Ok(kv.clone());
        }
        let bytes = self
            .backend
            .get(Bucket::Key, &rev.to_bytes())?
            .ok_or_else(|| Error::Internal(format!("revision {rev:?} is indexed but not stored")))?;
        Ok(decode_entry(&bytes)?.1)
    }

    /// Applies a write command. Errors are deterministic (every member gets the same) and leave the store
    /// unchanged.
    pub fn apply(&mut self, cmd: &Command) -> Result<CommandResponse> {
        // etcd's corrupt applier refuses everything, its capped applier (NOSPACE) what takes space; the
        // alarm requests themselves always pass so that an alarm can be disarmed.
        if !matches!(cmd.inner(), Command::Alarm(_) | Command::Downgrade(_)) {
            if self.alarms.is_active(pb::AlarmType::Corrupt) {
                return Err(Error::Corrupt);
            }
            if alarm::takes_space(cmd) && self.alarms.is_active(pb::AlarmType::Nospace) {
                return Err(Error::NoSpace);
            }
        }
        match cmd {
            Command::Put(req) => self.apply_put(req).map(CommandResponse::Put),
            Command::DeleteRange(req) => self.apply_delete(req).map(CommandResponse::DeleteRange),
            Command::Txn(req) => self.txn(req).map(CommandResponse::Txn),
            Command::Compact(req) => self.compact(req).map(CommandResponse::Compact),
            Command::LeaseGrant(req) => self.lease_grant(req).map(CommandResponse::LeaseGrant),
            Command::LeaseRevoke(req) => self.lease_revoke(req).map(CommandResponse::LeaseRevoke),
            Command::Alarm(req) => Ok(CommandResponse::Alarm(self.apply_alarm(req))),
            Command::Downgrade(req) => {
                let target = crate::downgrade::apply(self.downgrade, req)?;
                self.batch.put(Bucket::Meta, META_DOWNGRADE.to_vec(), crate::downgrade::encode(target));
                self.downgrade = target;
                Ok(CommandResponse::Downgrade(pb::DowngradeResponse::default()))
            }
            Command::Auth(req) => self.auth.apply(req, &mut self.batch).map(CommandResponse::Auth),
            Command::AsUser(caller, inner) => {
                self.check_caller(caller, inner)?;
                self.apply(inner)
            }
        }
    }

    /// etcd's auth applier: whether `caller` may make the write `cmd`, against the auth state at this
    /// point of the log.
    fn check_caller(&self, caller: &Caller, cmd: &Command) -> Result<()> {
        let auth = &self.auth;
        if !auth.is_enabled() {
            return Ok(());
        }
        // Attaching a key to a lease, or revoking it, needs write access to every key already on it.
        let lease_keys = |id: LeaseId| -> Result<()> {
            for key in self.leases.get(id).map(|lease| &lease.keys).into_iter().flatten() {
                auth.check_write(caller, key, &[])?;
            }
            Ok(())
        };
        match cmd {
            Command::Put(req) => {
                auth.check_write(caller, &req.key, &[])?;
                lease_keys(req.lease)?;
                if req.prev_kv {
                    auth.check_read(caller, &req.key, &[])?;
                }
                Ok(())
            }
            Command::DeleteRange(req) => {
                auth.check_write(caller, &req.key, &req.range_end)?;
                if req.prev_kv {
                    auth.check_read(caller, &req.key, &req.range_end)?;
                }
                Ok(())
            }
            Command::Txn(req) => auth.check_txn(caller, req),
            Command::LeaseRevoke(req) => lease_keys(req.id),
            Command::Auth(req) if req.needs_admin() => auth.check_admin(caller),
            Command::AsUser(_, inner) => self.check_caller(caller, inner),
            _ => Ok(()),
        }
    }

    /// Raises or disarms an alarm. As etcd, the answer lists the alarm when it was (or already is)
    /// raised, or when it was disarmed; a GET (never proposed) or unknown action changes nothing.
    fn apply_alarm(&mut self, req: &pb::AlarmRequest) -> pb::AlarmResponse {
        use pb::alarm_request::AlarmAction;
        let member = pb::AlarmMember { member_id: req.member_id, alarm: req.alarm };
        let alarms = match req.action() {
            AlarmAction::Activate => {
                if self.alarms.activate(req.member_id, req.alarm) {
                    self.batch.put(Bucket::Alarm, alarm::key(req.member_id, req.alarm), Vec::new());
                }
                vec![member]
            }
            AlarmAction::Deactivate => {
                if self.alarms.deactivate(req.member_id, req.alarm) {
                    self.batch.delete(Bucket::Alarm, alarm::key(req.member_id, req.alarm));
                    vec![member]
                } else {
                    Vec::new()
                }
            }
            AlarmAction::Get => self.alarms.get(req.alarm),
        };
        pb::AlarmResponse { header: None, alarms }
    }

    fn begin(&self) -> WriteTxn {
        WriteTxn { begin: self.current, changes: 0 }
    }

    fn end(&mut self, txn: WriteTxn) -> i64 {
        if txn.changes > 0 {
            self.current += 1;
        }
        self.current
    }

    fn apply_put(&mut self, req: &pb::PutRequest) -> Result<pb::PutResponse> {
        let mut txn = self.begin();
        // A plain put looks its lease up first (in a txn, the key precondition comes first), as etcd.
        if req.lease != 0 && !self.leases.contains(req.lease) {
            return Err(Error::LeaseNotFound);
        }
        txn::check_put(self, req, txn.read_rev())?;
        let resp = self.put(&mut txn, req)?;
        self.end(txn);
        Ok(resp)
    }

    fn apply_delete(&mut self, req: &pb::DeleteRangeRequest) -> Result<pb::DeleteRangeResponse> {
        let mut txn = self.begin();
        let resp = self.delete_range(&mut txn, req)?;
        self.end(txn);
        Ok(resp)
    }

    /// Evaluates a txn: compares against the store as it was before the txn, then runs the chosen
    /// branches, all changes at one main revision. Read-only txns change nothing and may be run on any
    /// member without consensus.
    pub fn txn(&mut self, req: &pb::TxnRequest) -> Result<pb::TxnResponse> {
        stats::count(&stats::TXNS);
        let path = txn::compare_path(self, req, self.current);
        txn::check_ops(self, req, &path, self.current)?;
        let mut txn = self.begin();
        let mut path_iter = path.iter().copied();
        let mut resp = self.run_txn(&mut txn, req, &mut path_iter)?;
        let rev = self.end(txn);
        resp.header = Some(revision_header(rev));
        Ok(resp)
    }

    /// Serves a read-only txn (no put, no delete, at any depth) without changing anything.
    pub fn txn_read_only(&self, req: &pb::TxnRequest) -> Result<pb::TxnResponse> {
        stats::count(&stats::TXNS);
        debug_assert!(txn::is_read_only(req));
        let path = txn::compare_path(self, req, self.current);
        txn::check_ops(self, req, &path, self.current)?;
        let mut path_iter = path.iter().copied();
        let mut resp = self.run_read_only(req, &mut path_iter)?;
        resp.header = Some(revision_header(self.current));
        Ok(resp)
    }

    fn run_txn(
        &mut self,
        txn: &mut WriteTxn,
        req: &pb::TxnRequest,
        path: &mut impl Iterator<Item = bool>,
    ) -> Result<pb::TxnResponse> {
        let succeeded = path.next().unwrap_or(false);
        let ops = if succeeded { &req.success } else { &req.failure };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            use pb::request_op::Request;
            use pb::response_op::Response;
            let response = match &op.request {
                Some(Request::RequestRange(r)) => Response::ResponseRange(self.range_at(r, txn.read_rev())?),
                Some(Request::RequestPut(r)) => Response::ResponsePut(self.put(txn, r)?),
                Some(Request::RequestDeleteRange(r)) => Response::ResponseDeleteRange(self.delete_range(txn, r)?),
                Some(Request::RequestTxn(r)) => {
                    let mut inner = self.run_txn(txn, r, path)?;
                    inner.header = Some(pb::ResponseHeader::default());
                    Response::ResponseTxn(inner)
                }
                None => continue,
            };
            responses.push(pb::ResponseOp { response: Some(response) });
        }
        Ok(pb::TxnResponse { header: None, succeeded, responses })
    }

    fn run_read_only(&self, req: &pb::TxnRequest, path: &mut impl Iterator<Item = bool>) -> Result<pb::TxnResponse> {
        let succeeded = path.next().unwrap_or(false);
        let ops = if succeeded { &req.success } else { &req.failure };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            use pb::request_op::Request;
            use pb::response_op::Response;
            let response = match &op.request {
                Some(Request::RequestRange(r)) => Response::ResponseRange(self.range_at(r, self.current)?),
                Some(Request::RequestTxn(r)) => {
                    let mut inner = self.run_read_only(r, path)?;
                    inner.header = Some(pb::ResponseHeader::default());
                    Response::ResponseTxn(inner)
                }
                Some(Request::RequestPut(_) | Request::RequestDeleteRange(_)) => {
                    return Err(Error::Internal("write inside a read-only txn".into()))
                }
                None => continue,
            };
            responses.push(pb::ResponseOp { response: Some(response) });
        }
        Ok(pb::TxnResponse { header: None, succeeded, responses })
    }

    /// The key as a read at `at` sees it, with its value.
    pub(crate) fn get_at(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>> {
        match self.index.get(key, at) {
            Some(found) => self.kv_at(found.modified).map(Some),
            None => Ok(None),
        }
    }

    /// Every key of `range` alive at `at`, with values.
    pub(crate) fn kvs_at(&self, range: KeyRange<'_>, at: i64) -> Result<Vec<KeyValue>> {
        self.index.range(range, at).map(|(_, found)| self.kv_at(found.modified)).collect()
    }

    fn put(&mut self, txn: &mut WriteTxn, req: &pb::PutRequest) -> Result<pb::PutResponse> {
        stats::count(&stats::PUTS);
        let prev = if req.prev_kv || req.ignore_value || req.ignore_lease {
            self.get_at(&req.key, txn.read_rev())?
        } else {
            None
        };
        let mut value = req.value.clone();
        let mut lease = req.lease;
        if req.ignore_value || req.ignore_lease {
            let prev = prev.as_ref().ok_or(Error::KeyNotFound)?;
            if req.ignore_value {
                value = prev.value.clone();
            }
            if req.ignore_lease {
                lease = prev.lease;
            }
        }
        let rev = Revision::new(txn.begin + 1, txn.changes);
        let (create_revision, version) = match self.index.get(&req.key, rev.main) {
            Some(found) => (found.created.main, found.version + 1),
            None => {
                self.live_keys += 1;
                (rev.main, 1)
            }
        };
        let kv = KeyValue { key: req.key.clone(), create_revision, mod_revision: rev.main, version, value, lease };
        self.leases.attach(&req.key, kv.lease);
        self.stage(rev, false, kv);
        self.index.put(&req.key, rev);
        txn.changes += 1;
        Ok(pb::PutResponse { header: Some(revision_header(rev.main)), prev_kv: if req.prev_kv { prev } else { None } })
    }

    fn delete_range(&mut self, txn: &mut WriteTxn, req: &pb::DeleteRangeRequest) -> Result<pb::DeleteRangeResponse> {
        stats::count(&stats::DELETES);
        let range = KeyRange::new(&req.key, &req.range_end);
        let victims = self.kvs_at(range, txn.read_rev())?;
        self.delete_keys(txn, &victims);
        Ok(pb::DeleteRangeResponse {
            header: Some(revision_header(txn.read_rev())),
            deleted: victims.len() as i64,
            prev_kvs: if req.prev_kv { victims } else { Vec::new() },
        })
    }

    /// Deletes keys alive at the txn's read revision (`victims` holds their current values).
    fn delete_keys(&mut self, txn: &mut WriteTxn, victims: &[KeyValue]) {
        for victim in victims {
            let rev = Revision::new(txn.begin + 1, txn.changes);
            let tombstone = KeyValue { key: victim.key.clone(), mod_revision: rev.main, ..Default::default() };
            if !self.index.tombstone(&victim.key, rev) {
                panic!("key {:?} listed alive at {} but cannot be deleted", victim.key, txn.read_rev());
            }
            self.leases.attach(&victim.key, 0);
            self.live_keys -= 1;
            self.stage(rev, true, tombstone);
            txn.changes += 1;
        }
    }

    fn lease_grant(&mut self, req: &pb::LeaseGrantRequest) -> Result<pb::LeaseGrantResponse> {
        if self.leases.contains(req.id) {
            return Err(Error::LeaseExists);
        }
        if req.ttl > MAX_LEASE_TTL {
            return Err(Error::LeaseTtlTooLarge);
        }
        self.leases.grant(req.id, req.ttl);
        self.batch.put(Bucket::Lease, req.id.to_be_bytes(), req.ttl.to_be_bytes());
        Ok(pb::LeaseGrantResponse {
            header: Some(revision_header(self.current)),
            id: req.id,
            ttl: req.ttl,
            error: String::new(),
        })
    }

    /// Revokes a lease, deleting every key attached to it in one revision.
    fn lease_revoke(&mut self, req: &pb::LeaseRevokeRequest) -> Result<pb::LeaseRevokeResponse> {
        let lease = self.leases.revoke(req.id).ok_or(Error::LeaseNotFound)?;
        self.batch.delete(Bucket::Lease, req.id.to_be_bytes());
        let mut txn = self.begin();
        let mut victims = Vec::with_capacity(lease.keys.len());
        for key in &lease.keys {
            if let Some(kv) = self.get_at(key, txn.read_rev())? {
                victims.push(kv);
            }
        }
        self.delete_keys(&mut txn, &victims);
        let rev = self.end(txn);
        Ok(pb::LeaseRevokeResponse { header: Some(revision_header(rev)) })
    }

    fn stage(&mut self, rev: Revision, tombstone: bool, kv: KeyValue) {
        self.batch.put(Bucket::Key, rev.to_bytes(), encode_entry(tombstone, &kv));
        self.events.push(event(tombstone, kv.clone()));
        self.staged.insert(rev, kv);
    }

    /// The changes applied since the last call, in revision order, for the watchers; call after
    /// [`MvccStore::commit`]. Events carry no `prev_kv` (watchers that want it read revision - 1).
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Every change to keys of `range` with a main revision in `(after, upto]`, in revision order: the
    /// history a watcher catches up from. Fails with [`Error::Compacted`] when part of it is gone.
    pub fn history(&self, range: KeyRange<'_>, after: i64, upto: i64) -> Result<Vec<Event>> {
        if after + 1 < self.compacted {
            return Err(Error::Compacted);
        }
        let mut revs: Vec<(Revision, bool)> = Vec::new();
        for (_, ki) in self.index.range_indexes(range) {
            revs.extend(ki.revisions_after(after).into_iter().filter(|(rev, _)| rev.main <= upto));
        }
        revs.sort_unstable();
        revs.into_iter().map(|(rev, tombstone)| Ok(event(tombstone, self.kv_at(rev)?))).collect()
    }

    /// The value of `key` as a read at `at` sees it (for watchers' `prev_kv`).
    pub fn value_at(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>> {
        if at < self.compacted {
            return Err(Error::Compacted);
        }
        self.get_at(key, at)
    }

    fn compact(&mut self, req: &pb::CompactionRequest) -> Result<pb::CompactionResponse> {
        if req.revision <= self.compacted {
            return Err(Error::Compacted);
        }
        if req.revision > self.current {
            return Err(Error::FutureRevision);
        }
        for rev in self.index.compact(req.revision) {
            self.staged.remove(&rev);
            self.batch.delete(Bucket::Key, rev.to_bytes());
        }
        self.compacted = req.revision;
        self.batch.put(Bucket::Meta, META_COMPACT_REV, req.revision.to_be_bytes());
        Ok(pb::CompactionResponse { header: Some(revision_header(self.current)) })
    }

    /// Stages a bookkeeping value to be written atomically with the next commit.
    pub fn stage_meta(&mut self, key: &[u8], value: Vec<u8>) {
        self.batch.put(Bucket::Meta, key, value);
    }

    /// A bookkeeping value as last committed.
    pub fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.backend.get(Bucket::Meta, key)?)
    }

    /// How many writes are staged and not yet committed.
    pub fn staged_writes(&self) -> usize {
        self.batch.ops.len()
    }

    /// Writes everything staged since the last commit, atomically.
    pub fn commit(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.backend.write(batch)?;
        self.staged.clear();
        Ok(())
    }

    /// Every committed entry of every bucket: the content of a snapshot.
    pub fn export(&self) -> Result<Vec<(Bucket, Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for bucket in Bucket::ALL {
            self.backend.scan(bucket, &mut |k, v| {
                out.push((bucket, k.to_vec(), v.to_vec()));
                true
            })?;
        }
        Ok(out)
    }

    /// Replaces the whole store with a snapshot's content (from [`MvccStore::export`]).
    pub fn install(&mut self, entries: Vec<(Bucket, Vec<u8>, Vec<u8>)>) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (bucket, key, value) in entries {
            batch.put(bucket, key, value);
        }
        self.backend.replace_all(batch)?;
        self.load()
    }
}

/// Visits every entry of `bucket` in key order, stopping at the first error `visit` returns.
pub(crate) fn try_scan(
    backend: &dyn Backend,
    bucket: Bucket,
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    let mut failure = None;
    backend.scan(bucket, &mut |key, value| match visit(key, value) {
        Ok(()) => true,
        Err(err) => {
            failure = Some(err);
            false
        }
    })?;
    failure.map_or(Ok(()), Err)
}

fn decode_i64(bytes: &[u8]) -> Result<i64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| Error::Internal("corrupt meta revision".into()))?;
    Ok(i64::from_be_bytes(arr))
}

fn event(tombstone: bool, kv: KeyValue) -> Event {
    let kind = if tombstone { EventType::Delete } else { EventType::Put };
    Event { r#type: kind as i32, kv: Some(kv), prev_kv: None }
}

/// A header carrying only a revision, as apply produces (the service fills in the rest).
pub(crate) fn revision_header(revision: i64) -> pb::ResponseHeader {
    pb::ResponseHeader { revision, ..Default::default() }
}
