//! `alarm <subcommand>`: not written yet.

use clap::Subcommand;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Subcommand)]
pub enum AlarmCommand {
    /// placeholder
    Todo,
}

impl AlarmCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("alarm is not implemented yet"))
    }
}
