//! `lease <subcommand>`: not written yet.

use clap::Subcommand;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Subcommand)]
pub enum LeaseCommand {
    /// placeholder
    Todo,
}

impl LeaseCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("lease is not implemented yet"))
    }
}
