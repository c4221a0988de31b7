//! Command-line parsing that behaves like etcdctl's cobra/pflag front end.
//!
//! clap does the parsing; this module makes the edges match what etcdctl users see:
//! - boolean flags take Go's optional `=value` (`--prefix=true`, `--hex=false`, `--keys=0`), per verb;
//! - parse errors print cobra's texts (`unknown flag: --foo`, `flag needs an argument: --rev`,
//!   `invalid argument "x" for "--limit" flag: strconv.ParseInt: ...`, `unknown command "foo" for
//!   "etcdctl"`), with the usage on stdout between two `Error:` lines, and exit 1;
//! - an output format etcdctl does not know is `unsupported output format`, exit 4;
//! - a flag's value may start with `-` (`--rev -1`), as pflag takes the next word whatever it is;
//! - a group verb without its subcommand (`kvctl lease`) prints its help and exits 0.

use std::collections::HashSet;
use std::error::Error as _;
use std::ffi::OsString;

use clap::builder::StyledStr;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Command, CommandFactory, FromArgMatches};

use crate::error::{EXIT_BAD_FEATURE, EXIT_ERROR};
use crate::global::parse_go_bool;
use crate::Cli;

/// What parsing ended with when it did not produce a command to run.
#[derive(Debug)]
pub struct ParseFailure {
    /// Printed to stdout (the usage or help text).
    pub stdout: String,
    /// Printed to stderr as they are (whole lines, each ending in `\n`).
    pub stderr: String,
    pub code: u8,
}

impl ParseFailure {
    fn error(message: &str, usage: String) -> Self {
        let line = format!("Error: {message}\n");
        ParseFailure { stdout: usage, stderr: format!("{line}{line}"), code: EXIT_ERROR }
    }
}

/// Parses `argv` (program name first) into a [`Cli`].
pub fn parse(argv: Vec<OsString>) -> Result<Cli, ParseFailure> {
    let mut command = pflag_values(Cli::command());
    let path = subcommand_path(&command, &argv);
    let argv = match rewrite_bool_values(&command, &path, argv) {
        Ok(argv) => argv,
        Err((flag, value, reason)) => {
            let usage = usage_of(&mut command, &path);
            return Err(ParseFailure::error(&format!("invalid argument {value:?} for {flag:?} flag: {reason}"), usage));
        }
    };
    let matches = command.try_get_matches_from_mut(argv.clone()).map_err(|err| failure(&mut command, &path, err))?;
    Cli::from_arg_matches(&matches).map_err(|err| failure(&mut command, &path, err))
}

/// pflag gives a flag that takes a value the next word, whatever it looks like (`--rev -1`,
/// `--prefix-of -x`); clap would read a leading `-` as another flag.
fn pflag_values(command: Command) -> Command {
    command
        .mut_args(|arg| {
            let named = arg.get_long().is_some() || arg.get_short().is_some();
            let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
            if named && takes_value {
                arg.allow_hyphen_values(true)
            } else {
                arg
            }
        })
        .mut_subcommands(pflag_values)
}

/// Long names of the flags that take no value (clap's `SetTrue`) on the command line's verb: the
/// root's (global) flags and those of each subcommand on `path`. Per verb, because a name can be
/// a bool in one verb and take a value in another (`get --prefix` vs `make-mirror --prefix=p/`).
fn bool_flags(command: &Command, path: &[String]) -> HashSet<String> {
    let mut names = HashSet::new();
    let mut current = Some(command);
    let mut rest = path.iter();
    while let Some(cmd) = current {
        for arg in cmd.get_arguments() {
            if let (ArgAction::SetTrue, Some(long)) = (arg.get_action(), arg.get_long()) {
                names.insert(long.to_string());
            }
        }
        current = rest.next().and_then(|name| cmd.find_subcommand(name));
    }
    names
}

