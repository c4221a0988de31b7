//! Txns: compares, the branch path, the checks apply makes before running any op, and the runs of a txn
//! (written through apply, or read-only).
//!
//! All compares of a txn, nested ones included, are evaluated against the store as it was before the txn;
//! the result is the *path*: one boolean per txn on the way, in the order the ops visit them.

use proto::etcdserverpb as pb;
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::request_op::Request;
use proto::mvccpb::KeyValue;

use super::{revision_header, MvccStore, WriteTxn};
use crate::command::is_read_only;
use crate::error::{Error, Result};
use crate::index::KeyRange;
use crate::stats;

/// The branch each txn on the way takes, evaluated at revision `at`.
pub(crate) fn compare_path(store: &MvccStore, req: &pb::TxnRequest, at: i64) -> Vec<bool> {
    let mut path = Vec::new();
    push_path(store, req, at, &mut path);
    path
}

fn push_path(store: &MvccStore, req: &pb::TxnRequest, at: i64, path: &mut Vec<bool>) {
    let succeeded = req.compare.iter().all(|c| compare_holds(store, c, at));
    path.push(succeeded);
    let ops = if succeeded { &req.success } else { &req.failure };
    for op in ops {
        if let Some(Request::RequestTxn(inner)) = &op.request {
            push_path(store, inner, at, path);
        }
    }
}

fn compare_holds(store: &MvccStore, cmp: &pb::Compare, at: i64) -> bool {
    let Ok(kvs) = store.kvs_at(KeyRange::new(&cmp.key, &cmp.range_end), at) else {
        return false;
    };
    if kvs.is_empty() {
        // A missing key compares as a zero KeyValue, except on its value: there is no way to tell a
        // missing value from an empty one, so a value compare on a missing key always fails.
        return cmp.target != CompareTarget::Value as i32 && compare_kv(cmp, &KeyValue::default());
    }
    kvs.iter().all(|kv| compare_kv(cmp, kv))
}

/// As etcd's `compareKV`, unknown enum values included (prost would read them as VALUE and EQUAL): an
/// unknown target compares as equal, and an unknown result holds whatever the comparison.
fn compare_kv(cmp: &pb::Compare, kv: &KeyValue) -> bool {
    let ordering = match (CompareTarget::try_from(cmp.target), &cmp.target_union) {
        (Ok(CompareTarget::Value), Some(TargetUnion::Value(v))) => kv.value.as_slice().cmp(v.as_slice()),
        (Ok(CompareTarget::Value), _) => kv.value.as_slice().cmp(&[][..]),
        (Ok(CompareTarget::Create), union) => kv.create_revision.cmp(&int_operand(union, TargetKind::Create)),
        (Ok(CompareTarget::Mod), union) => kv.mod_revision.cmp(&int_operand(union, TargetKind::Mod)),
        (Ok(CompareTarget::Version), union) => kv.version.cmp(&int_operand(union, TargetKind::Version)),
        (Ok(CompareTarget::Lease), union) => kv.lease.cmp(&int_operand(union, TargetKind::Lease)),
        (Err(_), _) => std::cmp::Ordering::Equal,
    };
    match CompareResult::try_from(cmp.result) {
        Ok(CompareResult::Equal) => ordering.is_eq(),
        Ok(CompareResult::NotEqual) => ordering.is_ne(),
        Ok(CompareResult::Greater) => ordering.is_gt(),
        Ok(CompareResult::Less) => ordering.is_lt(),
        Err(_) => true,
    }
}

#[derive(PartialEq)]
enum TargetKind {
    Create,
    Mod,
    Version,
    Lease,
}

/// The integer a compare holds for its target; 0 when the union carries another kind.
fn int_operand(union: &Option<TargetUnion>, kind: TargetKind) -> i64 {
    match (union, kind) {
        (Some(TargetUnion::CreateRevision(v)), TargetKind::Create)
        | (Some(TargetUnion::ModRevision(v)), TargetKind::Mod)
        | (Some(TargetUnion::Version(v)), TargetKind::Version)
        | (Some(TargetUnion::Lease(v)), TargetKind::Lease) => *v,
        _ => 0,
    }
}

/// A put's preconditions at apply time: `ignore_value`/`ignore_lease` need the key to exist at `at`, and
/// its lease must exist.
pub(crate) fn check_put(store: &MvccStore, req: &pb::PutRequest, at: i64) -> Result<()> {
    if (req.ignore_value || req.ignore_lease) && store.get_at(&req.key, at)?.is_none() {
        return Err(Error::KeyNotFound);
    }
    if req.lease != 0 && store.lease(req.lease).is_none() {
        return Err(Error::LeaseNotFound);
    }
    Ok(())
}

/// Checks every op on the chosen path before any runs, so a failing txn changes nothing. As etcd: first the
/// puts' preconditions (write txns only), then the revisions of ranges.
pub(crate) fn check_ops(store: &MvccStore, req: &pb::TxnRequest, path: &[bool], at: i64) -> Result<()> {
    if !is_read_only(req) {
        check_branch(store, req, &mut path.iter().copied(), at, true, &mut Vec::new())?;
    }
    check_branch(store, req, &mut path.iter().copied(), at, false, &mut Vec::new())
}

/// Checks the puts (`puts`) or the ranges of the branches on the path. `from_key_deletes` collects the start
/// keys of the from-key deletes met so far, in the order the ops run.
fn check_branch<'a>(
    store: &MvccStore,
    req: &'a pb::TxnRequest,
    path: &mut impl Iterator<Item = bool>,
    at: i64,
    puts: bool,
    from_key_deletes: &mut Vec<&'a [u8]>,
) -> Result<()> {
    let ops = if path.next().unwrap_or(false) { &req.success } else { &req.failure };
    for op in ops {
        match &op.request {
            Some(Request::RequestTxn(inner)) => check_branch(store, inner, path, at, puts, from_key_deletes)?,
            Some(Request::RequestPut(put)) if puts => {
                check_put(store, put, at)?;
                // etcd's duplicate-key check reads the `\0` end of a from-key delete literally, so such a delete
                // may remove the key a later ignore_value/ignore_lease put needs (etcd panics there).
                let needs_key = put.ignore_value || put.ignore_lease;
                if needs_key && from_key_deletes.iter().any(|start| *start <= put.key.as_slice()) {
                    return Err(Error::KeyNotFound);
                }
            }
            Some(Request::RequestDeleteRange(del)) if puts && del.range_end == [0] => from_key_deletes.push(&del.key),
            Some(Request::RequestRange(range)) if !puts && range.revision != 0 => {
                if range.revision > at {
                    return Err(Error::FutureRevision);
                }
                if range.revision < store.compacted_revision() {
                    return Err(Error::Compacted);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

impl MvccStore {
    /// Evaluates a txn: compares against the store as it was before the txn, then runs the chosen
    /// branches, all changes at one main revision. Read-only txns change nothing and may be run on any
    /// member without consensus.
    pub fn txn(&mut self, req: &pb::TxnRequest) -> Result<pb::TxnResponse> {
        stats::count(&stats::TXNS);
        let path = compare_path(self, req, self.current);
        check_ops(self, req, &path, self.current)?;
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
        debug_assert!(is_read_only(req));
        let path = compare_path(self, req, self.current);
        check_ops(self, req, &path, self.current)?;
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
}
