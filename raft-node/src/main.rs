//! The `raft-node` server binary: etcd's flags in, a member running until SIGINT/SIGTERM (see
//! [`raft_node::cli`]).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    raft_node::cli::main().await
}
