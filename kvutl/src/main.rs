//! The `kvutl` binary: parse flags, run one command, print etcdutl's `Error:` line and exit code.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = kvutl::Cli::parse();
    match cli.run() {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`kvutl ... | head`) is not worth a panic.
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("Error: {}", err.message);
            ExitCode::from(err.code)
        }
    }
}
