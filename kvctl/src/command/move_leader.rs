//! `move_leader`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct MoveLeaderCommand {
    pub args: Vec<String>,
}

impl MoveLeaderCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("move_leader is not implemented yet"))
    }
}
