//! `watch`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct WatchCommand {
    pub args: Vec<String>,
}

impl WatchCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("watch is not implemented yet"))
    }
}
