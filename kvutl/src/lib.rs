//! `kvutl`: an etcdutl look-alike for what needs no running member, as etcd moved the offline work out
//! of etcdctl into etcdutl.
//!
//! - `snapshot status FILE`: hash, revision, total keys, total size and storage version of an etcd
//!   `snapshot.db` (etcd's or ours: they are the same format), as etcdutl 3.6 prints them.
//! - `snapshot restore FILE --name --data-dir --initial-cluster ...`: a new member's data dir holding the
//!   file's store ([`raft_node::restore`]).
//! - `defrag --data-dir DIR`, `hashkv --data-dir DIR [--rev N]`: the store of a stopped member
//!   ([`raft_node::offline`]).
//! - `version`.
//!
//! # Layout
//!
//! - this file: the command line and dispatch, with etcdutl's exit codes;
//! - [`printer`]: etcdutl's `simple`, `fields`, `json` and `table` outputs.

pub mod printer;

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use kvctl::error::{CliError, EXIT_ERROR};
use raft_node::restore::{restore, RestoreConfig};

use printer::Format;

#[derive(Debug, Parser)]
#[command(
    name = "kvutl",
    about = "An etcdutl-compatible offline tool for etcd snapshot files and stopped members' data dirs"
)]
pub struct Cli {
    /// set the output format (fields, json, protobuf, simple, table)
    #[arg(short = 'w', long = "write-out", default_value = "simple", global = true)]
    pub write_out: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manages etcd node snapshots
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Defragments the storage of a stopped member
    Defrag {
        /// Required. Defragments a data directory not in use by a member.
        #[arg(long)]
        data_dir: String,
    },
    /// Prints the KV history hash of a stopped member's store
    Hashkv {
        /// The member's data directory (etcdutl takes its database file here)
        path: Option<String>,
        /// The member's data directory
        #[arg(long)]
        data_dir: Option<String>,
        /// maximum revision to hash (default: latest revision)
        #[arg(long, default_value_t = 0)]
        rev: i64,
    },
    /// Prints the version of kvutl
    Version,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Gets backend snapshot status of a given file
    Status { args: Vec<String> },
    /// Restores an etcd member snapshot to a data directory
    Restore {
        args: Vec<String>,
        #[command(flatten)]
        flags: EtcdutlRestoreFlags,
    },
}

/// etcdutl's `snapshot restore` flags, with its defaults: etcdctl's, and three of its own.
#[derive(Debug, Clone, Args)]
pub struct EtcdutlRestoreFlags {
    #[command(flatten)]
    pub etcdctl: kvctl::command::snapshot::restore::RestoreFlags,
    /// Initial memory map size of the database in bytes; accepted for etcdutl's sake (no memory map here)
    #[arg(long, default_value_t = 10 * 1024 * 1024 * 1024)]
    pub initial_memory_map_size: u64,
    /// How much to increase the latest revision after restore
    #[arg(long, default_value_t = 0)]
    pub bump_revision: u64,
    /// Mark the latest revision after restore as the point of scheduled compaction (required if --bump-revision > 0, disallowed otherwise)
    #[arg(long)]
    pub mark_compacted: bool,
}

impl Cli {
    /// Runs the command; returns what goes to stdout.
    pub fn run(&self) -> Result<String, CliError> {
        let format = Format::parse(&self.write_out)?;
        match &self.command {
            Command::Snapshot(SnapshotCommand::Status { args }) => {
                let [path] = args.as_slice() else {
                    return Err(CliError::bad_args("snapshot status requires exactly one argument"));
                };
                let status = kv_api::snapshot::status(Path::new(path)).map_err(|e| error(e.to_string()))?;
                format.status(&status)
            }
            Command::Snapshot(SnapshotCommand::Restore { args, flags }) => {
                let [path] = args.as_slice() else {
                    return Err(CliError::bad_args("snapshot restore requires exactly one argument"));
                };
                if (flags.bump_revision == 0) == flags.mark_compacted {
                    return Err(CliError::bad_args("--mark-compacted required if --revision-bump > 0"));
                }
                let restored = restore(&restore_config(path, flags)).map_err(|e| error(e.to_string()))?;
                // etcdutl logs the restore on stderr; stdout stays empty.
                eprintln!(
                    "restored snapshot {path} into {}: revision {} (compacted {}), member {:x} of cluster {:x}",
                    restored.data_dir.display(),
                    restored.revision,
                    restored.compacted,
                    restored.identity.member_id,
                    restored.identity.cluster_id
                );
                Ok(String::new())
            }
            Command::Defrag { data_dir } => {
                raft_node::offline::defrag(Path::new(data_dir))
                    .map_err(|e| error(format!("Failed to defragment etcd data[{data_dir}] ({e})")))?;
                Ok(String::new())
            }
            Command::Hashkv { path, data_dir, rev } => {
                let dir = match (path, data_dir) {
                    (Some(dir), None) | (None, Some(dir)) => dir,
                    _ => {
                        return Err(CliError::bad_args("hashkv takes one data directory, as an argument or --data-dir"))
                    }
                };
                let hash = raft_node::offline::hash_kv(Path::new(dir), *rev).map_err(|e| error(e.to_string()))?;
                format.hash_kv(&hash)
            }
            Command::Version => {
                Ok(format!("etcdutl version: {}\nAPI version: {}\n", kv_api::ETCD_VERSION, api_version()))
            }
        }
    }
}

