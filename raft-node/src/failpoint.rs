//! etcd's failpoints that this member honours, set as etcd's failpoint builds take them: the
//! `GOFAIL_FAILPOINTS` variable, `name=term` pairs separated by `;`.
//!
//! Only `raftBeforeSave` is here: before a member makes its new log entries durable (etcd: before its
//! WAL save), the term `sleep(N)` waits N milliseconds, as a slow disk would, on the leader and on
//! followers alike. It lets tests and fault injection show what a slow disk does to a cluster. `off`
//! turns a failpoint off. Any other name or term refuses the member's start in one line: a failpoint
//! this member cannot honour must not look set.

use std::sync::OnceLock;
use std::time::Duration;

/// The variable etcd's failpoint builds read.
pub const VARIABLE: &str = "GOFAIL_FAILPOINTS";

/// What the failpoints say, once read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Failpoints {
    /// `raftBeforeSave=sleep(N)`.
    pub before_save: Option<Duration>,
}

static SET: OnceLock<Failpoints> = OnceLock::new();

/// Reads [`VARIABLE`] once, for the whole process; the one line naming what is wrong otherwise.
pub fn init_from_env() -> Result<(), String> {
    let value = std::env::var(VARIABLE).unwrap_or_default();
    let failpoints = parse(&value)?;
    // A second call (tests start several members in one process) keeps the first reading.
    let _ = SET.set(failpoints);
    Ok(())
}

/// `raftBeforeSave`: blocks the calling thread for the set time, if any. Called where a log append's
/// sync starts.
pub fn before_save() {
    if let Some(pause) = SET.get().and_then(|set| set.before_save) {
        std::thread::sleep(pause);
    }
}

/// Parses `name=term;name=term`.
pub fn parse(value: &str) -> Result<Failpoints, String> {
    let mut failpoints = Failpoints::default();
    for pair in value.split(';').map(str::trim).filter(|pair| !pair.is_empty()) {
        let Some((name, term)) = pair.split_once('=') else {
            return Err(format!("{VARIABLE}: {pair:?} is not name=term"));
        };
        let name = name.trim();
        if name != "raftBeforeSave" {
            return Err(format!("{VARIABLE}: failpoint {name:?} is not supported here (raftBeforeSave)"));
        }
        failpoints.before_save = match term.trim() {
            "off" => None,
            term => Some(sleep_term(term).ok_or_else(|| {
                format!(
                    "{VARIABLE}: failpoint {name:?}: term {term:?} is not supported here (sleep(milliseconds) or off)"
                )
            })?),
        };
    }
    Ok(failpoints)
}

/// `sleep(N)`: N milliseconds, as gofail reads an integer argument.
fn sleep_term(term: &str) -> Option<Duration> {
    let millis = term.strip_prefix("sleep(")?.strip_suffix(')')?.trim().parse().ok()?;
    Some(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sleep_and_off_and_names_what_it_cannot_honour() {
        assert_eq!(parse("").unwrap(), Failpoints::default());
        assert_eq!(parse("raftBeforeSave=sleep(700)").unwrap().before_save, Some(Duration::from_millis(700)));
        assert_eq!(parse("raftBeforeSave=sleep(5); raftBeforeSave=off").unwrap().before_save, None);
        let err = parse("raftAfterSave=sleep(5)").unwrap_err();
        assert!(err.contains("\"raftAfterSave\" is not supported"), "{err}");
        let err = parse("raftBeforeSave=panic").unwrap_err();
        assert!(err.contains("term \"panic\""), "{err}");
        assert!(parse("raftBeforeSave=sleep(1s)").is_err());
        assert!(parse("raftBeforeSave").is_err());
    }
}
