//! etcd's watch guarantees (api_guarantees.md, as checked by etcd's robustness tests), per stream,
//! against a ground truth: every event the cluster persisted, in revision order (for example a
//! watch from revision 1 taken after the run, with compaction off).
//!
//! - **ordered**: event revisions never decrease;
//! - **unique**: no (revision, key) twice;
//! - **atomic**: a revision is never split across responses;
//! - **bookmarkable**: after a progress notification at R no event has revision ≤ R, and
//!   notifications neither go back nor fall below the last event;
//! - **reliable**: the events received equal the matching ground-truth events from the first
//!   expected revision to the last received event or notification — no gaps, nothing invented;
//! - **resumable**: a stream with start revision S begins with the first matching event at or after S;
//! - **filter**: every event lies in the watched range;
//! - **IsCreate**: set exactly when the key did not exist at revision − 1;
//! - **PrevKV**: when present, equals the key at revision − 1 (it may be missing once compacted).
//!
//! A watch that breaks and resumes is recorded as several streams. etcd promises no ordering between
//! watch events and KV responses, so nothing here compares them.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use crate::checker::{Anomaly, AnomalyKind, CheckResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Put,
    Delete,
}

/// One watch event (`mvccpb.Event`, reduced to what the rules need).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub key: String,
    /// The value put (empty for deletes).
    #[serde(default)]
    pub value: String,
    /// The event's `mod_revision`.
    pub revision: i64,
    /// `create_revision == mod_revision` on a put.
    #[serde(default)]
    pub is_create: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_kv: Option<PrevKv>,
}

/// Hand-built events for tests: neither a key's creation nor carrying `prev_kv`.
#[cfg(test)]
impl Event {
    pub(crate) fn put(key: &str, value: &str, revision: i64) -> Event {
        Event { kind: EventKind::Put, key: key.into(), value: value.into(), revision, is_create: false, prev_kv: None }
    }

    pub(crate) fn delete(key: &str, revision: i64) -> Event {
        Event {
            kind: EventKind::Delete,
            key: key.into(),
            value: String::new(),
            revision,
            is_create: false,
            prev_kv: None,
        }
    }
}

/// The key's previous version as carried by an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrevKv {
    pub value: String,
    pub mod_revision: i64,
}

/// One response on a watch stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchResponse {
    pub time_ns: u64,
    pub header_revision: i64,
    #[serde(default)]
    pub events: Vec<Event>,
    /// An empty response announcing progress up to `header_revision`.
    #[serde(default)]
    pub progress_notify: bool,
}

/// Everything one watch stream received, from creation until it ended or broke.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchStream {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    pub key: String,
    /// etcd's `range_end`: empty for the single key, `"\0"` for every key ≥ `key`, else `[key, range_end)`.
    #[serde(default)]
    pub range_end: String,
    /// 0 means "from now": resumability cannot be checked and reliability starts at the first event.
    pub start_revision: i64,
    #[serde(default)]
    pub prev_kv: bool,
    pub responses: Vec<WatchResponse>,
}

impl WatchStream {
    /// Whether `key` lies in the watched range.
    pub fn matches(&self, key: &str) -> bool {
        match self.range_end.as_str() {
            "" => key == self.key,
            "\0" => key >= self.key.as_str(),
            end => key >= self.key.as_str() && key < end,
        }
    }

    fn name(&self) -> String {
        match &self.member {
            Some(member) => format!("watch {} on {member}", self.id),
            None => format!("watch {}", self.id),
        }
    }
}

/// Each key's states over time, replayed from the ground truth.
struct Replay {
    /// key -> (revision, value and mod_revision after it; `None` once deleted)
    keys: BTreeMap<String, Vec<(i64, Option<PrevKv>)>>,
    /// (revision, key) -> the event
    events: BTreeMap<(i64, String), Event>,
}

impl Replay {
    fn new(truth: &[Event], anomalies: &mut Vec<Anomaly>) -> Self {
        let mut replay = Replay { keys: BTreeMap::new(), events: BTreeMap::new() };
        let mut last = 0;
        for event in truth {
            if event.revision < last {
                anomalies.push(Anomaly::new(
                    AnomalyKind::Malformed,
                    format!("ground truth goes back from revision {last} to {}", event.revision),
                ));
            }
            last = last.max(event.revision);
            let after = match event.kind {
                EventKind::Put => Some(PrevKv { value: event.value.clone(), mod_revision: event.revision }),
                EventKind::Delete => None,
            };
            replay.keys.entry(event.key.clone()).or_default().push((event.revision, after));
            replay.events.insert((event.revision, event.key.clone()), event.clone());
        }
        replay
    }

