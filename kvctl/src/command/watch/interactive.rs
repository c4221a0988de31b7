//! `watch -i`: reads `watch [options] <key> [range_end] [-- command]` and `progress` lines from
//! stdin and runs every watch on one stream, until stdin ends (which, as in etcdctl, ends the
//! command with an error).

use std::collections::HashMap;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::{env_key_args, show, WatchCommand, WatchPlan, ERR_ARGS, ERR_ARGS_CONFLICT_ENV, ERR_ARGS_SEPARATOR};
use crate::concurrency::{Delivery, WatchHandle, WatchStream};
use crate::error::{CliError, EXIT_INVALID_INPUT};
use crate::global::{Conn, GlobalFlags};
use crate::printer::Printer;

/// One stdin line parsed with the `watch` verb's own flags.
#[derive(Debug, Parser)]
#[command(name = "watch", disable_help_flag = true)]
struct WatchLine {
    #[command(flatten)]
    cmd: WatchCommand,
}

/// What the stdin reader hands over: a whole line, or why there will be no more.
enum Input {
    Line(String),
    End(String),
}

struct Session {
    conn: Conn,
    printer: Printer,
    env_key: String,
    env_range: String,
    stream: Option<WatchStream>,
    /// The command each watch runs per event.
    execs: HashMap<WatchHandle, Vec<String>>,
}

pub(super) async fn run(global: &GlobalFlags, env_key: &str, env_range: &str) -> Result<String, CliError> {
    let mut session = Session {
        conn: global.connect().await?,
        printer: Printer { format: global.write_out, hex: global.hex, value_only: false },
        env_key: env_key.to_string(),
        env_range: env_range.to_string(),
        stream: None,
        execs: HashMap::new(),
    };
    let mut lines = read_lines();
    loop {
        tokio::select! {
            input = lines.recv() => match input {
                Some(Input::Line(line)) => session.on_line(&line).await?,
                Some(Input::End(reason)) => return Err(end_of_input(&reason)),
                None => return Err(end_of_input("")),
            },
            delivery = next_delivery(&mut session.stream) => match delivery {
                Some(Delivery::Response(handle, resp)) => {
                    let exec = session.execs.get(&handle).cloned().unwrap_or_default();
                    show(&session.printer, &resp, &exec).await?;
                }
                Some(Delivery::Closed(_)) => {}
                None => {
                    session.stream = None;
                    session.execs.clear();
                }
            },
        }
    }
}

impl Session {
    /// etcdctl's `watchInteractiveFunc` for one line: bad lines are reported on stderr and
    /// skipped, bad flags end the command.
    async fn on_line(&mut self, line: &str) -> Result<(), CliError> {
        let args = argify(line).map_err(|e| CliError::new(EXIT_INVALID_INPUT, e))?;
        let Some(verb) = args.first() else {
            eprintln!("Invalid command: {line} (watch and progress supported)");
            return Ok(());
        };
        match verb.as_str() {
            "watch" => {
                if args.len() < 2 && self.env_key.is_empty() {
                    eprintln!("Invalid command {line} (command type or key is not provided)");
                    return Ok(());
                }
                let (cmd, plan) = parse_line(&args[1..], &self.env_key, &self.env_range)?;
                match cmd.create_request(&plan.key_args) {
                    Ok(request) => self.add(request, plan.exec).await?,
                    Err(err) => eprintln!("Invalid command {line} ({})", err.message),
                }
            }
            "progress" => {
                if let Some(stream) = &mut self.stream {
                    stream.request_progress().await;
                }
            }
            _ => eprintln!("Invalid command {line} (only support watch)"),
        }
        Ok(())
    }

    async fn add(
        &mut self,
        request: proto::etcdserverpb::WatchCreateRequest,
        exec: Vec<String>,
    ) -> Result<(), CliError> {
        let handle = match &mut self.stream {
            Some(stream) => stream.add(request).await,
            None => {
                let (stream, handle) = WatchStream::open(&self.conn, true, request).await?;
                self.stream = Some(stream);
                handle
            }
        };
        self.execs.insert(handle, exec);
        Ok(())
    }
}

