//! What the binaries do with a member: read etcd's flags (or `--config-file`), set up logging, run until
//! SIGINT or SIGTERM. A bad flag, file or setting is reported in one line naming the problem.

use std::process::ExitCode;

use clap::error::ErrorKind;
use tracing::warn;

use crate::config::{effect, Config};

/// Runs a member with this process's arguments and environment.
pub async fn main() -> ExitCode {
    let config = match Config::load(std::env::args_os()) {
        Ok(config) => config,
        Err(crate::config::LoadError::Flags(err))
            if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
        {
            err.exit()
        }
        Err(err) => {
            eprintln!("raft-node: {}", err.one_line());
            // Go's flag package exits with 2 on a bad flag, as etcd does.
            return ExitCode::from(2);
        }
    };
    let settings = match crate::config::settings::resolve(&config) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("raft-node: {err}");
            return ExitCode::FAILURE;
        }
    };
    let notes = match effect::check(&config, &settings) {
        Ok(notes) => notes,
        Err(refused) => {
            eprintln!("raft-node: {refused}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(err) = config.tls.policy() {
        eprintln!("raft-node: {err:#}");
        return ExitCode::FAILURE;
    }
    if let Err(err) = crate::config::auth_token::parse(&config.auth_token) {
        eprintln!("raft-node: {err}");
        return ExitCode::FAILURE;
    }
    if let Err(err) = crate::logging::init(&crate::logging::LogSettings::from_config(&config)) {
        eprintln!("raft-node: cannot open the log output {:?}: {err}", config.log_outputs);
        return ExitCode::FAILURE;
    }
    for warning in settings.deprecations.iter().chain(&notes) {
        warn!("{warning}");
    }
    match crate::server::run(config, crate::server::shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the error and its causes, as `{:#}` chains them.
            tracing::error!(error = format!("{err:#}"), "stopping the member");
            eprintln!("raft-node: {err:#}");
            ExitCode::FAILURE
        }
    }
}
