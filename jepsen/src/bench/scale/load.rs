//! The load probe: `--puts` puts of `--value-size` bytes cycling over `--keys` keys (so every key
//! has `--puts / --keys` revisions for compaction to remove), from 100 clients on 10 connections
//! as etcd's `benchmark put --clients 100 --conns 10`; then the member's RSS at once.

use std::time::Duration;

use serde::Serialize;

use super::put;
use super::server::Server;
use crate::bench::options::Stop;
use crate::error::Result;

/// The loaded keys' prefix.
pub const PREFIX: &str = "load/";

/// What the load probe measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadMeasure {
    pub puts: u64,
    pub keys: u64,
    pub value_size: u64,
    pub errors: u64,
    pub secs: f64,
    /// Successful puts per second.
    pub puts_per_sec: f64,
    pub p99_ms: f64,
    /// The member's RSS right after the last put was answered.
    pub rss_bytes: u64,
    pub first_error: Option<String>,
}

pub async fn run(server: &Server, puts: u64, keys: u64, value_size: usize, timeout: Duration) -> Result<LoadMeasure> {
    let (stats, first_error) = put::put_many(&server.url, PREFIX, keys, Stop::Total(puts), value_size, timeout).await?;
    let rss_bytes = server.rss_bytes()?;
    Ok(LoadMeasure {
        puts,
        keys,
        value_size: value_size as u64,
        errors: stats.errors,
        secs: stats.elapsed_secs,
        puts_per_sec: stats.qps,
        p99_ms: stats.p99_ms,
        rss_bytes,
        first_error,
    })
}