/// pflag lets a boolean flag take a value after `=`: `--flag=true` becomes `--flag`,
/// `--flag=false` disappears. Arguments after `--` are left alone.
fn rewrite_bool_values(
    command: &Command,
    path: &[String],
    argv: Vec<OsString>,
) -> Result<Vec<OsString>, (String, String, String)> {
    let names = bool_flags(command, path);
    let mut out = Vec::with_capacity(argv.len());
    let mut rest = argv.into_iter();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            out.push(arg);
            out.extend(rest.by_ref());
            break;
        }
        let bool_assignment = text
            .strip_prefix("--")
            .and_then(|flag| flag.split_once('='))
            .filter(|(name, _)| names.contains(*name))
            .map(|(name, value)| (name.to_string(), value.to_string()));
        match bool_assignment {
            Some((name, value)) => match parse_go_bool(&value) {
                Ok(true) => out.push(OsString::from(format!("--{name}"))),
                Ok(false) => {}
                Err(reason) => return Err((format!("--{name}"), value, reason)),
            },
            None => out.push(arg),
        }
    }
    Ok(out)
}

/// The names of the subcommands given on the command line (`["lease", "grant"]`), skipping
/// flags and their values, so the usage printed is the one of the verb that failed.
fn subcommand_path(command: &Command, argv: &[OsString]) -> Vec<String> {
    let mut path = Vec::new();
    let mut current = command;
    let mut tokens = argv.iter().skip(1).map(|a| a.to_string_lossy().into_owned());
    while let Some(token) = tokens.next() {
        if token == "--" {
            break;
        }
        if let Some(flag) = token.strip_prefix("--") {
            if !flag.contains('=') && takes_value(current, command, |arg| arg.get_long() == Some(flag)) {
                tokens.next();
            }
            continue;
        }
        if let Some(short) = token.strip_prefix('-').and_then(|s| s.chars().next()) {
            if token.len() == 2 && takes_value(current, command, |arg| arg.get_short() == Some(short)) {
                tokens.next();
            }
            continue;
        }
        match current.find_subcommand(&token) {
            Some(sub) => {
                path.push(token);
                current = sub;
            }
            None => break,
        }
    }
    path
}

fn takes_value(current: &Command, root: &Command, matches: impl Fn(&clap::Arg) -> bool) -> bool {
    current.get_arguments().chain(root.get_arguments()).find(|arg| matches(arg)).is_some_and(|arg| {
        matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) && !arg.is_require_equals_set()
    })
}

fn usage_of(command: &mut Command, path: &[String]) -> String {
    // Building from the root gives subcommands their full names (`kvctl lease grant`).
    command.build();
    let mut current: &Command = command;
    for name in path {
        match current.find_subcommand(name) {
            Some(sub) => current = sub,
            None => break,
        }
    }
    let help: StyledStr = current.clone().render_help();
    format!("{}\n", help.to_string().trim_end())
}

/// Turns a clap error into what etcdctl prints for the same mistake.
fn failure(command: &mut Command, path: &[String], err: clap::Error) -> ParseFailure {
    let context = |kind: ContextKind| match err.get(kind) {
        Some(ContextValue::String(text)) => text.clone(),
        Some(ContextValue::Strings(texts)) => texts.first().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    let invalid_arg = context(ContextKind::InvalidArg);
    let flag = flag_name(&invalid_arg);
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        | ErrorKind::MissingSubcommand
        | ErrorKind::DisplayVersion => ParseFailure { stdout: usage_of(command, path), stderr: String::new(), code: 0 },
        ErrorKind::InvalidValue | ErrorKind::ValueValidation if flag == "--write-out" || flag == "-w" => ParseFailure {
            stdout: String::new(),
            stderr: "Error: unsupported output format\n".to_string(),
            code: EXIT_BAD_FEATURE,
        },
        ErrorKind::UnknownArgument => {
            let message = match invalid_arg.strip_prefix('-') {
                Some(short) if !short.starts_with('-') => {
                    let letter = short.chars().next().unwrap_or('-');
                    format!("unknown shorthand flag: '{letter}' in {invalid_arg}")
                }
                _ => format!("unknown flag: {}", invalid_arg.split('=').next().unwrap_or(&invalid_arg)),
            };
            ParseFailure::error(&message, usage_of(command, path))
        }
        // cobra answers an unknown word after a group verb (`lease foo`) with the group's help.
        ErrorKind::InvalidSubcommand if !path.is_empty() => {
            ParseFailure { stdout: usage_of(command, path), stderr: String::new(), code: 0 }
        }
        ErrorKind::InvalidSubcommand => {
            let name = context(ContextKind::InvalidSubcommand);
            let mut parent = String::from("etcdctl");
            for p in path {
                parent.push(' ');
                parent.push_str(p);
            }
            let line = format!("Error: unknown command {name:?} for {parent:?}\n");
            ParseFailure {
                stdout: String::new(),
                stderr: format!("{line}Run '{parent} --help' for usage.\n{line}"),
                code: EXIT_ERROR,
            }
        }
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let value = context(ContextKind::InvalidValue);
            let message = if value.is_empty() && err.kind() == ErrorKind::InvalidValue {
                format!("flag needs an argument: {flag}")
            } else {
                let reason = err.source().map(|source| go_reason(&value, &source.to_string())).unwrap_or_default();
                format!("invalid argument {value:?} for {:?} flag: {reason}", pflag_name(command, &flag))
            };
            ParseFailure::error(&message, usage_of(command, path))
        }
        _ => {
            let rendered = err.to_string();
            let first = rendered.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
            ParseFailure::error(&first, usage_of(command, path))
        }
    }
}

