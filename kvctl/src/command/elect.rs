//! `elect`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct ElectCommand {
    pub args: Vec<String>,
}

impl ElectCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("elect is not implemented yet"))
    }
}
