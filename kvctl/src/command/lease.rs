//! `lease grant <ttl>`, `lease revoke <id>`, `lease timetolive <id> [--keys]`, `lease list`,
//! `lease keep-alive [--once] <id>`. Lease ids are hexadecimal on the command line and in the
//! simple output, decimal in json and fields, as in etcdctl.

mod keep_alive;

use std::num::{IntErrorKind, ParseIntError};

use clap::Subcommand;
use proto::etcdserverpb as pb;

use super::lease_client;
use crate::error::{CliError, EXIT_BAD_CONNECTION, EXIT_ERROR};
use crate::global::GlobalFlags;
use crate::printer::fields::go_quote;
use crate::printer::Printer;

/// Every verb collects its arguments itself so that a wrong count gets etcdctl's message.
#[derive(Debug, Clone, Subcommand)]
pub enum LeaseCommand {
    /// Creates leases
    Grant {
        #[arg(value_name = "ttl")]
        args: Vec<String>,
    },
    /// Revokes leases
    Revoke {
        #[arg(value_name = "leaseID")]
        args: Vec<String>,
    },
    /// Get lease information
    Timetolive {
        /// Get keys attached to this lease
        #[arg(long)]
        keys: bool,
        #[arg(value_name = "leaseID")]
        args: Vec<String>,
    },
    /// List all active leases
    List {
        /// etcdctl ignores arguments here.
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Keeps leases alive (renew)
    KeepAlive {
        /// Resets the keep-alive time to its original value and exits immediately
        #[arg(long)]
        once: bool,
        #[arg(value_name = "leaseID")]
        args: Vec<String>,
    },
}

impl LeaseCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let printer = Printer { format: global.write_out, hex: global.hex, value_only: false };
        match self {
            LeaseCommand::Grant { args } => grant(global, printer, args).await,
            LeaseCommand::Revoke { args } => revoke(global, printer, args).await,
            LeaseCommand::Timetolive { keys, args } => time_to_live(global, printer, args, *keys).await,
            LeaseCommand::List { .. } => list(global, printer).await,
            LeaseCommand::KeepAlive { once, args } => {
                let [arg] = args.as_slice() else {
                    return Err(CliError::bad_args("lease keep-alive command needs lease ID as argument"));
                };
                let id = lease_id(arg)?;
                if *once {
                    keep_alive::once(global, printer, id).await
                } else {
                    keep_alive::stream(global, printer, id).await
                }
            }
        }
    }
}

async fn grant(global: &GlobalFlags, printer: Printer, args: &[String]) -> Result<String, CliError> {
    let [arg] = args else { return Err(CliError::bad_args("lease grant command needs TTL argument")) };
    let ttl =
        arg.parse::<i64>().map_err(|e| CliError::bad_args(format!("bad TTL ({})", go_parse_int_error(arg, &e))))?;
    let mut client = lease_client(global).await?;
    let resp = client
        .lease_grant(pb::LeaseGrantRequest { ttl, id: 0 })
        .await
        .map_err(|status| wrapped("failed to grant lease", status))?
        .into_inner();
    printer.lease_grant(&resp)
}

async fn revoke(global: &GlobalFlags, printer: Printer, args: &[String]) -> Result<String, CliError> {
    let [arg] = args else { return Err(CliError::bad_args("lease revoke command needs 1 argument")) };
    let id = lease_id(arg)?;
    let mut client = lease_client(global).await?;
    let resp = client
        .lease_revoke(pb::LeaseRevokeRequest { id })
        .await
        .map_err(|status| wrapped("failed to revoke lease", status))?
        .into_inner();
    printer.lease_revoke(id, &resp)
}

async fn time_to_live(global: &GlobalFlags, printer: Printer, args: &[String], keys: bool) -> Result<String, CliError> {
    let [arg] = args else { return Err(CliError::bad_args("lease timetolive command needs lease ID as argument")) };
    // etcdctl dials before it reads the id here (Go evaluates the receiver first).
    let mut client = lease_client(global).await?;
    let id = lease_id(arg)?;
    let resp = client.lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys }).await.map_err(bad_connection)?;
    printer.lease_time_to_live(&resp.into_inner(), keys)
}

async fn list(global: &GlobalFlags, printer: Printer) -> Result<String, CliError> {
    let mut client = lease_client(global).await?;
    let resp = client.lease_leases(pb::LeaseLeasesRequest {}).await.map_err(bad_connection)?;
    printer.lease_leases(&resp.into_inner())
}

/// etcdctl's `leaseFromArgs`: `strconv.ParseInt(arg, 16, 64)`.
pub(crate) fn lease_id(arg: &str) -> Result<i64, CliError> {
    i64::from_str_radix(arg, 16).map_err(|e| {
        CliError::bad_args(format!("bad lease ID arg ({}), expecting ID in Hex", go_parse_int_error(arg, &e)))
    })
}

/// Go's `*strconv.NumError` text for `strconv.ParseInt`.
fn go_parse_int_error(text: &str, err: &ParseIntError) -> String {
    let reason = match err.kind() {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
        _ => "invalid syntax",
    };
    format!("strconv.ParseInt: parsing {}: {reason}", go_quote(text.as_bytes()))
}

