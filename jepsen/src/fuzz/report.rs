//! What a fuzzing run found: the differences grouped into classes (method, etcd's answer, ours), each
//! with its count and its first request as an example; the crashes; and each session's totals. Printed as
//! a table and written as `fuzz.json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{json, Value};

use super::request::Request;
use super::rule::Rule36;

/// At most this many classes keep an entry of their own (messages that embed a size or a key could
/// otherwise make one class per request); later ones are only counted.
const MAX_CLASSES: usize = 1000;
/// At most this many crashes are kept with their requests.
const MAX_CRASHES: usize = 100;
/// How much of an example request the printed table shows.
const EXAMPLE_CHARS: usize = 300;

/// Where a request was: which seed, which auth mode, its number in the session (0 = the setup).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Seen {
    pub seed: u64,
    pub auth: bool,
    pub index: u64,
}

/// One kind of difference.
#[derive(Debug, Serialize)]
pub struct Class {
    pub method: String,
    pub etcd: String,
    pub ours: String,
    pub count: u64,
    pub first_seen: Seen,
    /// The first request of the class, in the protobuf JSON mapping (bytes in base64).
    pub example: Value,
    /// The same with bytes as text.
    pub example_readable: Value,
}

/// A server process that died under a request.
#[derive(Debug, Serialize)]
pub struct Crash {
    pub side: &'static str,
    pub seen: Seen,
    pub method: String,
    /// What the call in flight got back.
    pub answer: String,
    pub request: Value,
    pub request_readable: Value,
    /// The request before it (a crash may surface one request late).
    pub previous_request: Option<Value>,
    pub log: String,
    pub log_tail: String,
}

/// The totals of one session (one seed, one auth mode).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunTotals {
    pub seed: u64,
    pub auth: bool,
    /// Requests generated and sent (setup included).
    pub requests: u64,
    /// Answers (any gRPC status or response, not a timeout) from each side.
    pub etcd_answered: u64,
    pub ours_answered: u64,
    /// OK answers from each side.
    pub etcd_ok: u64,
    pub ours_ok: u64,
    pub differences: u64,
    /// Requests held back from etcd because etcd 3.5.1 crashes on them: its answer taken from the table,
    /// or (no answer known) not compared.
    pub from_table: u64,
    /// Requests whose etcd answer is etcd 3.6's rather than 3.5.1's, per rule.
    pub as_etcd36: AsEtcd36,
    pub etcd_crashes: u64,
    pub ours_crashed: bool,
    /// Users holding a token on each side after the auth setup.
    pub etcd_tokens: usize,
    pub ours_tokens: usize,
    pub secs: f64,
}

/// How many requests each rule of [`super::etcd36`] answered as etcd 3.6.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AsEtcd36 {
    /// Sent to etcd without their token, auth being off.
    pub token_ignored: u64,
    /// Watch creates etcd refused for auth: 3.6's watch id and cancel reason.
    pub watch_refused: u64,
    /// Watch creates with a negative start revision: canceled as compacted.
    pub watch_negative_start: u64,
    /// Watch creates from a key to the end that 3.5.1 took, of a user who may not read to the end: refused.
    pub watch_from_key: u64,
    /// RoleGrantPermission of a range 3.6 refuses: held back from etcd.
    pub grant_invalid_range: u64,
    /// Admin-only requests of a caller without the root role: held back, 3.6's refusal.
    pub admin_required: u64,
    /// Admin-only maintenance requests 3.5.1 refused unmapped: 3.6's mapped refusal.
    pub admin_mapped: u64,
    /// Requests without a user (no token, an unknown one) that 3.6 refuses: held back.
    pub user_required: u64,
    /// Lease requests refused for a lease key the user may not read or write: held back.
    pub lease_keys: u64,
    /// Txns refused for a top-level Put's `prev_kv` or lease: held back.
    pub txn_put: u64,
    /// Txns refused for something inside a nested Txn: held back.
    pub txn_nested: u64,
    /// UserAdd and UserChangePassword with a password past 72 bytes: held back, 3.6's bcrypt refusal.
    pub password_too_long: u64,
}

impl AsEtcd36 {
    /// Counts one request `rule` answered (the rules that hold a request back, or map an answer).
    pub fn add(&mut self, rule: Rule36) {
        let count = match rule {
            Rule36::GrantInvalidRange => &mut self.grant_invalid_range,
            Rule36::AdminRequired => &mut self.admin_required,
            Rule36::AdminMapped => &mut self.admin_mapped,
            Rule36::UserRequired => &mut self.user_required,
            Rule36::LeaseKeys => &mut self.lease_keys,
            Rule36::TxnPut => &mut self.txn_put,
            Rule36::TxnNested => &mut self.txn_nested,
            Rule36::PasswordTooLong => &mut self.password_too_long,
        };
        *count += 1;
    }
}

