//! `txn [-i]`: a transaction read from stdin in etcdctl 3.4's grammar: comparisons, an empty line,
//! the success ops, an empty line, the failure ops, an empty line. Every line must end in a
//! newline (etcdctl stops with `Error: EOF` otherwise).
//!
//! ```text
//! mod("key1") > "0"
//! value(`key2`) = "v"
//!
//! put key1 "new value" --prev-kv
//! get key --prefix
//!
//! del key1
//!
//! ```

mod compare;
mod go_syntax;

use std::io::{BufRead, Write};

use clap::{ArgAction, Args, CommandFactory, Parser};
use proto::etcdserverpb as pb;

use super::del::DelCommand;
use super::get::GetCommand;
use super::kv_client;
use super::put::PutCommand;
use crate::error::{CliError, EXIT_ERROR, EXIT_INVALID_INPUT};
use crate::global::{parse_go_bool, GlobalFlags};
use crate::printer::Printer;

#[derive(Debug, Clone, Args)]
pub struct TxnCommand {
    /// Input transaction in interactive mode
    #[arg(short = 'i', long)]
    pub interactive: bool,

    /// etcdctl takes no arguments; they are only collected to refuse them with its message.
    #[arg(hide = true)]
    pub args: Vec<String>,
}

/// How reading the txn can end early, as it ends in etcdctl.
#[derive(Debug, PartialEq, Eq)]
enum Abort {
    /// `ExitWithError`: an `Error:` line and an exit code.
    Exit(CliError),
    /// A Go panic inside etcdctl (clientv3's `Compare` on an unknown operator or on any lease
    /// comparison, `argify`'s slicing of single-quoted words): no `Error:` line, exit status 2.
    Panic(String),
}

impl From<CliError> for Abort {
    fn from(err: CliError) -> Self {
        Abort::Exit(err)
    }
}

/// The verbs an op line may hold, parsed with the same flags as the top-level verbs (etcdctl also
/// builds fresh `put`/`get`/`del` commands for every line).
#[derive(Debug, Parser)]
#[command(no_binary_name = true, disable_help_subcommand = true)]
enum OpLine {
    Put(PutCommand),
    Get(GetCommand),
    Del(DelCommand),
}

const PROMPTS: [&str; 3] = ["compares:", "success requests (get, put, del):", "failure requests (get, put, del):"];

impl TxnCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        if !self.args.is_empty() {
            return Err(CliError::bad_args("txn command does not accept argument"));
        }
        // etcdctl connects before it reads (or prompts for) anything.
        let mut client = kv_client(global).await?;
        let interactive = self.interactive;
        let read = tokio::task::spawn_blocking(move || {
            read_txn(&mut std::io::stdin().lock(), &mut std::io::stdout(), interactive)
        })
        .await
        .map_err(|e| CliError::new(EXIT_ERROR, e.to_string()))?;
        let request = match read {
            Ok(request) => request,
            Err(Abort::Exit(err)) => return Err(err),
            Err(Abort::Panic(message)) => return Err(go_panic(&message)),
        };
        let resp = client.txn(request).await?.into_inner();
        Printer { format: global.write_out, hex: global.hex, value_only: false }.txn(&resp)
    }
}

/// The exit status of a Go program that panics.
const GO_PANIC_EXIT: u8 = 2;

/// etcdctl crashes on a few inputs: its users see Go's panic text on stderr, no `Error:` line, and
/// exit status 2.
fn go_panic(message: &str) -> CliError {
    eprintln!(
        "panic: {message}\n\ngoroutine 1 [running]:\n(etcdctl 3.4 crashes on this input; kvctl exits as it does)"
    );
    CliError::silent(GO_PANIC_EXIT)
}

/// Reads the three sections, prompting for each in interactive mode.
fn read_txn(input: &mut impl BufRead, prompt: &mut impl Write, interactive: bool) -> Result<pb::TxnRequest, Abort> {
    let mut show = |text: &str| {
        if interactive {
            let _ = writeln!(prompt, "{text}");
            let _ = prompt.flush();
        }
    };
    show(PROMPTS[0]);
    let compare = read_section(input, compare::parse)?;
    show(PROMPTS[1]);
    let success = read_section(input, parse_op)?;
    show(PROMPTS[2]);
    let failure = read_section(input, parse_op)?;
    Ok(pb::TxnRequest { compare, success, failure })
}

