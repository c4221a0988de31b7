//! The permission checks etcd 3.6.14's `checkTxnPermission` (server/etcdserver/apply/apply_auth.go) runs
//! on a Txn that 3.5.1's `checkTxnAuth` (server/etcdserver/apply_auth.go) does not, in 3.6's order. Both
//! walk the compares, then the success ops, then the failure ops, whichever branch will run. 3.6 adds:
//!
//! - inside every nested Txn, at any depth (`checkTxnReqsPermission`'s `RequestOp_RequestTxn` case,
//!   which 3.5.1 lacks): everything 3.5.1 checks only at the top, read on each compare's range and
//!   Range's, write on each Put's key and DeleteRange's range, read on a DeleteRange's range with
//!   `prev_kv`;
//! - on every Put, at any depth (`checkPutAuth`, etcd-io/etcd 633de82d0): write on every key of its lease
//!   (`checkLeasePuts`), then read on its key for `prev_kv`.
//!
//! 3.5.1 applies nested ops without any check (its `applyTxn` calls the backend applier), so what 3.6
//! refuses here, 3.5.1 may well apply. No I/O here: [`super::hardening`] asks etcd about each check.

use prost_reflect::DynamicMessage;

use super::field;
use super::rule::Rule36;

/// What a check needs of the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// `IsRangePermitted(key, range_end)`.
    Read { key: Vec<u8>, range_end: Vec<u8> },
    /// `IsPutPermitted(key)` (no `range_end`) or `IsDeleteRangePermitted(key, range_end)`.
    Write { key: Vec<u8>, range_end: Vec<u8> },
    /// `checkLeasePuts`: write on every key the lease holds (none when it does not exist).
    WriteLeaseKeys(i64),
}

/// One check 3.6 runs where 3.5.1 does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnCheck {
    pub need: Need,
    /// Inside a nested Txn, which 3.5.1 does not look into at all; else an added check on a top-level Put.
    pub nested: bool,
}

impl TxnCheck {
    /// The rule that answers for 3.6 when this check refuses.
    pub fn rule(&self) -> Rule36 {
        if self.nested {
            Rule36::TxnNested
        } else {
            Rule36::TxnPut
        }
    }
}

/// The checks 3.6 adds to a Txn's, in its order, each once (a repeat can only repeat the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnChecks {
    pub added: Vec<TxnCheck>,
    /// Whether 3.5.1 checks anything at all: a compare or an op other than a nested Txn at the top.
    pub top_level_checked: bool,
}

impl TxnChecks {
    pub fn of(txn: &DynamicMessage) -> TxnChecks {
        let mut added = Vec::new();
        walk(txn, false, &mut added);
        let top_level_checked = !field::messages(txn, "compare").is_empty()
            || branches(txn).iter().any(|op| field::message(op, "request_txn").is_none() && has_request(op));
        TxnChecks { added, top_level_checked }
    }

    /// Whether a caller without a token is refused by 3.6 ("user name is empty", from the first check it
    /// runs) where 3.5.1 runs no check and takes the Txn: nothing is checked at the top, something is
    /// below. A lease check always follows its Put's write check, so any added check will do.
    pub fn refused_only_without_user_by_36(&self) -> bool {
        !self.top_level_checked && !self.added.is_empty()
    }
}

/// The success ops, then the failure ops.
fn branches(txn: &DynamicMessage) -> Vec<DynamicMessage> {
    let mut ops = field::messages(txn, "success");
    ops.extend(field::messages(txn, "failure"));
    ops
}

/// Whether the op has a request set (Go's type switch skips an empty `RequestOp`).
fn has_request(op: &DynamicMessage) -> bool {
    ["request_range", "request_put", "request_delete_range", "request_txn"]
        .iter()
        .any(|name| field::message(op, name).is_some())
}