#[derive(Debug, Default)]
pub struct Report {
    classes: BTreeMap<(String, String, String), Class>,
    /// Differences beyond [`MAX_CLASSES`].
    unclassified: u64,
    /// Ours' answers to requests held back from etcd because it crashes on them (the "etcd" column
    /// holds the reason): not differences, nothing to compare them with.
    uncompared: BTreeMap<(String, String, String), Class>,
    crashes: Vec<Crash>,
    runs: Vec<RunTotals>,
    notes: Vec<String>,
}

impl Report {
    pub fn add_difference(&mut self, method: &str, etcd: String, ours: String, request: &Request, seen: Seen) {
        if !add_to(&mut self.classes, (method.to_string(), etcd, ours), request, seen) {
            self.unclassified += 1;
        }
    }

    /// Ours' answer to a request etcd did not get because it crashes on it.
    pub fn add_uncompared(&mut self, method: &str, reason: &str, ours: String, request: &Request, seen: Seen) {
        add_to(&mut self.uncompared, (method.to_string(), reason.to_string(), ours), request, seen);
    }

    pub fn add_crash(&mut self, crash: Crash) {
        if self.crashes.len() < MAX_CRASHES {
            self.crashes.push(crash);
        }
    }

    pub fn add_run(&mut self, run: RunTotals) {
        self.runs.push(run);
    }

    pub fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    pub fn differences(&self) -> u64 {
        self.runs.iter().map(|r| r.differences).sum()
    }

    pub fn ours_crashed(&self) -> bool {
        self.runs.iter().any(|r| r.ours_crashed)
    }

    /// The printed table: classes, crashes, notes, then one line per session.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let classes = by_count(&self.classes);
        let _ = writeln!(out, "DIFFERENCES: {} in {} classes", self.differences(), classes.len());
        for (number, class) in classes.iter().enumerate() {
            let _ = writeln!(out, "#{:<3} {}  x{}", number + 1, class.method, class.count);
            let _ = writeln!(out, "     etcd: {}", class.etcd);
            let _ = writeln!(out, "     ours: {}", class.ours);
            let _ = writeln!(out, "     e.g.: {}", truncate(&class.example_readable.to_string(), EXAMPLE_CHARS));
        }
        if self.unclassified > 0 {
            let _ = writeln!(out, "     ... and {} differences beyond {MAX_CLASSES} classes", self.unclassified);
        }
        for class in by_count(&self.uncompared) {
            let _ = writeln!(out, "NOT COMPARED  {}  x{}  ({})", class.method, class.count, class.etcd);
            let _ = writeln!(out, "     ours: {}", class.ours);
            let _ = writeln!(out, "     e.g.: {}", truncate(&class.example_readable.to_string(), EXAMPLE_CHARS));
        }
        for crash in &self.crashes {
            let _ = writeln!(
                out,
                "CRASH of {} (seed {}, auth {}, request {}): {} -> {}\n     request: {}\n     log: {}",
                crash.side,
                crash.seen.seed,
                on_off(crash.seen.auth),
                crash.seen.index,
                crash.method,
                crash.answer,
                truncate(&crash.request_readable.to_string(), EXAMPLE_CHARS),
                crash.log
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "NOTE: {note}");
        }
        let _ = writeln!(
            out,
            "{:>6} {:>4} {:>9} {:>15} {:>15} {:>11} {:>10} {:>12} {:>12} {:>8}",
            "seed",
            "auth",
            "requests",
            "etcd ok/answ",
            "ours ok/answ",
            "differences",
            "from table",
            "etcd crashes",
            "ours crashed",
            "secs"
        );
        for run in &self.runs {
            let _ = writeln!(
                out,
                "{:>6} {:>4} {:>9} {:>15} {:>15} {:>11} {:>10} {:>12} {:>12} {:>8.1}",
                run.seed,
                on_off(run.auth),
                run.requests,
                format!("{}/{}", run.etcd_ok, run.etcd_answered),
                format!("{}/{}", run.ours_ok, run.ours_answered),
                run.differences,
                run.from_table,
                run.etcd_crashes,
                if run.ours_crashed { "YES" } else { "no" },
                run.secs
            );
        }
        let _ = writeln!(
            out,
            "answered as etcd 3.6:\n{:>6} {:>4} {:>13} {:>13} {:>13} {:>14} {:>11} {:>6} {:>12} {:>6} {:>10} {:>7} {:>10}",
            "seed",
            "auth",
            "token ignored",
            "watch refused",
            "watch start<0",
            "watch from key",
            "grant range",
            "admin",
            "admin mapped",
            "user",
            "lease keys",
            "txn put",
            "txn nested"
        );
        for run in &self.runs {
            let counts = &run.as_etcd36;
            let _ = writeln!(
                out,
                "{:>6} {:>4} {:>13} {:>13} {:>13} {:>14} {:>11} {:>6} {:>12} {:>6} {:>10} {:>7} {:>10}",
                run.seed,
                on_off(run.auth),
                counts.token_ignored,
                counts.watch_refused,
                counts.watch_negative_start,
                counts.watch_from_key,
                counts.grant_invalid_range,
                counts.admin_required,
                counts.admin_mapped,
                counts.user_required,
                counts.lease_keys,
                counts.txn_put,
                counts.txn_nested
            );
        }
        out
    }

    /// `fuzz.json`.
    pub fn to_json(&self, options: &impl Serialize, secs: f64) -> Value {
        json!({
            "options": options,
            "duration_secs": secs,
            "differences": self.differences(),
            "ours_crashed": self.ours_crashed(),
            "runs": self.runs,
            "classes": by_count(&self.classes),
            "not_compared": by_count(&self.uncompared),
            "unclassified_differences": self.unclassified,
            "crashes": self.crashes,
            "notes": self.notes,
        })
    }
}

