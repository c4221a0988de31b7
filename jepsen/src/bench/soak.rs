//! `jepsen bench --soak`: issue 21's "a member's memory stays flat over an hour of updates to the
//! same keys with periodic compaction", side by side in the same run. Each target (etcd first, then
//! ours, one at a time) gets a fresh single member, then for `--soak-secs`:
//!
//! - puts at `--soak-rate` per second in all, paced (a client that falls behind does not burst to
//!   catch up), from [`CLIENTS`] clients on a connection each, cycling over `--soak-keys` keys of
//!   `--soak-value` bytes: the same keys updated over and over;
//! - every `--soak-compact-secs`, a Compaction at the revision the previous one read, as
//!   kube-apiserver compacts (every 5 minutes there), so that history stays bounded;
//! - every [`SAMPLE`] and when the puts end, a sample: the member's RSS, its database size (Status'
//!   `dbSize`), its revision, and the puts, errors and slowest put since the sample before.
//!
//! The table compares the RSS early (once a tenth of the time has passed), halfway and at the end,
//! the growth over the second half and the peak; then the samples at ten points in time. Everything
//! goes to `soak.json`, the table to `soak.txt`, beside each member's log.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use proto::etcdserverpb as pb;
use serde::Serialize;
use tokio::time::Instant;
use tracing::info;

use super::options::BenchOptions;
use super::scale::put::key;
use super::scale::server::Server;
use super::scale::{create_dir, write, Outcome};
use super::table::{align, side_by_side, Figure};
use super::workload::connect_all;
use crate::client;
use crate::error::{Error, Result};
use crate::netns;
use crate::options::Target;

const MB: f64 = 1024.0 * 1024.0;
/// The keys' prefix.
const PREFIX: &str = "soak/";
/// Clients (one connection each) sharing the rate.
const CLIENTS: usize = 10;
/// How often the member is sampled.
const SAMPLE: Duration = Duration::from_secs(5);
/// A bound on one Status or Compaction call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The checkpoints of the table's series.
const CHECKPOINTS: usize = 10;

/// `--soak` and its sizes.
#[derive(Debug, Clone, Args, Serialize)]
pub struct SoakOptions {
    /// soak mode: one fresh member per target (etcd first, then ours) takes --soak-secs of paced
    /// updates to the same keys with periodic compaction while its RSS and database size are sampled;
    /// prints one table and writes `soak.json` (ignores --workloads, --rounds, --duration)
    #[arg(long, conflicts_with_all = ["memory", "scale", "size"])]
    pub soak: bool,

    /// --soak: how long each target is written to, in seconds
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(10..))]
    pub soak_secs: u64,

    /// --soak: puts per second, all clients together
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub soak_rate: u64,

    /// --soak: the keys the puts cycle over
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub soak_keys: u64,

    /// --soak: the value size of the puts, in bytes
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub soak_value: u64,

    /// --soak: seconds between compactions (each at the revision the one before read)
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub soak_compact_secs: u64,
}

/// One sample of a member.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    pub at_secs: f64,
    pub rss_bytes: u64,
    pub db_size_bytes: u64,
    pub revision: i64,
    /// Since the sample before.
    pub puts: u64,
    pub errors: u64,
    pub slowest_put_ms: f64,
}

/// What one target measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SoakMeasure {
    pub target: Option<Target>,
    pub secs: f64,
    pub puts: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub compactions: u64,
    pub samples: Vec<Sample>,
}

impl SoakMeasure {
    /// Adds what the clients saw in `window` to the totals.
    fn count(&mut self, window: &Window) {
        self.puts += window.puts;
        self.errors += window.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&window.first_error);
        }
    }

    fn puts_per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.puts as f64 / self.secs
        } else {
            0.0
        }
    }

    fn slowest_put_ms(&self) -> f64 {
        self.samples.iter().map(|s| s.slowest_put_ms).fold(0.0, f64::max)
    }

    /// The first sample taken at or after `fraction` of the run (the last one if none).
    fn at(&self, fraction: f64) -> Option<&Sample> {
        let when = self.secs * fraction;
        self.samples.iter().find(|s| s.at_secs >= when).or(self.samples.last())
    }

    fn rss_mb_at(&self, fraction: f64) -> f64 {
        self.at(fraction).map_or(0.0, |s| s.rss_bytes as f64 / MB)
    }

    fn peak_rss_mb(&self) -> f64 {
        self.samples.iter().map(|s| s.rss_bytes).max().unwrap_or(0) as f64 / MB
    }
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    options: &'a BenchOptions,
    results: &'a [SoakMeasure],
}