    /// The key's value at `revision`, or `None` while it does not exist.
    fn at(&self, key: &str, revision: i64) -> Option<&PrevKv> {
        let history = self.keys.get(key)?;
        let n = history.partition_point(|(r, _)| *r <= revision);
        n.checked_sub(1).and_then(|i| history[i].1.as_ref())
    }
}

/// Checks every stream against the ground truth. `compact_revision` is the highest compaction of the
/// run: `prev_kv` may be missing for events whose previous revision it removed.
pub fn check(streams: &[WatchStream], truth: &[Event], compact_revision: i64) -> CheckResult {
    let mut anomalies = Vec::new();
    let replay = Replay::new(truth, &mut anomalies);
    for stream in streams {
        check_order(stream, &mut anomalies);
        check_fields(stream, &replay, compact_revision, &mut anomalies);
        check_reliable(stream, &replay, &mut anomalies);
    }
    CheckResult::from_anomalies("watch", anomalies)
}

/// Ordered, unique, atomic, bookmarkable and filter.
fn check_order(stream: &WatchStream, anomalies: &mut Vec<Anomaly>) {
    let name = stream.name();
    let mut push = |kind, text: String| anomalies.push(Anomaly::new(kind, format!("{name}: {text}")));
    let mut last_event: Option<i64> = None;
    let mut notified: Option<i64> = None;
    let mut seen: HashSet<(i64, &str)> = HashSet::new();
    for (r, response) in stream.responses.iter().enumerate() {
        if response.progress_notify && response.events.is_empty() {
            let at = response.header_revision;
            if let Some(n) = notified.filter(|&n| at < n) {
                push(AnomalyKind::WatchBookmark, format!("progress notify in response {r} went back from {n} to {at}"));
            }
            if let Some(e) = last_event.filter(|&e| at < e) {
                push(
                    AnomalyKind::WatchBookmark,
                    format!("progress notify {at} in response {r} is below event revision {e}"),
                );
            }
            notified = notified.max(Some(at));
            continue;
        }
        for (i, event) in response.events.iter().enumerate() {
            let at = format!("event {}@{} (response {r})", event.key, event.revision);
            if !stream.matches(&event.key) {
                push(AnomalyKind::WatchFilter, format!("{at} is outside [{:?}, {:?})", stream.key, stream.range_end));
            }
            let duplicate = !seen.insert((event.revision, &event.key));
            if duplicate {
                push(AnomalyKind::WatchDuplicate, format!("{at} delivered twice"));
            }
            if let Some(last) = last_event {
                if event.revision < last {
                    push(AnomalyKind::WatchUnordered, format!("{at} follows revision {last}"));
                } else if i == 0 && event.revision == last && !duplicate {
                    push(
                        AnomalyKind::WatchSplitRevision,
                        format!("{at} continues revision {last} of an earlier response"),
                    );
                }
            }
            if let Some(n) = notified.filter(|&n| event.revision <= n) {
                push(AnomalyKind::WatchBookmark, format!("{at} arrived after a progress notify at {n}"));
            }
            last_event = last_event.max(Some(event.revision));
        }
    }
}

/// IsCreate and PrevKV, for events that happened.
fn check_fields(stream: &WatchStream, replay: &Replay, compact_revision: i64, anomalies: &mut Vec<Anomaly>) {
    let name = stream.name();
    for event in stream.responses.iter().flat_map(|r| &r.events) {
        if !replay.events.contains_key(&(event.revision, event.key.clone())) {
            continue; // reported by the reliability check
        }
        let before = replay.at(&event.key, event.revision - 1);
        let at = format!("{name}: event {}@{}", event.key, event.revision);
        let is_create = event.kind == EventKind::Put && before.is_none();
        if event.is_create != is_create {
            let existed = if before.is_some() { "existed" } else { "did not exist" };
            anomalies.push(Anomaly::new(
                AnomalyKind::WatchIsCreate,
                format!("{at} has is_create={} but the key {existed} before", event.is_create),
            ));
        }
        if !stream.prev_kv {
            continue;
        }
        match (&event.prev_kv, before) {
            (Some(got), want) if want != Some(got) => anomalies.push(Anomaly::new(
                AnomalyKind::WatchPrevKv,
                format!("{at} has prev_kv {got:?}, but the key was {want:?}"),
            )),
            (None, Some(want)) if event.revision - 1 > compact_revision => anomalies.push(Anomaly::new(
                AnomalyKind::WatchPrevKv,
                format!("{at} lacks prev_kv although the key was {want:?} and not compacted"),
            )),
            _ => {}
        }
    }
}