/// Counts the request in its class, or opens the class with it as the example; `false` when the class is
/// new and there are already [`MAX_CLASSES`].
fn add_to(
    classes: &mut BTreeMap<(String, String, String), Class>,
    key: (String, String, String),
    request: &Request,
    seen: Seen,
) -> bool {
    if let Some(class) = classes.get_mut(&key) {
        class.count += 1;
        return true;
    }
    if classes.len() >= MAX_CLASSES {
        return false;
    }
    let (method, etcd, ours) = key.clone();
    let example = request.json();
    let example_readable = request.readable();
    classes.insert(key, Class { method, etcd, ours, count: 1, first_seen: seen, example, example_readable });
    true
}

/// Most frequent first.
fn by_count(classes: &BTreeMap<(String, String, String), Class>) -> Vec<&Class> {
    let mut sorted: Vec<&Class> = classes.values().collect();
    sorted.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.method.cmp(&b.method)));
    sorted
}

fn on_off(auth: bool) -> &'static str {
    if auth {
        "on"
    } else {
        "off"
    }
}

/// The first `max` characters, with `...` when cut.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use prost_reflect::DynamicMessage;

    use super::super::catalog::Catalog;
    use super::super::request::Caller;
    use super::*;

    #[test]
    fn differences_group_into_classes_with_their_first_example() {
        let catalog = Catalog::load().expect("descriptors");
        let method = catalog.method("etcdserverpb.KV", "Put").expect("Put");
        let request = Request {
            method: method.clone(),
            message: DynamicMessage::new(method.input),
            caller: Caller::Nobody,
            invalid_utf8_field: None,
        };
        let mut report = Report::default();
        let seen = Seen { seed: 1, auth: false, index: 4 };
        for _ in 0..3 {
            report.add_difference("KV/Put", "A".into(), "B".into(), &request, seen);
        }
        report.add_difference("KV/Put", "A".into(), "C".into(), &request, seen);
        let mut as_etcd36 = AsEtcd36 { watch_refused: 2, watch_from_key: 3, ..AsEtcd36::default() };
        as_etcd36.add(Rule36::LeaseKeys);
        as_etcd36.add(Rule36::AdminMapped);
        as_etcd36.add(Rule36::AdminMapped);
        as_etcd36.add(Rule36::TxnNested);
        report.add_run(RunTotals { seed: 1, differences: 4, requests: 10, as_etcd36, ..RunTotals::default() });
        let text = report.render();
        let counts =
            "     1  off             0             2             0              3           0      0            2      0          1       0          1\n";
        assert!(text.ends_with(counts), "{text}");
        assert!(
            text.starts_with("DIFFERENCES: 4 in 2 classes\n#1   KV/Put  x3\n     etcd: A\n     ours: B\n"),
            "{text}"
        );
        let json = report.to_json(&json!({}), 1.0);
        assert_eq!(json["classes"][0]["count"], 3);
        assert_eq!(json["runs"][0]["as_etcd36"]["watch_refused"], 2);
        assert_eq!(json["runs"][0]["as_etcd36"]["watch_from_key"], 3);
        assert_eq!(json["runs"][0]["as_etcd36"]["admin_mapped"], 2);
        assert_eq!(json["runs"][0]["as_etcd36"]["txn_nested"], 1);
        assert_eq!(json["classes"][1]["ours"], "C");
        assert_eq!(json["classes"][0]["example"]["method"], "KV/Put");
        assert_eq!(truncate("abcdef", 3), "abc...");
    }
}
