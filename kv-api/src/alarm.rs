//! The alarm table: which member raised which alarm (NOSPACE, CORRUPT), as etcd's alarm store keeps it.
//!
//! Alarms change only by [`crate::Command::Alarm`] applied in log order, so every member holds the same
//! table; it lives in the store's `Alarm` bucket, so it survives restarts and travels in snapshots.
//! While NOSPACE is active the store refuses what would take space (see [`takes_space`]); while CORRUPT
//! is active it refuses every request, as etcd's capped and corrupt appliers do.

use std::collections::BTreeSet;

use proto::etcdserverpb as pb;

/// Active alarms, ordered by member id then alarm type (etcd lists them in map order; a fixed order
/// makes `alarm list` stable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlarmTable {
    active: BTreeSet<(u64, i32)>,
}

impl AlarmTable {
    pub fn clear(&mut self) {
        self.active.clear();
    }

    /// Raises `alarm` for `member_id`; false when it was already raised.
    pub fn activate(&mut self, member_id: u64, alarm: i32) -> bool {
        self.active.insert((member_id, alarm))
    }

    /// Disarms `alarm` of `member_id`; false when it was not raised.
    pub fn deactivate(&mut self, member_id: u64, alarm: i32) -> bool {
        self.active.remove(&(member_id, alarm))
    }

    /// Whether any member raised `alarm`.
    pub fn is_active(&self, alarm: pb::AlarmType) -> bool {
        self.active.iter().any(|&(_, a)| a == alarm as i32)
    }

    /// The alarms of type `alarm`, or every alarm for `NONE` (as etcd's `AlarmStore.Get`).
    pub fn get(&self, alarm: i32) -> Vec<pb::AlarmMember> {
        self.active
            .iter()
            .filter(|&&(_, a)| alarm == pb::AlarmType::None as i32 || a == alarm)
            .map(|&(member_id, alarm)| pb::AlarmMember { member_id, alarm })
            .collect()
    }
}

/// The `Alarm` bucket's key of an alarm.
pub fn key(member_id: u64, alarm: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&member_id.to_be_bytes());
    out.extend_from_slice(&alarm.to_be_bytes());
    out
}

/// The alarm an `Alarm` bucket key names, `None` when the key is malformed.
pub fn from_key(key: &[u8]) -> Option<(u64, i32)> {
    let member_id = u64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let alarm = i32::from_be_bytes(key.get(8..12)?.try_into().ok()?);
    (key.len() == 12).then_some((member_id, alarm))
}

/// How etcd prints an alarm (gogo-protobuf's text form, trailing space included): `etcdctl alarm list`
/// and Status's `errors` show it.
pub fn describe(alarm: &pb::AlarmMember) -> String {
    let kind =
        pb::AlarmType::try_from(alarm.alarm).map_or_else(|_| alarm.alarm.to_string(), |t| t.as_str_name().to_string());
    format!("memberID:{} alarm:{} ", alarm.member_id, kind)
}

/// Whether etcd's corrupt applier refuses the request: the key space and lease changes (and reads, which
/// never reach apply here). Logins, user and role changes, alarms and downgrades still apply, so that a
/// client can log in and an operator can act on a corrupt cluster.
pub fn refused_when_corrupt(command: &crate::Command) -> bool {
    use crate::Command;
    matches!(
        command.inner(),
        Command::Put(_)
            | Command::DeleteRange(_)
            | Command::Txn(_)
            | Command::Compact(_)
            | Command::LeaseGrant(_)
            | Command::LeaseRevoke(_)
    )
}

/// Whether a request would take space: what etcd's quota charges for (a put, a txn with a put among its
/// top-level operations, a lease grant). Nested txns are not charged, as in etcd.
pub fn takes_space(command: &crate::Command) -> bool {
    quota_cost(command) > 0
}

