//! `watch [options] [key or prefix] [range_end] [--] [exec-command arg1 arg2 ...]`
//!
//! Streams events as they happen (each response printed and flushed on arrival) until the server
//! cancels the watch; with `-- <command>`, runs the command once per event with the event in
//! `ETCD_WATCH_*` variables; with `-i`, reads `watch ...`/`progress` lines from stdin.

mod interactive;

use clap::Args;
use proto::etcdserverpb as pb;

use super::exec;
use crate::concurrency::{Delivery, WatchResponse, WatchStream};
use crate::error::{CliError, EXIT_INTERRUPTED};
use crate::global::GlobalFlags;
use crate::prefix::prefix_end;
use crate::printer::fields::go_quote;
use crate::printer::simple::event_type_name;
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct WatchCommand {
    /// Interactive mode
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Watch on a prefix if prefix is set
    #[arg(long)]
    pub prefix: bool,
    /// Revision to start watching
    #[arg(long, default_value_t = 0)]
    pub rev: i64,
    /// get the previous key-value pair before the event happens
    #[arg(long)]
    pub prev_kv: bool,
    /// get periodic watch progress notification from server (etcdctl 3.5's flag)
    #[arg(long)]
    pub progress_notify: bool,

    /// [key or prefix] [range_end]
    pub args: Vec<String>,
    /// The command to run for every event (after `--`).
    #[arg(last = true)]
    pub exec: Vec<String>,
}

/// What to watch and what to run per event, once etcdctl's argument rules are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatchPlan {
    /// `key [range_end]`, from `ETCDCTL_WATCH_KEY`/`ETCDCTL_WATCH_RANGE_END` or the arguments.
    pub key_args: Vec<String>,
    pub exec: Vec<String>,
}

const ERR_ARGS: &str = "bad number of arguments";
const ERR_ARGS_CONFLICT_ENV: &str = "bad number of arguments (found conflicting environment key)";
const ERR_ARGS_SEPARATOR: &str = "bad number of arguments (found separator --, but no commands)";

impl WatchCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let env_key = std::env::var("ETCDCTL_WATCH_KEY").unwrap_or_default();
        let env_range = std::env::var("ETCDCTL_WATCH_RANGE_END").unwrap_or_default();
        if env_key.is_empty() && !env_range.is_empty() {
            return Err(CliError::bad_args(format!(
                "ETCDCTL_WATCH_KEY is empty but got ETCDCTL_WATCH_RANGE_END={}",
                go_quote(env_range.as_bytes())
            )));
        }
        if self.interactive {
            return interactive::run(global, &env_key, &env_range).await;
        }
        let plan = self.plan(&raw_args_after_verb(std::env::args()), &env_key, &env_range)?;
        let request = self.create_request(&plan.key_args)?;
        let conn = global.connect().await?;
        let (mut stream, _) = WatchStream::open(&conn, true, request).await?;
        let printer = Printer { format: global.write_out, hex: global.hex, value_only: false };
        while let Some(delivery) = stream.next().await {
            if let Delivery::Response(_, resp) = delivery {
                show(&printer, &resp, &plan.exec).await?;
            }
        }
        Err(CliError::new(EXIT_INTERRUPTED, "watch is canceled by the server"))
    }

    /// etcdctl's `parseWatchArgs` outside interactive mode. `raw` is the command line after the
    /// verb, which still shows whether a `--` was typed.
    pub(crate) fn plan(&self, raw: &[String], env_key: &str, env_range: &str) -> Result<WatchPlan, CliError> {
        let separator = raw.iter().position(|a| a == "--");
        if separator.is_some_and(|at| at + 1 == raw.len()) {
            return Err(CliError::bad_args(ERR_ARGS_SEPARATOR));
        }
        if separator.is_none() && raw.is_empty() && env_key.is_empty() {
            return Err(CliError::bad_args(ERR_ARGS));
        }
        if !env_key.is_empty() && !self.args.is_empty() {
            return Err(CliError::bad_args(ERR_ARGS_CONFLICT_ENV));
        }
        let mut key_args = env_key_args(env_key, env_range);
        key_args.extend(self.args.iter().cloned());
        Ok(WatchPlan { key_args, exec: self.exec.clone() })
    }

    /// clientv3's `Watch` options as etcdctl's `getWatchChan` sets them.
    pub(crate) fn create_request(&self, key_args: &[String]) -> Result<pb::WatchCreateRequest, CliError> {
        let Some(key) = key_args.first() else { return Err(CliError::bad_args(ERR_ARGS)) };
        let mut key = key.as_bytes().to_vec();
        let mut range_end = Vec::new();
        if key_args.len() == 2 {
            if self.prefix {
                return Err(CliError::bad_args("`range_end` and `--prefix` are mutually exclusive"));
            }
            range_end = key_args[1].as_bytes().to_vec();
        }
        if self.prefix {
            if key.is_empty() {
                key = vec![0];
                range_end = vec![0];
            } else {
                range_end = prefix_end(&key);
            }
        }
        Ok(pb::WatchCreateRequest {
            key,
            range_end,
            start_revision: self.rev,
            progress_notify: self.progress_notify,
            prev_kv: self.prev_kv,
            ..Default::default()
        })
    }
}

/// `ETCDCTL_WATCH_KEY` and `ETCDCTL_WATCH_RANGE_END` as the first arguments, when set.
fn env_key_args(env_key: &str, env_range: &str) -> Vec<String> {
    [env_key, env_range].iter().take_while(|v| !v.is_empty()).map(|v| v.to_string()).collect()
}

/// The words after the first `watch` on the command line, as etcdctl reads `os.Args`.
fn raw_args_after_verb(argv: impl Iterator<Item = String>) -> Vec<String> {
    argv.skip_while(|a| a != "watch").skip(1).collect()
}

