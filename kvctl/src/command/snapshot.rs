//! `snapshot save <file>`: streams one member's backend (Maintenance.Snapshot) into `<file>.part`,
//! checks that the stream ended with its sha256 trailer, fsyncs and renames it into place, as
//! clientv3's snapshot manager does. Any failure removes the partial file and exits with
//! etcdctl's "interrupted" code.
//!
//! `snapshot status` reads the file offline ([`status`]); `snapshot restore` hands the file to `kvutl`,
//! the offline tool ([`restore`]).

pub mod restore;
mod status;

use std::io;
use std::path::Path;

use clap::Subcommand;
use kv_api::snapshot::go_io_text as go_io_error;
use proto::etcdserverpb as pb;
use tokio::fs::{self, File, OpenOptions};
use tokio::io::AsyncWriteExt;

use crate::error::{CliError, EXIT_INTERRUPTED};
use crate::global::GlobalFlags;

/// The size of the sha256 digest etcd appends to the backend, which itself is a whole number of
/// 512-byte sectors: a complete snapshot's size is 32 modulo 512.
const SHA256_LEN: u64 = 32;
const SECTOR: u64 = 512;

#[derive(Debug, Clone, Subcommand)]
pub enum SnapshotCommand {
    /// Stores an etcd node backend snapshot to a given file
    Save {
        /// <filename>
        args: Vec<String>,
    },
    /// Restores an etcd member snapshot to an etcd directory
    Restore {
        /// <filename>
        args: Vec<String>,
        #[command(flatten)]
        flags: restore::RestoreFlags,
    },
    /// Gets backend snapshot status of a given file
    Status {
        /// <filename>
        args: Vec<String>,
    },
}

impl SnapshotCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        match self {
            SnapshotCommand::Save { args } => {
                let path = save_path(args)?;
                let version = save(global, path).await.map_err(|e| CliError::new(EXIT_INTERRUPTED, e.message))?;
                // etcdctl 3.6 also names the server's storage version, when the server sent one.
                Ok(match crate::dialect::Dialect::current() {
                    crate::dialect::Dialect::V3_6 if !version.is_empty() => {
                        format!("Snapshot saved at {path}\nServer version {version}\n")
                    }
                    _ => format!("Snapshot saved at {path}\n"),
                })
            }
            SnapshotCommand::Restore { args, flags } => restore::run(args, flags).await,
            SnapshotCommand::Status { args } => status::run(args, global.write_out).await,
        }
    }
}

fn save_path(args: &[String]) -> Result<&str, CliError> {
    match args {
        [path] => Ok(path),
        _ => Err(CliError::bad_args("snapshot save expects one argument")),
    }
}

/// Saves the snapshot; returns the storage version the server named in its first message (etcd 3.6).
async fn save(global: &GlobalFlags, path: &str) -> Result<String, CliError> {
    if global.endpoints.len() != 1 {
        return Err(CliError::new(
            EXIT_INTERRUPTED,
            format!("snapshot must be requested to one selected node, not multiple [{}]", global.endpoints.join(" ")),
        ));
    }
    let part = format!("{path}.part");
    let result = save_through(global, path, &part).await;
    if result.is_err() {
        // Nothing to report if it was never created.
        let _ = fs::remove_file(&part).await;
    }
    result
}

async fn save_through(global: &GlobalFlags, path: &str, part: &str) -> Result<String, CliError> {
    let mut file = create_private(part)
        .await
        .map_err(|e| failure(format!("could not open {part} (open {part}: {})", go_io_error(&e))))?;
    let mut client = pb::maintenance_client::MaintenanceClient::new(global.connect().await?);
    let mut stream = client.snapshot(pb::SnapshotRequest {}).await?.into_inner();
    let mut size = 0u64;
    let mut version = None;
    while let Some(chunk) = stream.message().await? {
        version.get_or_insert_with(|| chunk.version.clone());
        file.write_all(&chunk.blob).await.map_err(|e| failure(format!("write {part}: {}", go_io_error(&e))))?;
        size += chunk.blob.len() as u64;
    }
    if size % SECTOR != SHA256_LEN {
        return Err(failure(format!("sha256 checksum not found [bytes: {size}]")));
    }
    file.sync_all().await.map_err(|e| failure(format!("sync {part}: {}", go_io_error(&e))))?;
    drop(file);
    fs::rename(part, path).await.map_err(|e| {
        failure(format!("could not rename {part} to {path} (rename {part} {path}: {})", go_io_error(&e)))
    })?;
    Ok(version.unwrap_or_default())
}

/// `<file>.part` with Go's `O_WRONLY|O_CREATE|O_TRUNC` and etcd's private file mode (0600).
async fn create_private(part: &str) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(Path::new(part)).await
}

fn failure(message: String) -> CliError {
    CliError::new(EXIT_INTERRUPTED, message)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(args: &[&str]) -> Vec<String> {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Snapshot(SnapshotCommand::Save { args }) = cli.command else { panic!("not snapshot save") };
        args
    }

    #[test]
    fn arguments_checked_like_etcdctl() {
        assert_eq!(save_path(&parse(&["kvctl", "snapshot", "save", "/tmp/x.db"])).ok(), Some("/tmp/x.db"));
        for args in [&["kvctl", "snapshot", "save"][..], &["kvctl", "snapshot", "save", "a", "b"]] {
            let err = save_path(&parse(args)).expect_err("one argument");
            assert_eq!((err.code, err.message.as_str()), (128, "snapshot save expects one argument"));
        }
        assert!(Cli::try_parse_from(["kvctl", "snapshot"]).is_err());
    }

    #[tokio::test]
    async fn refuses_several_endpoints() {
        let cli = Cli::try_parse_from(["kvctl", "--endpoints=a:1,b:2", "snapshot", "save", "x.db"]).expect("parses");
        let err = cli.run().await.expect_err("one endpoint only");
        assert_eq!(
            (err.code, err.message.as_str()),
            (EXIT_INTERRUPTED, "snapshot must be requested to one selected node, not multiple [a:1 b:2]")
        );
    }

    #[tokio::test]
    async fn an_unwritable_path_is_reported_like_go() {
        let cli = Cli::try_parse_from(["kvctl", "snapshot", "save", "/nonexistent/x.db"]).expect("parses");
        let err = cli.run().await.expect_err("no such directory");
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                EXIT_INTERRUPTED,
                "could not open /nonexistent/x.db.part (open /nonexistent/x.db.part: no such file or directory)"
            )
        );
    }
}
