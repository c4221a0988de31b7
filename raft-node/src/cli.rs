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
    check_timing(config.heartbeat_interval, config.election_timeout)?;
    let settings = crate::config::settings::resolve(config)?;
    let notes = effect::check(config, &settings).map_err(|refused| refused.to_string())?;
    config.tls.policy().map_err(|err| format!("{err:#}"))?;
    crate::config::auth_token::parse(&config.auth_token)?;
    crate::failpoint::init_from_env()?;
    Ok((settings, notes))
}

/// etcd's longest election timeout, in milliseconds.
const MAX_ELECTION_MS: u64 = 50_000;

/// etcd's checks of `--heartbeat-interval` and `--election-timeout`, with its texts.
fn check_timing(heartbeat_ms: u64, election_ms: u64) -> Result<(), String> {
    if heartbeat_ms == 0 {
        return Err(format!("--heartbeat-interval must be >0 (set to {heartbeat_ms}ms)"));
    }
    if election_ms == 0 {
        return Err(format!("--election-timeout must be >0 (set to {election_ms}ms)"));
    }
    if heartbeat_ms.saturating_mul(5) > election_ms {
        return Err(format!(
            "--election-timeout[{election_ms}ms] should be at least as 5 times as --heartbeat-interval[{heartbeat_ms}ms]"
        ));
    }
    if election_ms > MAX_ELECTION_MS {
        return Err(format!(
            "--election-timeout[{election_ms}ms] is too long, and should be set less than {MAX_ELECTION_MS}ms"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_timing;

    #[test]
    fn timing_is_checked_as_etcd_checks_it() {
        assert_eq!(check_timing(100, 1000), Ok(()));
        assert_eq!(check_timing(100, 500), Ok(()));
        assert_eq!(check_timing(10_000, 50_000), Ok(()));
        let refused = [
            (0, 1000, "--heartbeat-interval must be >0 (set to 0ms)"),
            (100, 0, "--election-timeout must be >0 (set to 0ms)"),
            (300, 1000, "--election-timeout[1000ms] should be at least as 5 times as --heartbeat-interval[300ms]"),
            (100, 499, "--election-timeout[499ms] should be at least as 5 times as --heartbeat-interval[100ms]"),
            (100, 50_001, "--election-timeout[50001ms] is too long, and should be set less than 50000ms"),
        ];
        for (heartbeat, election, want) in refused {
            assert_eq!(check_timing(heartbeat, election), Err(want.to_string()), "{heartbeat}/{election}");
        }
    }
}