/// Reliable and resumable.
fn check_reliable(stream: &WatchStream, replay: &Replay, anomalies: &mut Vec<Anomaly>) {
    let name = stream.name();
    let received: BTreeSet<(i64, &str)> =
        stream.responses.iter().flat_map(|r| &r.events).map(|e| (e.revision, e.key.as_str())).collect();
    let notified =
        stream.responses.iter().filter(|r| r.progress_notify && r.events.is_empty()).map(|r| r.header_revision);
    let Some(until) = received.iter().map(|(r, _)| *r).chain(notified).max() else { return };
    let from = match (stream.start_revision, received.first()) {
        (s, _) if s > 0 => s,
        (_, Some(&(first, _))) => first,
        (_, None) => return,
    };
    let expected: BTreeSet<(i64, &str)> = replay
        .events
        .range((from, String::new())..)
        .map(|((r, k), _)| (*r, k.as_str()))
        .take_while(|(r, _)| *r <= until)
        .filter(|(_, k)| stream.matches(k))
        .collect();

    if stream.start_revision > 0 {
        if let (Some(want), Some(got)) = (expected.first(), received.first()) {
            if want != got {
                anomalies.push(Anomaly::new(
                    AnomalyKind::WatchResume,
                    format!(
                        "{name}: from revision {from} the first event must be {}@{}, but it was {}@{}",
                        want.1, want.0, got.1, got.0
                    ),
                ));
            }
        }
    }

    let missing: Vec<String> = expected.difference(&received).map(|(r, k)| format!("{k}@{r}")).collect();
    if !missing.is_empty() {
        anomalies.push(Anomaly::new(
            AnomalyKind::WatchGap,
            format!(
                "{name}: {} event(s) between revisions {from} and {until} never arrived: {}",
                missing.len(),
                summary(&missing)
            ),
        ));
    }
    let invented: Vec<String> = received
        .iter()
        .filter(|(r, k)| stream.matches(k) && !replay.events.contains_key(&(*r, k.to_string())))
        .map(|(r, k)| format!("{k}@{r}"))
        .collect();
    if !invented.is_empty() {
        anomalies.push(Anomaly::new(
            AnomalyKind::WatchGap,
            format!("{name}: {} event(s) never happened: {}", invented.len(), summary(&invented)),
        ));
    }
    // Events that happened but arrived with the wrong content.
    for event in stream.responses.iter().flat_map(|r| &r.events) {
        if let Some(truth) = replay.events.get(&(event.revision, event.key.clone())) {
            if (truth.kind, &truth.value) != (event.kind, &event.value) {
                anomalies.push(Anomaly::new(
                    AnomalyKind::WatchGap,
                    format!(
                        "{name}: event {}@{} arrived as {:?} {:?}, but it was {:?} {:?}",
                        event.key, event.revision, event.kind, event.value, truth.kind, truth.value
                    ),
                ));
            }
        }
    }
}

