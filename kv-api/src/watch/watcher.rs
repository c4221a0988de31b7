//! One watcher as its stream sees it (the client's id, options, and how far it got), and the pure steps
//! from events to responses: filters, `prev_kv`, one response per revision, and etcd's fragmentation.

use prost::Message;
use proto::etcdserverpb as pb;
use proto::etcdserverpb::watch_create_request::FilterType;
use proto::mvccpb::event::EventType;
use proto::mvccpb::Event;

use super::hub::{mod_revision, WatchRange, WatcherKey};
use crate::store::MvccStore;

/// etcd's `watchBatchMaxRevs`: the most revisions read from the store per catch-up response.
pub(crate) const CATCH_UP_REVISIONS: i64 = 1000;

/// A watcher of one stream (its stream keys it by its watch id). 32 bytes: with 100k watchers each
/// byte is 100 kB, and the stream's map of them fills allocations of 512 bytes rather than 640 at this
/// size.
#[derive(Debug)]
pub(crate) struct Watcher {
    pub key: WatcherKey,
    pub range: WatchRange,
    /// Every event before this revision has been sent (or precedes the start).
    pub next_rev: i64,
    /// Revisions the next catch-up reads: fewer after a batch was cut for size (at most
    /// [`CATCH_UP_REVISIONS`]).
    catch_up_window: u32,
    /// The create request's options, one bit each (`PREV_KV`, ...).
    options: u8,
    /// Whether the hub feeds this watcher (otherwise the stream catches it up from the store).
    pub synced: bool,
    /// No events were sent since the last timed progress notification (etcd's `progress[id]`).
    pub progress_due: bool,
}

const PREV_KV: u8 = 1;
const FRAGMENT: u8 = 1 << 1;
const PROGRESS_NOTIFY: u8 = 1 << 2;
const NO_PUT: u8 = 1 << 3;
const NO_DELETE: u8 = 1 << 4;

impl Watcher {
    pub fn new(key: WatcherKey, req: &pb::WatchCreateRequest, range: WatchRange, start: i64, synced: bool) -> Self {
        let has = |f: FilterType| req.filters.contains(&(f as i32));
        let options = [
            (req.prev_kv, PREV_KV),
            (req.fragment, FRAGMENT),
            (req.progress_notify, PROGRESS_NOTIFY),
            (has(FilterType::Noput), NO_PUT),
            (has(FilterType::Nodelete), NO_DELETE),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .fold(0, |bits, (_, bit)| bits | bit);
        Self {
            key,
            range,
            next_rev: start,
            catch_up_window: CATCH_UP_REVISIONS as u32,
            options,
            synced,
            progress_due: true,
        }
    }

    fn has(&self, option: u8) -> bool {
        self.options & option != 0
    }

    pub fn prev_kv(&self) -> bool {
        self.has(PREV_KV)
    }

    pub fn fragment(&self) -> bool {
        self.has(FRAGMENT)
    }

    pub fn progress_notify(&self) -> bool {
        self.has(PROGRESS_NOTIFY)
    }

    pub fn catch_up_window(&self) -> i64 {
        i64::from(self.catch_up_window)
    }

    /// The next catch-up reads `revisions`, kept between 1 and [`CATCH_UP_REVISIONS`].
    pub fn set_catch_up_window(&mut self, revisions: i64) {
        self.catch_up_window = revisions.clamp(1, CATCH_UP_REVISIONS) as u32;
    }

    /// The events of `events` this watcher sends: at or after its next revision, and not filtered out.
    pub fn select<'a>(&self, events: impl IntoIterator<Item = &'a Event>) -> Vec<Event> {
        events
            .into_iter()
            .filter(|e| mod_revision(e) >= self.next_rev)
            .filter(|e| match EventType::try_from(e.r#type) {
                Ok(EventType::Put) => !self.has(NO_PUT),
                Ok(EventType::Delete) => !self.has(NO_DELETE),
                Err(_) => true,
            })
            .cloned()
            .collect()
    }
}

/// A PUT that created the key (etcd sends no `prev_kv` for it).
fn is_create(event: &Event) -> bool {
    event.r#type == EventType::Put as i32 && event.kv.as_ref().is_some_and(|kv| kv.create_revision == kv.mod_revision)
}

