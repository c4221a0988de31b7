//! The requests the recipes share: the oldest/newest key under a prefix, and waiting for keys
//! to be deleted (clientv3's `concurrency/key.go`).

use proto::etcdserverpb as pb;
use proto::mvccpb::event::EventType;

use super::watcher::{Delivery, WatchStream};
use crate::error::{CliError, EXIT_ERROR};
use crate::global::Conn;
use crate::prefix::prefix_end;

pub(crate) type KvClient = pb::kv_client::KvClient<Conn>;

/// clientv3's `WithFirstCreate` (`oldest == true`) or `WithLastCreate`: the one key under
/// `prefix` created first (last), optionally among those created at or before `max_create_rev`.
pub(crate) fn by_create(prefix: &[u8], oldest: bool, max_create_rev: i64) -> pb::RangeRequest {
    use pb::range_request::{SortOrder, SortTarget};
    let order = if oldest { SortOrder::Ascend } else { SortOrder::Descend };
    pb::RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_end(prefix),
        limit: 1,
        sort_order: order as i32,
        sort_target: SortTarget::Create as i32,
        max_create_revision: max_create_rev,
        ..Default::default()
    }
}

/// Waits until every key under `prefix` created at or before `max_create_rev` is gone, newest
/// first; returns the header of the range that found none.
pub(crate) async fn wait_deletes(
    conn: &Conn,
    prefix: &[u8],
    max_create_rev: i64,
) -> Result<pb::ResponseHeader, CliError> {
    let mut kv = KvClient::new(conn.clone());
    loop {
        let resp = kv.range(by_create(prefix, false, max_create_rev)).await?.into_inner();
        let Some(last) = resp.kvs.first() else {
            return Ok(resp.header.unwrap_or_default());
        };
        let revision = resp.header.as_ref().map_or(0, |h| h.revision);
        wait_delete(conn, &last.key, revision).await?;
    }
}

/// Waits for a DELETE of `key` at or after revision `rev`.
async fn wait_delete(conn: &Conn, key: &[u8], rev: i64) -> Result<(), CliError> {
    let request = pb::WatchCreateRequest { key: key.to_vec(), start_revision: rev, ..Default::default() };
    let (mut stream, _) = WatchStream::open(conn, false, request).await?;
    let mut last_err = None;
    while let Some(delivery) = stream.next().await {
        match delivery {
            Delivery::Response(_, resp) => {
                if resp.events().iter().any(|e| e.r#type == EventType::Delete as i32) {
                    return Ok(());
                }
                last_err = resp.err();
            }
            Delivery::Closed(_) => break,
        }
    }
    Err(CliError::new(EXIT_ERROR, last_err.unwrap_or_else(|| "lost watcher waiting for delete".to_string())))
}

/// A txn comparison `create_revision(key) == rev`.
pub(crate) fn create_revision_is(key: &[u8], rev: i64) -> pb::Compare {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    pb::Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::CreateRevision(rev)),
    }
}

pub(crate) fn put_op(key: &[u8], value: &[u8], lease: i64) -> pb::RequestOp {
    let put = pb::PutRequest { key: key.to_vec(), value: value.to_vec(), lease, ..Default::default() };
    pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(put)) }
}

pub(crate) fn get_op(range: pb::RangeRequest) -> pb::RequestOp {
    pb::RequestOp { request: Some(pb::request_op::Request::RequestRange(range)) }
}

pub(crate) fn delete_op(key: &[u8]) -> pb::RequestOp {
    let delete = pb::DeleteRangeRequest { key: key.to_vec(), ..Default::default() };
    pb::RequestOp { request: Some(pb::request_op::Request::RequestDeleteRange(delete)) }
}

/// The kvs of the `index`-th response of a txn (a range), empty when it is not one.
pub(crate) fn range_kvs(resp: &pb::TxnResponse, index: usize) -> &[proto::mvccpb::KeyValue] {
    match resp.responses.get(index).and_then(|r| r.response.as_ref()) {
        Some(pb::response_op::Response::ResponseRange(range)) => &range.kvs,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_and_last_create() {
        let first = by_create(b"lock/", true, 0);
        assert_eq!((first.key.as_slice(), first.range_end.as_slice()), (&b"lock/"[..], &b"lock0"[..]));
        assert_eq!((first.limit, first.sort_order, first.sort_target), (1, 1, 2));
        let last = by_create(b"lock/", false, 41);
        assert_eq!((last.sort_order, last.max_create_revision), (2, 41));
    }
}
