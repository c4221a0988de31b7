//! `defrag`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct DefragCommand {
    pub args: Vec<String>,
}

impl DefragCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("defrag is not implemented yet"))
    }
}
