//! What `jepsen bench --scale` measured on each target, and its table: one row per probe, one
//! column per target (etcd first, as the table), and the ratio ours/etcd when both ran.

use std::fmt::Write as _;

use serde::Serialize;

use super::large_range::{LargeRangeMeasure, PeakSource};
use super::load::LoadMeasure;
use super::maintenance::MaintenanceMeasure;
use super::slow_consumer::{SlowConsumerMeasure, WRITE_TIME};
use super::watchers::WatchMeasure;
use crate::bench::table::align;
use crate::options::Target;

const MB: f64 = 1024.0 * 1024.0;

/// Everything measured on one target's member.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetResult {
    pub target: Target,
    pub binary: String,
    pub watch: WatchMeasure,
    pub load: LoadMeasure,
    pub maintenance: MaintenanceMeasure,
    pub slow_consumer: SlowConsumerMeasure,
    pub large_range: LargeRangeMeasure,
    pub duration_secs: f64,
}

impl TargetResult {
    /// Every error any probe saw, named by probe.
    pub fn errors(&self) -> Vec<String> {
        let probes = [
            ("watch", &self.watch.first_error),
            ("load", &self.load.first_error),
            ("maintenance", &self.maintenance.first_error),
            ("slow consumer", &self.slow_consumer.first_error),
            ("large range", &self.large_range.first_error),
        ];
        probes.iter().filter_map(|(probe, error)| error.as_ref().map(|e| format!("{probe}: {e}"))).collect()
    }
}

/// One row: its label and how to read its figure from a result, with its decimals.
struct Probe {
    label: String,
    value: fn(&TargetResult) -> f64,
    decimals: usize,
}

fn probes(first: &TargetResult) -> Vec<Probe> {
    let w = &first.watch;
    let l = &first.load;
    let s = &first.slow_consumer;
    let per_stream = w.watchers.div_ceil(w.streams.max(1));
    let probe = |label: String, value: fn(&TargetResult) -> f64, decimals| Probe { label, value, decimals };
    vec![
        probe(
            format!("{} watchers ({} streams x {per_stream}), member RSS MB", w.watchers, w.streams),
            |r| r.watch.rss_bytes as f64 / MB,
            0,
        ),
        probe("puts/s while those watchers are open".into(), |r| r.watch.puts_per_sec, 0),
        probe("events delivered/s to them".into(), |r| r.watch.events_per_sec, 0),
        probe(
            format!("load {} puts of {} B ({} keys), puts/s", l.puts, l.value_size, l.keys),
            |r| r.load.puts_per_sec,
            0,
        ),
        probe("RSS MB right after that load".into(), |r| r.load.rss_bytes as f64 / MB, 0),
        probe(
            "RSS MB after compaction (before defrag)".into(),
            |r| r.maintenance.rss_after_compaction_bytes as f64 / MB,
            0,
        ),
        probe("RSS MB after compaction and defrag of it".into(), |r| r.maintenance.rss_bytes as f64 / MB, 0),
        probe(
            "Compaction RPC (all but the last revision), ms to answer".into(),
            |r| r.maintenance.compaction_rpc_secs * 1000.0,
            1,
        ),
        probe("Defragment RPC, s to answer".into(), |r| r.maintenance.defrag_rpc_secs, 3),
        probe(
            "slowest put of a concurrent writer during compaction, ms".into(),
            |r| r.maintenance.slowest_put_during_compaction_ms,
            1,
        ),
        probe(
            "slowest put of a concurrent writer during defrag, ms".into(),
            |r| r.maintenance.slowest_put_during_defrag_ms,
            1,
        ),
        probe(
            format!(
                "slow consumer: puts/s of {} B for {} s, one Watch stream unread",
                s.value_size,
                WRITE_TIME.as_secs()
            ),
            |r| r.slow_consumer.puts_per_sec,
            0,
        ),
        probe("RSS growth MB over those puts".into(), |r| r.slow_consumer.rss_growth_bytes as f64 / MB, 0),
        probe(format!("one Range of all {} loaded keys (no limit), s", l.keys), |r| r.large_range.secs, 3),
        probe("peak RSS growth MB during that Range".into(), |r| r.large_range.peak_growth_bytes as f64 / MB, 0),
        probe("slowest put of a concurrent writer during that Range, ms".into(), |r| r.large_range.slowest_put_ms, 1),
    ]
}

