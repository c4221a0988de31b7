//! The `raft-node` server binary: parses etcd's flags, sets up logging, runs a member until SIGINT/SIGTERM.

use clap::Parser;
use raft_node::config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    raft_node::logging::init();
    raft_node::server::run(Config::parse(), raft_node::server::shutdown_signal()).await
}
