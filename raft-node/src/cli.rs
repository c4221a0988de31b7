//! What the binaries do with a member: read etcd's flags (or `--config-file`), set up logging, run until
//! SIGINT or SIGTERM. A bad flag, file or setting is reported in one line naming the problem.

use std::process::ExitCode;

use clap::error::ErrorKind;
use tracing::warn;

use crate::config::settings::Settings;
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
    let (settings, notes) = match check(&config) {
        Ok(checked) => checked,
        Err(refused) => {
            eprintln!("raft-node: {refused}");
            return ExitCode::FAILURE;
        }
    };
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

/// Checks what the flags (or the file) say as a whole, before anything starts: the settings and the
/// notes to log (flags without effect here), or the one line that refuses the configuration.
pub fn check(config: &Config) -> Result<(Settings, Vec<String>), String> {
    let settings = crate::config::settings::resolve(config)?;
    let notes = effect::check(config, &settings).map_err(|refused| refused.to_string())?;
    config.tls.policy().map_err(|err| format!("{err:#}"))?;
    crate::config::auth_token::parse(&config.auth_token)?;
    Ok((settings, notes))
}
