//! Tracing the truth's revisions that no `ok` write claimed to the indeterminate (`info`) writes
//! that could have made them: anything left over was unexpected, and a write seen twice was
//! duplicated.

use std::collections::{HashMap, HashSet};

use super::description::show_events;
use super::model::{effects, Effect, Model};
use super::op::KvOp;
use crate::checker::watch::{Event, EventKind};
use crate::checker::{Anomaly, AnomalyKind};
use crate::history::{OpPair, OpType};

/// Traces every revision of the truth that no `ok` write claimed to one indeterminate write.
pub(super) fn attribute(
    pairs: &[OpPair<KvOp>],
    model: &Model,
    claimed: &HashMap<i64, usize>,
    anomalies: &mut Vec<Anomaly>,
) {
    // value -> the position of the op that put it (values are unique per run)
    let mut by_value: HashMap<&str, usize> = HashMap::new();
    for (i, pair) in pairs.iter().enumerate() {
        for put in pair.invoke.payload.puts() {
            by_value.entry(put.value.as_str()).or_insert(i);
        }
    }
    let mut used: HashSet<usize> = claimed.values().copied().collect();
    for (&revision, events) in &model.revisions {
        if claimed.contains_key(&revision) {
            continue;
        }
        let shown = show_events(events);
        let put_value = events.iter().find(|e| e.kind == EventKind::Put).map(|e| e.value.as_str());
        let candidate = match put_value {
            Some(value) => {
                let Some(&i) = by_value.get(value) else {
                    anomalies.push(Anomaly::new(
                        AnomalyKind::Unexpected,
                        format!("revision {revision} ({shown}) puts value {value:?}, which no op wrote"),
                    ));
                    continue;
                };
                Some(i)
            }
            // Only deletes: any indeterminate op that could delete exactly these keys.
            None => pairs.iter().enumerate().position(|(i, pair)| {
                !used.contains(&i)
                    && pair.outcome() == OpType::Info
                    && pair.invoke.payload.puts().is_empty()
                    && events.iter().all(|e| pair.invoke.payload.deletes().contains(&e.key.as_str()))
            }),
        };
        let Some(i) = candidate else {
            anomalies.push(Anomaly::new(
                AnomalyKind::Unexpected,
                format!("revision {revision} ({shown}) was made by no invoked, unclaimed write"),
            ));
            continue;
        };
        let pair = &pairs[i];
        let op = &pair.invoke.payload;
        let name = format!("op {}", pair.index);
        let problem = match pair.outcome() {
            OpType::Fail => Some((AnomalyKind::Unexpected, format!("{name} was recorded as failed"))),
            OpType::Ok => match pair.revision() {
                // The op's own revision does not hold exactly its writes: already reported as lost.
                Some(r) if r == revision => continue,
                Some(r) if claimed.get(&r) == Some(&i) => {
                    Some((AnomalyKind::Duplicated, format!("{name} took effect at revision {r} already")))
                }
                Some(r) => Some((AnomalyKind::Unexpected, format!("{name} was acknowledged at revision {r} instead"))),
                None => Some((AnomalyKind::Unexpected, format!("{name} was acknowledged without a revision"))),
            },
            _ if used.contains(&i) => {
                Some((AnomalyKind::Duplicated, format!("{name} already explains an earlier revision")))
            }
            _ if !fits(op, events) => {
                Some((AnomalyKind::Unexpected, format!("its content does not match {name} ({op:?})")))
            }
            _ => None,
        };
        match problem {
            Some((kind, why)) if op.is_write() => {
                anomalies.push(Anomaly::new(kind, format!("revision {revision} ({shown}): {why}")));
            }
            Some((kind, why)) => {
                anomalies.push(Anomaly::new(kind, format!("revision {revision} ({shown}): {why} (not a write)")));
            }
            None => {
                used.insert(i);
            }
        }
    }
}

/// Whether an indeterminate op could have made exactly these events: all of its puts, and deletes
/// only of keys it deletes.
fn fits(op: &KvOp, events: &[Event]) -> bool {
    let mut puts: Vec<Effect> = op.puts().iter().map(|p| (EventKind::Put, p.key.clone(), p.value.clone())).collect();
    puts.sort();
    let made: Vec<Effect> = effects(events).into_iter().filter(|e| e.0 == EventKind::Put).collect();
    let deletes = op.deletes();
    puts == made && events.iter().filter(|e| e.kind == EventKind::Delete).all(|e| deletes.contains(&e.key.as_str()))
}
