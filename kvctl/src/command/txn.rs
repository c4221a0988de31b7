//! `txn`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct TxnCommand {
    pub args: Vec<String>,
}

impl TxnCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("txn is not implemented yet"))
    }
}
