//! The error a command ends with: etcdctl's exit code and the text it prints after `Error: `.

use std::fmt;

/// etcdctl's exit codes (`etcdctl/ctlv3/command/error.go`).
pub const EXIT_ERROR: u8 = 1;
pub const EXIT_BAD_CONNECTION: u8 = 2;
pub const EXIT_INVALID_INPUT: u8 = 3;
pub const EXIT_BAD_FEATURE: u8 = 4;
pub const EXIT_INTERRUPTED: u8 = 5;
pub const EXIT_BAD_ARGS: u8 = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    pub fn bad_args(message: impl Into<String>) -> Self {
        Self::new(EXIT_BAD_ARGS, message)
    }

    pub fn bad_feature(message: impl Into<String>) -> Self {
        Self::new(EXIT_BAD_FEATURE, message)
    }

    /// An exit without an `Error:` line: etcdctl's bare `os.Exit(code)` after it already printed
    /// what went wrong (`endpoint status` and `defrag` print one line per failed endpoint).
    pub fn silent(code: u8) -> Self {
        Self::new(code, "")
    }

    /// Whether `main` prints no `Error:` line for this error (see [`CliError::silent`]).
    pub fn is_silent(&self) -> bool {
        self.message.is_empty()
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// clientv3 turns etcd's own errors (`etcdserver: …`, `mvcc: …`) into plain errors whose text is
/// the status message; anything else keeps grpc-go's `rpc error: code = … desc = …` form.
impl From<tonic::Status> for CliError {
    fn from(status: tonic::Status) -> Self {
        let message = status.message();
        let text = if message.starts_with("etcdserver:") || message.starts_with("mvcc:") {
            message.to_string()
        } else {
            format!("rpc error: code = {:?} desc = {}", status.code(), message)
        };
        Self::new(EXIT_ERROR, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mapping() {
        let cases = [
            (
                tonic::Status::out_of_range("etcdserver: mvcc: required revision has been compacted"),
                "etcdserver: mvcc: required revision has been compacted",
            ),
            (
                tonic::Status::unavailable("connection refused"),
                "rpc error: code = Unavailable desc = connection refused",
            ),
        ];
        for (status, want) in cases {
            let err = CliError::from(status);
            assert_eq!(err.code, EXIT_ERROR);
            assert_eq!(err.message, want);
        }
    }
}
