//! One `Watch` stream: a task that owns the stream's watchers, answers its requests in order, turns the
//! hub's buffered events and the store's history into responses, and sends progress notifications.
//!
//! Everything a stream sends goes out from this one task, in the order it was produced, which gives
//! etcd's guarantees per stream: a watcher's `created` response precedes its events; events come in
//! revision order without gaps or duplicates (each watcher's `next_rev` only moves forward); a revision
//! is never split across responses (unless the client asked for fragments); and a progress revision is
//! never behind an event already sent, because a catch-up reads no further than the hub has announced and
//! a progress notification uses the revision of a drain made after it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use proto::etcdserverpb as pb;
use proto::etcdserverpb::watch_request::RequestUnion;
use proto::mvccpb::Event;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};
use tracing::debug;

use crate::consensus::Consensus;
use crate::error::Error;
use crate::store::SharedStore;
use crate::watch::hub::{mod_revision, Inbox, WatchHub, WatchRange};
use crate::watch::watcher::{by_revision, fill_prev_kv, fragments, truncate_batch, Watcher};
use crate::watch::WatchConfig;

/// Bytes of events per catch-up response, beyond which it ends at a revision boundary (etcd has no such
/// bound, but clients do: the Rust client refuses messages over 4 MiB by default).
const CATCH_UP_BYTES: usize = 1024 * 1024;

/// How long the final status of a stream ended by the server waits for room in the outbound queue.
const FINAL_STATUS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// etcd's error texts for refused create requests (`mvcc/watcher.go`).
const EMPTY_RANGE: &str = "mvcc: watcher range is empty";
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

/// What ends a stream.
pub(crate) type EndFuture = Pin<Box<dyn Future<Output = Status> + Send>>;

/// Why the task stops.
enum End {
    /// The client went away: nothing to send.
    ClientGone,
    /// The server ends the stream with this status.
    Status(Status),
}

/// What woke the task.
enum Step {
    Request(pb::WatchRequest),
    InboundClosed,
    Wake,
    Tick,
    End(End),
}

/// The state of one stream; see the module documentation.
pub(crate) struct WatchStream<C> {
    consensus: Arc<C>,
    store: SharedStore,
    hub: Arc<WatchHub>,
    config: WatchConfig,
    /// Where the hub lists the stream's watchers that have news, and wakes the stream.
    inbox: Arc<Inbox>,
    out: mpsc::Sender<Result<pb::WatchResponse, Status>>,
    /// Resolves when the server ends the stream (shutdown, leader lost).
    end: EndFuture,
    /// By watch id (the hub's drains name them by it, see [`WatchHub::register`]).
    watchers: BTreeMap<i64, Watcher>,
    /// The ids of the watchers that are not synced (they catch up from the store), so that a wake-up
    /// never looks at every watcher.
    unsynced: BTreeSet<i64>,
    /// The next server-chosen watch id.
    next_id: i64,
    /// A `RequestProgress` waits for every watcher to be synced.
    progress_requested: bool,
    /// The newest revision the client has seen from this stream, in events or progress notifications.
    sent_rev: i64,
    /// The auth token the stream was opened with; each watch creation is checked against it.
    token: Option<String>,
}

impl<C: Consensus> WatchStream<C> {
    pub(crate) fn new(
        consensus: Arc<C>,
        store: SharedStore,
        hub: Arc<WatchHub>,
        config: WatchConfig,
        out: mpsc::Sender<Result<pb::WatchResponse, Status>>,
        end: EndFuture,
        token: Option<String>,
    ) -> Self {
        Self {
            consensus,
            store,
            hub,
            config,
            inbox: Inbox::new(),
            out,
            end,
            watchers: BTreeMap::new(),
            unsynced: BTreeSet::new(),
            next_id: 0,
            progress_requested: false,
            sent_rev: 0,
            token,
        }
    }

