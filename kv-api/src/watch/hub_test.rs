//! Tests of [`super`]: the hub's matching, buffering, draining and bookkeeping.

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
    let registered = hub.register(watched.clone(), 0, Inbox::new(), 0);
    assert!(registered.range.shares_with(&watched));
    assert_eq!(watched.holders(), 3, "the caller's two and the hub's");
    let state = hub.state.lock();
    assert!(state.slots[&registered.key].range.shares_with(&watched));
    drop(state);
    hub.unregister(registered.key);
    drop(registered);
    assert_eq!(watched.holders(), 1);
}

/// Watchers of the same single key hold one range between them (the scale probe's 100k watchers
/// watch 100 keys): a range built for a later one is dropped at registration.
#[test]
fn watchers_of_one_key_share_its_range_until_the_last_is_gone() {
    let hub = WatchHub::new(1);
    let inbox = Inbox::new();
    let first = hub.register(range("k", ""), 0, inbox.clone(), 0);
    let second = hub.register(range("k", ""), 0, inbox.clone(), 0);
    let other = hub.register(range("l", ""), 0, inbox.clone(), 0);
    assert!(second.range.shares_with(&first.range));
    assert!(!other.range.shares_with(&first.range));
    // Prefix watchers of the same bounds are not shared: they are few.
    let prefix = hub.register(range("k", "l"), 0, inbox.clone(), 0);
    assert!(!prefix.range.shares_with(&first.range));
    let kept = first.range.clone();
    hub.unregister(first.key);
    hub.unregister(second.key);
    drop((first, second));
    assert_eq!(kept.holders(), 1, "the hub let go of the key's range with its last watcher");
    let own = Inbox::new();
    let again = hub.register(range("k", ""), 0, own.clone(), 0);
    assert!(!again.range.shares_with(&kept));
    hub.notify(2, vec![put("k", 2)]);
    let (_, drained) = hub.drain(&own);
    assert_eq!(drained.iter().map(|(key, _)| *key).collect::<Vec<_>>(), [again.key]);
}

#[test]
fn events_reach_the_watchers_whose_range_holds_them() {
    let hub = WatchHub::new(1);
    let inbox = Inbox::new();
    let single = hub.register(range("a", ""), 0, inbox.clone(), 0);
    let prefix = hub.register(range("a", "b"), 0, inbox.clone(), 0);
    let from_key = hub.register(range("b", "\0"), 0, inbox.clone(), 0);
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
            let r = if i % 2 == 0 { range(&format!("k{i}"), "") } else { range(&format!("k{i}"), &format!("k{i}\0")) };
            hub.register(r, 0, inbox.clone(), 0).key
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
    let w = hub.register(range("a", ""), 3, inbox.clone(), 0);
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
    let future = hub.register(range("a", ""), 100, Inbox::new(), 0);
    assert_eq!((future.synced, future.start), (true, 100));
}

#[test]
fn overflow_keeps_whole_revisions_and_says_where_to_resume() {
    let hub = WatchHub::with_pending_limit(1, 3);
    let inbox = Inbox::new();
    hub.register(range("a", "b"), 0, inbox.clone(), 0);
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
    hub.register(range("a", ""), 0, inbox.clone(), 0);
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
        (0..1000).map(|i| hub.register(range(&format!("k{i}"), ""), 0, inbox.clone(), 0).key).collect();
    let elsewhere = hub.register(range("k7", ""), 0, other.clone(), 0).key;
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
