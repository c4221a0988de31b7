//! [`LocalClient`]: the member's own KV and Lease services called in-process, and waits on its watch hub.
//!
//! etcd's Lock and Election servers are clients of etcd itself: they run the `clientv3/concurrency`
//! recipes through an in-process `clientv3` whose requests go through the ordinary KV and Lease handlers.
//! [`LocalClient`] does the same, passing the caller's gRPC metadata along, so whatever checks a client's
//! KV request (validation, request size, quota, learner refusal, permissions) checks the recipes'
//! requests too. [`KeyWatch`] replaces the recipes' watches: events of a key or prefix from a revision on,
//! from the hub when it has them and from the store's history otherwise.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use proto::etcdserverpb::kv_server::Kv;
use proto::etcdserverpb::lease_server::Lease;
use proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use proto::etcdserverpb::request_op::Request as Op;
use proto::mvccpb::Event;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

use super::kv::KvService;
use crate::consensus::Consensus;
use crate::error::Error;
use crate::service::lease::LeaseService;
use crate::store::SharedStore;
use crate::watch::hub::{mod_revision, WatcherKey};
use crate::watch::{Inbox, WatchHub, WatchRange};

/// The member's KV and Lease services, store and watch hub, as the Lock and Election services use them.
pub struct LocalClient<C> {
    consensus: Arc<C>,
    kv: Arc<KvService<C>>,
    lease: Arc<LeaseService<C>>,
    store: SharedStore,
    hub: Arc<WatchHub>,
}

impl<C> Clone for LocalClient<C> {
    fn clone(&self) -> Self {
        Self {
            consensus: self.consensus.clone(),
            kv: self.kv.clone(),
            lease: self.lease.clone(),
            store: self.store.clone(),
            hub: self.hub.clone(),
        }
    }
}

impl<C: Consensus> LocalClient<C> {
    pub fn new(
        consensus: Arc<C>,
        kv: Arc<KvService<C>>,
        lease: Arc<LeaseService<C>>,
        store: SharedStore,
        hub: Arc<WatchHub>,
    ) -> Self {
        Self { consensus, kv, lease, store, hub }
    }

    pub(crate) async fn txn(&self, metadata: &MetadataMap, req: pb::TxnRequest) -> Result<pb::TxnResponse, Status> {
        Ok(self.kv.txn(request(metadata, req)).await?.into_inner())
    }

    pub(crate) async fn range(
        &self,
        metadata: &MetadataMap,
        req: pb::RangeRequest,
    ) -> Result<pb::RangeResponse, Status> {
        Ok(self.kv.range(request(metadata, req)).await?.into_inner())
    }

    pub(crate) async fn delete(&self, metadata: &MetadataMap, key: Vec<u8>) -> Result<pb::DeleteRangeResponse, Status> {
        let req = pb::DeleteRangeRequest { key, ..Default::default() };
        Ok(self.kv.delete_range(request(metadata, req)).await?.into_inner())
    }

    /// The lease a recipe's key is bound to, as etcd's `concurrency.NewSession` settles it: the caller's,
    /// or a new one of 60 seconds when the caller gave none (which is then never kept alive).
    pub(crate) async fn session_lease(&self, metadata: &MetadataMap, lease: i64) -> Result<i64, Status> {
        /// etcd's `concurrency` default session TTL, in seconds.
        const SESSION_TTL: i64 = 60;
        if lease != 0 {
            return Ok(lease);
        }
        let req = pb::LeaseGrantRequest { ttl: SESSION_TTL, id: 0 };
        Ok(self.lease.lease_grant(request(metadata, req)).await?.into_inner().id)
    }

    /// A header of this member with the given revision.
    pub(crate) fn header(&self, revision: i64) -> pb::ResponseHeader {
        pb::ResponseHeader { revision, ..self.consensus.header() }
    }

    /// Watches `range` from revision `from` on.
    pub(crate) fn watch(&self, range: WatchRange, from: i64) -> KeyWatch {
        KeyWatch::open(self.hub.clone(), self.store.clone(), range, from)
    }

    /// Waits until `key`, which a read at `revision` found, is deleted (etcd's `waitDelete`).
    async fn wait_delete(&self, key: &[u8], revision: i64) -> Result<(), Status> {
        let mut watch = self.watch(WatchRange::new(key.to_vec(), Vec::new()), revision);
        loop {
            if watch.next().await?.iter().any(|event| event.r#type() == proto::mvccpb::event::EventType::Delete) {
                return Ok(());
            }
        }
    }

    /// Waits until no key under `prefix` created at or before `max_create_revision` is left, deletion by
    /// deletion of the newest of them (etcd's `waitDeletes`); answers the header of the read that found
    /// none.
    pub(crate) async fn wait_deletes(
        &self,
        metadata: &MetadataMap,
        prefix: &[u8],
        max_create_revision: i64,
    ) -> Result<Option<pb::ResponseHeader>, Status> {
        loop {
            let req = pb::RangeRequest { max_create_revision, ..first_by_create(prefix, SortOrder::Descend) };
            let resp = self.range(metadata, req).await?;
            let Some(newest) = resp.kvs.first() else {
                return Ok(resp.header);
            };
            let revision = resp.header.as_ref().map_or(0, |h| h.revision);
            self.wait_delete(&newest.key, revision).await?;
        }
    }
}

