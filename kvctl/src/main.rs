//! The `kvctl` binary: parse flags, run one command, exit with etcdctl's exit code.

use std::io::Write;
use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match kvctl::args::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(failure) => {
            eprint!("{}", failure.stderr.lines().next().map(|l| format!("{l}\n")).unwrap_or_default());
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(failure.stdout.as_bytes());
            let _ = stdout.flush();
            eprint!("{}", failure.stderr.lines().skip(1).map(|l| format!("{l}\n")).collect::<String>());
            return ExitCode::from(failure.code);
        }
    };
    match cli.run().await {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`kvctl get … | head`) is not worth a panic.
            let _ = stdout.write_all(&out);
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(err) => {
            if !err.is_silent() {
                eprintln!("Error: {}", err.message);
            }
            ExitCode::from(err.code)
        }
    }
}