/// `grant` and `revoke` wrap the client's error text: `failed to grant lease (…)`, exit 1.
fn wrapped(what: &str, status: tonic::Status) -> CliError {
    CliError::new(EXIT_ERROR, format!("{what} ({})", CliError::from(status).message))
}

/// `timetolive`, `list` and `keep-alive` exit with etcdctl's "bad connection" code on any error.
fn bad_connection(status: tonic::Status) -> CliError {
    CliError { code: EXIT_BAD_CONNECTION, ..CliError::from(status) }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn lease(args: &[&str]) -> LeaseCommand {
        let cli = Cli::try_parse_from(["kvctl"].iter().chain(args)).expect("parses");
        let Command::Lease(lease) = cli.command else { panic!("not lease") };
        lease
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        assert!(matches!(lease(&["lease", "grant", "10"]), LeaseCommand::Grant { args } if args == ["10"]));
        assert!(matches!(lease(&["lease", "revoke", "1a", "2b"]), LeaseCommand::Revoke { args } if args.len() == 2));
        assert!(matches!(
            lease(&["lease", "timetolive", "1a", "--keys"]),
            LeaseCommand::Timetolive { keys: true, args } if args == ["1a"]
        ));
        assert!(matches!(lease(&["lease", "timetolive", "1a"]), LeaseCommand::Timetolive { keys: false, .. }));
        assert!(matches!(lease(&["lease", "list"]), LeaseCommand::List { .. }));
        assert!(matches!(
            lease(&["lease", "keep-alive", "--once", "1a"]),
            LeaseCommand::KeepAlive { once: true, args } if args == ["1a"]
        ));
        assert!(matches!(
            lease(&["-w", "json", "lease", "keep-alive", "1a"]),
            LeaseCommand::KeepAlive { once: false, .. }
        ));
        assert!(Cli::try_parse_from(["kvctl", "lease", "grant", "--keys", "1"]).is_err());
        assert!(Cli::try_parse_from(["kvctl", "lease", "keepalive", "1"]).is_err());
    }

    #[test]
    fn lease_ids_parse_like_go() {
        assert_eq!(lease_id("694d77aa9e38260f"), Ok(0x694d77aa9e38260f));
        assert_eq!(lease_id("1A"), Ok(26));
        let bad = |arg: &str, reason: &str| {
            Err(CliError::bad_args(format!(
                "bad lease ID arg (strconv.ParseInt: parsing \"{arg}\": {reason}), expecting ID in Hex"
            )))
        };
        assert_eq!(lease_id("zz"), bad("zz", "invalid syntax"));
        assert_eq!(lease_id(""), bad("", "invalid syntax"));
        assert_eq!(lease_id("8000000000000000"), bad("8000000000000000", "value out of range"));
    }

    #[test]
    fn simple_output_prints_ids_like_go() {
        use crate::printer::simple;
        assert_eq!(simple::lease_id_hex(26), "000000000000001a");
        assert_eq!(simple::lease_id_hex(-26), "-00000000000001a");
        assert_eq!(simple::lease_id_hex(i64::MIN), "-8000000000000000");
        let ttl = |ttl, granted_ttl, keys: &[&str]| pb::LeaseTimeToLiveResponse {
            id: 26,
            ttl,
            granted_ttl,
            keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
            ..Default::default()
        };
        assert_eq!(simple::lease_time_to_live(&ttl(-1, 0, &[]), true), "lease 000000000000001a already expired\n");
        assert_eq!(
            simple::lease_time_to_live(&ttl(9, 10, &["a", "b"]), true),
            "lease 000000000000001a granted with TTL(10s), remaining(9s), attached keys([a b])\n"
        );
        assert_eq!(
            simple::lease_time_to_live(&ttl(9, 10, &[]), false),
            "lease 000000000000001a granted with TTL(10s), remaining(9s)\n"
        );
    }

    #[tokio::test]
    async fn argument_errors_before_dialing() {
        // An endpoint nobody listens on: these must fail on their arguments, not on the dial.
        let global = Cli::try_parse_from(["kvctl", "--endpoints=127.0.0.1:1", "lease", "list"]).expect("parses").global;
        let cases: [(&[&str], &str); 5] = [
            (&["lease", "grant"], "lease grant command needs TTL argument"),
            (&["lease", "grant", "x"], "bad TTL (strconv.ParseInt: parsing \"x\": invalid syntax)"),
            (&["lease", "revoke", "1", "2"], "lease revoke command needs 1 argument"),
            (
                &["lease", "revoke", "zz"],
                "bad lease ID arg (strconv.ParseInt: parsing \"zz\": invalid syntax), expecting ID in Hex",
            ),
            (&["lease", "keep-alive"], "lease keep-alive command needs lease ID as argument"),
        ];
        for (args, want) in cases {
            let err = lease(args).run(&global).await.expect_err("fails");
            assert_eq!((err.code, err.message.as_str()), (128, want), "{args:?}");
        }
    }
}