/// `msg` as a request carrying the caller's metadata (its auth token among them).
fn request<T>(metadata: &MetadataMap, msg: T) -> Request<T> {
    let mut req = Request::new(msg);
    *req.metadata_mut() = metadata.clone();
    req
}

/// etcd's `GetPrefixRangeEnd`: the end of the range of keys starting with `prefix`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|b| *b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// The key under `prefix` created first (`Ascend`) or last (`Descend`): clientv3's `WithFirstCreate` and
/// `WithLastCreate`.
pub(crate) fn first_by_create(prefix: &[u8], order: SortOrder) -> pb::RangeRequest {
    pb::RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_end(prefix),
        limit: 1,
        sort_order: order as i32,
        sort_target: SortTarget::Create as i32,
        ..Default::default()
    }
}

/// A recipe's key: the prefix and the lease id in lowercase hex (etcd's `fmt.Sprintf("%s%x", ...)`).
pub(crate) fn lease_key(prefix: &[u8], lease: i64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    key
}

/// A request op.
pub(crate) fn op(request: Op) -> pb::RequestOp {
    pb::RequestOp { request: Some(request) }
}

/// The compare `create_revision(key) == revision`.
pub(crate) fn created_at(key: &[u8], revision: i64) -> pb::Compare {
    pb::Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.to_vec(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
        ..Default::default()
    }
}

/// The first key-value of the `index`th response of a txn (a range).
pub(crate) fn first_kv(resp: &pb::TxnResponse, index: usize) -> Result<&proto::mvccpb::KeyValue, Status> {
    use pb::response_op::Response as R;
    match resp.responses.get(index).and_then(|r| r.response.as_ref()) {
        Some(R::ResponseRange(range)) => range.kvs.first().ok_or_else(|| not_found(index)),
        _ => Err(not_found(index)),
    }
}

fn not_found(index: usize) -> Status {
    Error::Internal(format!("a recipe's txn answered no key-value in response {index}")).into()
}

/// A recipe's failure as etcd's Lock and Election servers answer it: their in-process client turns every
/// status of the KV and Lease servers into a plain error, which gRPC sends as Unknown with the same text.
pub(crate) fn as_client_error(status: Status) -> Status {
    Status::unknown(status.message())
}

/// Work that must happen if a recipe stops half-way: when it fails, or when its future is dropped because
/// the client cancelled (then the work runs as a task of its own). Disarmed once the recipe succeeded.
pub(crate) struct Cleanup {
    work: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Cleanup {
    pub(crate) fn new(work: impl Future<Output = ()> + Send + 'static) -> Self {
        Self { work: Some(Box::pin(work)) }
    }

    pub(crate) fn disarm(&mut self) {
        self.work = None;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let (Some(work), Ok(runtime)) = (self.work.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(work);
        }
    }
}

/// A watcher of one key or prefix inside the member, from a revision on: what the recipes' watches are in
/// etcd. It reads the store's history while it is behind the hub and takes the hub's events once synced;
/// it is unregistered when dropped.
pub(crate) struct KeyWatch {
    hub: Arc<WatchHub>,
    store: SharedStore,
    range: WatchRange,
    inbox: Arc<Inbox>,
    key: WatcherKey,
    synced: bool,
    /// The first revision not yet returned.
    next_rev: i64,
}

impl KeyWatch {
    fn open(hub: Arc<WatchHub>, store: SharedStore, range: WatchRange, from: i64) -> Self {
        let inbox = Inbox::new();
        let registered = hub.register(range, from, inbox.clone(), 0);
        let (key, synced, next_rev) = (registered.key, registered.synced, registered.start);
        Self { hub, store, range: registered.range, inbox, key, synced, next_rev }
    }

    /// The next events of the range, in revision order (never empty). Fails when the member stops, or
    /// with etcd's compaction error when the history it needs is compacted.
    pub(crate) async fn next(&mut self) -> Result<Vec<Event>, Error> {
        loop {
            if !self.synced {
                let upto = self.hub.revision();
                let events = self.history(upto).await?;
                self.synced = self.hub.try_sync(self.key, upto);
                self.next_rev = self.next_rev.max(upto + 1);
                if !events.is_empty() {
                    return Ok(events);
                }
                continue;
            }
            tokio::select! {
                () = self.inbox.notified() => {}
                () = self.hub.stopped() => return Err(Error::Stopped),
            }
            let (revision, drained) = self.hub.drain(&self.inbox);
            // Nothing listed: no news (a wake-up left over from news an earlier drain took).
            let Some((_, drained)) = drained.into_iter().next() else {
                continue;
            };
            let events: Vec<Event> =
                drained.events.iter().filter(|e| mod_revision(e) >= self.next_rev).map(|e| (**e).clone()).collect();
            if let Some(last) = events.last() {
                self.next_rev = mod_revision(last) + 1;
            }
            if drained.synced {
                self.next_rev = self.next_rev.max(revision + 1);
            } else {
                self.synced = false;
                self.next_rev = self.next_rev.max(drained.resume_from.unwrap_or(0));
            }
            if !events.is_empty() {
                return Ok(events);
            }
        }
    }

