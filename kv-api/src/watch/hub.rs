//! [`WatchHub`]: every watcher of the member, fed by the apply path.
//!
//! The state machine calls [`WatchHub::notify`] once per applied batch, after the batch is committed,
//! with the batch's events and the store's revision. Notify only matches events to watchers and appends
//! shared pointers to each matching watcher's bounded `pending` buffer, then puts the watcher on its
//! stream's [`Inbox`] and wakes the stream: it never waits for a client. The stream tasks take the
//! buffers of the watchers on their inbox with [`WatchHub::drain`], so a wake-up costs the watchers that
//! have news, not every watcher of the stream (a stream of 1,000 watchers, one of them hit by a put, used
//! to look at all 1,000).
//!
//! # Synced and unsynced watchers
//!
//! As in etcd, a watcher is *synced* when every event up to the hub's revision is either delivered or
//! sitting in its buffer; only synced watchers receive events from notify. A watcher is *unsynced* when
//! it starts in the past, when its buffer overflows (a slow client), or after a snapshot install replaced
//! the store. Its stream then catches up from the store's history and asks to be synced again with
//! [`WatchHub::try_sync`], which succeeds only if notify has announced nothing the catch-up did not read.
//!
//! The store is committed before notify runs, so a catch-up may read revisions notify is about to
//! announce; streams drop events below the watcher's next revision, so nothing is sent twice.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use proto::mvccpb::Event;
use tokio::sync::{watch, Notify};

use super::range::SingleKey;
pub use super::range::WatchRange;

/// Events buffered per watcher before it falls back to catching up from the store.
pub const DEFAULT_PENDING_LIMIT: usize = 1024;

/// The hub's handle on one watcher (unique in the member, unlike the client's watch id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatcherKey(u64);

#[cfg(test)]
impl WatcherKey {
    pub(crate) fn for_tests(n: u64) -> Self {
        Self(n)
    }
}

/// What a stream learns about one of its watchers when it drains the hub.
#[derive(Debug, Default)]
pub struct Drained {
    /// The owner's name for the watcher, given at registration (a stream's watch id).
    pub tag: i64,
    /// Buffered events, in revision order, each revision complete.
    pub events: Vec<Arc<Event>>,
    /// Synced: with `events`, the watcher has everything up to the drain's revision. Unsynced: its stream
    /// catches up from the store.
    pub synced: bool,
    /// Set once when the watcher lost sync (overflow, resync): `events` hold everything before this
    /// revision, and the catch-up starts there (or at the stream's own next revision when later).
    pub resume_from: Option<i64>,
}

/// See [`WatchHub::backlog`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    pub slow_watchers: u64,
    pub pending_events: u64,
    /// The keys' and values' bytes of the pending events (an event buffered for several watchers is
    /// held once and counted once per watcher).
    pub pending_bytes: u64,
}

/// How the hub reaches the owner of some watchers (a Watch stream, a recipe's watch): a wake-up, and the
/// watchers with news since the owner's last drain (buffered events or a loss of sync), each once.
#[derive(Debug, Default)]
pub struct Inbox {
    signal: Notify,
    ready: Mutex<Vec<WatcherKey>>,
}

impl Inbox {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Resolves at the next news (or at once if news came since the last call).
    pub async fn notified(&self) {
        self.signal.notified().await
    }
}

/// A watcher as the hub keeps it.
#[derive(Debug)]
struct Slot {
    range: WatchRange,
    /// The owner's inbox.
    inbox: Arc<Inbox>,
    /// The owner's name for it (its owner then needs no table from keys to its own names).
    tag: i64,
    /// On the inbox's list (until the owner drains it). Invariant: a watcher with pending events or an
    /// unreported loss of sync (`lost_from > 0`) is queued.
    queued: bool,
    synced: bool,
    /// For an unsynced watcher: the first revision missing after `pending` (0 when the stream already
    /// knows where to catch up from).
    lost_from: i64,
    pending: Vec<Arc<Event>>,
}

#[derive(Debug)]
struct HubState {
    /// The newest revision announced by notify.
    notified: i64,
    next_key: u64,
    slots: HashMap<WatcherKey, Slot>,
    /// Single-key watchers by key; the others are scanned (watchers of a range are few in practice:
    /// kube-apiserver has one prefix watcher per resource type). Watchers of the same key share the
    /// first one's range.
    by_key: HashMap<SingleKey, Vec<WatcherKey>>,
    ranges: Vec<WatcherKey>,
}