/// Parses lines until an empty one (after trimming); the end of input before that is an error.
fn read_section<T>(input: &mut impl BufRead, parse: impl Fn(&str) -> Result<T, Abort>) -> Result<Vec<T>, Abort> {
    let mut items = Vec::new();
    loop {
        let line = read_line(input)?;
        let line = line.trim();
        if line.is_empty() {
            return Ok(items);
        }
        items.push(parse(line)?);
    }
}

/// Go's `bufio.Reader.ReadString('\n')`: a line without its newline is an `EOF` error.
fn read_line(input: &mut impl BufRead) -> Result<String, Abort> {
    let mut bytes = Vec::new();
    let eof = || CliError::new(EXIT_INVALID_INPUT, "EOF");
    match input.read_until(b'\n', &mut bytes) {
        Ok(_) if bytes.ends_with(b"\n") => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Ok(_) => Err(eof().into()),
        Err(e) => Err(CliError::new(EXIT_INVALID_INPUT, e.to_string()).into()),
    }
}

/// etcdctl's `parseRequestUnion`: one `put`/`get`/`del` line, with the verb's own flags and checks.
fn parse_op(line: &str) -> Result<pb::RequestOp, Abort> {
    use pb::request_op::Request;
    let args = go_syntax::argify(line)?;
    let invalid = |what: &str| CliError::new(EXIT_INVALID_INPUT, format!("{what}: {line}"));
    if args.len() < 2 {
        return Err(invalid("invalid txn compare request").into());
    }
    let args = with_go_bool_values(args).ok_or_else(|| invalid("invalid txn request"))?;
    let op = OpLine::try_parse_from(&args).map_err(|_| invalid("invalid txn request"))?;
    let request = match op {
        // Go reads a missing value from the rest of stdin, which its line reader has already
        // buffered: for any txn that fits in one read the value is missing.
        OpLine::Put(put) => Request::RequestPut(put.request(|| Ok(String::new()))?),
        OpLine::Get(get) => Request::RequestRange(get.request()?),
        OpLine::Del(del) => Request::RequestDeleteRange(del.request()?),
    };
    Ok(pb::RequestOp { request: Some(request) })
}

