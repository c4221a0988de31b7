//! Plumbing shared by [`crate::Member`] and [`crate::ClusterMember`]: free ports, addresses, log files,
//! signals.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

/// A port that was free a moment ago. Binding port 0 lets the kernel choose, so parallel tests
/// (separate processes under nextest) rarely collide; the callers retry with new ports when they do.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

pub(crate) fn open_append(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("open {}", path.display()))
}

/// `count` distinct ports that were free a moment ago, all held at once so that they differ.
pub(crate) fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..count).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
    listeners.iter().map(|listener| Ok(listener.local_addr()?.port())).collect()
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Sends `signal` (`STOP`, `CONT`, ...) to process `pid` with `kill -s`. The workspace forbids `unsafe`,
/// which `libc::kill` needs, and a fork per signal costs nothing next to a member process.
pub(crate) fn send_signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill").args(["-s", signal, &pid.to_string()]).status().context("run kill")?;
    if !status.success() {
        bail!("kill -s {signal} {pid} failed: {status}");
    }
    Ok(())
}

/// `127.0.0.1:<port>`, as etcdctl's `--endpoints` takes it.
pub fn endpoint(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// `http://127.0.0.1:<port>`, as the members' URL flags take it.
pub fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}
