//! `endpoint health|status|hashkv [--cluster]`: per-endpoint queries, asked of every `--endpoints`
//! entry (or, with `--cluster`, of every client URL in the member list).
//!
//! Like etcdctl, a failing endpoint does not stop the others: `status` and `hashkv` report it on
//! stderr, print what the others answered and then fail; `health` reports it as unhealthy. The
//! helpers other multi-endpoint verbs (`defrag`, `move-leader`) share live here too.

use std::future::Future;
use std::io::Write;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use proto::etcdserverpb as pb;
use tokio::task::JoinSet;

use super::cluster_client;
use crate::error::{CliError, EXIT_ERROR};
use crate::global::{Conn, GlobalFlags};
use crate::printer::{simple, EndpointHealth, Printer};

/// What clientv3 reports when a request, or dialling its endpoint, outlives the command timeout.
const DEADLINE_EXCEEDED: &str = "context deadline exceeded";
/// The pause between two dials of an endpoint that refused the connection.
const REDIAL_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Subcommand)]
pub enum EndpointCommand {
    /// Checks the healthiness of endpoints specified in `--endpoints` flag
    Health {
        #[command(flatten)]
        scope: ClusterFlag,
    },
    /// Prints out the status of endpoints specified in `--endpoints` flag
    Status {
        #[command(flatten)]
        scope: ClusterFlag,
    },
    /// Prints the KV history hash for each endpoint in --endpoints
    Hashkv {
        /// maximum revision to hash (default: all revisions)
        #[arg(long, default_value_t = 0)]
        rev: i64,
        #[command(flatten)]
        scope: ClusterFlag,
    },
}

/// `--cluster`, shared by `endpoint *` and `defrag`.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct ClusterFlag {
    /// use all endpoints from the cluster member list
    #[arg(long)]
    pub cluster: bool,
}

impl EndpointCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let printer = Printer { format: global.write_out, hex: global.hex, value_only: false };
        match self {
            EndpointCommand::Health { scope } => health(global, printer, endpoints(global, *scope).await?).await,
            EndpointCommand::Status { scope } => status(global, printer, endpoints(global, *scope).await?).await,
            EndpointCommand::Hashkv { rev, scope } => {
                hashkv(global, printer, *rev, endpoints(global, *scope).await?).await
            }
        }
    }
}

/// Every endpoint answers concurrently; the list is in the order the answers arrive, as etcdctl's.
async fn health(global: &GlobalFlags, printer: Printer, endpoints: Vec<String>) -> Result<String, CliError> {
    let mut probes = JoinSet::new();
    for endpoint in endpoints {
        let global = global.clone();
        probes.spawn(async move { probe_health(&global, endpoint).await });
    }
    let mut list = Vec::new();
    while let Some(probe) = probes.join_next().await {
        list.push(probe.map_err(|e| CliError::new(EXIT_ERROR, e.to_string()))?);
    }
    let (stdout, stderr) = printer.endpoint_health(&list);
    eprint!("{stderr}");
    let failure = list.iter().any(|h| !h.error.is_empty()).then(|| CliError::new(EXIT_ERROR, "unhealthy cluster"));
    finish(stdout, failure)
}

/// etcdctl's health probe: a linearizable Get of the key `health`, which has to go through
/// consensus. `permission denied` still proves that, so it counts as healthy.
async fn probe_health(global: &GlobalFlags, endpoint: String) -> EndpointHealth {
    let start = Instant::now();
    let request = pb::RangeRequest { key: b"health".to_vec(), ..Default::default() };
    let result =
        on_endpoint(global, &endpoint, |conn| async move { pb::kv_client::KvClient::new(conn).range(request).await })
            .await;
    let took = simple::go_duration(start.elapsed());
    let error = match result {
        Ok(_) => String::new(),
        Err(err) if err.message == "etcdserver: permission denied" => String::new(),
        Err(err) => err.message,
    };
    EndpointHealth { endpoint, health: error.is_empty(), took, error }
}

async fn status(global: &GlobalFlags, printer: Printer, endpoints: Vec<String>) -> Result<String, CliError> {
    let mut statuses = Vec::new();
    let mut failed = false;
    for endpoint in endpoints {
        match on_endpoint(global, &endpoint, |conn| async move {
            pb::maintenance_client::MaintenanceClient::new(conn).status(pb::StatusRequest {}).await
        })
        .await
        {
            Ok(resp) => statuses.push((endpoint, resp)),
            Err(err) => {
                eprintln!("Failed to get the status of endpoint {endpoint} ({})", err.message);
                failed = true;
            }
        }
    }
    // etcdctl exits here with a bare `os.Exit`: the lines above were the whole explanation.
    finish(printer.endpoint_status(&statuses)?, failed.then(|| CliError::silent(EXIT_ERROR)))
}

async fn hashkv(global: &GlobalFlags, printer: Printer, rev: i64, endpoints: Vec<String>) -> Result<String, CliError> {
    let mut hashes = Vec::new();
    let mut last_error = None;
    for endpoint in endpoints {
        let request = pb::HashKvRequest { revision: rev };
        match on_endpoint(global, &endpoint, |conn| async move {
            pb::maintenance_client::MaintenanceClient::new(conn).hash_kv(request).await
        })
        .await
        {
            Ok(resp) => hashes.push((endpoint, resp)),
            Err(err) => {
                eprintln!("Failed to get the hash of endpoint {endpoint} ({})", err.message);
                last_error = Some(err);
            }
        }
    }
    finish(printer.endpoint_hashkv(&hashes)?, last_error)
}