/// etcdctl's `printWatchCh` for one response: a cancel notice on stderr, the progress line, the
/// response in the output format, then the command once per event.
pub(crate) async fn show(printer: &Printer, resp: &WatchResponse, exec_args: &[String]) -> Result<(), CliError> {
    if resp.canceled {
        eprintln!("watch was canceled ({})", resp.err().unwrap_or_else(|| "<nil>".to_string()));
    }
    if resp.is_progress_notify() {
        write_stdout(&format!("progress notify: {}\n", resp.header.revision));
    }
    write_stdout(&printer.watch(resp)?);
    if exec_args.is_empty() {
        return Ok(());
    }
    for event in resp.events() {
        let kv = event.kv.clone().unwrap_or_default();
        let env = [
            ("ETCD_WATCH_REVISION".to_string(), resp.header.revision.to_string()),
            ("ETCD_WATCH_EVENT_TYPE".to_string(), format!("\"{}\"", event_type_name(event.r#type))),
            ("ETCD_WATCH_KEY".to_string(), go_quote(&kv.key)),
            ("ETCD_WATCH_VALUE".to_string(), go_quote(&kv.value)),
        ];
        if let Err(err) = exec::run(exec_args, &env).await {
            eprintln!("command {} error ({err})", exec::quote_args(exec_args));
            return Err(CliError::silent(1));
        }
    }
    Ok(())
}

/// Writes and flushes at once: a streaming command's output must not wait in a buffer.
pub(crate) fn write_stdout(text: &str) {
    use std::io::Write;
    if text.is_empty() {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(argv: &[&str]) -> WatchCommand {
        let cli = Cli::try_parse_from(argv).expect("parses");
        let Command::Watch(watch) = cli.command else { panic!("not watch") };
        watch
    }

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cmd = parse(&["kvctl", "watch", "foo", "--prefix", "--rev", "3", "--prev-kv", "-i"]);
        assert!(cmd.prefix && cmd.prev_kv && cmd.interactive && !cmd.progress_notify);
        assert_eq!((cmd.rev, cmd.args.clone()), (3, strings(&["foo"])));
        let cmd = parse(&["kvctl", "watch", "a", "b", "--progress-notify", "--", "echo", "--rev", "x"]);
        assert_eq!(cmd.args, strings(&["a", "b"]));
        assert_eq!(cmd.exec, strings(&["echo", "--rev", "x"]));
        assert!(cmd.progress_notify);
        assert!(Cli::try_parse_from(["kvctl", "watch", "--rev", "x"]).is_err());
    }

    #[test]
    fn plans_like_parse_watch_args() {
        let cmd = parse(&["kvctl", "watch", "foo", "--", "echo", "hi"]);
        let plan = cmd.plan(&strings(&["foo", "--", "echo", "hi"]), "", "").expect("valid");
        assert_eq!(plan, WatchPlan { key_args: strings(&["foo"]), exec: strings(&["echo", "hi"]) });
        // (argv, the raw words after the verb, env key, env range end, expected error)
        type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a str, &'a str, Option<&'a str>);
        let cases: [Case; 6] = [
            (&["watch"], &[], "", "", Some(ERR_ARGS)),
            (&["watch", "foo", "--"], &["foo", "--"], "", "", Some(ERR_ARGS_SEPARATOR)),
            (&["watch", "foo"], &["foo"], "k", "", Some(ERR_ARGS_CONFLICT_ENV)),
            (&["watch", "foo", "--", "echo"], &["foo", "--", "echo"], "k", "", Some(ERR_ARGS_CONFLICT_ENV)),
            (&["watch", "--", "echo"], &["--", "echo"], "k", "z", None),
            (&["watch", "--rev", "1"], &["--rev", "1"], "", "", None),
        ];
        for (argv, raw, key, range, want) in cases {
            let cmd = parse(&[&["kvctl"], argv].concat());
            let got = cmd.plan(&strings(raw), key, range);
            assert_eq!(got.as_ref().err().map(|e| e.message.as_str()), want, "{argv:?}");
            assert_eq!(got.err().map_or(128, |e| e.code), 128);
        }
        let plan = parse(&["kvctl", "watch", "--", "echo"]).plan(&strings(&["--", "echo"]), "k", "z").expect("ok");
        assert_eq!(plan.key_args, strings(&["k", "z"]));
    }

    #[test]
    fn requests_like_get_watch_chan() {
        let cmd = parse(&["kvctl", "watch", "--prefix", "--rev", "4", "--prev-kv", "x"]);
        let req = cmd.create_request(&strings(&["ab"])).expect("valid");
        assert_eq!(
            (req.key, req.range_end, req.start_revision, req.prev_kv),
            (b"ab".to_vec(), b"ac".to_vec(), 4, true)
        );
        let req = cmd.create_request(&strings(&[""])).expect("valid");
        assert_eq!((req.key, req.range_end), (vec![0], vec![0]));
        let err = cmd.create_request(&strings(&["a", "b"])).expect_err("prefix and range end");
        assert_eq!(err.message, "`range_end` and `--prefix` are mutually exclusive");
        let plain = parse(&["kvctl", "watch", "x"]);
        let req = plain.create_request(&strings(&["a", "c", "ignored"])).expect("valid");
        assert_eq!((req.key, req.range_end), (b"a".to_vec(), Vec::new()));
        assert_eq!(plain.create_request(&[]).map_err(|e| e.message), Err(ERR_ARGS.to_string()));
    }

    #[test]
    fn raw_args_start_after_the_verb() {
        let argv = strings(&["kvctl", "--endpoints=x", "watch", "foo", "--", "echo"]);
        assert_eq!(raw_args_after_verb(argv.into_iter()), strings(&["foo", "--", "echo"]));
    }
}
