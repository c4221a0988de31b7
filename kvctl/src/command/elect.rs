//! `elect <election-name> [proposal]`, `elect -l <election-name>`
//!
//! Campaigns with clientv3's election recipe (session lease plus a key per candidate, so any
//! etcd server will do), prints the leader key and value once elected and resigns on
//! SIGINT/SIGTERM; with `-l`, prints every leader (and each new value) as it comes.

use clap::Args;
use proto::etcdserverpb as pb;

use super::lock::{canceled, Interrupt};
use super::watch::write_stdout;
use crate::concurrency::session::DEFAULT_TTL;
use crate::concurrency::{Election, Session};
use crate::error::{CliError, EXIT_ERROR};
use crate::global::{Conn, GlobalFlags};
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct ElectCommand {
    /// observation mode
    #[arg(short = 'l', long)]
    pub listen: bool,

    /// <election-name> [proposal]
    pub args: Vec<String>,
}

impl ElectCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        if !matches!(self.args.len(), 1 | 2) {
            return Err(CliError::bad_args("elect takes one election name argument and an optional proposal argument"));
        }
        let conn = global.connect().await?;
        let proposal = self.args.get(1);
        match (proposal, self.listen) {
            (None, false) => return Err(CliError::bad_args("no proposal argument but -l not set")),
            (Some(_), true) => return Err(CliError::bad_args("proposal given but -l is set")),
            _ => {}
        }
        let printer = Printer { format: global.write_out, hex: global.hex, value_only: false };
        let mut interrupt = Interrupt::new()?;
        // etcdctl opens a session even to observe.
        let mut session = Session::new(&conn, DEFAULT_TTL).await?;
        let name = &self.args[0];
        let result = match proposal {
            None => observe(&conn, &mut interrupt, name, &printer).await,
            Some(proposal) => campaign(&conn, &mut session, &mut interrupt, name, proposal, &printer).await,
        };
        // etcdctl leaves its session lease to expire; revoking it frees everything at once.
        let _ = session.close().await;
        result.map(|()| String::new())
    }
}

/// Prints every leader until interrupted; the observation ending otherwise is an error.
async fn observe(conn: &Conn, interrupt: &mut Interrupt, name: &str, printer: &Printer) -> Result<(), CliError> {
    let election = Election::new(name);
    let show = |resp: &pb::RangeResponse| {
        write_stdout(&printer.get(resp)?);
        Ok(())
    };
    tokio::select! {
        observed = election.observe(conn, show) => observed,
        () = interrupt.recv() => Ok(()),
    }
}

/// etcdctl's `campaign`: wait to be elected, print our key, resign when interrupted.
async fn campaign(
    conn: &Conn,
    session: &mut Session,
    interrupt: &mut Interrupt,
    name: &str,
    proposal: &str,
    printer: &Printer,
) -> Result<(), CliError> {
    let mut election = Election::new(name);
    let elected = tokio::select! {
        elected = election.campaign(conn, session, proposal.as_bytes()) => elected,
        () = interrupt.recv() => Err(canceled()),
    };
    if let Err(err) = elected {
        let _ = election.resign(conn).await;
        return Err(err);
    }
    let request = pb::RangeRequest { key: election.key().to_vec(), ..Default::default() };
    let resp = pb::kv_client::KvClient::new(conn.clone()).range(request).await?.into_inner();
    write_stdout(&printer.get(&resp)?);
    tokio::select! {
        () = interrupt.recv() => election.resign(conn).await,
        () = session.done() => Err(CliError::new(EXIT_ERROR, "elect: session expired")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(argv: &[&str]) -> ElectCommand {
        let cli = Cli::try_parse_from(argv).expect("parses");
        let Command::Elect(elect) = cli.command else { panic!("not elect") };
        elect
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cmd = parse(&["kvctl", "elect", "-l", "e"]);
        assert!(cmd.listen);
        assert_eq!(cmd.args, ["e"]);
        let cmd = parse(&["kvctl", "elect", "e", "p1", "--listen"]);
        assert!(cmd.listen);
        assert_eq!(cmd.args, ["e", "p1"]);
        assert!(!parse(&["kvctl", "elect", "e", "p"]).listen);
    }

    #[tokio::test]
    async fn argument_count_is_checked_first() {
        let global = Cli::try_parse_from(["kvctl", "--endpoints=127.0.0.1:1", "get", "x"]).expect("parses").global;
        for argv in [&["kvctl", "elect"][..], &["kvctl", "elect", "a", "b", "c"]] {
            let err = parse(argv).run(&global).await.expect_err("bad count");
            assert_eq!(err.code, 128);
            assert_eq!(err.message, "elect takes one election name argument and an optional proposal argument");
        }
    }
}
