//! Crashes in member logs: Rust panics, aborts, stack overflows and fatal log levels (Jepsen's
//! `:crash` check). A member may survive a panic in a spawned task, so the log is the only witness.

use crate::checker::{Anomaly, AnomalyKind, CheckResult};

/// Case-insensitive fragments that mark a crash anywhere in a line.
pub const CRASH_MARKERS: &[&str] = &[
    "panicked at",
    "panic in a function that cannot unwind",
    "fatal runtime error",
    "fatal error",
    "has overflowed its stack",
    "sigsegv",
    "sigabrt",
    "sigbus",
    "double free",
    "\"level\":\"fatal\"",
    "\"level\":\"panic\"",
    "level=fatal",
    "level=panic",
];

/// Case-insensitive line starts that mark a crash (Go's and glibc's formats).
pub const CRASH_PREFIXES: &[&str] = &["panic: ", "fatal: ", "fatal "];

/// At most this many crash lines are reported per member.
const MAX_PER_MEMBER: usize = 20;
/// Reported lines are cut to this many characters.
const MAX_LINE: usize = 240;

/// Whether `line` reports a crash.
pub fn is_crash_line(line: &str) -> bool {
    let lower = line.to_lowercase();
    if lower.contains("non-fatal") {
        return false;
    }
    let trimmed = lower.trim_start();
    CRASH_MARKERS.iter().any(|m| lower.contains(m)) || CRASH_PREFIXES.iter().any(|p| trimmed.starts_with(p))
}

/// The crash lines of one member's log.
pub fn scan(member: &str, log: &str) -> Vec<Anomaly> {
    let hits: Vec<(usize, &str)> = log.lines().enumerate().filter(|(_, line)| is_crash_line(line)).collect();
    let mut anomalies: Vec<Anomaly> = hits
        .iter()
        .take(MAX_PER_MEMBER)
        .map(|(i, line)| {
            let shown: String = line.trim().chars().take(MAX_LINE).collect();
            Anomaly::new(AnomalyKind::Panic, format!("{member} log line {}: {shown}", i + 1))
        })
        .collect();
    if hits.len() > MAX_PER_MEMBER {
        anomalies.push(Anomaly::new(
            AnomalyKind::Panic,
            format!("{member}: {} more crash lines", hits.len() - MAX_PER_MEMBER),
        ));
    }
    anomalies
}

/// Scans every member's log; `logs` holds (member, log text).
pub fn check(logs: &[(String, String)]) -> CheckResult {
    let anomalies = logs.iter().flat_map(|(member, log)| scan(member, log)).collect();
    CheckResult::from_anomalies("logs", anomalies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_lines() {
        let cases = [
            ("thread 'tokio-runtime-worker' panicked at raft-node/src/apply.rs:88:9:", true),
            ("thread 'main' has overflowed its stack", true),
            ("fatal runtime error: stack overflow", true),
            (r#"{"level":"fatal","msg":"failed to open WAL"}"#, true),
            ("panic: runtime error: index out of range", true),
            ("2026-01-01T00:00:00Z  WARN raft_node: non-fatal error talking to peer", false),
            ("2026-01-01T00:00:00Z  INFO raft_node: became leader term=3", false),
            ("2026-01-01T00:00:00Z ERROR kv_api: request failed: panic recovery disabled", false),
        ];
        for (line, want) in cases {
            assert_eq!(is_crash_line(line), want, "{line}");
        }
    }

    #[test]
    fn reports_member_and_line() {
        let logs = vec![
            ("n1".to_string(), "INFO started\nINFO ready\n".to_string()),
            ("n2".to_string(), "INFO started\nthread 'apply' panicked at src/x.rs:1:1:\nboom\n".to_string()),
        ];
        let result = check(&logs);
        assert_eq!(result.valid, crate::Validity::Invalid);
        assert_eq!(result.anomalies.len(), 1);
        assert_eq!(result.anomalies[0].description, "n2 log line 2: thread 'apply' panicked at src/x.rs:1:1:");
        assert!(check(&logs[..1]).is_valid());
    }

    #[test]
    fn caps_reports_per_member() {
        let log = "panic: again\n".repeat(25);
        let anomalies = scan("n3", &log);
        assert_eq!(anomalies.len(), MAX_PER_MEMBER + 1);
        assert_eq!(anomalies[MAX_PER_MEMBER].description, "n3: 5 more crash lines");
    }
}
