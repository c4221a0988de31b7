//! `member add|remove|update|list|promote`: cluster membership.
//!
//! Arguments are checked before dialling, with etcdctl's texts. The fields and table formats have
//! no view of a membership change in etcdctl 3.4: the change is made, then the command fails with
//! `<format> not supported as output format`, and kvctl does the same.

use clap::Subcommand;
use proto::etcdserverpb as pb;

use super::cluster_client;
use crate::error::CliError;
use crate::global::{GlobalFlags, WriteOut};
use crate::printer::fields::go_quote;
use crate::printer::Printer;

const NO_MEMBER_ID: &str = "member ID is not provided";
const NO_PEER_URLS: &str = "member peer urls not provided";

#[derive(Debug, Clone, Subcommand)]
pub enum MemberCommand {
    /// Adds a member into the cluster
    Add {
        /// comma separated peer URLs for the new member.
        #[arg(long, default_value = "")]
        peer_urls: String,
        /// indicates if the new member is raft learner
        #[arg(long)]
        learner: bool,
        /// <memberName>
        args: Vec<String>,
    },
    /// Removes a member from the cluster
    Remove {
        /// <memberID>
        args: Vec<String>,
    },
    /// Updates a member in the cluster
    Update {
        /// comma separated peer URLs for the updated member.
        #[arg(long, default_value = "")]
        peer_urls: String,
        /// <memberID>
        args: Vec<String>,
    },
    /// Lists all members in the cluster
    List,
    /// Promotes a non-voting member in the cluster
    Promote {
        /// <memberID>
        args: Vec<String>,
    },
}

impl MemberCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let printer = Printer { format: global.write_out, hex: global.hex, value_only: false };
        match self {
            MemberCommand::Add { peer_urls, learner, args } => {
                let name = new_member_name(args)?;
                let request = pb::MemberAddRequest { peer_ur_ls: peer_url_list(peer_urls)?, is_learner: *learner };
                let resp = cluster_client(global).await?.member_add(request).await?.into_inner();
                let mut out = printer.member_add(&resp)?;
                if global.write_out == WriteOut::Simple {
                    out.push_str(&initial_cluster_env(name, peer_urls, &resp));
                }
                Ok(out)
            }
            MemberCommand::Remove { args } => {
                let id = member_id(args)?;
                let resp = cluster_client(global).await?.member_remove(pb::MemberRemoveRequest { id }).await?;
                printer.member_remove(id, &resp.into_inner())
            }
            MemberCommand::Update { peer_urls, args } => {
                let id = member_id(args)?;
                let request = pb::MemberUpdateRequest { id, peer_ur_ls: peer_url_list(peer_urls)? };
                let resp = cluster_client(global).await?.member_update(request).await?;
                printer.member_update(id, &resp.into_inner())
            }
            MemberCommand::List => {
                let mut client = cluster_client(global).await?;
                let resp = client.member_list(pb::MemberListRequest { linearizable: false }).await?.into_inner();
                printer.member_list(&resp)
            }
            MemberCommand::Promote { args } => {
                let id = member_id(args)?;
                let resp = cluster_client(global).await?.member_promote(pb::MemberPromoteRequest { id }).await?;
                printer.member_promote(id, &resp.into_inner())
            }
        }
    }
}

/// `member add`'s one argument. With more, etcdctl guesses that a URL was meant for `--peer-urls`.
fn new_member_name(args: &[String]) -> Result<&str, CliError> {
    match args {
        [] => Err(CliError::bad_args("member name not provided")),
        [name] => Ok(name),
        _ => {
            let mut message = String::from("too many arguments");
            for arg in args.iter().filter(|a| a.to_lowercase().starts_with("http")) {
                message.push_str(&format!(", did you mean --peer-urls={arg}"));
            }
            Err(CliError::bad_args(message))
        }
    }
}

/// `--peer-urls` split on commas, as given (etcdctl checks nothing but presence).
fn peer_url_list(peer_urls: &str) -> Result<Vec<String>, CliError> {
    if peer_urls.is_empty() {
        return Err(CliError::bad_args(NO_PEER_URLS));
    }
    Ok(peer_urls.split(',').map(str::to_string).collect())
}

/// The one hex member id `remove`, `update` and `promote` take.
fn member_id(args: &[String]) -> Result<u64, CliError> {
    let [arg] = args else { return Err(CliError::bad_args(NO_MEMBER_ID)) };
    parse_hex_id(arg).map_err(|e| CliError::bad_args(format!("bad member ID arg ({e}), expecting ID in Hex")))
}

/// Go's `strconv.ParseUint(text, 16, 64)`, failing with the text of Go's `*NumError`. Unlike
/// Rust's parser, Go takes no leading `+`.
pub(crate) fn parse_hex_id(text: &str) -> Result<u64, String> {
    use std::num::IntErrorKind;
    let parsed = if text.starts_with('+') { None } else { Some(u64::from_str_radix(text, 16)) };
    let reason = match parsed {
        Some(Ok(id)) => return Ok(id),
        Some(Err(e)) if *e.kind() == IntErrorKind::PosOverflow => "value out of range",
        _ => "invalid syntax",
    };
    Err(format!("strconv.ParseUint: parsing {}: {reason}", go_quote(text.as_bytes())))
}

