//! How the kv-model checker describes keys, ranges, compares and events in its anomalies.

use std::fmt::Write as _;

use super::model::{effects, Effect};
use super::op::{Compare, Expect, Kv};
use crate::checker::watch::{Event, EventKind};

pub(super) fn describe_range(key: &str, range_end: &str) -> String {
    if range_end.is_empty() {
        key.to_string()
    } else {
        format!("[{key}, {range_end})")
    }
}

pub(super) fn show_kv(kv: &Kv) -> String {
    format!("{}={} (mod {}, create {}, version {})", kv.key, kv.value, kv.mod_revision, kv.create_revision, kv.version)
}

pub(super) fn show_kvs(kvs: &[Kv]) -> String {
    if kvs.is_empty() {
        return "nothing".to_string();
    }
    kvs.iter().map(show_kv).collect::<Vec<_>>().join(", ")
}

pub(super) fn show_reads(reads: &[Option<Kv>]) -> String {
    let shown: Vec<String> = reads.iter().map(|r| r.as_ref().map_or_else(|| "absent".to_string(), show_kv)).collect();
    format!("[{}]", shown.join("; "))
}

pub(super) fn show_compares(compares: &[Compare]) -> String {
    let shown: Vec<String> = compares
        .iter()
        .map(|c| match &c.expect {
            Expect::ModRevision(m) => format!("mod_revision({}) == {m}", c.key),
            Expect::Value(v) => format!("value({}) == {v:?}", c.key),
        })
        .collect();
    shown.join(" && ")
}

pub(super) fn show_effects(effects: &[Effect]) -> String {
    let mut text = String::new();
    for (i, (kind, key, value)) in effects.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        let _ = match kind {
            EventKind::Put => write!(text, "put {key}={value}"),
            EventKind::Delete => write!(text, "delete {key}"),
        };
    }
    text
}

pub(super) fn show_events(events: &[Event]) -> String {
    if events.is_empty() {
        return "no event under the prefix".to_string();
    }
    show_effects(&effects(events))
}