/// Runs the soak on each target; the process must already be in private namespaces, unless
/// `--host-network` asks for the host's.
pub async fn run(opts: &BenchOptions) -> Result<Outcome> {
    netns::prepare_for(opts.host_network)?;
    let dir = create_dir(opts, "soak")?;
    info!(dir = %dir.display(), secs = opts.soak.soak_secs, "report folder");
    let mut results = Vec::new();
    for target in super::scale::etcd_first(opts) {
        results.push(measure(opts, target, &dir).await?);
    }
    let table = render(&results);
    write(
        &dir.join("soak.json"),
        &serde_json::to_string_pretty(&Report { options: opts, results: &results }).map_err(Error::Encode)?,
    )?;
    write(&dir.join("soak.txt"), &table)?;
    Ok(Outcome { dir, table })
}

/// What the clients saw since the last sample.
#[derive(Debug, Default)]
struct Window {
    puts: u64,
    errors: u64,
    slowest: Duration,
    first_error: Option<String>,
}

async fn measure(opts: &BenchOptions, target: Target, dir: &Path) -> Result<SoakMeasure> {
    let (root, binary) = super::scale::target_dir_and_binary(opts, target, dir)?;
    let soak = &opts.soak;
    let mut server = Server::start(target, &binary, &root, opts.scale.quota_backend_bytes).await?;
    info!(target = target.name(), binary = %binary.display(), "member ready");
    let channels = connect_all(std::slice::from_ref(&server.url), CLIENTS).await?;
    let window = Arc::new(Mutex::new(Window::default()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(soak.soak_secs);
    // Client c puts at slots c/rate + k*CLIENTS/rate: together, `rate` per second.
    let period = Duration::from_secs_f64(CLIENTS as f64 / soak.soak_rate as f64);
    let value = vec![b'v'; usize::try_from(soak.soak_value).unwrap_or(usize::MAX)];
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let mut kv = pb::kv_client::KvClient::new(channels[c].clone());
            let (window, value, keys) = (Arc::clone(&window), value.clone(), soak.soak_keys);
            let timeout = opts.request_timeout();
            tokio::spawn(async move {
                let mut slot = started + period.mul_f64(c as f64 / CLIENTS as f64);
                let mut seq = c as u64;
                while slot < deadline {
                    tokio::time::sleep_until(slot).await;
                    let request =
                        pb::PutRequest { key: key(PREFIX, seq % keys), value: value.clone(), ..Default::default() };
                    let sent = Instant::now();
                    let outcome = client::with_timeout(timeout, kv.put(request)).await;
                    let took = sent.elapsed();
                    let mut w = window.lock().unwrap_or_else(|e| e.into_inner());
                    match outcome {
                        Ok(_) => {
                            w.puts += 1;
                            w.slowest = w.slowest.max(took);
                        }
                        Err(status) => {
                            w.errors += 1;
                            w.first_error.get_or_insert_with(|| client::describe(&status));
                        }
                    }
                    drop(w);
                    seq += CLIENTS as u64;
                    // Behind: the next slot from now, no burst.
                    slot = (slot + period).max(Instant::now());
                }
            })
        })
        .collect();

    let mut m = SoakMeasure { target: Some(target), ..Default::default() };
    let compact_every = Duration::from_secs(soak.soak_compact_secs);
    let (mut next_compaction, mut compact_at) = (started + compact_every, 0);
    let mut next_sample = started;
    loop {
        // Every SAMPLE, and the last one when the puts end.
        next_sample = (next_sample + SAMPLE).min(deadline);
        tokio::time::sleep_until(next_sample).await;
        let now = next_sample;
        let status = client::status(server.member.channel(), CALL_TIMEOUT)
            .await
            .map_err(|status| Error::Setup(format!("Status: {}", client::describe(&status))))?;
        let w = std::mem::take(&mut *window.lock().unwrap_or_else(|e| e.into_inner()));
        m.count(&w);
        m.samples.push(Sample {
            at_secs: now.duration_since(started).as_secs_f64(),
            rss_bytes: server.rss_bytes()?,
            db_size_bytes: u64::try_from(status.db_size).unwrap_or(0),
            revision: status.revision,
            puts: w.puts,
            errors: w.errors,
            slowest_put_ms: w.slowest.as_secs_f64() * 1000.0,
        });
        if now >= next_compaction {
            if compact_at > 0 {
                client::compact(server.member.channel(), compact_at, false, CALL_TIMEOUT).await.map_err(|status| {
                    Error::Setup(format!("Compaction at {compact_at}: {}", client::describe(&status)))
                })?;
                m.compactions += 1;
            }
            compact_at = status.revision;
            next_compaction += compact_every;
        }
        if now >= deadline {
            break;
        }
    }
    for task in clients {
        let _ = task.await;
    }
    // Puts in flight at the last sample finish after it: counted in the totals, in no sample.
    m.count(&window.lock().unwrap_or_else(|e| e.into_inner()));
    m.secs = deadline.duration_since(started).as_secs_f64();
    info!(target = target.name(), puts = m.puts, errors = m.errors, peak_rss_mb = m.peak_rss_mb() as u64, "soaked");
    server.member.kill()?;
    let _ = std::fs::copy(server.log_path(), dir.join(format!("{}.log", target.name())));
    if !opts.keep_data {
        server.member.wipe_data()?;
    }
    Ok(m)
}

