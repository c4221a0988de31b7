//! `completion`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct CompletionCommand {
    pub args: Vec<String>,
}

impl CompletionCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("completion is not implemented yet"))
    }
}