/// etcd's estimate of the bytes a request adds to the backend (`etcdserver/quota.go`).
pub fn quota_cost(command: &crate::Command) -> u64 {
    use crate::Command;
    const KV_OVERHEAD: u64 = 256;
    const LEASE_OVERHEAD: u64 = 64;
    let put = |req: &pb::PutRequest| KV_OVERHEAD + (req.key.len() + req.value.len()) as u64;
    let ops = |ops: &[pb::RequestOp]| -> u64 {
        ops.iter()
            .map(|op| match &op.request {
                Some(pb::request_op::Request::RequestPut(req)) => put(req),
                _ => 0,
            })
            .sum()
    };
    match command.inner() {
        Command::Put(req) => put(req),
        Command::Txn(req) => ops(&req.success).max(ops(&req.failure)),
        Command::LeaseGrant(_) => LEASE_OVERHEAD,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Command, CommandResponse, Error, MemBackend, MvccStore};

    fn alarm(action: pb::alarm_request::AlarmAction, member_id: u64) -> Command {
        Command::Alarm(pb::AlarmRequest { action: action as i32, member_id, alarm: pb::AlarmType::Nospace as i32 })
    }

    fn alarms_of(resp: crate::Result<CommandResponse>) -> Vec<u64> {
        match resp {
            Ok(CommandResponse::Alarm(resp)) => resp.alarms.iter().map(|a| a.member_id).collect(),
            other => panic!("not an alarm response: {other:?}"),
        }
    }

    #[test]
    fn nospace_refuses_what_takes_space_until_disarmed_and_survives_a_reopen() {
        use pb::alarm_request::AlarmAction::{Activate, Deactivate};
        use pb::request_op::Request;
        let backend = Arc::new(MemBackend::default());
        let mut store = MvccStore::open(backend.clone()).expect("open");
        let put = pb::PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), ..Default::default() };
        store.apply(&Command::Put(put.clone())).expect("put before the alarm");
        store.apply(&Command::LeaseGrant(pb::LeaseGrantRequest { ttl: 10, id: 5 })).expect("grant");
        assert_eq!(alarms_of(store.apply(&alarm(Activate, 9))), vec![9]);
        // Raising it again answers the same alarm, as etcd.
        assert_eq!(alarms_of(store.apply(&alarm(Activate, 9))), vec![9]);
        store.commit().expect("commit");

        let mut store = MvccStore::open(backend).expect("reopen");
        assert!(store.alarms().is_active(pb::AlarmType::Nospace));
        let op = |r: Request| pb::RequestOp { request: Some(r) };
        let delete = pb::DeleteRangeRequest { key: b"k".to_vec(), ..Default::default() };
        let refused = [
            Command::Put(put.clone()),
            Command::LeaseGrant(pb::LeaseGrantRequest { ttl: 10, id: 6 }),
            Command::Txn(pb::TxnRequest { failure: vec![op(Request::RequestPut(put.clone()))], ..Default::default() }),
        ];
        for command in &refused {
            assert_eq!(store.apply(command), Err(Error::NoSpace), "{command:?}");
        }
        let delete_txn = Command::Txn(pb::TxnRequest {
            success: vec![op(Request::RequestDeleteRange(delete))],
            ..Default::default()
        });
        assert!(store.apply(&delete_txn).is_ok());
        assert!(store.apply(&Command::Compact(pb::CompactionRequest { revision: 2, physical: false })).is_ok());
        assert!(store.apply(&Command::LeaseRevoke(pb::LeaseRevokeRequest { id: 5 })).is_ok());

        // Disarming another member's alarm changes nothing; disarming this one restores writes.
        assert!(alarms_of(store.apply(&alarm(Deactivate, 1))).is_empty());
        assert_eq!(alarms_of(store.apply(&alarm(Deactivate, 9))), vec![9]);
        assert!(store.apply(&Command::Put(put)).is_ok());
    }

    #[test]
    fn keys_round_trip_and_the_table_lists_by_type() {
        assert_eq!(from_key(&key(7, 2)), Some((7, 2)));
        assert_eq!(from_key(&[1, 2, 3]), None);
        let mut table = AlarmTable::default();
        assert!(table.activate(9, pb::AlarmType::Nospace as i32));
        assert!(!table.activate(9, pb::AlarmType::Nospace as i32));
        assert!(table.activate(3, pb::AlarmType::Corrupt as i32));
        assert!(table.is_active(pb::AlarmType::Nospace));
        let all = table.get(pb::AlarmType::None as i32);
        assert_eq!(all.iter().map(|a| a.member_id).collect::<Vec<_>>(), vec![3, 9]);
        assert_eq!(table.get(pb::AlarmType::Nospace as i32).len(), 1);
        assert!(table.deactivate(9, pb::AlarmType::Nospace as i32));
        assert!(!table.deactivate(9, pb::AlarmType::Nospace as i32));
        assert!(!table.is_active(pb::AlarmType::Nospace));
    }

    #[test]
    fn alarms_print_as_etcd_prints_them() {
        let alarm = pb::AlarmMember { member_id: 17010963214147749224, alarm: pb::AlarmType::Nospace as i32 };
        assert_eq!(describe(&alarm), "memberID:17010963214147749224 alarm:NOSPACE ");
    }

    #[test]
    fn the_quota_charges_what_etcd_charges() {
        let put = pb::PutRequest { key: b"key".to_vec(), value: vec![0; 10], ..Default::default() };
        let op = |req: pb::request_op::Request| pb::RequestOp { request: Some(req) };
        let delete = op(pb::request_op::Request::RequestDeleteRange(Default::default()));
        let cases = [
            (Command::Put(put.clone()), 269),
            (Command::LeaseGrant(Default::default()), 64),
            (Command::LeaseRevoke(Default::default()), 0),
            (Command::DeleteRange(Default::default()), 0),
            (Command::Compact(Default::default()), 0),
            (Command::Txn(pb::TxnRequest { success: vec![delete.clone()], ..Default::default() }), 0),
            (
                Command::Txn(pb::TxnRequest {
                    success: vec![delete],
                    failure: vec![op(pb::request_op::Request::RequestPut(put.clone())); 2],
                    ..Default::default()
                }),
                538,
            ),
            (
                // A put inside a nested txn is not charged (etcd looks at the top level only).
                Command::Txn(pb::TxnRequest {
                    success: vec![op(pb::request_op::Request::RequestTxn(pb::TxnRequest {
                        success: vec![op(pb::request_op::Request::RequestPut(put))],
                        ..Default::default()
                    }))],
                    ..Default::default()
                }),
                0,
            ),
        ];
        for (command, cost) in cases {
            assert_eq!(quota_cost(&command), cost, "{command:?}");
            assert_eq!(takes_space(&command), cost > 0);
        }
    }
}
