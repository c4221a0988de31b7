//! The command line: global flags plus one subcommand per etcdctl verb, one file each.

pub mod alarm;
pub mod auth;
pub mod compaction;
pub mod completion;
pub mod defrag;
pub mod del;
pub mod downgrade;
pub mod elect;
pub mod endpoint;
/// Running a user's command (`watch -- cmd`, `lock name cmd`).
pub(crate) mod exec;
pub mod get;
pub mod lease;
pub mod lock;
pub mod make_mirror;
pub mod member;
pub mod move_leader;
pub mod put;
pub mod role;
pub mod snapshot;
pub mod txn;
pub mod user;
pub mod version;
pub mod watch;

use clap::{Parser, Subcommand};
use proto::etcdserverpb as pb;

use crate::error::CliError;
use crate::global::{Conn, GlobalFlags, WriteOut};

#[derive(Debug, Parser)]
#[command(name = "kvctl", about = "A simple command line client for etcd3.", disable_version_flag = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalFlags,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Gets the key or a range of keys
    Get(get::GetCommand),
    /// Puts the given key into the store
    Put(put::PutCommand),
    /// Removes the specified key or range of keys [key, range_end)
    Del(del::DelCommand),
    /// Txn processes all the requests in one transaction
    Txn(txn::TxnCommand),
    /// Compacts the event history in etcd
    Compaction(compaction::CompactionCommand),
    /// Watches events stream on keys or prefixes
    Watch(watch::WatchCommand),
    /// Lease related commands
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Membership related commands
    #[command(subcommand)]
    Member(member::MemberCommand),
    /// Endpoint related commands
    #[command(subcommand)]
    Endpoint(endpoint::EndpointCommand),
    /// Transfers leadership to another etcd cluster member.
    MoveLeader(move_leader::MoveLeaderCommand),
    /// Alarm related commands
    #[command(subcommand)]
    Alarm(alarm::AlarmCommand),
    /// Defragments the storage of the etcd members with given endpoints
    Defrag(defrag::DefragCommand),
    /// Downgrade related commands (etcdctl 3.6)
    #[command(subcommand)]
    Downgrade(downgrade::DowngradeCommand),
    /// Manages etcd node snapshots
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Acquires a named lock
    Lock(lock::LockCommand),
    /// Observes and participates in leader election
    Elect(elect::ElectCommand),
    /// Makes a mirror at the destination etcd cluster
    MakeMirror(make_mirror::MakeMirrorCommand),
    /// Enable or disable authentication
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// User related commands
    #[command(subcommand)]
    User(user::UserCommand),
    /// Role related commands
    #[command(subcommand)]
    Role(role::RoleCommand),
    /// Prints the version of etcdctl
    Version,
    /// Generate completion script
    Completion(completion::CompletionCommand),
}

impl Cli {
    /// Runs the command and returns what goes to stdout.
    pub async fn run(&self) -> Result<Vec<u8>, CliError> {
        let global = &self.global;
        crate::dialect::Dialect::from_env()?;
        global.validate()?;
        let text = match &self.command {
            Command::Auth(cmd) => return cmd.run(global).await,
            Command::User(cmd) => return cmd.run(global).await,
            Command::Role(cmd) => return cmd.run(global).await,
            // Only the Auth verbs print protobuf so far.
            _ if global.write_out == WriteOut::Protobuf => {
                return Err(CliError::bad_feature("unsupported output format"))
            }
            Command::Get(cmd) => cmd.run(global).await,
            Command::Put(cmd) => cmd.run(global).await,
            Command::Del(cmd) => cmd.run(global).await,
            Command::Txn(cmd) => cmd.run(global).await,
            Command::Compaction(cmd) => cmd.run(global).await,
            Command::Watch(cmd) => cmd.run(global).await,
            Command::Lease(cmd) => cmd.run(global).await,
            Command::Member(cmd) => cmd.run(global).await,
            Command::Endpoint(cmd) => cmd.run(global).await,
            Command::MoveLeader(cmd) => cmd.run(global).await,
            Command::Alarm(cmd) => cmd.run(global).await,
            Command::Defrag(cmd) => cmd.run(global).await,
            Command::Downgrade(cmd) => cmd.run(global).await,
            Command::Snapshot(cmd) => cmd.run(global).await,
            Command::Lock(cmd) => cmd.run(global).await,
            Command::Elect(cmd) => cmd.run(global).await,
            Command::MakeMirror(cmd) => cmd.run(global).await,
            Command::Version => Ok(version::output()),
            Command::Completion(cmd) => cmd.run(global).await,
        };
        text.map(String::into_bytes)
    }
}

pub(crate) async fn kv_client(global: &GlobalFlags) -> Result<pb::kv_client::KvClient<Conn>, CliError> {
    Ok(pb::kv_client::KvClient::new(global.connect().await?))
}

