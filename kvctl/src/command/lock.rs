//! `lock <lockname> [exec-command arg1 arg2 ...]`
//!
//! Takes the lock with clientv3's mutex recipe (a session lease plus a key per contender, so
//! any etcd server will do), prints the lock key and holds it until SIGINT/SIGTERM — or runs the
//! command while holding it and releases it when the command ends.

use clap::Args;
use proto::etcdserverpb as pb;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::exec;
use super::watch::write_stdout;
use crate::concurrency::{Mutex, Session};
use crate::error::{CliError, EXIT_ERROR};
use crate::global::{Conn, GlobalFlags};
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct LockCommand {
    /// timeout for session
    #[arg(long, default_value_t = 10)]
    pub ttl: i64,

    /// <lockname> [exec-command arg1 arg2 ...]
    pub args: Vec<String>,
}

impl LockCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let Some((name, command)) = self.args.split_first() else {
            return Err(CliError::bad_args("lock takes a lock name argument and an optional command to execute"));
        };
        let conn = global.connect().await?;
        // Installed before waiting for the lock: an interrupt while waiting gives up cleanly.
        let mut interrupt = Interrupt::new()?;
        let mut session = Session::new(&conn, self.ttl).await?;
        let printer = Printer { format: global.write_out, hex: global.hex, value_only: false };
        let result = hold(&conn, &mut session, &mut interrupt, name, command, &printer).await;
        // etcdctl leaves its session lease to expire; revoking it frees everything at once.
        let _ = session.close().await;
        result.map(|()| String::new())
    }
}

/// etcdctl's `lockUntilSignal`.
async fn hold(
    conn: &Conn,
    session: &mut Session,
    interrupt: &mut Interrupt,
    name: &str,
    command: &[String],
    printer: &Printer,
) -> Result<(), CliError> {
    let mut mutex = Mutex::new(name);
    let locked = tokio::select! {
        locked = mutex.lock(conn, session) => locked,
        () = interrupt.recv() => Err(canceled()),
    };
    if let Err(err) = locked {
        let _ = mutex.unlock(conn).await;
        return Err(err);
    }
    if !command.is_empty() {
        let ran = exec::run(command, &lock_env(&mutex)).await;
        let unlocked = mutex.unlock(conn).await;
        ran.map_err(|err| CliError::new(EXIT_ERROR, err))?;
        return unlocked;
    }
    let request = pb::RangeRequest { key: mutex.key().to_vec(), ..Default::default() };
    let resp = pb::kv_client::KvClient::new(conn.clone()).range(request).await?.into_inner();
    if resp.kvs.is_empty() {
        return Err(CliError::new(EXIT_ERROR, "lock lost on init"));
    }
    write_stdout(&printer.get(&resp)?);
    tokio::select! {
        () = interrupt.recv() => mutex.unlock(conn).await,
        () = session.done() => Err(CliError::new(EXIT_ERROR, "session expired")),
    }
}

/// `ETCD_LOCK_KEY` and `ETCD_LOCK_REV` for the command. etcdctl appends our environment after
/// them and Go keeps the last duplicate, so an inherited value wins.
fn lock_env(mutex: &Mutex) -> Vec<(String, String)> {
    let revision = mutex.header().map_or(0, |h| h.revision);
    [("ETCD_LOCK_KEY", String::from_utf8_lossy(mutex.key()).into_owned()), ("ETCD_LOCK_REV", revision.to_string())]
        .into_iter()
        .filter(|(name, _)| std::env::var_os(name).is_none())
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

/// clientv3's error for a call whose context was canceled (here: by SIGINT or SIGTERM).
pub(crate) fn canceled() -> CliError {
    CliError::new(EXIT_ERROR, "context canceled")
}

/// SIGINT or SIGTERM, which `lock` and `elect` answer by giving up cleanly instead of dying.
pub(crate) struct Interrupt {
    int: Signal,
    term: Signal,
}

impl Interrupt {
    pub(crate) fn new() -> Result<Interrupt, CliError> {
        let install = |kind| signal(kind).map_err(|e| CliError::new(EXIT_ERROR, e.to_string()));
        Ok(Interrupt { int: install(SignalKind::interrupt())?, term: install(SignalKind::terminate())? })
    }

    pub(crate) async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(argv: &[&str]) -> LockCommand {
        let cli = Cli::try_parse_from(argv).expect("parses");
        let Command::Lock(lock) = cli.command else { panic!("not lock") };
        lock
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cmd = parse(&["kvctl", "lock", "mylock"]);
        assert_eq!((cmd.ttl, cmd.args), (10, vec!["mylock".to_string()]));
        let cmd = parse(&["kvctl", "lock", "--ttl", "5", "l", "--", "sh", "-c", "echo $ETCD_LOCK_KEY"]);
        assert_eq!(cmd.ttl, 5);
        assert_eq!(cmd.args, ["l", "sh", "-c", "echo $ETCD_LOCK_KEY"]);
        assert!(Cli::try_parse_from(["kvctl", "lock", "--ttl", "x", "l"]).is_err());
    }

    #[tokio::test]
    async fn no_name_is_bad_args() {
        let cmd = parse(&["kvctl", "lock"]);
        let global = Cli::try_parse_from(["kvctl", "get", "x"]).expect("parses").global;
        let err = cmd.run(&global).await.expect_err("needs a name");
        assert_eq!(
            (err.code, err.message.as_str()),
            (128, "lock takes a lock name argument and an optional command to execute")
        );
    }
}