/// The environment the new member has to start with, which etcdctl prints after the simple
/// output: every peer URL of the membership under its member's name, the new one under `name`
/// (members that have not started yet have no name, and get none).
fn initial_cluster_env(name: &str, peer_urls: &str, resp: &pb::MemberAddResponse) -> String {
    let new_id = resp.member.as_ref().map_or(0, |m| m.id);
    let initial_cluster = resp
        .members
        .iter()
        .flat_map(|m| {
            let member_name = if m.id == new_id { name } else { m.name.as_str() };
            m.peer_ur_ls.iter().map(move |url| format!("{member_name}={url}"))
        })
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "\nETCD_NAME={}\nETCD_INITIAL_CLUSTER={}\nETCD_INITIAL_ADVERTISE_PEER_URLS={}\nETCD_INITIAL_CLUSTER_STATE=\"existing\"\n",
        go_quote(name.as_bytes()),
        go_quote(initial_cluster.as_bytes()),
        go_quote(peer_urls.as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(args: &[&str]) -> MemberCommand {
        let cli = Cli::try_parse_from(args).expect("parses");
        let Command::Member(cmd) = cli.command else { panic!("not member: {:?}", cli.command) };
        cmd
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let MemberCommand::Add { peer_urls, learner, args } =
            parse(&["kvctl", "member", "add", "n4", "--peer-urls=http://a:1,http://b:2", "--learner"])
        else {
            panic!("not add")
        };
        assert_eq!((peer_urls.as_str(), learner, args), ("http://a:1,http://b:2", true, strings(&["n4"])));
        let MemberCommand::Update { peer_urls, args } =
            parse(&["kvctl", "member", "update", "8e9e05c52164694d", "--peer-urls", "http://c:3"])
        else {
            panic!("not update")
        };
        assert_eq!((peer_urls.as_str(), args), ("http://c:3", strings(&["8e9e05c52164694d"])));
        assert!(matches!(parse(&["kvctl", "member", "remove", "1"]), MemberCommand::Remove { args } if args == ["1"]));
        assert!(matches!(parse(&["kvctl", "member", "promote"]), MemberCommand::Promote { args } if args.is_empty()));
        assert!(matches!(parse(&["kvctl", "member", "list", "-w", "table"]), MemberCommand::List));
        // etcdctl's `remove` has no --peer-urls either.
        assert!(Cli::try_parse_from(["kvctl", "member", "remove", "1", "--peer-urls=http://a:1"]).is_err());
    }

    #[test]
    fn argument_errors() {
        fn message<T>(result: Result<T, CliError>) -> Result<T, (u8, String)> {
            result.map_err(|e| (e.code, e.message))
        }
        assert_eq!(message(new_member_name(&strings(&["n1"]))), Ok("n1"));
        assert_eq!(message(new_member_name(&[])), Err((128, "member name not provided".into())));
        assert_eq!(
            message(new_member_name(&strings(&["a", "HTTP://x", "b"]))),
            Err((128, "too many arguments, did you mean --peer-urls=HTTP://x".into()))
        );
        assert_eq!(message(peer_url_list("")), Err((128, NO_PEER_URLS.into())));
        assert_eq!(message(peer_url_list("http://a,http://b")), Ok(strings(&["http://a", "http://b"])));
        assert_eq!(message(member_id(&strings(&["1", "2"]))), Err((128, NO_MEMBER_ID.into())));
        assert_eq!(
            message(member_id(&strings(&["zz"]))),
            Err((
                128,
                "bad member ID arg (strconv.ParseUint: parsing \"zz\": invalid syntax), expecting ID in Hex".into()
            ))
        );
    }

    #[test]
    fn hex_ids_parse_like_go() {
        let cases = [
            ("8e9e05c52164694d", Ok(0x8e9e05c52164694d)),
            ("ABC", Ok(0xabc)),
            ("ffffffffffffffff", Ok(u64::MAX)),
            ("1ffffffffffffffff", Err("strconv.ParseUint: parsing \"1ffffffffffffffff\": value out of range")),
            ("-1", Err("strconv.ParseUint: parsing \"-1\": invalid syntax")),
            ("+1", Err("strconv.ParseUint: parsing \"+1\": invalid syntax")),
            ("0x1", Err("strconv.ParseUint: parsing \"0x1\": invalid syntax")),
            ("", Err("strconv.ParseUint: parsing \"\": invalid syntax")),
        ];
        for (text, want) in cases {
            assert_eq!(parse_hex_id(text), want.map_err(str::to_string), "{text:?}");
        }
    }

    #[test]
    fn initial_cluster_names_the_new_member() {
        let member = |id, name: &str, url: &str| pb::Member {
            id,
            name: name.into(),
            peer_ur_ls: vec![url.into()],
            ..Default::default()
        };
        let resp = pb::MemberAddResponse {
            header: None,
            member: Some(member(2, "", "http://n:2")),
            members: vec![member(2, "", "http://n:2"), member(1, "default", "http://d:1"), member(3, "", "http://u:3")],
        };
        assert_eq!(
            initial_cluster_env("new", "http://n:2", &resp),
            "\nETCD_NAME=\"new\"\nETCD_INITIAL_CLUSTER=\"new=http://n:2,default=http://d:1,=http://u:3\"\n\
             ETCD_INITIAL_ADVERTISE_PEER_URLS=\"http://n:2\"\nETCD_INITIAL_CLUSTER_STATE=\"existing\"\n"
        );
    }
}
