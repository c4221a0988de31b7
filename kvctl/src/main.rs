//! The `kvctl` binary: parse flags, run one command, exit with etcdctl's exit code.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = kvctl::Cli::parse();
    match cli.run().await {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`kvctl get … | head`) is not worth a panic.
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
