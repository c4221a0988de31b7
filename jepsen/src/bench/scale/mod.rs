//! `jepsen bench --scale`: how one member of ours and one of real etcd cope with size, side by side
//! in the same run. Each target gets a fresh single-member server (etcd first, then ours, one at a
//! time on this two-core machine, each on a fresh data dir with the same `--quota-backend-bytes`),
//! and the same probes in this order:
//!
//! 1. [`watchers`]: `--watchers` watchers over `--watch-streams` streams, the member's RSS with them
//!    open, then `--watch-puts` puts to the watched keys: puts/s and events delivered/s.
//! 2. [`load`]: `--puts` puts of `--value-size` bytes over `--keys` keys (100 clients, 10
//!    connections): puts/s, and RSS right after.
//! 3. [`maintenance`]: Compaction at the last revision and Defragment, each RPC's time to answer,
//!    the slowest put of a concurrent writer during each, and RSS after both.
//! 4. [`slow_consumer`]: puts at full speed for 10 s while one Watch stream of their prefix is
//!    never read: puts/s, and the member's RSS growth over them.
//! 5. [`large_range`]: one Range over every loaded key (no limit): its time, and the member's peak
//!    RSS growth while it served it.
//!
//! The last two come after the maintenance so that the RSS rows before them stay comparable with
//! earlier runs (a Go heap or an allocator keeps what a 200 MB answer used for a while), and the
//! slow consumer comes before the Range so that the memory the Range frees cannot hide its growth.
//!
//! The report folder holds `scale.json` (everything measured, the writer's every put included),
//! `scale.txt` (the table), `scale.png` (the writer's latency over time, one series per target,
//! compaction and defrag shaded), `scale.html` and each member's log.
//!
//! - [`options`]: the flags; [`server`]: the single member; [`put`]: the put the probes repeat;
//!   [`table`]: the results and the table; [`page`]: `scale.html`.

pub mod large_range;
pub mod load;
pub mod maintenance;
pub mod options;
pub mod page;
pub mod put;
pub mod server;
pub mod slow_consumer;
pub mod table;
pub mod watchers;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tracing::info;

use self::server::Server;
use self::table::TargetResult;
use crate::bench::options::BenchOptions;
use crate::error::{Error, Result};
use crate::netns;
use crate::options::Target;
use crate::plot::{self, timeline};

/// What a scale or size run produced.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    /// The table, as printed.
    pub table: String,
}

/// `scale.json`.
#[derive(Debug, Serialize)]
struct Report<'a> {
    options: &'a BenchOptions,
    results: &'a [TargetResult],
    duration_secs: f64,
}

/// Runs every probe on each target; the process must already be in private namespaces, unless
/// `--host-network` asks for the host's.
pub async fn run(opts: &BenchOptions) -> Result<Outcome> {
    netns::prepare_for(opts.host_network)?;
    let started = Instant::now();
    let dir = create_dir(opts, "scale")?;
    info!(dir = %dir.display(), "report folder");
    let mut results = Vec::new();
    for target in etcd_first(opts) {
        results.push(measure(opts, target, &dir).await?);
    }
    let table = table::render(&results);
    let report = Report { options: opts, results: &results, duration_secs: started.elapsed().as_secs_f64() };
    write(&dir.join("scale.json"), &serde_json::to_string_pretty(&report).map_err(Error::Encode)?)?;
    write(&dir.join("scale.txt"), &table)?;
    let image = draw(&results, &dir.join("scale.png"));
    if let Err(err) = &image {
        tracing::warn!(%err, "cannot draw scale.png");
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .map_err(Error::system(format!("list {}", dir.display())))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.contains('.'))
        .collect();
    files.sort();
    let title =
        format!("jepsen bench --scale ({})", results.iter().map(|r| r.target.name()).collect::<Vec<_>>().join(", "));
    write(&dir.join("scale.html"), &page::render(&title, &table, image.ok().map(|()| "scale.png"), &files))?;
    Ok(Outcome { dir, table })
}