/// One row per figure, one column per target and ours/etcd when both ran; then the samples at
/// [`CHECKPOINTS`] points in time.
pub fn render(results: &[SoakMeasure]) -> String {
    let rows: Vec<Figure<SoakMeasure>> = vec![
        ("puts/s (paced), to the same keys".into(), SoakMeasure::puts_per_sec, 0),
        ("put errors".into(), |m| m.errors as f64, 0),
        ("slowest put, ms".into(), SoakMeasure::slowest_put_ms, 1),
        ("compactions".into(), |m| m.compactions as f64, 0),
        ("RSS MB at a tenth of the time".into(), |m| m.rss_mb_at(0.1), 0),
        ("RSS MB halfway".into(), |m| m.rss_mb_at(0.5), 0),
        ("RSS MB at the end".into(), |m| m.rss_mb_at(1.0), 0),
        ("RSS MB growth over the second half".into(), |m| m.rss_mb_at(1.0) - m.rss_mb_at(0.5), 0),
        ("peak RSS MB".into(), SoakMeasure::peak_rss_mb, 0),
        ("database MB at the end (dbSize)".into(), |m| m.at(1.0).map_or(0.0, |s| s.db_size_bytes as f64 / MB), 1),
    ];
    let name = |m: &SoakMeasure| m.target.map_or("?", Target::name).to_string();
    let columns: Vec<_> = results.iter().map(|m| (m.target, m)).collect();
    let mut out = side_by_side(&columns, &rows);
    out.push('\n');
    let mut header = vec!["minute".to_string()];
    for m in results {
        header.push(format!("{} RSS MB", name(m)));
        header.push(format!("{} db MB", name(m)));
    }
    let mut series = vec![header];
    for i in 1..=CHECKPOINTS {
        let fraction = i as f64 / CHECKPOINTS as f64;
        let mut line = vec![format!("{:.1}", results.first().map_or(0.0, |m| m.secs * fraction / 60.0))];
        for m in results {
            let sample = m.at(fraction).cloned().unwrap_or_default();
            line.push(format!("{:.0}", sample.rss_bytes as f64 / MB));
            line.push(format!("{:.1}", sample.db_size_bytes as f64 / MB));
        }
        series.push(line);
    }
    out.push_str(&align(&series));
    for m in results {
        if let Some(error) = &m.first_error {
            let _ = writeln!(out, "{}: ERROR {error}", name(m));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<SoakOptions, clap::Error> {
        crate::bench::options::tests::parse(args).map(|opts| opts.soak)
    }

    #[test]
    fn the_defaults_are_an_hour_of_a_thousand_puts_a_second_over_ten_thousand_keys() {
        let opts = parse(&["--soak"]).expect("parses");
        assert_eq!((opts.soak_secs, opts.soak_rate, opts.soak_keys, opts.soak_value), (3600, 1000, 10_000, 1024));
        assert_eq!(opts.soak_compact_secs, 60);
    }

    #[test]
    fn bad_sizes_and_other_modes_are_refused() {
        for bad in [&["--soak-secs", "5"][..], &["--soak-rate", "0"], &["--soak-keys", "0"], &["--soak", "--size"]] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    fn sample(at_secs: f64, rss_mb: u64) -> Sample {
        Sample { at_secs, rss_bytes: rss_mb << 20, ..Default::default() }
    }

    #[test]
    fn the_table_reads_the_samples_at_their_times_and_compares_the_targets() {
        let samples = |rss: [u64; 4]| {
            vec![sample(5.0, rss[0]), sample(50.0, rss[1]), sample(95.0, rss[2]), sample(100.0, rss[3])]
        };
        let etcd = SoakMeasure {
            target: Some(Target::Etcd),
            secs: 100.0,
            puts: 1000,
            samples: samples([300, 400, 500, 600]),
            ..Default::default()
        };
        let ours = SoakMeasure { target: Some(Target::Ours), samples: samples([100, 120, 90, 150]), ..etcd.clone() };
        let table = render(&[etcd, ours]);
        let cells = |row: &str| -> Vec<String> {
            let line = table.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("{row} in {table}"));
            line.split_whitespace().rev().take(3).map(str::to_string).collect()
        };
        // At a tenth of 100 s: the sample at 50 s, the first at or after 10 s.
        assert_eq!(cells("RSS MB at a tenth"), ["0.30", "120", "400"]);
        assert_eq!(cells("RSS MB growth over the second half"), ["0.15", "30", "200"]);
        assert_eq!(cells("peak RSS MB"), ["0.25", "150", "600"]);
        assert_eq!(cells("puts/s"), ["1.00", "10", "10"]);
    }
}
