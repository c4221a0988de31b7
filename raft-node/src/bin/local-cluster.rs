//! `local-cluster`: a three-member cluster on 127.0.0.1 in the foreground, like etcd's Procfile
//! (clients on 2379, 22379, 32379; peers on 2380, 22380, 32380). Each member's log lines are prefixed with
//! its name; Ctrl-C stops all three cleanly. The members are this same binary, re-executed.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::Context;
use clap::Parser;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts three `raft-node` members on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "local-cluster", version, about)]
struct Args {
    /// Directory holding the members' data dirs (`infra1.etcd`, ...).
    #[arg(long, default_value = ".")]
    dir: PathBuf,

    /// Initial cluster token.
    #[arg(long, default_value = "etcd-cluster-1")]
    initial_cluster_token: String,
}

const MEMBERS: [(&str, u16, u16); 3] = [("infra1", 2379, 2380), ("infra2", 22379, 22380), ("infra3", 32379, 32380)];

fn member_args(args: &Args, name: &str, client: u16, peer: u16) -> Vec<String> {
    let initial_cluster: Vec<String> = MEMBERS.iter().map(|(n, _, p)| format!("{n}=http://127.0.0.1:{p}")).collect();
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", args.dir.join(format!("{name}.etcd")).display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster={}", initial_cluster.join(",")),
        format!("--initial-cluster-token={}", args.initial_cluster_token),
        "--initial-cluster-state=new".to_string(),
    ]
}

/// One member: the same flags and logging as the `raft-node` binary.
async fn run_member() -> std::process::ExitCode {
    raft_node::cli::main().await
}

/// Copies a child's output to ours, each line prefixed with the member's name.
fn relay(name: &'static str, stream: impl tokio::io::AsyncRead + Unpin + Send + 'static) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            println!("{name:<6} | {line}");
        }
    });
}

/// Set in the members' environment: this same binary then runs as one member (so `cargo run --bin
/// local-cluster` needs no other binary).
const MEMBER_ENV: &str = "LOCAL_CLUSTER_MEMBER";

fn main() -> anyhow::Result<()> {
    if std::env::var_os(MEMBER_ENV).is_some() {
        // A member runs on the runtime `raft-node` picks (see `raft_node::runtime`).
        let runtime = raft_node::runtime::build().map_err(anyhow::Error::msg)?;
        let code = runtime.block_on(run_member());
        std::process::exit(if code == std::process::ExitCode::SUCCESS { 0 } else { 1 });
    }
    tokio::runtime::Runtime::new()?.block_on(supervise())
}

/// Starts the three members and relays their output until Ctrl-C or SIGTERM.
async fn supervise() -> anyhow::Result<()> {
    let args = Args::parse();
    let exe = std::env::current_exe()?;
    std::fs::create_dir_all(&args.dir)?;

    let mut children: Vec<(&str, Child)> = Vec::new();
    for (name, client, peer) in MEMBERS {
        let mut child = Command::new(&exe)
            .env(MEMBER_ENV, name)
            .args(member_args(&args, name, client, peer))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        if let Some(out) = child.stdout.take() {
            relay(name, out);
        }
        if let Some(err) = child.stderr.take() {
            relay(name, err);
        }
        children.push((name, child));
    }
    println!("three members serving clients on 127.0.0.1:2379, 127.0.0.1:22379 and 127.0.0.1:32379; Ctrl-C stops them");

    // A member that dies is reported and the others keep serving (the cluster survives one failure);
    // only Ctrl-C or SIGTERM stops them all.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut running: Vec<bool> = vec![true; children.len()];
    loop {
        let exits = children
            .iter_mut()
            .zip(&running)
            .filter(|(_, alive)| **alive)
            .map(|((name, child), _)| Box::pin(async move { (*name, child.wait().await) }));
        let exits: Vec<_> = exits.collect();
        let any_exit = async {
            if exits.is_empty() {
                std::future::pending::<()>().await;
            }
            futures::future::select_all(exits).await.0
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            (name, status) = any_exit => {
                println!("{name} exited ({status:?}); the others keep running");
                if let Some(i) = MEMBERS.iter().position(|(n, _, _)| *n == name) {
                    running[i] = false;
                }
            }
        }
    }
    println!("stopping the cluster");
    for (_, child) in &children {
        if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }
    for (name, child) in &mut children {
        match child.wait().await {
            Ok(status) => println!("{name} stopped ({status})"),
            Err(err) => println!("{name}: {err}"),
        }
    }
    Ok(())
}
