//! Checks made on a request before it is proposed, as etcd's gRPC layer makes them: a request that fails
//! here never reaches the log.

use std::collections::HashSet;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::request_op::Request;

use crate::error::{Error, Result};

/// Limits a member enforces on requests (etcd's `--max-txn-ops` and `--max-request-bytes`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_txn_ops: usize,
    pub max_request_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_txn_ops: 128, max_request_bytes: 1536 * 1024 }
    }
}

/// An empty key, then the sort options (etcd 3.6's order; 3.5 panics on an unknown sort option).
pub fn check_range(req: &pb::RangeRequest) -> Result<()> {
    if req.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if pb::range_request::SortOrder::try_from(req.sort_order).is_err()
        || pb::range_request::SortTarget::try_from(req.sort_target).is_err()
    {
        return Err(Error::InvalidSortOption);
    }
    Ok(())
}

pub fn check_put(req: &pb::PutRequest) -> Result<()> {
    if req.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if req.ignore_value && !req.value.is_empty() {
        return Err(Error::ValueProvided);
    }
    if req.ignore_lease && req.lease != 0 {
        return Err(Error::LeaseProvided);
    }
    Ok(())
}

pub fn check_delete(req: &pb::DeleteRangeRequest) -> Result<()> {
    if req.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

/// Op counts, empty keys and, for each branch, etcd's duplicate-key rule.
pub fn check_txn(req: &pb::TxnRequest, limits: &Limits) -> Result<()> {
    check_txn_ops(req, limits.max_txn_ops)?;
    check_intervals(&req.success)?;
    check_intervals(&req.failure)?;
    Ok(())
}

fn check_txn_ops(req: &pb::TxnRequest, max_ops: usize) -> Result<()> {
    let ops = req.compare.len().max(req.success.len()).max(req.failure.len());
    if ops > max_ops {
        return Err(Error::TooManyOps);
    }
    if req.compare.iter().any(|c| c.key.is_empty()) {
        return Err(Error::EmptyKey);
    }
    // Nested txns share the budget left by their parent, as in etcd.
    let left = max_ops - ops;
    for op in req.success.iter().chain(&req.failure) {
        match &op.request {
            Some(Request::RequestRange(r)) => check_range(r)?,
            Some(Request::RequestPut(r)) => check_put(r)?,
            Some(Request::RequestDeleteRange(r)) => check_delete(r)?,
            Some(Request::RequestTxn(r)) => check_txn_ops(r, left)?,
            None => return Err(Error::KeyNotFound),
        }
    }
    Ok(())
}

/// A deleted interval as etcd's duplicate check sees it: `end` empty is the single key `start`; any
/// other `end` is compared literally (so a from-key delete, `end == [0]`, covers nothing, as in etcd).
struct Deleted {
    start: Vec<u8>,
    end: Vec<u8>,
}

impl Deleted {
    fn covers(&self, key: &[u8]) -> bool {
        if self.end.is_empty() {
            key == self.start.as_slice()
        } else {
            self.start.as_slice() <= key && key < self.end.as_slice()
        }
    }
}

/// etcd's rule: in one branch (with its nested txns), a key may be put at most once and never put and
/// deleted; puts in the two branches of a nested txn may repeat each other.
fn check_intervals(ops: &[pb::RequestOp]) -> Result<(HashSet<Vec<u8>>, Vec<Deleted>)> {
    let mut dels: Vec<Deleted> = ops
        .iter()
        .filter_map(|op| match &op.request {
            Some(Request::RequestDeleteRange(d)) => Some(Deleted { start: d.key.clone(), end: d.range_end.clone() }),
            _ => None,
        })
        .collect();
    let covered = |dels: &[Deleted], key: &[u8]| dels.iter().any(|d| d.covers(key));

    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        let Some(Request::RequestTxn(inner)) = &op.request else {
            continue;
        };
        let (puts_then, dels_then) = check_intervals(&inner.success)?;
        let (puts_else, dels_else) = check_intervals(&inner.failure)?;
        for key in &puts_then {
            if puts.contains(key) || covered(&dels, key) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(key.clone());
        }
        for key in &puts_else {
            if (puts.contains(key) && !puts_then.contains(key)) || covered(&dels, key) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(key.clone());
        }
        dels.extend(dels_then);
        dels.extend(dels_else);
    }
    for op in ops {
        let Some(Request::RequestPut(put)) = &op.request else {
            continue;
        };
        if puts.contains(&put.key) || covered(&dels, &put.key) {
            return Err(Error::DuplicateKey);
        }
        puts.insert(put.key.clone());
    }
    Ok((puts, dels))
}

