//! Which etcdctl kvctl speaks where etcdctl 3.4 and 3.6 print differently: 3.6 (the line Kubernetes ships
//! today) unless `KVCTL_ETCDCTL_VERSION=3.4` asks for 3.4's output, for scripts written against it.
//!
//! What 3.6 changed that kvctl follows: `version`; `endpoint status` (storage version, DB size in use and
//! its share, quota, downgrade target and state); `endpoint hashkv` (the hash revision); `defrag` (how long
//! each member took); `snapshot save` (the server's storage version); the fields format (no `"Revision"`
//! line unless it is positive, and `--hex` IDs); the json format's `member list --hex`.

use std::sync::OnceLock;

use crate::error::CliError;

/// The variable that picks the dialect.
pub const VARIABLE: &str = "KVCTL_ETCDCTL_VERSION";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    V3_4,
    V3_6,
}

impl Dialect {
    fn parse(value: Option<&str>) -> Result<Dialect, CliError> {
        match value {
            None | Some("" | "3.6") => Ok(Dialect::V3_6),
            Some("3.4") => Ok(Dialect::V3_4),
            Some(other) => Err(CliError::bad_args(format!("{VARIABLE} must be 3.4 or 3.6, not {other:?}"))),
        }
    }

    /// The dialect `KVCTL_ETCDCTL_VERSION` asks for, or why its value is refused.
    pub fn from_env() -> Result<Dialect, CliError> {
        Dialect::parse(std::env::var(VARIABLE).ok().as_deref())
    }

    /// The process' dialect (3.6 when the variable is refused: `Cli::run` reports that first).
    pub fn current() -> Dialect {
        static CURRENT: OnceLock<Dialect> = OnceLock::new();
        *CURRENT.get_or_init(|| Dialect::from_env().unwrap_or(Dialect::V3_6))
    }

    /// The etcdctl release whose output kvctl reproduces, and its API version.
    pub fn versions(self) -> (&'static str, &'static str) {
        match self {
            Dialect::V3_4 => ("3.4.23", "3.4"),
            Dialect::V3_6 => ("3.6.14", "3.6"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_picks_34_or_36_and_nothing_else() {
        assert_eq!(Dialect::parse(None).ok(), Some(Dialect::V3_6));
        assert_eq!(Dialect::parse(Some("3.4")).ok(), Some(Dialect::V3_4));
        assert_eq!(Dialect::parse(Some("3.6")).ok(), Some(Dialect::V3_6));
        let err = Dialect::parse(Some("3.5")).expect_err("3.5");
        assert_eq!((err.code, err.message.as_str()), (128, "KVCTL_ETCDCTL_VERSION must be 3.4 or 3.6, not \"3.5\""));
    }
}
