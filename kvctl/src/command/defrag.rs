//! `defrag [--cluster]`: asks every endpoint in turn to defragment its backend. Each endpoint gets
//! its own line; one that fails does not stop the others, and the command then fails without an
//! `Error:` line, as etcdctl's does.

use clap::Args;
use proto::etcdserverpb as pb;

use super::endpoint::{endpoints, finish, on_endpoint, ClusterFlag};
use crate::error::{CliError, EXIT_ERROR};
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct DefragCommand {
    #[command(flatten)]
    pub scope: ClusterFlag,
    /// Optional. If present, defragments a data directory not in use by etcd.
    #[arg(long, default_value = "")]
    pub data_dir: String,
}

impl DefragCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        if !self.data_dir.is_empty() {
            // etcdctl opens the bbolt file itself; kvctl has no bbolt, and our server's data dir
            // is not one anyway.
            eprintln!(
                "Failed to defragment etcd data[{}] (kvctl cannot defragment a data directory offline)",
                self.data_dir
            );
            return Err(CliError::silent(EXIT_ERROR));
        }
        let mut stdout = String::new();
        let mut failed = false;
        for endpoint in endpoints(global, self.scope).await? {
            let started = std::time::Instant::now();
            let result = on_endpoint(global, &endpoint, |conn| async move {
                pb::maintenance_client::MaintenanceClient::new(conn).defragment(pb::DefragmentRequest {}).await
            })
            .await;
            match result {
                Ok(_) => stdout.push_str(&match crate::dialect::Dialect::current() {
                    crate::dialect::Dialect::V3_4 => format!("Finished defragmenting etcd member[{endpoint}]\n"),
                    // etcdctl 3.6 says how long it took, as Go prints a duration.
                    crate::dialect::Dialect::V3_6 => format!(
                        "Finished defragmenting etcd member[{endpoint}]. took {}\n",
                        crate::printer::simple::go_duration(started.elapsed())
                    ),
                }),
                Err(err) => {
                    eprintln!("Failed to defragment etcd member[{endpoint}] ({})", err.message);
                    failed = true;
                }
            }
        }
        finish(stdout, failed.then(|| CliError::silent(EXIT_ERROR)))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(args: &[&str]) -> DefragCommand {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Defrag(cmd) = cli.command else { panic!("not defrag: {:?}", cli.command) };
        cmd
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cmd = parse(&["kvctl", "defrag"]);
        assert_eq!((cmd.scope.cluster, cmd.data_dir.as_str()), (false, ""));
        let cmd = parse(&["kvctl", "--endpoints=a:1", "defrag", "--cluster"]);
        assert!(cmd.scope.cluster);
        let cmd = parse(&["kvctl", "defrag", "--data-dir", "/var/lib/etcd"]);
        assert_eq!(cmd.data_dir, "/var/lib/etcd");
        assert!(Cli::try_parse_from(["kvctl", "defrag", "--nope"]).is_err());
    }

    #[tokio::test]
    async fn an_offline_data_dir_is_refused_without_an_error_line() {
        let cli = Cli::try_parse_from(["kvctl", "defrag", "--data-dir=/nonexistent"]).expect("parses");
        let Command::Defrag(cmd) = &cli.command else { panic!("not defrag") };
        let err = cmd.run(&cli.global).await.expect_err("refused");
        assert!(err.is_silent());
        assert_eq!(err.code, EXIT_ERROR);
    }
}