/// pflag lets a boolean flag take a value (`--prefix=true`, `--prev-kv=false`), clap does not:
/// `--flag=<true>` becomes `--flag`, `--flag=<false>` goes away. `None`: not a Go bool.
fn with_go_bool_values(args: Vec<String>) -> Option<Vec<String>> {
    let command = OpLine::command();
    let bools: Vec<&str> = command
        .get_subcommands()
        .flat_map(|verb| verb.get_arguments())
        .filter(|arg| matches!(arg.get_action(), ArgAction::SetTrue))
        .filter_map(|arg| arg.get_long())
        .collect();
    let mut out = Vec::with_capacity(args.len());
    for arg in args {
        let assignment = arg.strip_prefix("--").and_then(|flag| flag.split_once('='));
        match assignment.filter(|(name, _)| bools.contains(name)) {
            Some((name, value)) => {
                if parse_go_bool(value).ok()? {
                    out.push(format!("--{name}"));
                }
            }
            None => out.push(arg),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Cli, Command};

    fn read(input: &str, interactive: bool) -> (Result<pb::TxnRequest, Abort>, String) {
        let mut prompts = Vec::new();
        let result = read_txn(&mut input.as_bytes(), &mut prompts, interactive);
        (result, String::from_utf8(prompts).expect("utf-8 prompts"))
    }

    fn exit(code: u8, message: &str) -> Abort {
        Abort::Exit(CliError::new(code, message))
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cli = Cli::try_parse_from(["kvctl", "txn", "-i"]).expect("parses");
        let Command::Txn(txn) = cli.command else { panic!("not txn") };
        assert!(txn.interactive && txn.args.is_empty());
        let cli = Cli::try_parse_from(["kvctl", "-w", "json", "txn", "--interactive", "extra"]).expect("parses");
        let Command::Txn(txn) = cli.command else { panic!("not txn") };
        assert!(txn.interactive);
        assert_eq!(txn.args, ["extra"]);
    }

    #[test]
    fn reads_three_sections() {
        let input = "mod(\"k\") > \"0\"\n  value(\"k\") = \"v\"  \n\nput k v --prev-kv\nget k --prefix\n\ndel k\n\n";
        let (request, prompts) = read(input, false);
        let request = request.expect("valid txn");
        assert_eq!(prompts, "");
        assert_eq!((request.compare.len(), request.success.len(), request.failure.len()), (2, 2, 1));
        let Some(pb::request_op::Request::RequestPut(put)) = &request.success[0].request else { panic!("not put") };
        assert_eq!((put.key.as_slice(), put.value.as_slice(), put.prev_kv), (&b"k"[..], &b"v"[..], true));
        let Some(pb::request_op::Request::RequestRange(get)) = &request.success[1].request else { panic!("not get") };
        assert_eq!((get.key.as_slice(), get.range_end.as_slice()), (&b"k"[..], &b"l"[..]));
        let Some(pb::request_op::Request::RequestDeleteRange(del)) = &request.failure[0].request else {
            panic!("not del")
        };
        assert_eq!(del.key, b"k");
    }

    #[test]
    fn bool_flags_take_go_values() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            with_go_bool_values(args(&["get", "k", "--prefix=true", "--keys-only=0", "--rev=3"])),
            Some(args(&["get", "k", "--prefix", "--rev=3"]))
        );
        assert_eq!(with_go_bool_values(args(&["del", "k", "--prev-kv=maybe"])), None);
        let (request, _) = read("\nget k --prefix=T\n\n\n", false);
        let success = request.expect("valid txn").success;
        let Some(pb::request_op::Request::RequestRange(get)) = &success[0].request else { panic!("not get") };
        assert_eq!(get.range_end, b"l");
    }

    #[test]
    fn prompts_when_interactive() {
        let (request, prompts) = read("\n\n\n", true);
        assert_eq!(request.map(|r| r.compare.len()), Ok(0));
        assert_eq!(prompts, format!("{}\n{}\n{}\n", PROMPTS[0], PROMPTS[1], PROMPTS[2]));
        // A failure stops the prompts where etcdctl stops.
        let (request, prompts) = read("bad\n", true);
        assert_eq!(request, Err(exit(3, "malformed comparison: bad")));
        assert_eq!(prompts, "compares:\n");
    }

    #[test]
    fn input_errors_like_etcdctl() {
        let cases = [
            ("", exit(3, "EOF")),
            ("\n\nput a b", exit(3, "EOF")),
            ("\n\n", exit(3, "EOF")),
            ("\nput\n\n\n", exit(3, "invalid txn compare request: put")),
            ("\nfoo a b\n\n\n", exit(3, "invalid txn request: foo a b")),
            ("\nget k3 -w json\n\n\n", exit(3, "invalid txn request: get k3 -w json")),
            ("\nput a\n\n\n", exit(128, "put command needs 1 argument and input from stdin or 2 arguments")),
            (
                "\nput a b --lease=zz\n\n\n",
                exit(128, "bad lease ID (strconv.ParseInt: parsing \"zz\": invalid syntax), expecting ID in Hex"),
            ),
            ("\nget a --consistency=x\n\n\n", exit(4, "unknown consistency flag \"x\"")),
            (
                "\ndel a b c\n\n\n",
                exit(128, "del command needs one argument as key and an optional argument as range_end"),
            ),
            ("\nput \"a\\q\" v\n\n\n", exit(3, "invalid syntax")),
            (
                "ver(\"k\") = \"1\"\n\nput 'k' v x y z\n\n\n",
                Abort::Panic("runtime error: slice bounds out of range [:5] with length 3".into()),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(read(input, false).0, Err(want), "{input:?}");
        }
    }
}
