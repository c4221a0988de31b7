//! `snapshot restore <file>`: a new member's data dir from a saved snapshot, with etcdctl 3.4's flags
//! and defaults.
//!
//! As etcdctl 3.5 hands restore to etcdutl, kvctl hands it to `kvutl snapshot restore` (the offline
//! tool, which links the member's storage so that kvctl need not): found beside the kvctl binary, else
//! on `PATH`. Its output and exit code are the command's.

use std::path::PathBuf;
use std::process::Command;

use clap::Args;

use crate::error::{CliError, EXIT_ERROR};

/// etcdctl's `snapshot restore` flags (3.4), with its defaults.
#[derive(Debug, Clone, Args)]
pub struct RestoreFlags {
    /// Path to the data directory
    #[arg(long, default_value = "")]
    pub data_dir: String,
    /// Path to the WAL directory (use --data-dir if none given); ignored: the restored Raft log is empty and lives in the data directory
    #[arg(long, default_value = "")]
    pub wal_dir: String,
    /// Initial cluster configuration for restore bootstrap
    #[arg(long, default_value = "default=http://localhost:2380")]
    pub initial_cluster: String,
    /// Initial cluster token for the etcd cluster during restore bootstrap
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    /// List of this member's peer URLs to advertise to the rest of the cluster
    #[arg(long, default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: String,
    /// Human-readable name for this member
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Ignore snapshot integrity hash value (required if copied from data directory)
    #[arg(long)]
    pub skip_hash_check: bool,
}

/// Runs kvutl's restore; prints nothing of its own, as etcdctl (whose only output is its log on stderr).
pub async fn run(args: &[String], flags: &RestoreFlags) -> Result<String, CliError> {
    let [path] = args else {
        return Err(CliError::bad_args("snapshot restore requires exactly one argument"));
    };
    let kvutl = kvutl_path()?;
    let args = kvutl_args(path, flags);
    let status = tokio::task::spawn_blocking(move || Command::new(&kvutl).args(&args).status())
        .await
        .map_err(|e| CliError::new(EXIT_ERROR, e.to_string()))?
        .map_err(|e| CliError::new(EXIT_ERROR, format!("running kvutl: {e}")))?;
    match status.code() {
        Some(0) => Ok(String::new()),
        // kvutl printed its own `Error:` line.
        code => Err(CliError::silent(code.and_then(|c| u8::try_from(c).ok()).unwrap_or(EXIT_ERROR))),
    }
}

/// `kvutl` beside this binary, else the first on `PATH`.
fn kvutl_path() -> Result<PathBuf, CliError> {
    let beside = std::env::current_exe().ok().map(|exe| exe.with_file_name("kvutl"));
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|dir| dir.join("kvutl")).collect::<Vec<_>>())
        .unwrap_or_default();
    beside.into_iter().chain(on_path).find(|path| path.is_file()).ok_or_else(|| {
        CliError::new(
            EXIT_ERROR,
            "snapshot restore needs kvutl, the offline tool, beside kvctl or on PATH (cargo build -p kvutl)",
        )
    })
}

fn kvutl_args(path: &str, flags: &RestoreFlags) -> Vec<String> {
    let mut args = vec![
        "snapshot".to_string(),
        "restore".to_string(),
        path.to_string(),
        format!("--name={}", flags.name),
        format!("--initial-cluster={}", flags.initial_cluster),
        format!("--initial-cluster-token={}", flags.initial_cluster_token),
        format!("--initial-advertise-peer-urls={}", flags.initial_advertise_peer_urls),
    ];
    for (flag, value) in [("--data-dir", &flags.data_dir), ("--wal-dir", &flags.wal_dir)] {
        if !value.is_empty() {
            args.push(format!("{flag}={value}"));
        }
    }
    if flags.skip_hash_check {
        args.push("--skip-hash-check".to_string());
    }
    args
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::snapshot::SnapshotCommand;
    use crate::command::{Cli, Command};

    fn parse(args: &[&str]) -> (Vec<String>, RestoreFlags) {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Snapshot(SnapshotCommand::Restore { args, flags }) = cli.command else { panic!("not restore") };
        (args, flags)
    }

    #[test]
    fn etcdctls_flags_and_defaults_reach_kvutl() {
        let (args, flags) = parse(&["kvctl", "snapshot", "restore", "s.db"]);
        assert_eq!(
            kvutl_args(&args[0], &flags),
            [
                "snapshot",
                "restore",
                "s.db",
                "--name=default",
                "--initial-cluster=default=http://localhost:2380",
                "--initial-cluster-token=etcd-cluster",
                "--initial-advertise-peer-urls=http://localhost:2380",
            ]
        );
        let (args, flags) = parse(&[
            "kvctl",
            "snapshot",
            "restore",
            "s.db",
            "--name=n1",
            "--data-dir=/tmp/d",
            "--initial-advertise-peer-urls=http://a:1,http://b:2",
            "--skip-hash-check",
        ]);
        let passed = kvutl_args(&args[0], &flags);
        assert!(passed.contains(&"--name=n1".to_string()));
        assert!(passed.contains(&"--data-dir=/tmp/d".to_string()));
        assert!(passed.contains(&"--initial-advertise-peer-urls=http://a:1,http://b:2".to_string()));
        assert_eq!(passed.last().map(String::as_str), Some("--skip-hash-check"));
    }

    #[tokio::test]
    async fn a_missing_file_argument_is_etcdctls_error() {
        let (_, flags) = parse(&["kvctl", "snapshot", "restore", "s.db", "--name=n1"]);
        let err = run(&[], &flags).await.expect_err("no file");
        assert_eq!((err.code, err.message.as_str()), (128, "snapshot restore requires exactly one argument"));
    }
}
