//! `snapshot restore <file>`: a new member's data dir from a saved snapshot, with etcdctl's flags and
//! defaults. The work is `raft_node::restore`'s: the data dir is the one our `raft-node` starts from.

use std::path::PathBuf;

use clap::Args;
use raft_node::restore::{restore, RestoreConfig};

use crate::error::{CliError, EXIT_ERROR};

/// etcdctl's `snapshot restore` flags (3.4), with its defaults.
#[derive(Debug, Clone, Args)]
pub struct RestoreFlags {
    /// Path to the data directory
    #[arg(long, default_value = "")]
    pub data_dir: String,
    /// Path to the WAL directory (use --data-dir if none given); ignored: our Raft log lives in the member's database
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

/// Restores and prints nothing, as etcdctl (whose only output is its log on stderr).
pub async fn run(args: &[String], flags: &RestoreFlags) -> Result<String, CliError> {
    let [path] = args else {
        return Err(CliError::bad_args("snapshot restore requires exactly one argument"));
    };
    let config = restore_config(path, flags);
    tokio::task::spawn_blocking(move || restore(&config))
        .await
        .map_err(|e| CliError::new(EXIT_ERROR, e.to_string()))?
        .map_err(|e| CliError::new(EXIT_ERROR, e.to_string()))?;
    Ok(String::new())
}

fn restore_config(path: &str, flags: &RestoreFlags) -> RestoreConfig {
    RestoreConfig {
        snapshot: PathBuf::from(path),
        name: flags.name.clone(),
        data_dir: (!flags.data_dir.is_empty()).then(|| PathBuf::from(&flags.data_dir)),
        initial_cluster: flags.initial_cluster.clone(),
        initial_cluster_token: flags.initial_cluster_token.clone(),
        initial_advertise_peer_urls: flags.initial_advertise_peer_urls.split(',').map(str::to_string).collect(),
        skip_hash_check: flags.skip_hash_check,
    }
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
    fn defaults_are_etcdctls() {
        let (args, flags) = parse(&["kvctl", "snapshot", "restore", "s.db"]);
        let config = restore_config(&args[0], &flags);
        assert_eq!(config.name, "default");
        assert_eq!(config.data_dir, None, "the restore makes it <name>.etcd");
        assert_eq!(config.initial_cluster, "default=http://localhost:2380");
        assert_eq!(config.initial_cluster_token, "etcd-cluster");
        assert_eq!(config.initial_advertise_peer_urls, vec!["http://localhost:2380".to_string()]);
        assert!(!config.skip_hash_check);

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
        let config = restore_config(&args[0], &flags);
        assert_eq!((config.name.as_str(), config.data_dir), ("n1", Some(PathBuf::from("/tmp/d"))));
        assert_eq!(config.initial_advertise_peer_urls, vec!["http://a:1".to_string(), "http://b:2".to_string()]);
        assert!(config.skip_hash_check);
    }

    #[tokio::test]
    async fn errors_are_etcdctls() {
        let (_, flags) = parse(&["kvctl", "snapshot", "restore", "s.db", "--name=n1"]);
        let err = run(&[], &flags).await.expect_err("no file");
        assert_eq!((err.code, err.message.as_str()), (128, "snapshot restore requires exactly one argument"));
        let err = run(&["s.db".into()], &flags).await.expect_err("name not in the cluster");
        assert_eq!(
            (err.code, err.message.as_str()),
            (1, "couldn't find local name \"n1\" in the initial cluster configuration")
        );
    }
}
