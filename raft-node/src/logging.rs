//! Logging for the binaries: `tracing` to stderr, filtered by `RUST_LOG` (default: info, openraft's
//! chatter at warn).

/// Installs the subscriber; call once, first thing in `main`.
pub fn init() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