fn summary(items: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut text = items.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(", … ({} more)", items.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{read_jsonl, write_jsonl};
    use crate::Validity;

    /// The ground truth: a=1@2, b=1@3, a=2@4, a deleted@5, a=3@6, {a=4, b=2}@7 (one txn).
    fn truth() -> Vec<Event> {
        vec![
            Event::put("a", "1", 2),
            Event::put("b", "1", 3),
            Event::put("a", "2", 4),
            Event::delete("a", 5),
            Event::put("a", "3", 6),
            Event::put("a", "4", 7),
            Event::put("b", "2", 7),
        ]
    }

    /// The truth's events as a correct server delivers them, with is_create and prev_kv filled in.
    fn delivered(matches: impl Fn(&str) -> bool, from: i64) -> Vec<Event> {
        let mut anomalies = Vec::new();
        let replay = Replay::new(&truth(), &mut anomalies);
        truth()
            .into_iter()
            .filter(|e| matches(&e.key) && e.revision >= from)
            .map(|mut e| {
                let before = replay.at(&e.key, e.revision - 1).cloned();
                e.is_create = e.kind == EventKind::Put && before.is_none();
                e.prev_kv = before;
                e
            })
            .collect()
    }

    fn response(events: Vec<Event>) -> WatchResponse {
        let header_revision = events.iter().map(|e| e.revision).max().unwrap_or(0);
        WatchResponse { time_ns: 0, header_revision, events, progress_notify: false }
    }

    fn notify(revision: i64) -> WatchResponse {
        WatchResponse { time_ns: 0, header_revision: revision, events: vec![], progress_notify: true }
    }

    fn stream(key: &str, range_end: &str, start_revision: i64, responses: Vec<WatchResponse>) -> WatchStream {
        WatchStream {
            id: 1,
            member: Some("n2".into()),
            key: key.into(),
            range_end: range_end.into(),
            start_revision,
            prev_kv: true,
            responses,
        }
    }

    /// A stream over every key from revision 1, one response per revision.
    fn good_stream() -> WatchStream {
        let mut by_revision: BTreeMap<i64, Vec<Event>> = BTreeMap::new();
        for e in delivered(|_| true, 1) {
            by_revision.entry(e.revision).or_default().push(e);
        }
        let mut responses: Vec<WatchResponse> = by_revision.into_values().map(response).collect();
        responses.insert(2, notify(3));
        responses.push(notify(9));
        stream("a", "\0", 1, responses)
    }

    fn events_mut(s: &mut WatchStream) -> Vec<&mut Event> {
        s.responses.iter_mut().flat_map(|r| r.events.iter_mut()).collect()
    }

    #[test]
    fn correct_streams_pass() {
        let only_a = |k: &str| k == "a";
        let cases: Vec<(&str, WatchStream)> = vec![
            ("everything, with notifies", good_stream()),
            ("one key", stream("a", "", 1, vec![response(delivered(only_a, 1))])),
            ("range [a, b)", stream("a", "b", 3, vec![response(delivered(only_a, 3)), notify(8)])),
            ("resumed mid-way", stream("a", "", 5, vec![response(delivered(only_a, 5))])),
            ("from now", stream("b", "", 0, vec![response(delivered(|k| k == "b", 7))])),
            ("empty", stream("a", "", 0, vec![])),
        ];
        for (name, s) in cases {
            let result = check(&[s], &truth(), 0);
            assert!(result.is_valid(), "{name}: {result}");
        }
    }

    #[test]
    fn each_rule_catches_its_anomaly() {
        type Corrupt = fn(&mut WatchStream);
        let cases: Vec<(&str, Corrupt, AnomalyKind)> = vec![
            ("gap", |s| s.responses.remove(3).events.clear(), AnomalyKind::WatchGap),
            ("out of order", |s| s.responses.swap(0, 1), AnomalyKind::WatchUnordered),
            (
                "duplicate",
                |s| {
                    let again = s.responses[1].clone();
                    s.responses.insert(2, again)
                },
                AnomalyKind::WatchDuplicate,
            ),
            (
                "split revision",
                |s| {
                    let last = s.responses.len() - 2;
                    let b = s.responses[last].events.pop().expect("two events at 7");
                    s.responses.insert(last + 1, response(vec![b]))
                },
                AnomalyKind::WatchSplitRevision,
            ),
            ("event below a notify", |s| s.responses.insert(1, notify(5)), AnomalyKind::WatchBookmark),
            ("notify going back", |s| s.responses.push(notify(8)), AnomalyKind::WatchBookmark),
            ("filter", |s| s.range_end = "b".into(), AnomalyKind::WatchFilter),
            ("wrong is_create", |s| events_mut(s)[2].is_create = true, AnomalyKind::WatchIsCreate),
            (
                "wrong prev_kv",
                |s| events_mut(s)[2].prev_kv = Some(PrevKv { value: "0".into(), mod_revision: 2 }),
                AnomalyKind::WatchPrevKv,
            ),
            ("missing prev_kv", |s| events_mut(s)[2].prev_kv = None, AnomalyKind::WatchPrevKv),
            ("invented event", |s| s.responses[0].events.push(Event::put("a", "x", 2)), AnomalyKind::WatchDuplicate),
            ("invented revision", |s| s.responses.push(response(vec![Event::put("a", "x", 8)])), AnomalyKind::WatchGap),
            ("wrong value", |s| events_mut(s)[0].value = "9".into(), AnomalyKind::WatchGap),
            (
                "late start",
                |s| {
                    s.responses.remove(0);
                },
                AnomalyKind::WatchResume,
            ),
        ];
        for (name, corrupt, kind) in cases {
            let mut s = good_stream();
            corrupt(&mut s);
            let result = check(&[s], &truth(), 0);
            assert_eq!(result.valid, Validity::Invalid, "{name}: {result}");
            assert!(result.has(kind), "{name}: want {kind:?}, got {result}");
        }
    }

    #[test]
    fn prev_kv_may_be_missing_after_compaction() {
        let mut s = good_stream();
        events_mut(&mut s)[2].prev_kv = None; // a@4, previous revision 3
        assert!(check(&[s.clone()], &truth(), 3).is_valid());
        assert!(!check(&[s], &truth(), 2).is_valid());
    }

    #[test]
    fn gap_report_is_readable() {
        let mut s = good_stream();
        s.responses.remove(3); // a@4
        let result = check(&[s], &truth(), 0);
        assert_eq!(result.anomalies.len(), 1, "{result}");
        assert_eq!(
            result.anomalies[0].description,
            "watch 1 on n2: 1 event(s) between revisions 1 and 9 never arrived: a@4"
        );
    }

    #[test]
    fn streams_survive_jsonl() {
        let streams = vec![good_stream()];
        let mut buf = Vec::new();
        write_jsonl(&mut buf, &streams).expect("write");
        let back: Vec<WatchStream> = read_jsonl(&buf[..]).expect("read");
        assert_eq!(back, streams);
    }
}
