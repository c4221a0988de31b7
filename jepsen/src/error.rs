//! The crate's error type: histories that cannot be read or that break the recording rules.

/// Errors from reading, writing or pairing a history, and from running a test (processes, the
/// firewall, the cluster). Checkers never fail with an error: what they cannot decide they report as
/// [`crate::Validity::Unknown`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("history I/O: {0}")]
    Io(#[from] std::io::Error),

    #[error("history line {line}: {source}")]
    Json { line: usize, source: serde_json::Error },

    #[error("cannot encode history op: {0}")]
    Encode(serde_json::Error),

    /// The ops do not form a well-formed concurrent history (see [`crate::history::pair`]).
    #[error("history op {index} (process {process}): {reason}")]
    Malformed { index: usize, process: u64, reason: String },

    /// A file, directory or process the runner needs could not be created or run.
    #[error("{what}: {source}")]
    System { what: String, source: std::io::Error },

    /// An `nft` command failed.
    #[error("nft failed ({status}): {stderr}")]
    Nft { status: String, stderr: String },

    /// The run refuses to go on: not in a private network namespace, a member that does not come up.
    #[error("{0}")]
    Setup(String),
}

impl Error {
    /// An I/O error with what was being done.
    pub fn system(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::System { what, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