/// Every probe on a fresh member of `target`, which is killed afterwards.
async fn measure(opts: &BenchOptions, target: Target, dir: &Path) -> Result<TargetResult> {
    let started = Instant::now();
    let (root, binary) = target_dir_and_binary(opts, target, dir)?;
    let scale = &opts.scale;
    let mut server = Server::start(target, &binary, &root, scale.quota_backend_bytes).await?;
    info!(target = target.name(), binary = %binary.display(), "member ready");
    let timeout = opts.request_timeout();
    let watch = watchers::run(&server, scale, timeout).await?;
    info!(
        target = target.name(),
        rss_mb = watch.rss_bytes >> 20,
        puts_per_sec = watch.puts_per_sec as u64,
        events_per_sec = watch.events_per_sec as u64,
        "watchers measured"
    );
    let load = load::run(&server, scale.puts, opts.scale_keys(), scale.value_size(), timeout).await?;
    info!(
        target = target.name(),
        puts_per_sec = load.puts_per_sec as u64,
        rss_mb = load.rss_bytes >> 20,
        "load measured"
    );
    let maintenance = maintenance::run(&server).await?;
    info!(
        target = target.name(),
        compaction_secs = maintenance.compaction_rpc_secs,
        defrag_secs = maintenance.defrag_rpc_secs,
        rss_mb = maintenance.rss_bytes >> 20,
        "maintenance measured"
    );
    let slow_consumer = slow_consumer::run(&server, timeout).await?;
    info!(
        target = target.name(),
        puts_per_sec = slow_consumer.puts_per_sec as u64,
        rss_growth_mb = slow_consumer.rss_growth_bytes >> 20,
        events_after = slow_consumer.events_after,
        "slow consumer measured"
    );
    let large_range = large_range::run(&server).await?;
    info!(
        target = target.name(),
        keys = large_range.keys,
        secs = large_range.secs,
        peak_growth_mb = large_range.peak_growth_bytes >> 20,
        "large range measured"
    );
    server.member.kill()?;
    if !opts.keep_data {
        server.member.wipe_data()?;
    }
    // The log sits in `<target>/`; a copy beside the report files is what the page links.
    let log = server.log_path();
    let _ = std::fs::copy(&log, dir.join(format!("{}.log", target.name())));
    Ok(TargetResult {
        target,
        binary: binary.display().to_string(),
        watch,
        load,
        maintenance,
        slow_consumer,
        large_range,
        duration_secs: started.elapsed().as_secs_f64(),
    })
}

/// `scale.png`: each target's writer puts, its compaction and defrag shaded.
fn draw(results: &[TargetResult], path: &Path) -> Result<()> {
    let series = results
        .iter()
        .map(|r| timeline::Series {
            name: format!("{} writer", r.target.name()),
            points: r.maintenance.writer_puts.iter().map(|p| (p.at_secs, p.latency_ms)).collect(),
        })
        .collect();
    let spans = results
        .iter()
        .flat_map(|r| {
            let m = &r.maintenance;
            let span = |what: &str, i: &maintenance::Interval| timeline::Span {
                label: format!("{} {what}", r.target.name()),
                start: i.start_secs,
                end: i.end_secs,
            };
            [span("compaction", &m.compaction), span("defrag", &m.defrag)]
        })
        .collect();
    let title = "put latency of a concurrent writer during compaction and defrag".to_string();
    timeline::Timeline { title, series, spans, text: plot::font().is_some() }.draw(path)
}

/// The targets to measure, etcd first (the tables' columns are in this order).
pub(crate) fn etcd_first(opts: &BenchOptions) -> Vec<Target> {
    let mut targets = opts.target.targets();
    targets.sort_by_key(|&t| t != Target::Etcd);
    targets
}

/// A target's folder under the report's `dir` (created) and the server binary it runs.
pub(crate) fn target_dir_and_binary(opts: &BenchOptions, target: Target, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let root = dir.join(target.name());
    std::fs::create_dir_all(&root).map_err(Error::system(format!("create {}", root.display())))?;
    let binary = match target {
        Target::Ours => opts.server_bin.clone().unwrap_or_else(raft_node_beside_us),
        Target::Etcd => opts.etcd_bin.clone(),
    };
    Ok((root, binary))
}

/// `raft-node` next to this binary (where `cargo build` puts both).
pub(crate) fn raft_node_beside_us() -> PathBuf {
    let exe = std::env::current_exe().ok();
    exe.and_then(|exe| exe.parent().map(|dir| dir.join("raft-node"))).unwrap_or_else(|| PathBuf::from("raft-node"))
}

/// `<store>/bench-<mode>-<targets>-<unix time>` (`--scale`, `--size`).
pub(crate) fn create_dir(opts: &BenchOptions, mode: &str) -> Result<PathBuf> {
    let store = opts.store.clone().unwrap_or_else(|| std::env::temp_dir().join("jepsen"));
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let targets: Vec<&str> = opts.target.targets().iter().map(|t| t.name()).collect();
    let dir = store.join(format!("bench-{mode}-{}-{stamp}", targets.join("-")));
    std::fs::create_dir_all(&dir).map_err(Error::system(format!("create {}", dir.display())))?;
    Ok(dir)
}

pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(Error::system(format!("write {}", path.display())))
}
