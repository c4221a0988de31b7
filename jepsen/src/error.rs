//! The crate's error type: histories that cannot be read or that break the recording rules.

/// Errors from reading, writing or pairing a history. Checkers never fail with an error: what they
/// cannot decide they report as [`crate::Validity::Unknown`].
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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