/// Fills each event's `prev_kv` with the key's value at the revision before the event, as etcd: none for
/// a creating PUT, none when that revision is compacted.
pub(crate) fn fill_prev_kv(store: &MvccStore, events: &mut [Event]) {
    for event in events.iter_mut().filter(|e| !is_create(e)) {
        if let Some(kv) = &event.kv {
            event.prev_kv = store.value_at(&kv.key, kv.mod_revision - 1).ok().flatten();
        }
    }
}

/// Splits events (in revision order) into one group per revision.
pub(crate) fn by_revision(events: Vec<Event>) -> Vec<Vec<Event>> {
    let mut groups: Vec<Vec<Event>> = Vec::new();
    for event in events {
        match groups.last_mut() {
            Some(group) if group.last().map(mod_revision) == Some(mod_revision(&event)) => group.push(event),
            _ => groups.push(vec![event]),
        }
    }
    groups
}

/// Shortens a catch-up batch (events in revision order) to whole revisions of at most `max_bytes`, keeping
/// at least the first revision; returns the last revision the shortened batch covers when it cut.
pub(crate) fn truncate_batch(events: &mut Vec<Event>, max_bytes: usize) -> Option<i64> {
    let (mut total, mut end) = (0, 0);
    while end < events.len() {
        let rev = mod_revision(&events[end]);
        let len = events[end..].iter().take_while(|e| mod_revision(e) == rev).count();
        let size: usize = events[end..end + len].iter().map(Message::encoded_len).sum();
        if end > 0 && total + size > max_bytes {
            break;
        }
        total += size;
        end += len;
    }
    let cut = mod_revision(events.get(end)?);
    events.truncate(end);
    Some(cut - 1)
}

/// etcd's `sendFragments`: a response of at least `max_bytes` with two or more events is cut into pieces,
/// each filled with events until adding one more would reach `max_bytes` (a piece holds at least one
/// event); every piece but the last carries `fragment = true`.
pub(crate) fn fragments(resp: pb::WatchResponse, max_bytes: usize) -> Vec<pb::WatchResponse> {
    if resp.encoded_len() < max_bytes || resp.events.len() < 2 {
        return vec![resp];
    }
    let mut template = resp;
    let events = std::mem::take(&mut template.events);
    let mut pieces = Vec::new();
    let mut current = template.clone();
    for event in events {
        current.events.push(event);
        if current.events.len() > 1 && current.encoded_len() >= max_bytes {
            let overflow = current.events.pop().expect("just pushed");
            current.fragment = true;
            pieces.push(std::mem::replace(&mut current, template.clone()));
            current.events.push(overflow);
        }
    }
    current.fragment = false;
    pieces.push(current);
    pieces
}

#[cfg(test)]
mod tests {
    use proto::mvccpb::KeyValue;

    use super::*;

    fn event(kind: EventType, key: &str, rev: i64, value_len: usize) -> Event {
        Event {
            r#type: kind as i32,
            kv: Some(KeyValue {
                key: key.as_bytes().to_vec(),
                mod_revision: rev,
                create_revision: 2,
                version: 1,
                value: vec![b'x'; value_len],
                lease: 0,
            }),
            prev_kv: None,
        }
    }

    fn watcher(filters: &[FilterType], start: i64) -> Watcher {
        let req = pb::WatchCreateRequest { filters: filters.iter().map(|f| *f as i32).collect(), ..Default::default() };
        Watcher::new(
            super::super::hub::WatcherKey::for_tests(0),
            &req,
            WatchRange::new(b"a".to_vec(), vec![]),
            start,
            true,
        )
    }

    /// Every byte of a watcher is 100 kB with 100k of them: the stream's `BTreeMap` of 32-byte watchers
    /// fills 512-byte nodes (the 48 bytes they took filled 640).
    #[test]
    fn a_watcher_takes_32_bytes_and_keeps_its_options() {
        assert_eq!(std::mem::size_of::<Watcher>(), 32);
        let req = pb::WatchCreateRequest {
            prev_kv: true,
            progress_notify: true,
            filters: vec![FilterType::Nodelete as i32],
            ..Default::default()
        };
        let range = WatchRange::new(b"a".to_vec(), vec![]);
        let mut w = Watcher::new(super::super::hub::WatcherKey::for_tests(0), &req, range, 1, true);
        assert!(w.prev_kv() && w.progress_notify() && !w.fragment());
        assert_eq!(w.catch_up_window(), CATCH_UP_REVISIONS);
        w.set_catch_up_window(5_000);
        assert_eq!(w.catch_up_window(), CATCH_UP_REVISIONS);
        w.set_catch_up_window(0);
        assert_eq!(w.catch_up_window(), 1);
    }

