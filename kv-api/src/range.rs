//! Range options applied after the index scan: min/max filters, sorting, limit and `keys_only`, in etcd's
//! order (filters and sorts see the whole range; the limit truncates last).

use std::cmp::Ordering;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use proto::mvccpb::KeyValue;

/// How many values the scan must fetch.
pub(crate) struct Plan {
    /// `None` fetches every key of the range.
    pub fetch: Option<usize>,
}

impl Plan {
    pub fn of(req: &pb::RangeRequest) -> Self {
        let filtered = req.min_mod_revision != 0
            || req.max_mod_revision != 0
            || req.min_create_revision != 0
            || req.max_create_revision != 0;
        // As etcd: only an explicit order fetches everything; a non-key target with no order sorts just
        // the first `limit + 1` keys.
        let sorted = req.sort_order() != SortOrder::None;
        let fetch = if filtered || sorted || req.limit <= 0 {
            None
        } else {
            // One more than asked, to know whether there is more.
            usize::try_from(req.limit).ok().map(|n| n.saturating_add(1))
        };
        Plan { fetch }
    }
}

/// Filters, sorts and truncates fetched values into a response (count and header left to the caller).
pub(crate) fn finish(req: &pb::RangeRequest, mut kvs: Vec<KeyValue>) -> pb::RangeResponse {
    kvs.retain(|kv| {
        (req.max_mod_revision == 0 || kv.mod_revision <= req.max_mod_revision)
            && (req.min_mod_revision == 0 || kv.mod_revision >= req.min_mod_revision)
            && (req.max_create_revision == 0 || kv.create_revision <= req.max_create_revision)
            && (req.min_create_revision == 0 || kv.create_revision >= req.min_create_revision)
    });
    let target = req.sort_target();
    let order = match req.sort_order() {
        // Results come in key order; any other target sorts ascending unless told otherwise.
        SortOrder::None if target != SortTarget::Key => SortOrder::Ascend,
        order => order,
    };
    if order != SortOrder::None {
        let by = |a: &KeyValue, b: &KeyValue| -> Ordering {
            match target {
                SortTarget::Key => a.key.cmp(&b.key),
                SortTarget::Version => a.version.cmp(&b.version),
                SortTarget::Create => a.create_revision.cmp(&b.create_revision),
                SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
                SortTarget::Value => a.value.cmp(&b.value),
            }
        };
        // Stable, so that ties keep key order in both directions.
        match order {
            SortOrder::Descend => kvs.sort_by(|a, b| by(b, a)),
            _ => kvs.sort_by(by),
        }
    }
    let mut more = false;
    if let Ok(limit) = usize::try_from(req.limit) {
        if limit > 0 && kvs.len() > limit {
            kvs.truncate(limit);
            more = true;
        }
    }
    if req.keys_only {
        for kv in &mut kvs {
            kv.value.clear();
        }
    }
    pb::RangeResponse { header: None, kvs, more, count: 0 }
}