    /// The range's changes from `next_rev` through `upto`, read from the store off the runtime.
    async fn history(&self, upto: i64) -> Result<Vec<Event>, Error> {
        let store = self.store.clone();
        let range = self.range.clone();
        let after = self.next_rev - 1;
        tokio::task::spawn_blocking(move || store.read().history(range.as_key_range(), after, upto))
            .await
            .map_err(|err| Error::Internal(format!("reading history: {err}")))?
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.hub.unregister(self.key);
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::RwLock;
    use proto::mvccpb::event::EventType;

    use super::*;
    use crate::{Command, MemBackend, MvccStore};

    /// Applies `commands` as the state machine does: commit, then hand the events to the hub.
    fn apply(store: &SharedStore, hub: &WatchHub, commands: &[Command]) {
        let mut store = store.write();
        for command in commands {
            store.apply(command).expect("apply");
        }
        store.commit().expect("commit");
        hub.notify(store.current_revision(), store.take_events());
    }

    fn put(key: &str, value: &str) -> Command {
        Command::Put(pb::PutRequest { key: key.into(), value: value.into(), ..Default::default() })
    }

    fn delete(key: &str) -> Command {
        Command::DeleteRange(pb::DeleteRangeRequest { key: key.into(), ..Default::default() })
    }

    /// (type, key, value, revision) of each event.
    fn seen(events: Vec<Event>) -> Vec<(EventType, String, String, i64)> {
        events
            .into_iter()
            .map(|e| {
                let kind = e.r#type();
                let kv = e.kv.expect("kv");
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                (kind, text(&kv.key), text(&kv.value), kv.mod_revision)
            })
            .collect()
    }

    async fn next(watch: &mut KeyWatch) -> Vec<(EventType, String, String, i64)> {
        let events = tokio::time::timeout(std::time::Duration::from_secs(5), watch.next()).await;
        seen(events.expect("events in time").expect("events"))
    }

    #[tokio::test]
    async fn a_key_watch_catches_up_then_follows_the_hub_and_survives_overflow() {
        use EventType::{Delete, Put};
        let store: SharedStore = Arc::new(RwLock::new(MvccStore::open(Arc::new(MemBackend::default())).expect("open")));
        let hub = Arc::new(WatchHub::with_pending_limit(1, 2));
        // Revisions 2..=4 happen before the watch opens at 3: it reads them from the store's history.
        apply(&store, &hub, &[put("p/a", "1"), put("p/a", "2"), put("q", "x")]);
        let mut watch =
            KeyWatch::open(hub.clone(), store.clone(), WatchRange::new(b"p/".to_vec(), prefix_end(b"p/")), 3);
        assert_eq!(next(&mut watch).await, [(Put, "p/a".into(), "2".into(), 3)]);
        // Live changes come from the hub, outside keys left out.
        apply(&store, &hub, &[put("q", "y"), put("p/b", "1")]);
        assert_eq!(next(&mut watch).await, [(Put, "p/b".into(), "1".into(), 6)]);
        // More than the hub buffers (two events): the watch falls back to the store and misses nothing.
        apply(&store, &hub, &[put("p/a", "3")]);
        apply(&store, &hub, &[put("p/b", "2")]);
        apply(&store, &hub, &[delete("p/a")]);
        let mut events = Vec::new();
        while events.len() < 3 {
            events.extend(next(&mut watch).await);
        }
        let want = [
            (Put, "p/a".to_string(), "3".to_string(), 7),
            (Put, "p/b".to_string(), "2".to_string(), 8),
            (Delete, "p/a".to_string(), String::new(), 9),
        ];
        assert_eq!(events, want);
        // Dropping the watch unregisters it.
        drop(watch);
        assert!(hub.is_empty());
    }

    #[test]
    fn prefix_ends_follow_etcd() {
        let cases: [(&[u8], &[u8]); 4] = [(b"lock/", b"lock0"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"", b"\0")];
        for (prefix, end) in cases {
            assert_eq!(prefix_end(prefix), end, "prefix {prefix:?}");
        }
    }

    #[test]
    fn lease_keys_are_lowercase_hex() {
        assert_eq!(lease_key(b"m/", 0x694d_7e3a_9c0f_0a0b), b"m/694d7e3a9c0f0a0b");
        assert_eq!(lease_key(b"/", 255), b"/ff");
    }
}
