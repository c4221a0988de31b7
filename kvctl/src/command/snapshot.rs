//! `snapshot <subcommand>`: not written yet.

use clap::Subcommand;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Subcommand)]
pub enum SnapshotCommand {
    /// placeholder
    Todo,
}

impl SnapshotCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("snapshot is not implemented yet"))
    }
}
