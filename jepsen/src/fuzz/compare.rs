//! Deciding whether two answers are the same: the gRPC code and message (after normalizing what truly
//! varies between two servers), a stream's first response, and for two OKs how far each store's revision
//! moved since the last comparable answer (so a write that one side applies and the other does not shows
//! up even when both say OK).

use tonic::Code;

use super::call::Answer;

/// The text an answer is compared and reported by: `OK`, `InvalidArgument: etcdserver: ...`, `timeout`.
pub fn describe(answer: &Answer) -> String {
    match answer {
        Answer::Ok { detail: Some(detail), .. } => format!("OK ({detail})"),
        Answer::Ok { detail: None, .. } => "OK".to_string(),
        Answer::Status { code, message } => format!("{}: {}", code_name(*code), normalize(message)),
        Answer::Timeout => "timeout".to_string(),
        Answer::Ended => "stream ended without a response".to_string(),
        Answer::Garbled(err) => format!("OK, but the response does not decode: {err}"),
    }
}

/// gRPC's names for the codes (`InvalidArgument`), as tonic's `Debug` prints them.
fn code_name(code: Code) -> String {
    format!("{code:?}")
}

/// Member and cluster ids are random per server; where a message carries one (16 hex digits, as etcd
/// prints ids) it becomes `<id>`. Nothing else is rewritten: every other difference is a real one.
pub fn normalize(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.len() == 16 && word.chars().all(|c| c.is_ascii_hexdigit()) && word.chars().any(|c| c.is_ascii_digit()) {
            out.push_str("<id>");
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in message.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The verdict on one pair of answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Same,
    /// The texts the report shows for each side.
    Differ {
        etcd: String,
        ours: String,
    },
}

/// Follows each side's header revision over OK answers. The two stores start empty and take the same
/// writes, so each OK answer must move both revisions by the same amount. After answers that differed,
/// the stores may have drifted for a reason already reported: the next OK pair only re-synchronizes.
#[derive(Debug, Default)]
pub struct Drift {
    last: Option<(i64, i64)>,
}

impl Drift {
    /// Forgets the last revisions (after a difference, a request etcd did not see, a restart).
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// The two revision steps when they differ.
    fn step(&mut self, etcd: i64, ours: i64) -> Option<(i64, i64)> {
        let previous = self.last.replace((etcd, ours));
        let (last_etcd, last_ours) = previous?;
        let steps = (etcd - last_etcd, ours - last_ours);
        (steps.0 != steps.1).then_some(steps)
    }
}

/// Compares etcd's answer with ours.
pub fn compare(etcd: &Answer, ours: &Answer, drift: &mut Drift) -> Verdict {
    let (etcd_text, ours_text) = (describe(etcd), describe(ours));
    if etcd_text != ours_text {
        drift.reset();
        return Verdict::Differ { etcd: etcd_text, ours: ours_text };
    }
    if let (Answer::Ok { revision: Some(etcd_rev), .. }, Answer::Ok { revision: Some(ours_rev), .. }) = (etcd, ours) {
        // Some headers carry no store revision at all (etcd's MemberList): 0, on both sides or on one.
        match (*etcd_rev == 0, *ours_rev == 0) {
            (true, true) => return Verdict::Same,
            (true, false) | (false, true) => {
                let text = |rev: i64| format!("OK (header revision {})", if rev == 0 { "0" } else { "set" });
                return Verdict::Differ { etcd: text(*etcd_rev), ours: text(*ours_rev) };
            }
            (false, false) => {}
        }
        if let Some((etcd_step, ours_step)) = drift.step(*etcd_rev, *ours_rev) {
            return Verdict::Differ {
                etcd: format!("OK (revision moved by {etcd_step})"),
                ours: format!("OK (revision moved by {ours_step})"),
            };
        }
    }
    Verdict::Same
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(revision: i64) -> Answer {
        Answer::Ok { revision: Some(revision), detail: None }
    }

    fn status(code: Code, message: &str) -> Answer {
        Answer::Status { code, message: message.to_string() }
    }

    #[test]
    fn codes_and_messages_decide_and_only_ids_are_normalized() {
        let mut drift = Drift::default();
        let empty = status(Code::InvalidArgument, "etcdserver: key is not provided");
        assert_eq!(compare(&empty, &empty.clone(), &mut drift), Verdict::Same);
        assert_eq!(
            compare(&empty, &ok(3), &mut drift),
            Verdict::Differ { etcd: "InvalidArgument: etcdserver: key is not provided".into(), ours: "OK".into() }
        );
        let member = |id: &str| status(Code::NotFound, &format!("etcdserver: member {id} not found"));
        assert_eq!(compare(&member("8e9e05c52164694d"), &member("1c7d0a2b3e4f5061"), &mut drift), Verdict::Same);
        assert_ne!(compare(&Answer::Timeout, &ok(1), &mut drift), Verdict::Same);
        assert_eq!(
            normalize("grpc: received message larger than max (1572900 vs. 2097152)"),
            "grpc: received message larger than max (1572900 vs. 2097152)"
        );
    }

    #[test]
    fn ok_answers_must_move_both_revisions_alike() {
        let mut drift = Drift::default();
        assert_eq!(compare(&ok(1), &ok(1), &mut drift), Verdict::Same);
        assert_eq!(compare(&ok(2), &ok(2), &mut drift), Verdict::Same);
        // Ours applied a write etcd did not.
        assert_eq!(
            compare(&ok(2), &ok(3), &mut drift),
            Verdict::Differ { etcd: "OK (revision moved by 0)".into(), ours: "OK (revision moved by 1)".into() }
        );
        // From there on the offset is the new normal.
        assert_eq!(compare(&ok(3), &ok(4), &mut drift), Verdict::Same);
        // After a difference, the next pair only re-synchronizes.
        let _ = compare(&status(Code::NotFound, "x"), &ok(5), &mut drift);
        assert_eq!(compare(&ok(3), &ok(5), &mut drift), Verdict::Same);
        // A header without a revision (MemberList) neither counts as a step nor resets the offset.
        assert_eq!(compare(&ok(0), &ok(0), &mut drift), Verdict::Same);
        assert_eq!(compare(&ok(3), &ok(5), &mut drift), Verdict::Same);
        assert_ne!(compare(&ok(0), &ok(5), &mut drift), Verdict::Same);
        let watch = |d: &str| Answer::Ok { revision: None, detail: Some(d.to_string()) };
        assert_ne!(compare(&watch("created=true"), &watch("created=false"), &mut drift), Verdict::Same);
    }
}