/// A request whose encoding exceeds `--max-request-bytes` is refused before it is proposed.
pub fn check_size(encoded_len: usize, limits: &Limits) -> Result<()> {
    if encoded_len > limits.max_request_bytes {
        return Err(Error::RequestTooLarge);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str) -> pb::RequestOp {
        let put = pb::PutRequest { key: key.into(), ..Default::default() };
        pb::RequestOp { request: Some(Request::RequestPut(put)) }
    }

    fn del(key: &str, end: &str) -> pb::RequestOp {
        let del = pb::DeleteRangeRequest { key: key.into(), range_end: end.into(), ..Default::default() };
        pb::RequestOp { request: Some(Request::RequestDeleteRange(del)) }
    }

    fn nested(success: Vec<pb::RequestOp>, failure: Vec<pb::RequestOp>) -> pb::RequestOp {
        let txn = pb::TxnRequest { compare: vec![], success, failure };
        pb::RequestOp { request: Some(Request::RequestTxn(txn)) }
    }

    fn txn(success: Vec<pb::RequestOp>) -> pb::TxnRequest {
        pb::TxnRequest { compare: vec![], success, failure: vec![] }
    }

    #[test]
    fn duplicate_key_rule() {
        let cases: Vec<(&str, Vec<pb::RequestOp>, bool)> = vec![
            ("two puts", vec![put("a"), put("a")], false),
            ("put and delete", vec![put("a"), del("a", "")], false),
            ("delete then put", vec![del("a", ""), put("a")], false),
            ("put inside deleted range", vec![del("a", "c"), put("b")], false),
            ("put past deleted range", vec![del("a", "c"), put("c")], true),
            ("from-key delete is literal", vec![del("a", "\0"), put("b")], true),
            ("overlapping deletes", vec![del("a", "c"), del("b", "")], true),
            ("distinct puts", vec![put("a"), put("b")], true),
            ("nested branches may repeat", vec![nested(vec![put("a")], vec![put("a")])], true),
            ("nested repeats outer", vec![put("a"), nested(vec![put("a")], vec![])], false),
            ("nested put in outer delete", vec![del("a", ""), nested(vec![], vec![put("a")])], false),
        ];
        for (name, ops, ok) in cases {
            let got = check_txn(&txn(ops), &Limits::default());
            assert_eq!(got.is_ok(), ok, "{name}: {got:?}");
            if !ok {
                assert_eq!(got, Err(Error::DuplicateKey), "{name}");
            }
        }
    }

    #[test]
    fn op_limits_and_empty_keys() {
        let limits = Limits { max_txn_ops: 2, ..Default::default() };
        assert_eq!(check_txn(&txn(vec![put("a"), put("b"), put("c")]), &limits), Err(Error::TooManyOps));
        assert_eq!(check_txn(&txn(vec![put("a"), put("b")]), &limits), Ok(()));
        assert_eq!(check_txn(&txn(vec![put("")]), &limits), Err(Error::EmptyKey));
        let empty_op = pb::RequestOp { request: None };
        assert_eq!(check_txn(&txn(vec![empty_op]), &limits), Err(Error::KeyNotFound));
        // A nested txn only gets what its parent left.
        let inner = nested(vec![put("x"), put("y")], vec![]);
        assert_eq!(check_txn(&txn(vec![inner]), &limits), Err(Error::TooManyOps));
    }

    #[test]
    fn unknown_sort_options_are_refused_after_the_empty_key_and_inside_nested_txns() {
        let range = |key: &str, order: i32, target: i32| pb::RangeRequest {
            key: key.into(),
            sort_order: order,
            sort_target: target,
            ..Default::default()
        };
        assert_eq!(check_range(&range("k", 2, 4)), Ok(()));
        for (order, target) in [(3, 0), (-1, 0), (0, 5), (0, -1), (1000, 1000)] {
            assert_eq!(check_range(&range("k", order, target)), Err(Error::InvalidSortOption), "{order} {target}");
        }
        assert_eq!(check_range(&range("", 9, 9)), Err(Error::EmptyKey));
        let op = pb::RequestOp { request: Some(Request::RequestRange(range("k", 0, 7))) };
        let limits = Limits::default();
        assert_eq!(check_txn(&txn(vec![nested(vec![], vec![op])]), &limits), Err(Error::InvalidSortOption));
    }

    #[test]
    fn put_flags() {
        let mut req =
            pb::PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), ignore_value: true, ..Default::default() };
        assert_eq!(check_put(&req), Err(Error::ValueProvided));
        req.value.clear();
        assert_eq!(check_put(&req), Ok(()));
        req.ignore_lease = true;
        req.lease = 5;
        assert_eq!(check_put(&req), Err(Error::LeaseProvided));
        assert_eq!(check_size(10, &Limits { max_request_bytes: 9, max_txn_ops: 1 }), Err(Error::RequestTooLarge));
    }
}