/// Go's `ReadString` error at the end of stdin (`EOF`) or on a read failure.
fn end_of_input(reason: &str) -> CliError {
    let reason = if reason.is_empty() { "EOF" } else { reason };
    CliError::new(EXIT_INVALID_INPUT, format!("Error reading watch request line: {reason}"))
}

/// The next delivery of the stream; never, while there is no stream.
async fn next_delivery(stream: &mut Option<WatchStream>) -> Option<Delivery> {
    match stream {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// Reads stdin on its own task, so a half-read line is never lost to `select!`. Like Go's
/// `ReadString('\n')`, a last line without its newline counts as the end of input.
fn read_lines() -> mpsc::Receiver<Input> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
        loop {
            let mut line = String::new();
            let input = match stdin.read_line(&mut line).await {
                Ok(_) if line.ends_with('\n') => {
                    line.pop();
                    Input::Line(line)
                }
                Ok(_) => Input::End(String::new()),
                Err(err) => Input::End(err.to_string()),
            };
            let end = matches!(input, Input::End(_));
            if tx.send(input).await.is_err() || end {
                return;
            }
        }
    });
    rx
}

/// etcdctl's `parseWatchArgs` in interactive mode: the line's own flags, positional arguments
/// before `--`, the command after it.
fn parse_line(rest: &[String], env_key: &str, env_range: &str) -> Result<(WatchCommand, WatchPlan), CliError> {
    let separator = rest.iter().position(|a| a == "--");
    if separator.is_some_and(|at| at + 1 == rest.len()) {
        return Err(CliError::bad_args(ERR_ARGS_SEPARATOR));
    }
    let argv = std::iter::once("watch".to_string()).chain(rest.iter().cloned());
    let cmd = WatchLine::try_parse_from(argv).map_err(flag_error)?.cmd;
    if separator.is_none() && cmd.args.is_empty() && env_key.is_empty() {
        return Err(CliError::bad_args(ERR_ARGS));
    }
    if separator.is_none() && !cmd.args.is_empty() && !env_key.is_empty() {
        return Err(CliError::bad_args(ERR_ARGS_CONFLICT_ENV));
    }
    // With a command, etcdctl does not check the env key against the arguments here.
    let mut key_args = env_key_args(env_key, env_range);
    key_args.extend(cmd.args.iter().cloned());
    let plan = WatchPlan { key_args, exec: cmd.exec.clone() };
    Ok((cmd, plan))
}

/// pflag's words for a bad flag on a line.
fn flag_error(err: clap::Error) -> CliError {
    let arg = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.split([' ', '=']).next().unwrap_or_default().to_string(),
        _ => String::new(),
    };
    let message = match err.kind() {
        ErrorKind::UnknownArgument if arg.starts_with("--") => format!("unknown flag: {arg}"),
        ErrorKind::UnknownArgument => {
            let letter = arg.trim_start_matches('-').chars().next().unwrap_or('-');
            format!("unknown shorthand flag: '{letter}' in {arg}")
        }
        ErrorKind::InvalidValue => format!("flag needs an argument: {arg}"),
        _ => err.to_string().lines().next().unwrap_or_default().trim_start_matches("error: ").to_string(),
    };
    CliError::bad_args(message)
}

