//! `make_mirror`: not written yet.

use clap::Args;

use crate::error::CliError;
use crate::global::GlobalFlags;

#[derive(Debug, Clone, Args)]
pub struct MakeMirrorCommand {
    pub args: Vec<String>,
}

impl MakeMirrorCommand {
    pub async fn run(&self, _global: &GlobalFlags) -> Result<String, CliError> {
        Err(CliError::bad_feature("make_mirror is not implemented yet"))
    }
}