/// `checkTxnPermission` on `txn`, keeping the checks 3.5.1 does not run: all of them when `nested`.
fn walk(txn: &DynamicMessage, nested: bool, out: &mut Vec<TxnCheck>) {
    let range = |message: &DynamicMessage| (field::bytes(message, "key"), field::bytes(message, "range_end"));
    for compare in field::messages(txn, "compare") {
        let (key, range_end) = range(&compare);
        add(out, nested, Need::Read { key, range_end });
    }
    for op in branches(txn) {
        if let Some(get) = field::message(&op, "request_range") {
            let (key, range_end) = range(get);
            add(out, nested, Need::Read { key, range_end });
        } else if let Some(put) = field::message(&op, "request_put") {
            let key = field::bytes(put, "key");
            add(out, nested, Need::Write { key: key.clone(), range_end: Vec::new() });
            let lease = field::int64(put, "lease");
            if lease != 0 {
                add_always(out, nested, Need::WriteLeaseKeys(lease));
            }
            if field::boolean(put, "prev_kv") {
                add_always(out, nested, Need::Read { key, range_end: Vec::new() });
            }
        } else if let Some(delete) = field::message(&op, "request_delete_range") {
            let (key, range_end) = range(delete);
            if field::boolean(delete, "prev_kv") {
                add(out, nested, Need::Read { key: key.clone(), range_end: range_end.clone() });
            }
            add(out, nested, Need::Write { key, range_end });
        } else if let Some(inner) = field::message(&op, "request_txn") {
            walk(inner, true, out);
        }
    }
}

/// A check both versions run at the top level: added only inside a nested Txn.
fn add(out: &mut Vec<TxnCheck>, nested: bool, need: Need) {
    if nested {
        add_always(out, nested, need);
    }
}