    #[test]
    fn filters_and_start_revision_select_events() {
        let events =
            [event(EventType::Put, "a", 3, 0), event(EventType::Delete, "a", 4, 0), event(EventType::Put, "a", 5, 0)];
        let revs = |w: &Watcher| w.select(&events).iter().map(mod_revision).collect::<Vec<_>>();
        assert_eq!(revs(&watcher(&[], 0)), vec![3, 4, 5]);
        assert_eq!(revs(&watcher(&[], 4)), vec![4, 5]);
        assert_eq!(revs(&watcher(&[FilterType::Noput], 0)), vec![4]);
        assert_eq!(revs(&watcher(&[FilterType::Nodelete], 0)), vec![3, 5]);
        assert!(revs(&watcher(&[FilterType::Noput, FilterType::Nodelete], 0)).is_empty());
    }

    #[test]
    fn events_group_by_revision() {
        let events =
            vec![event(EventType::Put, "a", 3, 0), event(EventType::Put, "b", 3, 0), event(EventType::Put, "a", 4, 0)];
        let groups: Vec<Vec<i64>> = by_revision(events).iter().map(|g| g.iter().map(mod_revision).collect()).collect();
        assert_eq!(groups, vec![vec![3, 3], vec![4]]);
    }

    #[test]
    fn catch_up_batches_end_at_revision_boundaries() {
        let batch = || -> Vec<Event> {
            [(3, 100), (3, 100), (4, 100), (6, 100), (6, 100)]
                .iter()
                .enumerate()
                .map(|(i, &(rev, size))| event(EventType::Put, &format!("k{i}"), rev, size))
                .collect()
        };
        let revs = |events: &[Event]| events.iter().map(mod_revision).collect::<Vec<_>>();
        let mut events = batch();
        assert_eq!(truncate_batch(&mut events, 10_000), None);
        assert_eq!(revs(&events), [3, 3, 4, 6, 6]);
        // Room for about three events: revisions 3 and 4, covering everything up to 5.
        let mut events = batch();
        assert_eq!(truncate_batch(&mut events, 350), Some(5));
        assert_eq!(revs(&events), [3, 3, 4]);
        // The first revision is kept whole even when it alone is too large.
        let mut events = batch();
        assert_eq!(truncate_batch(&mut events, 10), Some(3));
        assert_eq!(revs(&events), [3, 3]);
    }

    #[test]
    fn fragments_follow_etcd() {
        let resp = |n: usize, size: usize| pb::WatchResponse {
            watch_id: 7,
            events: (0..n).map(|i| event(EventType::Put, &format!("k{i}"), 3, size)).collect(),
            ..Default::default()
        };
        // Small responses and single events are never cut.
        assert_eq!(fragments(resp(3, 10), 1000).len(), 1);
        assert_eq!(fragments(resp(1, 5000), 1000).len(), 1);
        // Ten events of ~120 bytes with a 500-byte limit: pieces of at most 4 events, all but the last
        // flagged, every event kept in order.
        let whole = resp(10, 100);
        let pieces = fragments(whole.clone(), 500);
        assert!(pieces.len() > 1);
        for (i, piece) in pieces.iter().enumerate() {
            assert_eq!(piece.fragment, i + 1 < pieces.len());
            assert_eq!(piece.watch_id, 7);
            assert!(piece.events.len() == 1 || piece.encoded_len() < 500, "piece {i} too large");
        }
        let rejoined: Vec<Event> = pieces.into_iter().flat_map(|p| p.events).collect();
        assert_eq!(rejoined, whole.events);
        // An event larger than the limit travels alone.
        let pieces = fragments(resp(3, 1000), 500);
        assert_eq!(pieces.iter().map(|p| p.events.len()).collect::<Vec<_>>(), vec![1, 1, 1]);
    }
}