/// `--limit <LIMIT>` → `--limit`; `--interactive[=<INTERACTIVE>]` → `--interactive`.
fn flag_name(invalid_arg: &str) -> String {
    invalid_arg.split([' ', '=', '[']).next().unwrap_or(invalid_arg).to_string()
}

/// pflag names a flag that has a shorthand as `-w, --write-out`.
fn pflag_name(command: &Command, flag: &str) -> String {
    let long = flag.trim_start_matches('-');
    let mut stack = vec![&*command];
    while let Some(cmd) = stack.pop() {
        if let Some(arg) = cmd.get_arguments().find(|arg| arg.get_long() == Some(long)) {
            return match arg.get_short() {
                Some(short) => format!("-{short}, --{long}"),
                None => format!("--{long}"),
            };
        }
        stack.extend(cmd.get_subcommands());
    }
    flag.to_string()
}

/// Go's parse error for the value: integer parse errors become `strconv.ParseInt` texts; our own
/// value parsers already speak Go (durations, bools).
fn go_reason(value: &str, reason: &str) -> String {
    if reason.contains("invalid digit") || reason.contains("cannot parse integer from empty string") {
        format!("strconv.ParseInt: parsing {value:?}: invalid syntax")
    } else if reason.contains("too large") || reason.contains("too small") {
        format!("strconv.ParseInt: parsing {value:?}: value out of range")
    } else {
        reason.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        std::iter::once("kvctl").chain(words.iter().copied()).map(OsString::from).collect()
    }

    #[test]
    fn bool_values_are_per_verb() {
        // `--prefix` is a bool of get, a value of make-mirror.
        assert!(parse(argv(&["get", "--prefix=true", "a"])).is_ok());
        assert!(parse(argv(&["get", "--prefix=false", "a"])).is_ok());
        assert!(parse(argv(&["make-mirror", "--prefix=mm/", "127.0.0.1:2"])).is_ok());
        let failure = parse(argv(&["get", "--prefix=maybe", "a"])).err().expect("refused");
        assert_eq!(failure.code, EXIT_ERROR);
        assert!(failure
            .stderr
            .starts_with("Error: invalid argument \"maybe\" for \"--prefix\" flag: strconv.ParseBool"));
        // A bool whose default is true takes its value after `=` only (`--interactive=false`).
        assert!(parse(argv(&["user", "add", "u", "--interactive=false"])).is_ok());
        let failure = parse(argv(&["user", "passwd", "u", "--interactive=maybe"])).expect_err("refused");
        assert!(failure
            .stderr
            .starts_with("Error: invalid argument \"maybe\" for \"--interactive\" flag: strconv.ParseBool"));
    }

    #[test]
    fn cobra_errors() {
        let unknown = parse(argv(&["frobnicate"])).err().expect("refused");
        assert_eq!(
            unknown.stderr,
            "Error: unknown command \"frobnicate\" for \"etcdctl\"\nRun 'etcdctl --help' for usage.\n\
             Error: unknown command \"frobnicate\" for \"etcdctl\"\n"
        );
        let format = parse(argv(&["-w", "yaml", "get", "a"])).err().expect("refused");
        assert_eq!((format.code, format.stderr.as_str()), (EXIT_BAD_FEATURE, "Error: unsupported output format\n"));
        assert!(parse(argv(&["get", "a", "--rev", "-1"])).is_ok(), "a value may start with '-'");
    }
}