/// A check 3.5.1 runs nowhere.
fn add_always(out: &mut Vec<TxnCheck>, nested: bool, need: Need) {
    if !out.iter().any(|check| check.need == need) {
        out.push(TxnCheck { need, nested });
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost_reflect::Value;

    use super::super::catalog::Catalog;
    use super::*;

    struct Build(Catalog);

    impl Build {
        fn message(&self, name: &str, fields: Vec<(&str, Value)>) -> DynamicMessage {
            let descriptor = self.0.pool.get_message_by_name(name).expect("message");
            let mut message = DynamicMessage::new(descriptor);
            for (field, value) in fields {
                message.set_field_by_name(field, value);
            }
            message
        }

        fn op(&self, case: &str, name: &str, fields: Vec<(&str, Value)>) -> Value {
            let request = Value::Message(self.message(name, fields));
            Value::Message(self.message("etcdserverpb.RequestOp", vec![(case, request)]))
        }

        fn put(&self, key: &'static [u8], prev_kv: bool, lease: i64) -> Value {
            let fields = vec![("key", bytes(key)), ("prev_kv", Value::Bool(prev_kv)), ("lease", Value::I64(lease))];
            self.op("request_put", "etcdserverpb.PutRequest", fields)
        }

        fn get(&self, key: &'static [u8], range_end: &'static [u8]) -> Value {
            let fields = vec![("key", bytes(key)), ("range_end", bytes(range_end))];
            self.op("request_range", "etcdserverpb.RangeRequest", fields)
        }

        fn delete(&self, key: &'static [u8], range_end: &'static [u8], prev_kv: bool) -> Value {
            let fields = vec![("key", bytes(key)), ("range_end", bytes(range_end)), ("prev_kv", Value::Bool(prev_kv))];
            self.op("request_delete_range", "etcdserverpb.DeleteRangeRequest", fields)
        }

        fn compare(&self, key: &'static [u8], range_end: &'static [u8]) -> Value {
            let fields = vec![("key", bytes(key)), ("range_end", bytes(range_end))];
            Value::Message(self.message("etcdserverpb.Compare", fields))
        }

        fn txn(&self, compare: Vec<Value>, success: Vec<Value>, failure: Vec<Value>) -> DynamicMessage {
            let fields = vec![
                ("compare", Value::List(compare)),
                ("success", Value::List(success)),
                ("failure", Value::List(failure)),
            ];
            self.message("etcdserverpb.TxnRequest", fields)
        }

        fn nested(&self, compare: Vec<Value>, success: Vec<Value>, failure: Vec<Value>) -> Value {
            let txn = Value::Message(self.txn(compare, success, failure));
            Value::Message(self.message("etcdserverpb.RequestOp", vec![("request_txn", txn)]))
        }
    }

    fn bytes(b: &'static [u8]) -> Value {
        Value::Bytes(Bytes::from_static(b))
    }

    fn read(key: &[u8], range_end: &[u8], nested: bool) -> TxnCheck {
        TxnCheck { need: Need::Read { key: key.to_vec(), range_end: range_end.to_vec() }, nested }
    }

    fn write(key: &[u8], range_end: &[u8], nested: bool) -> TxnCheck {
        TxnCheck { need: Need::Write { key: key.to_vec(), range_end: range_end.to_vec() }, nested }
    }

    #[test]
    fn the_fuzzers_example_needs_read_on_a_nested_compare_of_the_branch_that_does_not_run() {
        let b = Build(Catalog::load().expect("descriptors"));
        // {"failure":[{"request_txn":{"compare":[{"key":"\xff",...}]}}],"success":[{"request_txn":{}}]}
        let txn = b.txn(
            vec![],
            vec![b.nested(vec![], vec![], vec![])],
            vec![b.nested(vec![b.compare(b"\xff", b"")], vec![], vec![])],
        );
        let checks = TxnChecks::of(&txn);
        assert_eq!(checks.added, vec![read(b"\xff", b"", true)]);
        assert!(!checks.top_level_checked);
        assert!(checks.refused_only_without_user_by_36());
        assert_eq!(checks.added[0].rule(), Rule36::TxnNested);
    }

    #[test]
    fn nested_ops_at_any_depth_are_checked_in_3_6_s_order_and_the_top_level_s_are_not() {
        let b = Build(Catalog::load().expect("descriptors"));
        let deepest = b.nested(vec![b.compare(b"c3", b"c4")], vec![], vec![b.delete(b"d1", b"d2", false)]);
        let inner = b.nested(
            vec![b.compare(b"c1", b"\0")],
            vec![b.get(b"g1", b"g2"), deepest, b.put(b"p1", true, 5)],
            vec![b.delete(b"d3", b"", true)],
        );
        let txn = b.txn(
            vec![b.compare(b"top", b"")],
            vec![b.get(b"top-get", b""), inner, b.put(b"top-put", false, 0)],
            vec![b.delete(b"top-del", b"z", true)],
        );
        let checks = TxnChecks::of(&txn);
        let expected = vec![
            read(b"c1", b"\0", true),
            read(b"g1", b"g2", true),
            read(b"c3", b"c4", true),
            write(b"d1", b"d2", true),
            write(b"p1", b"", true),
            TxnCheck { need: Need::WriteLeaseKeys(5), nested: true },
            read(b"p1", b"", true),
            read(b"d3", b"", true),
            write(b"d3", b"", true),
        ];
        assert_eq!(checks.added, expected);
        assert!(checks.top_level_checked);
        assert!(!checks.refused_only_without_user_by_36());
    }

    #[test]
    fn top_level_puts_add_only_their_lease_and_prev_kv_checks_and_repeats_are_dropped() {
        let b = Build(Catalog::load().expect("descriptors"));
        let nested = b.nested(vec![b.compare(b"k", b"")], vec![b.put(b"k", false, 0)], vec![]);
        let txn = b.txn(vec![], vec![b.put(b"k", true, 2), b.put(b"j", false, 0)], vec![nested, b.put(b"k", true, 2)]);
        let checks = TxnChecks::of(&txn);
        let lease = TxnCheck { need: Need::WriteLeaseKeys(2), nested: false };
        assert_eq!(checks.added, vec![lease, read(b"k", b"", false), write(b"k", b"", true)]);
        assert_eq!(checks.added[0].rule(), Rule36::TxnPut);
        assert_eq!(checks.added[2].rule(), Rule36::TxnNested);

        let plain = b.txn(
            vec![b.compare(b"a", b"")],
            vec![b.put(b"k", false, 0)],
            vec![b.get(b"a", b""), b.delete(b"b", b"", true)],
        );
        assert_eq!(TxnChecks::of(&plain).added, vec![]);
    }

    #[test]
    fn empty_ops_and_empty_nested_txns_are_not_checks() {
        let b = Build(Catalog::load().expect("descriptors"));
        let empty_op = Value::Message(b.message("etcdserverpb.RequestOp", vec![]));
        let txn = b.txn(vec![], vec![empty_op.clone(), b.nested(vec![], vec![empty_op], vec![])], vec![]);
        let checks = TxnChecks::of(&txn);
        assert_eq!(checks, TxnChecks { added: vec![], top_level_checked: false });
        assert!(!checks.refused_only_without_user_by_36());
    }
}