/// The table of `results` (in column order), with notes on errors and on compaction windows.
pub fn render(results: &[TargetResult]) -> String {
    let Some(first) = results.first() else { return String::new() };
    let pair = match results {
        [etcd, ours] if etcd.target == Target::Etcd && ours.target == Target::Ours => Some((etcd, ours)),
        _ => None,
    };
    let mut header = vec!["probe".to_string()];
    header.extend(results.iter().map(|r| r.target.name().to_string()));
    if pair.is_some() {
        header.push("ours/etcd".to_string());
    }
    let mut lines = vec![header];
    for probe in probes(first) {
        let mut line = vec![probe.label];
        line.extend(results.iter().map(|r| format!("{:.*}", probe.decimals, (probe.value)(r))));
        if let Some((etcd, ours)) = pair {
            let (a, b) = ((probe.value)(ours), (probe.value)(etcd));
            line.push(if b != 0.0 && a.is_finite() && b.is_finite() { format!("{:.2}", a / b) } else { "-".into() });
        }
        lines.push(line);
    }
    let mut out = align(&lines);
    for result in results {
        let m = &result.maintenance;
        let _ = writeln!(
            out,
            "{}: compaction at revision {} took {:.3} s until {} (writer puts: {})",
            result.target.name(),
            m.compact_revision,
            m.compaction.end_secs - m.compaction.start_secs,
            if m.compaction_done_reported { "its /metrics reported it done" } else { "the answer" },
            m.writer_puts.len(),
        );
        let s = &result.slow_consumer;
        let _ = writeln!(
            out,
            "{}: the slow watcher, read again, got {} events for {} puts in {:.1} s{}",
            result.target.name(),
            s.events_after,
            s.puts,
            s.drain_secs,
            s.watch_ended.as_ref().map(|why| format!(" ({why})")).unwrap_or_default(),
        );
        let r = &result.large_range;
        let _ = writeln!(
            out,
            "{}: the Range answered {} keys, {:.0} MB; peak from {}",
            result.target.name(),
            r.keys,
            r.response_bytes as f64 / MB,
            match r.peak_source {
                PeakSource::ResetHighWaterMark => "VmHWM reset before it",
                PeakSource::NewHighWaterMark => "VmHWM (not reset, a new lifetime peak)",
                PeakSource::Sampled => "RSS sampled every 10 ms (VmHWM not reset, no new lifetime peak)",
            },
        );
        for error in result.errors() {
            let _ = writeln!(out, "{}: ERROR {error}", result.target.name());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::scale::maintenance::Interval;

    fn result(target: Target, scale: f64) -> TargetResult {
        TargetResult {
            target,
            binary: "bin".into(),
            watch: WatchMeasure {
                watchers: 1000,
                streams: 10,
                rss_bytes: (100.0 * scale * MB) as u64,
                puts_per_sec: 500.0 * scale,
                events_per_sec: 50_000.0,
                ..WatchMeasure::default()
            },
            load: LoadMeasure {
                puts: 4000,
                keys: 2000,
                value_size: 1024,
                puts_per_sec: 900.0,
                ..LoadMeasure::default()
            },
            maintenance: MaintenanceMeasure {
                compact_revision: 5000,
                compaction_rpc_secs: 0.25 * scale,
                compaction: Interval { start_secs: 2.0, end_secs: 3.0 },
                ..MaintenanceMeasure::default()
            },
            slow_consumer: SlowConsumerMeasure {
                value_size: 1024,
                puts: 30_000,
                puts_per_sec: 3000.0,
                rss_growth_bytes: (-10.0 * scale * MB) as i64,
                events_after: 30_000,
                drain_secs: 1.5,
                ..SlowConsumerMeasure::default()
            },
            large_range: LargeRangeMeasure {
                keys: 2000,
                response_bytes: (2.0 * MB) as u64,
                secs: 0.5 * scale,
                peak_growth_bytes: (40.0 * MB) as u64,
                slowest_put_ms: 20.0 * scale,
                ..LargeRangeMeasure::default()
            },
            duration_secs: 10.0,
        }
    }

    fn cells<'a>(table: &'a str, prefix: &str) -> Vec<&'a str> {
        let line = table.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{table}"));
        line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
    }

    #[test]
    fn both_targets_give_etcd_ours_and_their_ratio() {
        let table = render(&[result(Target::Etcd, 1.0), result(Target::Ours, 2.0)]);
        assert_eq!(cells(&table, "probe"), ["probe", "etcd", "ours", "ours/etcd"]);
        assert_eq!(
            cells(&table, "1000 watchers"),
            ["1000 watchers (10 streams x 100), member RSS MB", "100", "200", "2.00"]
        );
        assert_eq!(cells(&table, "load 4000 puts of 1024 B (2000 keys)")[1..], ["900", "900", "1.00"]);
        assert_eq!(cells(&table, "Compaction RPC")[1..], ["250.0", "500.0", "2.00"]);
        assert_eq!(cells(&table, "slowest put of a concurrent writer during defrag")[1..], ["0.0", "0.0", "-"]);
        assert_eq!(cells(&table, "slow consumer: puts/s of 1024 B for 10 s")[1..], ["3000", "3000", "1.00"]);
        assert_eq!(cells(&table, "RSS growth MB over those puts")[1..], ["-10", "-20", "2.00"]);
        assert_eq!(cells(&table, "one Range of all 2000 loaded keys (no limit), s")[1..], ["0.500", "1.000", "2.00"]);
        assert_eq!(
            cells(&table, "slowest put of a concurrent writer during that Range, ms")[1..],
            ["20.0", "40.0", "2.00"]
        );
        assert_eq!(cells(&table, "peak RSS growth MB during that Range")[1..], ["40", "40", "1.00"]);
        assert_eq!(table.lines().filter(|l| !l.starts_with("etcd:") && !l.starts_with("ours:")).count(), 17);
        assert!(table.contains("etcd: compaction at revision 5000 took 1.000 s until the answer"), "{table}");
        assert!(
            table.contains("ours: the slow watcher, read again, got 30000 events for 30000 puts in 1.5 s\n"),
            "{table}"
        );
        assert!(table.contains("etcd: the Range answered 2000 keys, 2 MB; peak from VmHWM reset before it"), "{table}");
        assert!(!table.contains("ERROR"), "{table}");
    }

    #[test]
    fn one_target_has_one_column_and_errors_are_shown() {
        let mut ours = result(Target::Ours, 1.0);
        ours.load.first_error = Some("Unavailable: gone".into());
        ours.slow_consumer.watch_ended = Some("the Watch stream ended".into());
        let table = render(&[ours]);
        assert_eq!(cells(&table, "probe"), ["probe", "ours"]);
        assert!(table.contains("ours: ERROR load: Unavailable: gone"), "{table}");
        assert!(table.contains("in 1.5 s (the Watch stream ended)"), "{table}");
        assert_eq!(render(&[]), "");
    }
}
