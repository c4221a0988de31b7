//! `lock`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct LockCommand {
    pub args: Vec<String>,
}

impl LockCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("lock is not implemented yet"))
    }
}
