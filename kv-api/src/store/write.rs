//! The write path of the store: [`MvccStore::apply`] of each command, the writes of puts, deletes, leases
//! and compaction, each staged in the batch that [`MvccStore::commit`] writes.

use proto::etcdserverpb as pb;
use proto::mvccpb::KeyValue;

use super::{encode_entry, event, revision_header, MvccStore, WriteTxn, META_COMPACT_REV, META_DOWNGRADE};
use crate::alarm;
use crate::auth::Caller;
use crate::backend::Bucket;
use crate::command::{Command, CommandResponse};
use crate::error::{Error, Result};
use crate::index::KeyRange;
use crate::lease::{LeaseId, MAX_LEASE_TTL};
use crate::revision::Revision;
use crate::stats;

impl MvccStore {
    /// Applies a write command. Errors are deterministic (every member gets the same) and leave the store
    /// unchanged.
    pub fn apply(&mut self, cmd: &Command) -> Result<CommandResponse> {
        // etcd's corrupt applier refuses what touches keys and leases, its capped applier (NOSPACE) what
        // takes space; the alarm requests themselves always pass so that an alarm can be disarmed.
        if alarm::refused_when_corrupt(cmd) && self.alarms.is_active(pb::AlarmType::Corrupt) {
            return Err(Error::Corrupt);
        }
        if alarm::takes_space(cmd) && self.alarms.is_active(pb::AlarmType::Nospace) {
            return Err(Error::NoSpace);
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
            Command::Txn(req) => {
                auth.check_txn(caller, req)?;
                // A put inside a txn is checked as one outside (etcd 3.6.14; before, a txn could read a
                // key through `prev_kv` or attach a key to another's lease unchecked).
                let mut pending = vec![req];
                while let Some(txn) = pending.pop() {
                    for op in txn.success.iter().chain(&txn.failure) {
                        match &op.request {
                            Some(pb::request_op::Request::RequestPut(put)) => {
                                lease_keys(put.lease)?;
                                if put.prev_kv {
                                    auth.check_read(caller, &put.key, &[])?;
                                }
                            }
                            Some(pb::request_op::Request::RequestTxn(inner)) => pending.push(inner),
                            _ => {}
                        }
                    }
                }
                Ok(())
            }
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

    pub(super) fn begin(&self) -> WriteTxn {
        WriteTxn { begin: self.current, changes: 0 }
    }

    pub(super) fn end(&mut self, txn: WriteTxn) -> i64 {
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
        super::txn::check_put(self, req, txn.read_rev())?;
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

    pub(super) fn put(&mut self, txn: &mut WriteTxn, req: &pb::PutRequest) -> Result<pb::PutResponse> {
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

    pub(super) fn delete_range(
        &mut self,
        txn: &mut WriteTxn,
        req: &pb::DeleteRangeRequest,
    ) -> Result<pb::DeleteRangeResponse> {
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

    /// As etcd's lessor, at apply (so a raised alarm answers first): the TTL, then the id.
    fn lease_grant(&mut self, req: &pb::LeaseGrantRequest) -> Result<pb::LeaseGrantResponse> {
        if req.ttl > MAX_LEASE_TTL {
            return Err(Error::LeaseTtlTooLarge);
        }
        if self.leases.contains(req.id) {
            return Err(Error::LeaseExists);
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

    /// Applies a compaction: only what every member must do at once and alike (see `crate::compactor`).
    fn compact(&mut self, req: &pb::CompactionRequest) -> Result<pb::CompactionResponse> {
        if req.revision <= self.compacted {
            return Err(Error::Compacted);
        }
        if req.revision > self.current {
            return Err(Error::FutureRevision);
        }
        // Reads below the revision fail from here on. The key index is compacted a step at a time after
        // the commit, and the compactor deletes what it freed (see `index_compaction`): nothing here
        // grows with the number of keys.
        self.compacted = req.revision;
        self.batch.put(Bucket::Meta, META_COMPACT_REV, req.revision.to_be_bytes());
        self.compaction_staged = true;
        self.start_index_compaction(req.revision);
        Ok(pb::CompactionResponse { header: Some(revision_header(self.current)) })
    }
}
