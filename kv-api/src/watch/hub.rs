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

use crate::index::KeyRange;

/// Events buffered per watcher before it falls back to catching up from the store.
pub const DEFAULT_PENDING_LIMIT: usize = 1024;

/// A watcher's key range (etcd's forms: empty end = one key, `[0]` = from the key on). Its clones share
/// one allocation: the hub's slot and the stream's watcher both hold it, and with 100k watchers every
/// byte a watcher takes is 100 kB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchRange(Arc<Bounds>);

#[derive(Debug, PartialEq, Eq)]
struct Bounds {
    key: Box<[u8]>,
    range_end: Box<[u8]>,
}

impl WatchRange {
    pub fn new(key: Vec<u8>, range_end: Vec<u8>) -> Self {
        Self(Arc::new(Bounds { key: key.into_boxed_slice(), range_end: range_end.into_boxed_slice() }))
    }

    pub fn key(&self) -> &[u8] {
        &self.0.key
    }

    pub fn range_end(&self) -> &[u8] {
        &self.0.range_end
    }

    pub fn as_key_range(&self) -> KeyRange<'_> {
        KeyRange::new(self.key(), self.range_end())
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.as_key_range().contains(key)
    }
}

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
    /// kube-apiserver has one prefix watcher per resource type).
    by_key: HashMap<Vec<u8>, Vec<WatcherKey>>,
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

    /// Registers a watcher of `range` whose first wanted revision is `start` (0: the next one). Returns its
    /// key, the hub's revision at registration, the first revision it will get and whether it is synced
    /// (otherwise its stream catches up from the store).
    pub fn register(&self, range: WatchRange, start: i64, inbox: Arc<Inbox>) -> Registered {
        let mut state = self.state.lock();
        let revision = state.notified;
        let start = if start == 0 { revision + 1 } else { start };
        let synced = start > revision;
        let key = WatcherKey(state.next_key);
        state.next_key += 1;
        if range.range_end().is_empty() {
            state.by_key.entry(range.key().to_vec()).or_default().push(key);
        } else {
            state.ranges.push(key);
        }
        state.slots.insert(key, Slot { range, inbox, queued: false, synced, lost_from: 0, pending: Vec::new() });
        crate::stats::WATCHERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Registered { key, revision, start, synced }
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
                Some((key, Drained { events, synced: slot.synced, resume_from }))
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registered {
    pub key: WatcherKey,
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
mod tests {
    use proto::mvccpb::event::EventType;
    use proto::mvccpb::KeyValue;

    use super::*;

    fn put(key: &str, rev: i64) -> Event {
        Event {
            r#type: EventType::Put as i32,
            kv: Some(KeyValue {
                key: key.as_bytes().to_vec(),
                mod_revision: rev,
                create_revision: rev,
                version: 1,
                ..Default::default()
            }),
            prev_kv: None,
        }
    }

    fn keys_and_revs(drained: &Drained) -> Vec<(String, i64)> {
        drained
            .events
            .iter()
            .map(|e| {
                let kv = e.kv.as_ref().expect("kv");
                (String::from_utf8_lossy(&kv.key).into_owned(), kv.mod_revision)
            })
            .collect()
    }

    /// A drain with the watchers in registration order (the inbox lists them in the order news came).
    fn drain_sorted(hub: &WatchHub, inbox: &Inbox) -> (i64, Vec<(WatcherKey, Drained)>) {
        let (rev, mut drained) = hub.drain(inbox);
        drained.sort_by_key(|(key, _)| *key);
        (rev, drained)
    }

    fn range(key: &str, end: &str) -> WatchRange {
        WatchRange::new(key.as_bytes().to_vec(), end.as_bytes().to_vec())
    }

    /// The stream's watcher and the hub's slot share one range, its key allocated once: with 100k
    /// watchers, a copy each took 13 MB more (68 MB against 55-56 in `jepsen bench --scale`).
    #[test]
    fn a_range_is_held_once_by_the_hub_and_its_stream() {
        let hub = WatchHub::new(1);
        let watched = range("a", "b");
        let registered = hub.register(watched.clone(), 0, Inbox::new());
        assert_eq!(Arc::strong_count(&watched.0), 2, "the caller's and the hub's");
        let state = hub.state.lock();
        let held = &state.slots[&registered.key].range;
        assert!(std::ptr::eq(held.key().as_ptr(), watched.key().as_ptr()));
        drop(state);
        hub.unregister(registered.key);
        assert_eq!(Arc::strong_count(&watched.0), 1);
    }

    #[test]
    fn events_reach_the_watchers_whose_range_holds_them() {
        let hub = WatchHub::new(1);
        let inbox = Inbox::new();
        let single = hub.register(range("a", ""), 0, inbox.clone());
        let prefix = hub.register(range("a", "b"), 0, inbox.clone());
        let from_key = hub.register(range("b", "\0"), 0, inbox.clone());
        assert!(single.synced && prefix.synced && from_key.synced);
        assert_eq!((single.revision, single.start), (1, 2));
        hub.notify(3, vec![put("a", 2), put("ab", 3), put("c", 3)]);
        let (rev, drained) = drain_sorted(&hub, &inbox);
        assert_eq!(rev, 3);
        let got: Vec<_> = drained.iter().map(|(_, d)| keys_and_revs(d)).collect();
        let want =
            [vec![("a".to_string(), 2)], vec![("a".to_string(), 2), ("ab".to_string(), 3)], vec![("c".to_string(), 3)]];
        assert_eq!(got, want);
        assert!(drained.iter().all(|(_, d)| d.synced && d.resume_from.is_none()));
        // Drained buffers are empty; an unregistered watcher gets nothing more.
        hub.unregister(single.key);
        hub.notify(4, vec![put("a", 4)]);
        let (_, drained) = drain_sorted(&hub, &inbox);
        assert_eq!(drained.len(), 1);
        assert_eq!(drained[0].0, prefix.key);
        assert_eq!(keys_and_revs(&drained[0].1), vec![("a".to_string(), 4)]);
    }

    #[test]
    fn the_tables_give_back_their_room_once_most_watchers_are_gone() {
        let hub = WatchHub::new(1);
        let inbox = Inbox::new();
        let registered: Vec<_> = (0..20_000)
            .map(|i| {
                // Odd ones watch a range holding only their key, so that they sit in `ranges`.
                let r =
                    if i % 2 == 0 { range(&format!("k{i}"), "") } else { range(&format!("k{i}"), &format!("k{i}\0")) };
                hub.register(r, 0, inbox.clone()).key
            })
            .collect();
        let capacity = |hub: &WatchHub| {
            let state = hub.state.lock();
            (state.slots.capacity(), state.by_key.capacity(), state.ranges.capacity())
        };
        let full = capacity(&hub);
        assert!(full.0 >= 20_000 && full.1 >= 10_000 && full.2 >= 10_000, "{full:?}");
        let (kept, gone) = registered.split_at(100);
        for key in gone {
            hub.unregister(*key);
        }
        let shrunk = capacity(&hub);
        assert!(shrunk.0 <= 4 * SHRINK_FLOOR && shrunk.1 <= 4 * SHRINK_FLOOR, "{shrunk:?}");
        assert!(shrunk.2 <= 4 * SHRINK_FLOOR, "{shrunk:?}");
        // The watchers left still get their events.
        hub.notify(2, vec![put("k0", 2), put("k1", 2), put("k100", 2)]);
        let (_, drained) = drain_sorted(&hub, &inbox);
        assert!(drained.iter().all(|(key, _)| kept.contains(key)));
        let got: Vec<_> = drained.iter().flat_map(|(_, d)| keys_and_revs(d)).collect();
        assert_eq!(got, vec![("k0".to_string(), 2), ("k1".to_string(), 2)]);
    }

    #[test]
    fn a_watcher_starting_in_the_past_is_unsynced_until_caught_up() {
        let hub = WatchHub::new(5);
        let inbox = Inbox::new();
        let w = hub.register(range("a", ""), 3, inbox.clone());
        assert_eq!((w.synced, w.start, w.revision), (false, 3, 5));
        assert_eq!(hub.backlog(), Backlog { slow_watchers: 1, pending_events: 0, pending_bytes: 0 });
        hub.notify(6, vec![put("a", 6)]);
        let (_, drained) = hub.drain(&inbox);
        assert!(drained.is_empty(), "unsynced watchers get nothing from notify");
        // A catch-up that read only through 5 is behind notify.
        assert!(!hub.try_sync(w.key, 5));
        assert!(hub.try_sync(w.key, 6));
        assert_eq!(hub.backlog(), Backlog::default());
        hub.notify(7, vec![put("a", 7)]);
        // One event of key "a" and no value.
        assert_eq!(hub.backlog(), Backlog { slow_watchers: 0, pending_events: 1, pending_bytes: 1 });
        let (_, drained) = hub.drain(&inbox);
        assert_eq!(keys_and_revs(&drained[0].1), vec![("a".to_string(), 7)]);
        // A future start is synced at once.
        let future = hub.register(range("a", ""), 100, Inbox::new());
        assert_eq!((future.synced, future.start), (true, 100));
    }

    #[test]
    fn overflow_keeps_whole_revisions_and_says_where_to_resume() {
        let hub = WatchHub::with_pending_limit(1, 3);
        let inbox = Inbox::new();
        hub.register(range("a", "b"), 0, inbox.clone());
        hub.notify(3, vec![put("a1", 2), put("a2", 2), put("a1", 3), put("a2", 3)]);
        hub.notify(4, vec![put("a1", 4)]);
        let (_, drained) = hub.drain(&inbox);
        let d = &drained[0].1;
        assert_eq!(keys_and_revs(d), vec![("a1".to_string(), 2), ("a2".to_string(), 2)]);
        assert_eq!((d.synced, d.resume_from), (false, Some(3)));
        // The resume point is reported once; the stream tracks it from then on.
        let (_, drained) = hub.drain(&inbox);
        assert!(drained.is_empty());
    }

    #[test]
    fn resync_unsyncs_every_watcher_from_the_last_announced_revision() {
        let hub = WatchHub::new(4);
        let inbox = Inbox::new();
        hub.register(range("a", ""), 0, inbox.clone());
        hub.resync(10);
        assert_eq!(hub.revision(), 10);
        let (_, drained) = hub.drain(&inbox);
        assert_eq!(drained[0].1.resume_from, Some(5));
    }

    #[test]
    fn a_drain_takes_only_the_watchers_with_news_each_once() {
        let hub = WatchHub::new(1);
        let (inbox, other) = (Inbox::new(), Inbox::new());
        let watchers: Vec<_> =
            (0..1000).map(|i| hub.register(range(&format!("k{i}"), ""), 0, inbox.clone()).key).collect();
        let elsewhere = hub.register(range("k7", ""), 0, other.clone()).key;
        hub.notify(2, vec![put("k7", 2)]);
        hub.notify(3, vec![put("k7", 3), put("k9", 3)]);
        let (rev, drained) = drain_sorted(&hub, &inbox);
        assert_eq!(rev, 3);
        let got: Vec<_> = drained.iter().map(|(key, d)| (*key, keys_and_revs(d))).collect();
        let k = |s: &str, rev| (s.to_string(), rev);
        assert_eq!(got, vec![(watchers[7], vec![k("k7", 2), k("k7", 3)]), (watchers[9], vec![k("k9", 3)])]);
        assert!(hub.drain(&inbox).1.is_empty(), "nothing new since");
        // The other owner's watcher of the same key is on its own inbox.
        let (_, drained) = hub.drain(&other);
        assert_eq!(
            drained.iter().map(|(key, d)| (*key, keys_and_revs(d))).collect::<Vec<_>>(),
            vec![(elsewhere, vec![k("k7", 2), k("k7", 3)])]
        );
        // A watcher unregistered while queued is skipped.
        hub.notify(4, vec![put("k1", 4)]);
        hub.unregister(watchers[1]);
        assert!(hub.drain(&inbox).1.is_empty());
    }
}
