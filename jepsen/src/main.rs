//! `jepsen`: the fault-injection harness's command line. `jepsen test` runs one test and writes a
//! report folder; `jepsen campaign` runs many over the workload × fault matrix and writes a table;
//! `jepsen fuzz` compares ours with etcd 3.5.1 on random requests. They exit 0 when everything is
//! valid, 1 when something is invalid (a difference, a crash of ours), 2 when undecided, 3 when the
//! harness itself failed.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jepsen::bench::options::BenchOptions;
use jepsen::campaign::{self, CampaignOptions};
use jepsen::fuzz::options::FuzzOptions;
use jepsen::options::TestOptions;
use jepsen::{bench, fuzz, netns, report, run, Validity};

#[derive(Debug, Parser)]
#[command(name = "jepsen", about = "Fault-injection tests of an etcd-compatible cluster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one test: start a three-member cluster, run a workload while injecting faults, check the
    /// history and write a report folder
    Test(TestOptions),
    /// Run many tests over the workload × fault matrix (each a child `jepsen test`) and print a
    /// table of their verdicts
    #[command(after_help = campaign_help())]
    Campaign(CampaignOptions),
    /// Run etcd's benchmark workloads against fresh three-member clusters of ours and/or etcd and
    /// print a table (QPS, latency percentiles, ratio ours/etcd, members' RSS and CPU); with
    /// `--scale`, probe one member of each with many watchers, a large load, compaction and defrag,
    /// a Watch stream left unread and one Range of the whole load; with `--size`, load one member of
    /// each with 10 GiB, restart it and let a new member catch up from it
    Bench(BenchOptions),
    /// Send random requests built from the protobuf descriptors to one member of ours and one of etcd
    /// 3.5.1 (plain child processes on loopback) and print a table of the answers that differ
    Fuzz(FuzzOptions),
}

/// The default fault groups, for `jepsen campaign --help`.
fn campaign_help() -> String {
    format!("FAULT GROUPS (default --faults):\n  {}", campaign::FAULT_GROUPS.join("\n  "))
}

/// The exit code when the harness itself fails (as opposed to the run being invalid).
const EXIT_ERROR: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let opts = match cli.command {
        Command::Test(opts) => opts,
        Command::Campaign(opts) => return run_campaign(&opts),
        Command::Bench(opts) => return run_bench(opts),
        Command::Fuzz(opts) => return run_fuzz(opts),
    };
    if !netns::is_inside() {
        // Everything the run does to the network happens in a namespace of its own.
        return reexec_in_namespaces();
    }
    init_tracing();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("jepsen: cannot start the runtime: {err}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match runtime.block_on(run::run(opts)) {
        Ok(outcome) => {
            print!("{}", report::render(&outcome.summary));
            println!("report: {}", outcome.dir.display());
            ExitCode::from(run::exit_code(outcome.summary.valid))
        }
        Err(err) => {
            eprintln!("jepsen: {err}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run_campaign(opts: &CampaignOptions) -> ExitCode {
    match campaign::run(opts) {
        Ok((dir, rows)) => {
            print!("{}", campaign::table(&rows));
            println!("campaign: {}", dir.display());
            ExitCode::from(run::exit_code(campaign::overall(&rows)))
        }
        Err(err) => {
            eprintln!("jepsen: {err}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Runs this command again in private network and PID namespaces and exits with its status.
fn reexec_in_namespaces() -> ExitCode {
    match netns::reexec() {
        Ok(status) => ExitCode::from(status.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(EXIT_ERROR)),
        Err(err) => {
            eprintln!("jepsen: {err}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Log lines on stderr (`RUST_LOG` to filter).
fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,h2=warn,tower=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// `jepsen bench`: like `jepsen test`, it re-executes itself in private network and PID namespaces
/// (members on 127.0.0.11..13 need no free host ports and never outlive it), then runs the rounds;
/// with `--host-network` it stays where it was started.
fn run_bench(opts: BenchOptions) -> ExitCode {
    if !netns::is_inside() {
        // Inside the namespace there is no network to fetch etcd with.
        if let Err(err) = bench::ensure_etcd(&opts) {
            eprintln!("jepsen: {err}");
            return ExitCode::from(EXIT_ERROR);
        }
        if !opts.host_network {
            return reexec_in_namespaces();
        }
    }
    init_tracing();
    let result = tokio::runtime::Runtime::new()
        .map_err(|err| format!("cannot start the runtime: {err}"))
        .and_then(|runtime| runtime.block_on(bench::run(opts)).map_err(|err| err.to_string()));
    match result {
        Ok(outcome) => {
            print!("{}", outcome.table);
            println!("report: {}", outcome.dir.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("jepsen: {err}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// `jepsen fuzz`: plain child processes on loopback, no namespaces; exits 1 on any difference or a crash
/// of ours.
fn run_fuzz(opts: FuzzOptions) -> ExitCode {
    init_tracing();
    let result = tokio::runtime::Runtime::new()
        .map_err(|err| format!("cannot start the runtime: {err}"))
        .and_then(|runtime| runtime.block_on(fuzz::run(opts)).map_err(|err| err.to_string()));
    match result {
        Ok(outcome) => {
            print!("{}", outcome.table);
            println!("report: {}", outcome.dir.display());
            ExitCode::from(run::exit_code(if outcome.failed { Validity::Invalid } else { Validity::Valid }))
        }
        Err(err) => {
            eprintln!("jepsen: {err}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
