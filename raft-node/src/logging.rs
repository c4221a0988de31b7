//! Logging for the binaries: `tracing` to stderr (or `--log-outputs`), at `--log-level` (openraft's
//! chatter at warn), as text or JSON lines (`--log-format`); `RUST_LOG`, when set, overrides the level.

use std::io::IsTerminal;

use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::EnvFilter;

/// How the subscriber is set up.
#[derive(Clone, Debug)]
pub struct LogSettings {
    /// etcd's level name: debug, info, warn, error (panic and fatal log errors only).
    pub level: String,
    /// One JSON object a line instead of text.
    pub json: bool,
    /// 'default', 'stderr', 'stdout', or a file path.
    pub output: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self { level: "info".into(), json: false, output: "default".into() }
    }
}

impl LogSettings {
    pub fn from_config(config: &crate::config::Config) -> Self {
        Self { level: config.log_level.clone(), json: config.log_json(), output: config.log_outputs.clone() }
    }

    /// The filter directive for etcd's level name.
    fn directive(&self) -> String {
        let level = match self.level.as_str() {
            "panic" | "fatal" => "error",
            level => level,
        };
        // openraft logs every election and replication step at info: keep it at warn unless debugging.
        let openraft = if level == "debug" { "debug" } else { "warn" };
        format!("{level},openraft={openraft}")
    }
}

/// Installs the subscriber; call once, first thing in `main`. Fails when the log file cannot be opened.
pub fn init(settings: &LogSettings) -> std::io::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(settings.directive()));
    let (writer, terminal) = match settings.output.as_str() {
        "default" | "stderr" => (BoxMakeWriter::new(std::io::stderr), std::io::stderr().is_terminal()),
        "stdout" => (BoxMakeWriter::new(std::io::stdout), std::io::stdout().is_terminal()),
        path => {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
            (BoxMakeWriter::new(std::sync::Mutex::new(file)), false)
        }
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    if settings.json {
        builder.event_format(crate::zap_json::ZapJson).init();
    } else {
        builder.with_ansi(terminal).init();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_levels_map_to_filters() {
        let directive = |level: &str| LogSettings { level: level.into(), ..Default::default() }.directive();
        assert_eq!(directive("info"), "info,openraft=warn");
        assert_eq!(directive("debug"), "debug,openraft=debug");
        assert_eq!(directive("fatal"), "error,openraft=warn");
    }
}