impl HubState {
    /// Gives back the tables' room once most of the watchers that needed it are gone: a member that
    /// once served 100k watchers kept ~13 MB of empty slots for the rest of its life. Shrinking to
    /// twice what is left when under a quarter is used costs O(1) per removal, amortized.
    fn shrink(&mut self) {
        fn shrink_map<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
            if map.capacity() > SHRINK_FLOOR && map.len() * 4 < map.capacity() {
                map.shrink_to(map.len() * 2);
            }
        }
        shrink_map(&mut self.slots);
        shrink_map(&mut self.by_key);
        if self.ranges.capacity() > SHRINK_FLOOR && self.ranges.len() * 4 < self.ranges.capacity() {
            self.ranges.shrink_to(self.ranges.len() * 2);
        }
    }
}

/// Tables this small are never shrunk.
const SHRINK_FLOOR: usize = 1024;

/// The member's watchers; see the module documentation.
#[derive(Debug)]
pub struct WatchHub {
    state: Mutex<HubState>,
    pending_limit: usize,
    stop: watch::Sender<bool>,
}

impl WatchHub {
    /// A hub for a store whose current revision is `revision`.
    pub fn new(revision: i64) -> Self {
        Self::with_pending_limit(revision, DEFAULT_PENDING_LIMIT)
    }

    /// A hub whose watchers buffer at most `pending_limit` events before catching up from the store.
    pub fn with_pending_limit(revision: i64, pending_limit: usize) -> Self {
        Self {
            state: Mutex::new(HubState {
                notified: revision,
                next_key: 0,
                slots: HashMap::new(),
                by_key: HashMap::new(),
                ranges: Vec::new(),
            }),
            pending_limit,
            stop: watch::Sender::new(false),
        }
    }

    /// The newest revision announced to watchers.
    pub fn revision(&self) -> i64 {
        self.state.lock().notified
    }