/// etcdctl's `argify`: words split on whitespace, where a `"double-quoted"` word is unquoted
/// with Go's escapes and a `'single-quoted'` one taken literally. A quote that never closes is
/// skipped, as the regular expression etcdctl uses skips it.
pub(crate) fn argify(line: &str) -> Result<Vec<String>, String> {
    let chars: Vec<char> = line.chars().collect();
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c');
    let mut words = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if is_space(c) {
            at += 1;
        } else if c == '"' {
            match closing_double_quote(&chars, at) {
                Some(end) => {
                    words.push(go_unquote(&chars[at + 1..end])?);
                    at = end + 1;
                }
                None => at += 1,
            }
        } else if c == '\'' {
            match chars[at + 1..].iter().position(|&c| c == '\'') {
                Some(len) => {
                    words.push(chars[at + 1..at + 1 + len].iter().collect());
                    at += len + 2;
                }
                None => at += 1,
            }
        } else {
            let start = at;
            while at < chars.len() && !is_space(chars[at]) {
                at += 1;
            }
            words.push(chars[start..at].iter().collect());
        }
    }
    Ok(words)
}

/// The index of the `"` closing the one at `open`, skipping backslash escapes.
fn closing_double_quote(chars: &[char], open: usize) -> Option<usize> {
    let mut at = open + 1;
    while at < chars.len() {
        match chars[at] {
            '"' => return Some(at),
            '\\' => at += 2,
            '\n' => return None,
            _ => at += 1,
        }
    }
    None
}

/// Go's `strconv.Unquote` of a double-quoted string's inside; fails with Go's `invalid syntax`.
fn go_unquote(inner: &[char]) -> Result<String, String> {
    let bad = || "invalid syntax".to_string();
    let mut out = String::new();
    let mut rest = inner.iter().copied();
    while let Some(c) = rest.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = rest.next().ok_or_else(bad)?;
        let simple = match escaped {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' => Some('\\'),
            '"' => Some('"'),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (digits, radix) = match escaped {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => (2, 8),
            _ => return Err(bad()),
        };
        let mut text: String = if radix == 8 { escaped.to_string() } else { String::new() };
        for _ in 0..digits {
            text.push(rest.next().ok_or_else(bad)?);
        }
        let value = u32::from_str_radix(&text, radix).map_err(|_| bad())?;
        out.push(char::from_u32(value).ok_or_else(bad)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn argify_like_etcdctl() {
        let cases: [(&str, &[&str]); 6] = [
            ("watch foo --prefix", &["watch", "foo", "--prefix"]),
            ("  watch \"a b\\n\" 'c d'  ", &["watch", "a b\n", "c d"]),
            ("watch a\"b", &["watch", "a\"b"]),
            ("watch \"open", &["watch", "open"]),
            ("", &[]),
            ("watch \"\\x41\\u00e9\"", &["watch", "Aé"]),
        ];
        for (line, want) in cases {
            assert_eq!(argify(line), Ok(strings(want)), "{line}");
        }
        assert_eq!(argify("watch \"\\q\""), Err("invalid syntax".to_string()));
    }

    #[test]
    fn lines_parse_with_the_verb_flags() {
        let (cmd, plan) = parse_line(&strings(&["foo", "--prefix", "--rev=2", "--", "echo", "x"]), "", "").expect("ok");
        assert!(cmd.prefix);
        assert_eq!(cmd.rev, 2);
        assert_eq!(plan, WatchPlan { key_args: strings(&["foo"]), exec: strings(&["echo", "x"]) });
        let err = |rest: &[&str], key: &str| parse_line(&strings(rest), key, "").err().map(|e| (e.code, e.message));
        assert_eq!(err(&["foo", "--"], ""), Some((128, ERR_ARGS_SEPARATOR.to_string())));
        assert_eq!(err(&["--prefix"], ""), Some((128, ERR_ARGS.to_string())));
        assert_eq!(err(&["foo"], "k"), Some((128, ERR_ARGS_CONFLICT_ENV.to_string())));
        assert_eq!(err(&["foo", "--bogus"], ""), Some((128, "unknown flag: --bogus".to_string())));
        let (_, plan) = parse_line(&strings(&["--prev-kv"]), "k", "z").expect("env key");
        assert_eq!(plan.key_args, strings(&["k", "z"]));
    }
}