/// The API version etcd prints beside its own: major.minor.
fn api_version() -> String {
    kv_api::ETCD_VERSION.splitn(3, '.').take(2).collect::<Vec<_>>().join(".")
}

fn error(message: String) -> CliError {
    CliError::new(EXIT_ERROR, message)
}

fn restore_config(path: &str, flags: &EtcdutlRestoreFlags) -> RestoreConfig {
    let (bump_revision, flags) = (flags.bump_revision, &flags.etcdctl);
    RestoreConfig {
        snapshot: PathBuf::from(path),
        name: flags.name.clone(),
        data_dir: (!flags.data_dir.is_empty()).then(|| PathBuf::from(&flags.data_dir)),
        initial_cluster: flags.initial_cluster.clone(),
        initial_cluster_token: flags.initial_cluster_token.clone(),
        initial_advertise_peer_urls: flags.initial_advertise_peer_urls.split(',').map(str::to_string).collect(),
        skip_hash_check: flags.skip_hash_check,
        bump_revision,
    }
}

#[cfg(test)]
mod tests {
    use kvctl::error::EXIT_BAD_ARGS;

    use super::*;

    fn run(args: &[&str]) -> Result<String, CliError> {
        Cli::try_parse_from(args).expect("parses").run()
    }

    #[test]
    fn arguments_are_checked_as_etcdutl_checks_them() {
        let err = run(&["kvutl", "snapshot", "restore"]).expect_err("no file");
        assert_eq!((err.code, err.message.as_str()), (EXIT_BAD_ARGS, "snapshot restore requires exactly one argument"));
        for flags in [&["--bump-revision=5"][..], &["--mark-compacted"]] {
            let args: Vec<&str> = ["kvutl", "snapshot", "restore", "s.db"].iter().chain(flags).copied().collect();
            let err = run(&args).expect_err("bump without mark");
            assert_eq!(
                (err.code, err.message.as_str()),
                (EXIT_BAD_ARGS, "--mark-compacted required if --revision-bump > 0")
            );
        }
        let err = run(&["kvutl", "snapshot", "status", "a", "b"]).expect_err("two files");
        assert_eq!((err.code, err.message.as_str()), (EXIT_BAD_ARGS, "snapshot status requires exactly one argument"));
        let err = run(&["kvutl", "snapshot", "status", "/nonexistent/x.db"]).expect_err("missing");
        assert_eq!((err.code, err.message.as_str()), (EXIT_ERROR, "open /nonexistent/x.db: no such file or directory"));
        let err = run(&["kvutl", "-w", "protobuf", "snapshot", "status", "x.db"]).expect_err("protobuf");
        assert_eq!(err.message, "protobuf not supported as output format");
        assert_eq!(run(&["kvutl", "version"]).expect("version"), "etcdutl version: 3.6.14\nAPI version: 3.6\n");
    }

    #[test]
    fn restore_defaults_are_etcdutls() {
        let cli = Cli::try_parse_from(["kvutl", "snapshot", "restore", "s.db", "--name=m1"]).expect("parses");
        let Command::Snapshot(SnapshotCommand::Restore { flags, .. }) = &cli.command else { panic!("restore") };
        let config = restore_config("s.db", flags);
        // etcdutl's default cluster names "default", whatever --name says.
        assert_eq!(config.initial_cluster, "default=http://localhost:2380");
        assert_eq!((config.initial_cluster_token.as_str(), config.data_dir), ("etcd-cluster", None));
        assert_eq!(config.initial_advertise_peer_urls, vec!["http://localhost:2380".to_string()]);
        let err = run(&["kvutl", "snapshot", "restore", "s.db", "--name=m1"]).expect_err("m1 is not in the cluster");
        assert_eq!(err.message, "couldn't find local name \"m1\" in the initial cluster configuration");
    }
}