pub(crate) async fn lease_client(global: &GlobalFlags) -> Result<pb::lease_client::LeaseClient<Conn>, CliError> {
    Ok(pb::lease_client::LeaseClient::new(global.connect().await?))
}

pub(crate) async fn auth_client(global: &GlobalFlags) -> Result<pb::auth_client::AuthClient<Conn>, CliError> {
    Ok(pb::auth_client::AuthClient::new(global.connect().await?))
}

pub(crate) async fn cluster_client(global: &GlobalFlags) -> Result<pb::cluster_client::ClusterClient<Conn>, CliError> {
    Ok(pb::cluster_client::ClusterClient::new(global.connect().await?))
}

/// How many positional arguments a key-range verb takes: `del` refuses a third, `get` ignores it
/// (etcdctl's `getGetOp` never looks past `args[1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtraArgs {
    Refused,
    Ignored,
}

/// The `[key, range_end)` a get or del covers, applying `--prefix`/`--from-key` as clientv3 does.
pub(crate) fn key_range(
    verb: &str,
    args: &[String],
    extra: ExtraArgs,
    prefix: bool,
    from_key: bool,
) -> Result<(Vec<u8>, Vec<u8>), CliError> {
    if args.is_empty() || (extra == ExtraArgs::Refused && args.len() > 2) {
        return Err(CliError::bad_args(format!(
            "{verb} command needs one argument as key and an optional argument as range_end"
        )));
    }
    if prefix && from_key {
        return Err(CliError::bad_args("`--prefix` and `--from-key` cannot be set at the same time, choose one"));
    }
    let mut key = args[0].as_bytes().to_vec();
    let mut range_end = Vec::new();
    if let Some(end) = args.get(1) {
        if prefix || from_key {
            return Err(CliError::bad_args(
                "too many arguments, only accept one argument when `--prefix` or `--from-key` is set",
            ));
        }
        range_end = end.as_bytes().to_vec();
    }
    if prefix {
        if key.is_empty() {
            key = vec![0];
            range_end = vec![0];
        } else {
            range_end = crate::prefix::prefix_end(&key);
        }
    }
    if from_key {
        if key.is_empty() {
            key = vec![0];
        }
        range_end = vec![0];
    }
    Ok((key, range_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ranges() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            key_range("get", &args(&["a"]), ExtraArgs::Ignored, false, false).ok(),
            Some((b"a".to_vec(), vec![]))
        );
        assert_eq!(
            key_range("get", &args(&["a", "c"]), ExtraArgs::Ignored, false, false).ok(),
            Some((b"a".to_vec(), b"c".to_vec()))
        );
        assert_eq!(
            key_range("get", &args(&["a"]), ExtraArgs::Ignored, true, false).ok(),
            Some((b"a".to_vec(), b"b".to_vec()))
        );
        assert_eq!(key_range("get", &args(&[""]), ExtraArgs::Ignored, true, false).ok(), Some((vec![0], vec![0])));
        assert_eq!(
            key_range("get", &args(&["a"]), ExtraArgs::Ignored, false, true).ok(),
            Some((b"a".to_vec(), vec![0]))
        );
        assert_eq!(key_range("get", &args(&[]), ExtraArgs::Ignored, false, false).map_err(|e| e.code), Err(128));
        assert_eq!(key_range("get", &args(&["a", "b"]), ExtraArgs::Ignored, true, false).map_err(|e| e.code), Err(128));
        assert_eq!(key_range("del", &args(&["a"]), ExtraArgs::Refused, true, true).map_err(|e| e.code), Err(128));
        assert_eq!(
            key_range("del", &args(&["a", "b", "c"]), ExtraArgs::Refused, false, false).map_err(|e| e.code),
            Err(128)
        );
        assert_eq!(
            key_range("get", &args(&["a", "b", "c"]), ExtraArgs::Ignored, false, false).ok(),
            Some((b"a".to_vec(), b"b".to_vec()))
        );
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cli = Cli::try_parse_from([
            "kvctl",
            "--endpoints=http://a:1,b:2",
            "get",
            "foo",
            "--prefix",
            "-w",
            "json",
            "--rev=3",
            "--limit",
            "2",
            "--sort-by=MODIFY",
            "--order=DESCEND",
        ])
        .expect("parses");
        assert_eq!(cli.global.endpoints, ["http://a:1", "b:2"]);
        assert_eq!(cli.global.write_out, crate::global::WriteOut::Json);
        let Command::Get(get) = cli.command else { panic!("not get") };
        assert!(get.prefix);
        assert_eq!((get.rev, get.limit), (3, 2));
        assert_eq!(get.sort_by, "MODIFY");
    }
}