    /// Serves the stream until the client leaves or the server ends it.
    pub(crate) async fn run(mut self, mut inbound: Streaming<pb::WatchRequest>) {
        let _open = crate::stats::Held::new(&crate::stats::WATCH_STREAMS);
        let period = self.config.progress_interval();
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut inbound_open = true;
        let outcome = loop {
            if let Err(end) = self.pump().await {
                break end;
            }
            let catching_up = !self.unsynced.is_empty();
            let inbox = self.inbox.clone();
            let out = self.out.clone();
            let step = tokio::select! {
                biased;
                status = &mut self.end => Step::End(End::Status(status)),
                () = out.closed() => Step::End(End::ClientGone),
                msg = inbound.message(), if inbound_open => match msg {
                    Ok(Some(req)) => Step::Request(req),
                    // A client that closed its side still gets events, as from etcd.
                    Ok(None) => Step::InboundClosed,
                    // A request the server cannot read (one over the size limit, say) ends the stream with
                    // its status, as in etcd; a client that went away never reads it.
                    Err(status) => Step::End(End::Status(status)),
                },
                () = inbox.notified() => Step::Wake,
                _ = ticker.tick() => Step::Tick,
                () = std::future::ready(()), if catching_up => Step::Wake,
            };
            let done = match step {
                Step::Request(req) => self.handle(req).await,
                Step::InboundClosed => {
                    inbound_open = false;
                    Ok(())
                }
                Step::Wake => Ok(()),
                Step::Tick => self.timed_progress().await,
                Step::End(end) => Err(end),
            };
            if let Err(end) = done {
                break end;
            }
        };
        for watcher in self.watchers.values() {
            self.hub.unregister(watcher.key);
        }
        if let End::Status(status) = outcome {
            // A client that reads nothing must not keep the task (and a shutting-down server) waiting.
            let _ = tokio::time::timeout(FINAL_STATUS_WAIT, self.out.send(Err(status))).await;
        }
    }