    /// Number of registered watchers.
    pub fn len(&self) -> usize {
        self.state.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the watchers hold back (etcd's `slow_watcher_total` and `pending_events_total` gauges): the
    /// unsynced watchers, which catch up from the store, and the events buffered for all of them.
    pub fn backlog(&self) -> Backlog {
        let state = self.state.lock();
        let bytes = |event: &Arc<Event>| event.kv.as_ref().map_or(0, |kv| (kv.key.len() + kv.value.len()) as u64);
        state.slots.values().fold(Backlog::default(), |sum, slot| Backlog {
            slow_watchers: sum.slow_watchers + u64::from(!slot.synced),
            pending_events: sum.pending_events + slot.pending.len() as u64,
            pending_bytes: sum.pending_bytes + slot.pending.iter().map(bytes).sum::<u64>(),
        })
    }

    /// Registers a watcher of `range` whose first wanted revision is `start` (0: the next one), which its
    /// owner calls `tag` (drains name it so). Returns its
    /// key, the hub's revision at registration, the first revision it will get, whether it is synced
    /// (otherwise its stream catches up from the store), and the range to keep (see [`Registered`]).
    pub fn register(&self, range: WatchRange, start: i64, inbox: Arc<Inbox>, tag: i64) -> Registered {
        let mut state = self.state.lock();
        let revision = state.notified;
        let start = if start == 0 { revision + 1 } else { start };
        let synced = start > revision;
        let key = WatcherKey(state.next_key);
        state.next_key += 1;
        let range = if range.range_end().is_empty() {
            let shared = state.by_key.get_key_value(range.key()).map_or(range, |(single, _)| single.0.clone());
            state.by_key.entry(SingleKey(shared.clone())).or_default().push(key);
            shared
        } else {
            state.ranges.push(key);
            range
        };
        let slot = Slot { range: range.clone(), inbox, tag, queued: false, synced, lost_from: 0, pending: Vec::new() };
        state.slots.insert(key, slot);
        crate::stats::WATCHERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Registered { key, revision, start, synced, range }
    }

    /// Forgets a watcher and its buffered events.
    pub fn unregister(&self, key: WatcherKey) {
        let mut state = self.state.lock();
        let Some(slot) = state.slots.remove(&key) else {
            return;
        };
        crate::stats::WATCHERS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if slot.range.range_end().is_empty() {
            if let Some(keys) = state.by_key.get_mut(slot.range.key()) {
                keys.retain(|k| *k != key);
                if keys.is_empty() {
                    state.by_key.remove(slot.range.key());
                }
            }
        } else {
            state.ranges.retain(|k| *k != key);
        }
        state.shrink();
    }

    /// Announces the events of a committed batch (in revision order) and the store's revision after it.
    /// Called on the apply path: matches and buffers, never waits.
    pub fn notify(&self, revision: i64, events: Vec<Event>) {
        let mut state = self.state.lock();
        if events.is_empty() {
            state.notified = state.notified.max(revision);
            return;
        }
        let mut matched: HashMap<WatcherKey, Vec<Arc<Event>>> = HashMap::new();
        for event in events.into_iter().map(Arc::new) {
            let Some(key) = event.kv.as_ref().map(|kv| kv.key.as_slice()) else {
                continue;
            };
            let singles = state.by_key.get(key).into_iter().flatten();
            let ranges =
                state.ranges.iter().filter(|k| state.slots.get(k).is_some_and(|slot| slot.range.contains(key)));
            for watcher in singles.chain(ranges) {
                if state.slots.get(watcher).is_some_and(|slot| slot.synced) {
                    matched.entry(*watcher).or_default().push(event.clone());
                }
            }
        }
        for (watcher, events) in matched {
            if let Some(slot) = state.slots.get_mut(&watcher) {
                slot.buffer(events, self.pending_limit);
                slot.tell(watcher);
            }
        }
        state.notified = state.notified.max(revision);
    }

    /// The store was replaced (a snapshot install) and its revision is now `revision`: every synced
    /// watcher catches up from the store, from the revision after the last one announced.
    pub fn resync(&self, revision: i64) {
        let mut state = self.state.lock();
        let lost_from = state.notified + 1;
        for (key, slot) in state.slots.iter_mut() {
            if slot.synced {
                slot.synced = false;
                slot.lost_from = lost_from;
            }
            slot.tell(*key);
        }
        state.notified = state.notified.max(revision);
    }

    /// Takes the news of the watchers on `inbox` (those not listed have none: no buffered event, no loss
    /// of sync); returns it with the hub's revision at that instant.
    pub fn drain(&self, inbox: &Inbox) -> (i64, Vec<(WatcherKey, Drained)>) {
        let mut state = self.state.lock();
        let ready = std::mem::take(&mut *inbox.ready.lock());
        let drained = ready
            .into_iter()
            .filter_map(|key| {
                let slot = state.slots.get_mut(&key)?;
                slot.queued = false;
                let events = std::mem::take(&mut slot.pending);
                let lost_from = std::mem::take(&mut slot.lost_from);
                let resume_from = (!slot.synced && lost_from > 0).then_some(lost_from);
                Some((key, Drained { tag: slot.tag, events, synced: slot.synced, resume_from }))
            })
            .collect();
        (state.notified, drained)
    }

    /// Marks a watcher that caught up from the store through revision `upto` synced, unless notify
    /// announced later revisions meanwhile (then the stream reads on).
    pub fn try_sync(&self, key: WatcherKey, upto: i64) -> bool {
        let mut state = self.state.lock();
        let notified = state.notified;
        match state.slots.get_mut(&key) {
            Some(slot) if notified <= upto => {
                slot.synced = true;
                slot.lost_from = 0;
                slot.pending.clear();
                true
            }
            _ => false,
        }
    }

    /// Ends every stream (the member is shutting down).
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Resolves once [`WatchHub::stop`] was called.
    pub async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        let _ = rx.wait_for(|stopped| *stopped).await;
    }
}

/// The outcome of [`WatchHub::register`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    pub key: WatcherKey,
    /// The range the watcher holds: the one registered, or an equal one the hub already held.
    pub range: WatchRange,
    /// The hub's revision when the watcher was registered (the `created` response's header revision).
    pub revision: i64,
    /// The first revision the watcher wants.
    pub start: i64,
    pub synced: bool,
}

impl Slot {
    /// Puts the watcher (`key`) on its owner's inbox, once until drained, and wakes the owner.
    fn tell(&mut self, key: WatcherKey) {
        if !self.queued {
            self.queued = true;
            self.inbox.ready.lock().push(key);
        }
        self.inbox.signal.notify_one();
    }

    /// Appends whole revisions of `events` while they fit; at the first revision that does not fit the
    /// watcher turns unsynced, to catch up from the store from that revision.
    fn buffer(&mut self, events: Vec<Arc<Event>>, limit: usize) {
        let mut rest = events.as_slice();
        while let Some(first) = rest.first() {
            let rev = mod_revision(first);
            let len = rest.iter().take_while(|e| mod_revision(e) == rev).count();
            if self.pending.len() + len > limit {
                self.synced = false;
                self.lost_from = rev;
                return;
            }
            self.pending.extend_from_slice(&rest[..len]);
            rest = &rest[len..];
        }
    }
}

pub(crate) fn mod_revision(event: &Event) -> i64 {
    event.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

#[cfg(test)]
#[path = "hub_test.rs"]
mod tests;
