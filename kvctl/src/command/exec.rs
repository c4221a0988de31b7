//! Running a user's command for `watch ... -- <command>` and `lock <name> <command>`, with the
//! error texts of Go's `exec.Cmd.Run` (etcdctl prints them).

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use crate::printer::fields::go_quote;

/// Runs `argv` with stdout and stderr shared with ours and stdin empty, `env` added to our
/// environment, and waits for it. `Err` holds Go's error text (`exit status 1`, `signal: killed`,
/// `exec: "x": executable file not found in $PATH`).
pub(crate) async fn run(argv: &[String], env: &[(String, String)]) -> Result<(), String> {
    let Some((program, args)) = argv.split_first() else { return Ok(()) };
    // Our buffered output must come before the command's.
    let _ = std::io::stdout().flush();
    let mut command = tokio::process::Command::new(program);
    command.args(args).envs(env.iter().cloned()).stdin(Stdio::null()).stdout(Stdio::inherit()).stderr(Stdio::inherit());
    let status = command.status().await.map_err(|err| spawn_error(program, &err))?;
    match status_error(status) {
        Some(text) => Err(text),
        None => Ok(()),
    }
}

/// Go's `%q` of a `[]string`: `["echo" "hi"]`.
pub(crate) fn quote_args(argv: &[String]) -> String {
    let quoted: Vec<String> = argv.iter().map(|a| go_quote(a.as_bytes())).collect();
    format!("[{}]", quoted.join(" "))
}

/// Go's `exec.LookPath` failure for a bare name, `fork/exec` failures otherwise.
fn spawn_error(program: &str, err: &std::io::Error) -> String {
    let reason = match err.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => err.to_string(),
    };
    if program.contains('/') {
        format!("fork/exec {program}: {reason}")
    } else if err.kind() == std::io::ErrorKind::NotFound {
        format!("exec: {}: executable file not found in $PATH", go_quote(program.as_bytes()))
    } else {
        format!("exec: {}: {reason}", go_quote(program.as_bytes()))
    }
}

/// Go's `ProcessState.String()` for a failed run; `None` for success.
fn status_error(status: ExitStatus) -> Option<String> {
    if status.success() {
        return None;
    }
    if let Some(code) = status.code() {
        return Some(format!("exit status {code}"));
    }
    let signal = status.signal().unwrap_or(0);
    let core = if status.core_dumped() { " (core dumped)" } else { "" };
    Some(format!("signal: {}{core}", signal_name(signal)))
}

/// Go's names of Linux signals (`syscall.Signal.String()`).
fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 16] = [
        "",
        "hangup",
        "interrupt",
        "quit",
        "illegal instruction",
        "trace/breakpoint trap",
        "aborted",
        "bus error",
        "floating point exception",
        "killed",
        "user defined signal 1",
        "segmentation fault",
        "user defined signal 2",
        "broken pipe",
        "alarm clock",
        "terminated",
    ];
    match usize::try_from(signal).ok().and_then(|i| NAMES.get(i)) {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => format!("signal {signal}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_texts() {
        assert_eq!(quote_args(&["echo".into(), "a \"b\"".into()]), r#"["echo" "a \"b\""]"#);
        assert_eq!(status_error(ExitStatus::from_raw(3 << 8)).as_deref(), Some("exit status 3"));
        assert_eq!(status_error(ExitStatus::from_raw(9)).as_deref(), Some("signal: killed"));
        assert_eq!(status_error(ExitStatus::from_raw(0)), None);
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(spawn_error("nosuch", &missing), "exec: \"nosuch\": executable file not found in $PATH");
        assert_eq!(spawn_error("./nosuch", &missing), "fork/exec ./nosuch: no such file or directory");
    }

    #[tokio::test]
    async fn runs_and_reports() {
        assert_eq!(run(&["true".into()], &[]).await, Ok(()));
        assert_eq!(run(&["false".into()], &[]).await, Err("exit status 1".into()));
        let env = [("KVCTL_TEST_VAR".to_string(), "7".to_string())];
        let check = ["sh".to_string(), "-c".to_string(), "exit $KVCTL_TEST_VAR".to_string()];
        assert_eq!(run(&check, &env).await, Err("exit status 7".into()));
    }
}