/// The endpoints a multi-endpoint command asks: `--endpoints`, or with `--cluster` the client
/// URLs of every member in the member list.
pub(crate) async fn endpoints(global: &GlobalFlags, scope: ClusterFlag) -> Result<Vec<String>, CliError> {
    if !scope.cluster {
        return Ok(global.endpoints.clone());
    }
    let members = within_deadline(global, async {
        let mut client = cluster_client(global).await?;
        Ok(client.member_list(pb::MemberListRequest { linearizable: false }).await?.into_inner())
    })
    .await
    .map_err(|e| {
        CliError::new(EXIT_ERROR, format!("failed to fetch endpoints from etcd cluster member list: {}", e.message))
    })?;
    Ok(members.members.into_iter().flat_map(|m| m.client_ur_ls).collect())
}

/// Sends one request to `endpoint` alone, as clientv3's per-endpoint calls do. grpc-go keeps
/// dialling an endpoint that refuses connections until the command's deadline, so an unreachable
/// endpoint fails with `context deadline exceeded` after `--command-timeout`, as in etcdctl.
pub(crate) async fn on_endpoint<T, F, Fut>(global: &GlobalFlags, endpoint: &str, call: F) -> Result<T, CliError>
where
    F: FnOnce(Conn) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    within_deadline(global, async {
        let conn = dial_until_connected(global, endpoint).await;
        Ok(call(conn).await?.into_inner())
    })
    .await
}

async fn dial_until_connected(global: &GlobalFlags, endpoint: &str) -> Conn {
    loop {
        if let Ok(conn) = global.connect_to(endpoint).await {
            return conn;
        }
        tokio::time::sleep(REDIAL_INTERVAL).await;
    }
}

/// Runs `work` within `--command-timeout` (etcdctl's `commandCtx`).
async fn within_deadline<T>(
    global: &GlobalFlags,
    work: impl Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::time::timeout(global.command_timeout, work)
        .await
        .unwrap_or_else(|_| Err(CliError::new(EXIT_ERROR, DEADLINE_EXCEEDED)))
}

/// Ends a multi-endpoint command: with a failure, what the other endpoints answered is still
/// printed before the command fails.
pub(crate) fn finish(stdout: String, failure: Option<CliError>) -> Result<String, CliError> {
    let Some(err) = failure else { return Ok(stdout) };
    let mut out = std::io::stdout().lock();
    // A closed pipe is not worth hiding the error for.
    let _ = out.write_all(stdout.as_bytes());
    let _ = out.flush();
    Err(err)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(args: &[&str]) -> EndpointCommand {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Endpoint(cmd) = cli.command else { panic!("not endpoint: {:?}", cli.command) };
        cmd
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cases = [
            (&["kvctl", "endpoint", "health"][..], "health", false, 0),
            (&["kvctl", "endpoint", "health", "--cluster"], "health", true, 0),
            (&["kvctl", "-w", "json", "endpoint", "status", "--cluster"], "status", true, 0),
            (&["kvctl", "endpoint", "hashkv", "--rev=7", "--cluster"], "hashkv", true, 7),
            (&["kvctl", "endpoint", "hashkv"], "hashkv", false, 0),
        ];
        for (args, verb, cluster, want_rev) in cases {
            let (got_verb, scope, rev) = match parse(args) {
                EndpointCommand::Health { scope } => ("health", scope, 0),
                EndpointCommand::Status { scope } => ("status", scope, 0),
                EndpointCommand::Hashkv { rev, scope } => ("hashkv", scope, rev),
            };
            assert_eq!((got_verb, scope.cluster, rev), (verb, cluster, want_rev), "{args:?}");
        }
        assert!(Cli::try_parse_from(["kvctl", "endpoint", "hashkv", "--rev=x"]).is_err());
        assert!(Cli::try_parse_from(["kvctl", "endpoint", "nope"]).is_err());
    }

    #[tokio::test]
    async fn without_cluster_the_endpoints_flag_is_used() {
        let cli = Cli::try_parse_from(["kvctl", "--endpoints=a:1,b:2", "endpoint", "status"]).expect("parses");
        let got = endpoints(&cli.global, ClusterFlag::default()).await.expect("no dial needed");
        assert_eq!(got, ["a:1", "b:2"]);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_fails_at_the_command_deadline() {
        let cli = Cli::try_parse_from(["kvctl", "--command-timeout=300ms", "endpoint", "status"]).expect("parses");
        let err = on_endpoint(&cli.global, "127.0.0.1:1", |conn| async move {
            pb::maintenance_client::MaintenanceClient::new(conn).status(pb::StatusRequest {}).await
        })
        .await
        .expect_err("nothing listens on port 1");
        assert_eq!((err.code, err.message.as_str()), (EXIT_ERROR, DEADLINE_EXCEEDED));
    }
}
