//! The keyspace replayed from the ground truth: every key's value, `mod_revision`,
//! `create_revision` and `version` at every revision, and events reduced to the effects the checker
//! compares.

use std::collections::BTreeMap;

use super::op::{in_range, Compare, Expect, Kv, Txn, TxnWrite};
use crate::checker::watch::{Event, EventKind};
use crate::checker::{Anomaly, AnomalyKind};

/// One event as the model compares it: kind, key and value.
pub(super) type Effect = (EventKind, String, String);

/// The events a completed, successful txn made, from its recorded delete counts.
pub(super) fn expected_events(txn: &Txn) -> Vec<Effect> {
    let mut effects: Vec<Effect> = txn
        .success
        .iter()
        .filter_map(|w| match w {
            TxnWrite::Put(p) => Some((EventKind::Put, p.key.clone(), p.value.clone())),
            TxnWrite::Delete(d) if d.deleted.is_some_and(|n| n > 0) => {
                Some((EventKind::Delete, d.key.clone(), String::new()))
            }
            TxnWrite::Delete(_) => None,
        })
        .collect();
    effects.sort();
    effects
}

/// The effects of truth events, sorted, to compare with what an op asked for.
pub(super) fn effects(events: &[Event]) -> Vec<Effect> {
    let mut effects: Vec<Effect> = events.iter().map(|e| (e.kind, e.key.clone(), e.value.clone())).collect();
    effects.sort();
    effects
}

/// The keyspace at every revision, replayed from the ground truth.
pub struct Model {
    /// key -> (revision, the key from that revision on; `None` once deleted)
    keys: BTreeMap<String, Vec<(i64, Option<Kv>)>>,
    /// revision -> the events it made, in truth order
    pub(super) revisions: BTreeMap<i64, Vec<Event>>,
    /// The truth is complete up to this revision.
    pub(super) until: i64,
}

impl Model {
    /// Replays `truth` (complete up to `until`); anomalies are events that cannot have happened
    /// (revisions going back, deleting a missing key, two events on one key in one revision).
    pub fn replay(truth: &[Event], until: i64) -> (Model, Vec<Anomaly>) {
        let mut model = Model { keys: BTreeMap::new(), revisions: BTreeMap::new(), until };
        let mut anomalies = Vec::new();
        let mut last = 0;
        for event in truth {
            let at = format!("truth event {:?} {}@{}", event.kind, event.key, event.revision);
            if event.revision < last {
                anomalies.push(Anomaly::new(AnomalyKind::Malformed, format!("{at} follows revision {last}")));
                continue;
            }
            last = event.revision;
            let history = model.keys.entry(event.key.clone()).or_default();
            let before = history.last().and_then(|(_, kv)| kv.clone());
            if history.last().is_some_and(|(r, _)| *r == event.revision) {
                anomalies.push(Anomaly::new(
                    AnomalyKind::Unexpected,
                    format!("{at}: a second event on the key in one revision"),
                ));
                continue;
            }
            let after = match event.kind {
                EventKind::Put => Some(Kv {
                    key: event.key.clone(),
                    value: event.value.clone(),
                    mod_revision: event.revision,
                    create_revision: before.as_ref().map_or(event.revision, |b| b.create_revision),
                    version: before.as_ref().map_or(1, |b| b.version + 1),
                }),
                EventKind::Delete if before.is_none() => {
                    anomalies.push(Anomaly::new(AnomalyKind::Unexpected, format!("{at} deletes a missing key")));
                    continue;
                }
                EventKind::Delete => None,
            };
            history.push((event.revision, after));
            model.revisions.entry(event.revision).or_default().push(event.clone());
        }
        (model, anomalies)
    }

    pub fn until(&self) -> i64 {
        self.until
    }

    /// The key at `revision`, or `None` while it does not exist.
    pub fn get(&self, key: &str, revision: i64) -> Option<&Kv> {
        let history = self.keys.get(key)?;
        let n = history.partition_point(|(r, _)| *r <= revision);
        n.checked_sub(1).and_then(|i| history[i].1.as_ref())
    }

    /// Every existing key of the range at `revision`, in key order (what a Range returns).
    pub fn range(&self, start: &str, range_end: &str, revision: i64) -> Vec<Kv> {
        self.keys
            .keys()
            .filter(|k| in_range(start, range_end, k))
            .filter_map(|k| self.get(k, revision).cloned())
            .collect()
    }

    /// The events of one revision (none when it made no change under the prefix).
    pub fn events_at(&self, revision: i64) -> &[Event] {
        self.revisions.get(&revision).map_or(&[], Vec::as_slice)
    }

    pub(super) fn holds(&self, compare: &Compare, revision: i64) -> bool {
        let kv = self.get(&compare.key, revision);
        match &compare.expect {
            Expect::ModRevision(m) => kv.map_or(0, |kv| kv.mod_revision) == *m,
            Expect::Value(v) => kv.is_some_and(|kv| &kv.value == v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::kv_model::tests::{kv, truth};

    #[test]
    fn replay_tracks_versions_and_generations() {
        let (model, anomalies) = Model::replay(&truth(), 6);
        assert!(anomalies.is_empty(), "{anomalies:?}");
        assert_eq!(model.get("a", 4), Some(&kv("a", "3", 4, 2, 2)));
        assert_eq!(model.get("a", 5), None);
        assert_eq!(model.get("b", 6), Some(&kv("b", "4", 6, 6, 1)), "a new generation after the delete");
        assert_eq!(model.range("a", "c", 3).len(), 2);
        assert_eq!(model.events_at(4).len(), 2);
        let (_, bad) = Model::replay(&[Event::delete("a", 2), Event::put("a", "1", 3), Event::put("b", "2", 1)], 3);
        assert_eq!(bad.len(), 2, "{bad:?}");
    }
}