    async fn handle(&mut self, req: pb::WatchRequest) -> Result<(), End> {
        match req.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create).await,
            Some(RequestUnion::CancelRequest(cancel)) => self.cancel(cancel.watch_id).await,
            Some(RequestUnion::ProgressRequest(_)) => {
                self.progress_requested = true;
                Ok(())
            }
            // etcd ignores what it does not understand rather than ending the stream.
            None => Ok(()),
        }
    }

    async fn create(&mut self, create: pb::WatchCreateRequest) -> Result<(), End> {
        // As etcd: an empty key is the smallest key, `\0`.
        let key = if create.key.is_empty() { vec![0] } else { create.key.clone() };
        let range = WatchRange::new(key, create.range_end.clone());
        // etcd 3.6's order: a negative start revision, the caller's permission, then the rest.
        let refused = if create.start_revision < 0 {
            Some(Error::Compacted.to_string())
        } else {
            auth_refusal(self.consensus.clone(), self.store.clone(), self.token.clone(), &create).await
        };
        let refused = match refused {
            Some(reason) => Some(reason),
            None if !matches!(range.range_end(), [] | [0]) && range.key() >= range.range_end() => {
                Some(EMPTY_RANGE.to_string())
            }
            None if create.watch_id != 0 && self.watchers.contains_key(&create.watch_id) => {
                Some(DUPLICATE_ID.to_string())
            }
            None => None,
        };
        if let Some(reason) = refused {
            let resp = pb::WatchResponse {
                header: Some(self.header(self.hub.revision())),
                watch_id: -1,
                created: true,
                canceled: true,
                cancel_reason: reason,
                ..Default::default()
            };
            return self.send(resp).await;
        }
        let id = if create.watch_id == 0 {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id += 1;
            self.next_id - 1
        } else {
            create.watch_id
        };
        let registered = self.hub.register(range, create.start_revision, self.inbox.clone(), id);
        let watcher = Watcher::new(registered.key, &create, registered.range, registered.start, registered.synced);
        if !registered.synced {
            self.unsynced.insert(id);
        }
        self.watchers.insert(id, watcher);
        let resp = pb::WatchResponse {
            header: Some(self.header(registered.revision)),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        self.send(resp).await
    }

    async fn cancel(&mut self, id: i64) -> Result<(), End> {
        // etcd answers only the cancellation of a watcher it has.
        let Some(watcher) = self.remove(id) else {
            return Ok(());
        };
        drop(watcher);
        let resp = pb::WatchResponse {
            header: Some(self.header(self.hub.revision())),
            watch_id: id,
            canceled: true,
            ..Default::default()
        };
        self.send(resp).await
    }

    fn remove(&mut self, id: i64) -> Option<Watcher> {
        let watcher = self.watchers.remove(&id)?;
        self.unsynced.remove(&id);
        self.hub.unregister(watcher.key);
        Some(watcher)
    }

    /// Sends what is ready: buffered events, one catch-up step per unsynced watcher, and a requested
    /// progress notification once every watcher is synced.
    async fn pump(&mut self) -> Result<(), End> {
        self.drain().await?;
        let unsynced: Vec<i64> = self.unsynced.iter().copied().collect();
        for id in unsynced {
            self.catch_up(id).await?;
        }
        if self.progress_requested && self.unsynced.is_empty() {
            let revision = self.drain().await?;
            if self.unsynced.is_empty() && revision >= self.sent_rev {
                self.progress_requested = false;
                let resp =
                    pb::WatchResponse { header: Some(self.header(revision)), watch_id: -1, ..Default::default() };
                self.sent_rev = revision;
                self.send(resp).await?;
            }
        }
        Ok(())
    }

    /// Sends the buffered events of the watchers with news, one response per revision; returns the hub's
    /// revision at the drain (synced watchers have everything up to it: the others had nothing buffered).
    async fn drain(&mut self) -> Result<i64, End> {
        let (revision, drained) = self.hub.drain(&self.inbox);
        for (key, drained) in drained {
            // Its tag is its watch id; an id taken again since names another key.
            let id = drained.tag;
            let Some(watcher) = self.watchers.get_mut(&id).filter(|watcher| watcher.key == key) else {
                continue;
            };
            let mut events = watcher.select(drained.events.iter().map(|e| &**e));
            watcher.synced = drained.synced;
            if drained.synced {
                self.unsynced.remove(&id);
            } else {
                self.unsynced.insert(id);
            }
            if drained.synced {
                watcher.next_rev = watcher.next_rev.max(revision + 1);
            } else if let Some(from) = drained.resume_from {
                debug!(watch_id = id, from, "watcher fell behind; catching up from the store");
                watcher.next_rev = watcher.next_rev.max(from);
            }
            if events.is_empty() {
                continue;
            }
            if watcher.prev_kv() {
                fill_prev_kv(&self.store.read(), &mut events);
            }
            for group in by_revision(events) {
                let rev = mod_revision(&group[0]);
                self.send_events(id, rev, group).await?;
            }
        }
        Ok(revision)
    }

    /// Reads the next stretch of an unsynced watcher's history from the store and sends it in one
    /// response (as etcd, with the store's revision in the header); a compacted start cancels the watcher.
    async fn catch_up(&mut self, id: i64) -> Result<(), End> {
        let Some(watcher) = self.watchers.get(&id) else {
            return Ok(());
        };
        let (range, after, prev_kv, key, window) =
            (watcher.range.clone(), watcher.next_rev - 1, watcher.prev_kv(), watcher.key, watcher.catch_up_window());
        // Read no further than the hub announced, so that later progress revisions cover every event sent.
        let announced = self.hub.revision();
        let store = self.store.clone();
        let read = tokio::task::spawn_blocking(move || {
            let store = store.read();
            let current = store.current_revision();
            let upto = announced.min(after.saturating_add(window));
            if after >= upto {
                return Ok((Vec::new(), upto, current, false));
            }
            let mut events = store.history(range.as_key_range(), after, upto)?;
            if prev_kv {
                fill_prev_kv(&store, &mut events);
            }
            match truncate_batch(&mut events, CATCH_UP_BYTES) {
                Some(cut) => Ok((events, cut, current, true)),
                None => Ok((events, upto, current, false)),
            }
        })
        .await;
        let (events, upto, current, truncated) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(Error::Compacted)) => return self.compacted(id).await,
            Ok(Err(err)) => return Err(End::Status(err.into())),
            Err(join) => return Err(End::Status(Error::Internal(join.to_string()).into())),
        };
        let Some(watcher) = self.watchers.get_mut(&id) else {
            return Ok(());
        };
        let events = watcher.select(&events);
        // Large revisions: read fewer next time rather than reading much and sending little.
        watcher.set_catch_up_window(if truncated { (upto - after) * 2 } else { window * 2 });
        watcher.next_rev = watcher.next_rev.max(upto + 1);
        if upto >= announced && self.hub.try_sync(key, upto) {
            watcher.synced = true;
            self.unsynced.remove(&id);
        }
        if !events.is_empty() {
            self.send_events(id, current, events).await?;
        }
        Ok(())
    }

    /// etcd's answer to a watcher whose history is compacted: cancelled, with the compacted revision, no
    /// header revision and (etcd 3.4 and 3.5 alike) no cancel reason: clients read `compact_revision`.
    async fn compacted(&mut self, id: i64) -> Result<(), End> {
        self.remove(id);
        let compact_revision = self.store.read().compacted_revision();
        let resp = pb::WatchResponse {
            header: Some(self.header(0)),
            watch_id: id,
            canceled: true,
            compact_revision,
            ..Default::default()
        };
        self.send(resp).await
    }

    /// etcd's timed progress notification: to each synced watcher that asked for them and got no events
    /// since the last tick, an empty response with the current revision.
    async fn timed_progress(&mut self) -> Result<(), End> {
        let revision = self.drain().await?;
        let wants = |w: &Watcher| w.progress_notify() && w.progress_due && w.synced;
        let due: Vec<i64> = self.watchers.iter().filter(|(_, w)| wants(w)).map(|(id, _)| *id).collect();
        for watcher in self.watchers.values_mut().filter(|w| w.progress_notify()) {
            watcher.progress_due = true;
        }
        if revision < self.sent_rev {
            return Ok(());
        }
        for id in due {
            let resp = pb::WatchResponse { header: Some(self.header(revision)), watch_id: id, ..Default::default() };
            self.sent_rev = revision;
            self.send(resp).await?;
        }
        Ok(())
    }

    /// Sends events of watcher `id` (whole revisions) with `revision` in the header, in fragments if the
    /// watcher asked for them.
    async fn send_events(&mut self, id: i64, revision: i64, events: Vec<Event>) -> Result<(), End> {
        let Some(watcher) = self.watchers.get_mut(&id) else {
            return Ok(());
        };
        watcher.progress_due = false;
        let fragment = watcher.fragment();
        if let Some(last) = events.last() {
            self.sent_rev = self.sent_rev.max(mod_revision(last));
        }
        let resp =
            pb::WatchResponse { header: Some(self.header(revision)), watch_id: id, events, ..Default::default() };
        if !fragment {
            return self.send(resp).await;
        }
        for piece in fragments(resp, self.config.fragment_bytes) {
            self.send(piece).await?;
        }
        Ok(())
    }

    fn header(&self, revision: i64) -> pb::ResponseHeader {
        pb::ResponseHeader { revision, ..self.consensus.header() }
    }

    /// Sends one response, waiting while the client is slow, unless the server ends the stream meanwhile.
    async fn send(&mut self, resp: pb::WatchResponse) -> Result<(), End> {
        tokio::select! {
            biased;
            status = &mut self.end => Err(End::Status(status)),
            sent = self.out.send(Ok(resp)) => sent.map_err(|_| End::ClientGone),
        }
    }
}

/// Why auth refuses a watch, in etcd's words: the caller must be able to read the whole range. The
/// reason is the gRPC error's text as Go prints it.
async fn auth_refusal<C: Consensus>(
    consensus: Arc<C>,
    store: SharedStore,
    token: Option<String>,
    create: &pb::WatchCreateRequest,
) -> Option<String> {
    let checked = match crate::service::auth_request::caller(&*consensus, &store, token.as_deref()).await {
        Ok(Some(caller)) => store.read().auth().check_read(&caller, &create.key, &create.range_end),
        Ok(None) => Ok(()),
        Err(err) => Err(err),
    };
    let err = match checked.err()? {
        err @ (Error::InvalidAuthToken | Error::AuthOldRevision | Error::UserEmpty) => err,
        _ => Error::PermissionDenied,
    };
    let code = match err.code() {
        tonic::Code::Unauthenticated => "Unauthenticated",
        tonic::Code::InvalidArgument => "InvalidArgument",
        _ => "PermissionDenied",
    };
    Some(format!("rpc error: code = {code} desc = {err}"))
}
