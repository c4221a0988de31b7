//! The `raft-node` server binary: parses etcd's flags, sets up logging, runs a member until SIGINT/SIGTERM.

use clap::Parser;
use raft_node::config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    raft_node::logging::init(&raft_node::logging::LogSettings::from_config(&config))?;
    raft_node::server::run(config, raft_node::server::shutdown_signal()).await
}
