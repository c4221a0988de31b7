//! The results of a benchmark: each round as measured, the medians over the rounds per target, and
//! the text table `jepsen bench` prints (with `both`: ours and etcd side by side with their ratio).

use std::fmt::Write as _;

use serde::Serialize;

use super::leader_stop::LeaderStop;
use super::stats::{median, Stats};
use crate::options::Target;

/// One workload row of one round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub workload: String,
    pub stats: Stats,
    /// CPU seconds the three members used while this workload ran.
    pub cluster_cpu_secs: f64,
    /// The first error a client saw (or why the workload could not run at all).
    pub first_error: Option<String>,
}

/// One member at the end of a round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberUsage {
    pub name: String,
    pub rss_bytes: u64,
    /// CPU seconds since the member started (the whole round).
    pub cpu_secs: f64,
    /// The size of its data dir.
    pub data_bytes: u64,
}

/// A follower killed after the load and started again on its data dir (memory mode).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Restart {
    pub member: String,
    /// From the start of the process until it answered Status at the revision the load reached.
    pub secs: f64,
    pub rss_bytes_after: u64,
}

/// One round of one target on a fresh cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Round {
    pub target: Target,
    pub round: u32,
    /// The member that led when the workloads started.
    pub leader: String,
    pub rows: Vec<Row>,
    pub members: Vec<MemberUsage>,
    /// CPU seconds the benchmark's own clients used during the round.
    pub client_cpu_secs: f64,
    pub restart: Option<Restart>,
    /// The leader stopped with SIGTERM under writes, after everything else.
    pub leader_stop: Option<LeaderStop>,
    pub duration_secs: f64,
}

/// One workload's medians over the rounds of one target (each column on its own).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MedianRow {
    pub workload: String,
    pub qps: f64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Errors summed over the rounds.
    pub errors: u64,
    pub cluster_cpu_secs: f64,
}

/// One target's medians over its rounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetSummary {
    pub target: Target,
    pub rounds: usize,
    pub rows: Vec<MedianRow>,
    /// Per member, in member order (n1, n2, n3).
    pub members: Vec<String>,
    pub rss_mb: Vec<f64>,
    pub cpu_secs: Vec<f64>,
    pub data_mb: Vec<f64>,
    pub restart_secs: Option<f64>,
    /// The longest time writes went unacknowledged around the leader's SIGTERM.
    pub leader_stop_held_ms: Option<f64>,
}

/// The leader-stop probe's row: how long writes to the other members went unanswered.
const LEADER_STOP_ROW: &str = "leader SIGTERM: writes held ms";

/// Workloads whose rate is fixed by the benchmark, so that only their latency compares.
fn is_latency_row(workload: &str) -> bool {
    workload.starts_with("watch-")
}

const MB: f64 = 1024.0 * 1024.0;

/// The medians of `target`'s rounds; workloads keep the order of their first appearance.
pub fn summarize(target: Target, rounds: &[Round]) -> TargetSummary {
    let own: Vec<&Round> = rounds.iter().filter(|r| r.target == target).collect();
    let mut workloads: Vec<&str> = Vec::new();
    for row in own.iter().flat_map(|r| &r.rows) {
        if !workloads.contains(&row.workload.as_str()) {
            workloads.push(&row.workload);
        }
    }
    let rows = workloads
        .into_iter()
        .map(|workload| {
            let samples: Vec<&Row> = own.iter().flat_map(|r| &r.rows).filter(|row| row.workload == workload).collect();
            let med = |f: fn(&Row) -> f64| median(&samples.iter().map(|row| f(row)).collect::<Vec<_>>()).unwrap_or(0.0);
            MedianRow {
                workload: workload.to_string(),
                qps: med(|r| r.stats.qps),
                avg_ms: med(|r| r.stats.avg_ms),
                p50_ms: med(|r| r.stats.p50_ms),
                p99_ms: med(|r| r.stats.p99_ms),
                p999_ms: med(|r| r.stats.p999_ms),
                errors: samples.iter().map(|r| r.stats.errors).sum(),
                cluster_cpu_secs: med(|r| r.cluster_cpu_secs),
            }
        })
        .collect();
    let members: Vec<String> =
        own.first().map(|r| r.members.iter().map(|m| m.name.clone()).collect()).unwrap_or_default();
    let per_member = |f: fn(&MemberUsage) -> f64| -> Vec<f64> {
        members
            .iter()
            .map(|name| {
                let values: Vec<f64> = own.iter().flat_map(|r| &r.members).filter(|m| &m.name == name).map(f).collect();
                median(&values).unwrap_or(0.0)
            })
            .collect()
    };
    let restarts: Vec<f64> = own.iter().filter_map(|r| r.restart.as_ref().map(|r| r.secs)).collect();
    let leader_stops: Vec<f64> = own.iter().filter_map(|r| r.leader_stop.as_ref().map(|s| s.held_ms)).collect();
    TargetSummary {
        target,
        rounds: own.len(),
        rows,
        rss_mb: per_member(|m| m.rss_bytes as f64 / MB),
        cpu_secs: per_member(|m| m.cpu_secs),
        data_mb: per_member(|m| m.data_bytes as f64 / MB),
        members,
        restart_secs: median(&restarts),
        leader_stop_held_ms: median(&leader_stops),
    }
}

/// `a / b`, when `b` is not zero.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

fn fmt_ratio(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"))
}

/// `12/10/11`: one value per member.
fn per_member(values: &[f64], decimals: usize) -> String {
    values.iter().map(|v| format!("{v:.decimals$}")).collect::<Vec<_>>().join("/")
}

/// The table of one or two targets: one target gives every latency column; two (ours first) give
/// QPS and p99 of each with the ratio ours/etcd (for the watch rows, whose rate is fixed, the p99
/// ratio, marked so).
pub fn render(summaries: &[TargetSummary]) -> String {
    match summaries {
        [one] => render_single(one),
        [ours, etcd, ..] => render_pair(ours, etcd),
        [] => String::new(),
    }
}

fn render_single(s: &TargetSummary) -> String {
    let mut lines = vec![vec![
        "workload".to_string(),
        format!("{} QPS", s.target.name()),
        "avg ms".to_string(),
        "p50 ms".to_string(),
        "p99 ms".to_string(),
        "p99.9 ms".to_string(),
        "errors".to_string(),
    ]];
    for row in &s.rows {
        lines.push(vec![
            row.workload.clone(),
            format!("{:.0}", row.qps),
            format!("{:.2}", row.avg_ms),
            format!("{:.2}", row.p50_ms),
            format!("{:.2}", row.p99_ms),
            format!("{:.2}", row.p999_ms),
            row.errors.to_string(),
        ]);
    }
    let mut out = align(&lines);
    let names = s.members.join("/");
    let _ = writeln!(out, "RSS MB ({names}): {}", per_member(&s.rss_mb, 0));
    let _ = writeln!(out, "CPU s ({names}): {}", per_member(&s.cpu_secs, 1));
    if let Some(secs) = s.restart_secs {
        let _ = writeln!(out, "data MB ({names}): {}", per_member(&s.data_mb, 0));
        let _ = writeln!(out, "follower restart s: {secs:.2}");
    }
    if let Some(ms) = s.leader_stop_held_ms {
        let _ = writeln!(out, "{LEADER_STOP_ROW}: {ms:.0}");
    }
    let _ = writeln!(out, "(medians of {} rounds)", s.rounds);
    out
}

fn render_pair(ours: &TargetSummary, etcd: &TargetSummary) -> String {
    let mut lines =
        vec![["workload", "ours QPS", "etcd QPS", "ours/etcd", "ours p99 ms", "etcd p99 ms", "errors ours/etcd"]
            .map(String::from)
            .to_vec()];
    for row in &ours.rows {
        let other = etcd.rows.iter().find(|r| r.workload == row.workload);
        let (qps, p99, errors) = other.map_or((0.0, 0.0, 0), |r| (r.qps, r.p99_ms, r.errors));
        let shown = if is_latency_row(&row.workload) {
            ratio(row.p99_ms, p99).map_or_else(|| "-".to_string(), |r| format!("{r:.2} (p99)"))
        } else {
            fmt_ratio(ratio(row.qps, qps))
        };
        lines.push(vec![
            row.workload.clone(),
            format!("{:.0}", row.qps),
            other.map_or_else(|| "-".to_string(), |_| format!("{qps:.0}")),
            shown,
            format!("{:.2}", row.p99_ms),
            other.map_or_else(|| "-".to_string(), |_| format!("{p99:.2}")),
            format!("{}/{}", row.errors, errors),
        ]);
    }
    let sum = |values: &[f64]| values.iter().sum::<f64>();
    let names = ours.members.join("/");
    let mut resource = |label: String, a: &[f64], b: &[f64], decimals: usize| {
        lines.push(vec![
            label,
            per_member(a, decimals),
            per_member(b, decimals),
            fmt_ratio(ratio(sum(a), sum(b))),
            String::new(),
            String::new(),
            String::new(),
        ]);
    };
    resource(format!("RSS MB ({names})"), &ours.rss_mb, &etcd.rss_mb, 0);
    resource(format!("CPU s ({names})"), &ours.cpu_secs, &etcd.cpu_secs, 1);
    if ours.restart_secs.is_some() || etcd.restart_secs.is_some() {
        resource(format!("data MB ({names})"), &ours.data_mb, &etcd.data_mb, 0);
        let (a, b) = (ours.restart_secs.unwrap_or(0.0), etcd.restart_secs.unwrap_or(0.0));
        resource("follower restart s".to_string(), &[a], &[b], 2);
    }
    if ours.leader_stop_held_ms.is_some() || etcd.leader_stop_held_ms.is_some() {
        let (a, b) = (ours.leader_stop_held_ms.unwrap_or(0.0), etcd.leader_stop_held_ms.unwrap_or(0.0));
        resource(LEADER_STOP_ROW.to_string(), &[a], &[b], 0);
    }
    let mut out = align(&lines);
    let _ = writeln!(
        out,
        "(medians of {} rounds each; ours/etcd > 1 is better for QPS, < 1 for p99 and resources)",
        ours.rounds.min(etcd.rounds)
    );
    out
}

/// A figure of a one-member probe (`--size`, `--soak`): its row's label, how to read it from a
/// target's measure, and its decimals.
pub(crate) type Figure<M> = (String, fn(&M) -> f64, usize);

/// One row per figure and one column per target (`probe` and the targets' names in the header), with
/// ours/etcd in a last column when exactly etcd then ours were measured; aligned.
pub(crate) fn side_by_side<M>(results: &[(Option<Target>, &M)], figures: &[Figure<M>]) -> String {
    let pair = match results {
        [(Some(Target::Etcd), etcd), (Some(Target::Ours), ours)] => Some((*etcd, *ours)),
        _ => None,
    };
    let mut header = vec!["probe".to_string()];
    header.extend(results.iter().map(|(target, _)| target.map_or("?", Target::name).to_string()));
    if pair.is_some() {
        header.push("ours/etcd".to_string());
    }
    let mut lines = vec![header];
    for (label, figure, decimals) in figures {
        let mut line = vec![label.clone()];
        line.extend(results.iter().map(|(_, m)| format!("{:.*}", decimals, figure(m))));
        if let Some((etcd, ours)) = pair {
            line.push(fmt_ratio(ratio(figure(ours), figure(etcd))));
        }
        lines.push(line);
    }
    align(&lines)
}

/// Left-aligns the first column and right-aligns the others, two spaces apart (the `--scale` table too).
pub(crate) fn align(lines: &[Vec<String>]) -> String {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| lines.iter().filter_map(|line| line.get(c)).map(|cell| cell.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .enumerate()
            .map(
                |(c, cell)| {
                    if c == 0 {
                        format!("{cell:<w$}", w = widths[c])
                    } else {
                        format!("{cell:>w$}", w = widths[c])
                    }
                },
            )
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, qps: f64, p99_ms: f64, errors: u64) -> Row {
        let stats = Stats {
            count: 10,
            errors,
            elapsed_secs: 1.0,
            qps,
            avg_ms: 1.0,
            p50_ms: 1.0,
            p99_ms,
            p999_ms: 9.0,
            max_ms: 9.0,
        };
        Row { workload: workload.to_string(), stats, cluster_cpu_secs: 0.5, first_error: None }
    }

    fn round(target: Target, number: u32, rows: Vec<Row>, rss_mb: [u64; 3]) -> Round {
        let members = rss_mb
            .iter()
            .enumerate()
            .map(|(i, mb)| MemberUsage {
                name: format!("n{}", i + 1),
                rss_bytes: mb * 1024 * 1024,
                cpu_secs: 2.0,
                data_bytes: 0,
            })
            .collect();
        Round {
            target,
            round: number,
            leader: "n1".into(),
            rows,
            members,
            client_cpu_secs: 1.0,
            restart: None,
            leader_stop: None,
            duration_secs: 10.0,
        }
    }

    fn rounds() -> Vec<Round> {
        vec![
            round(
                Target::Ours,
                1,
                vec![row("put-1-leader", 900.0, 3.0, 0), row("watch-latency", 100.0, 2.0, 0)],
                [40, 30, 30],
            ),
            round(
                Target::Etcd,
                1,
                vec![row("put-1-leader", 1000.0, 2.0, 1), row("watch-latency", 100.0, 1.0, 0)],
                [100, 90, 90],
            ),
            round(
                Target::Etcd,
                2,
                vec![row("put-1-leader", 500.0, 4.0, 0), row("watch-latency", 100.0, 1.0, 0)],
                [120, 90, 90],
            ),
            round(
                Target::Ours,
                2,
                vec![row("put-1-leader", 1500.0, 1.0, 2), row("watch-latency", 100.0, 2.0, 0)],
                [60, 30, 30],
            ),
            round(
                Target::Ours,
                3,
                vec![row("put-1-leader", 1200.0, 2.0, 0), row("watch-latency", 100.0, 2.0, 0)],
                [50, 30, 30],
            ),
            round(
                Target::Etcd,
                3,
                vec![row("put-1-leader", 600.0, 3.0, 0), row("watch-latency", 100.0, 1.0, 0)],
                [110, 90, 90],
            ),
        ]
    }

    #[test]
    fn medians_are_taken_per_column_over_a_targets_rounds() {
        let ours = summarize(Target::Ours, &rounds());
        assert_eq!(ours.rounds, 3);
        assert_eq!((ours.rows[0].qps, ours.rows[0].p99_ms, ours.rows[0].errors), (1200.0, 2.0, 2));
        assert_eq!(ours.rss_mb, vec![50.0, 30.0, 30.0]);
        assert_eq!(ours.members, vec!["n1", "n2", "n3"]);
        let etcd = summarize(Target::Etcd, &rounds());
        assert_eq!((etcd.rows[0].qps, etcd.rows[0].p99_ms, etcd.rows[0].errors), (600.0, 3.0, 1));
        assert_eq!(etcd.restart_secs, None);
    }

    #[test]
    fn the_pair_table_shows_qps_ratios_and_p99_ratios_for_watch_rows() {
        let all = rounds();
        let table = render(&[summarize(Target::Ours, &all), summarize(Target::Etcd, &all)]);
        let line = |prefix: &str| {
            table.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} row in\n{table}"))
        };
        let cells = |prefix: &str| line(prefix).split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(cells("put-1-leader"), ["put-1-leader", "1200", "600", "2.00", "2.00", "3.00", "2/1"]);
        assert_eq!(cells("watch-latency"), ["watch-latency", "100", "100", "2.00", "(p99)", "2.00", "1.00", "0/0"]);
        assert_eq!(cells("RSS MB"), ["RSS", "MB", "(n1/n2/n3)", "50/30/30", "110/90/90", "0.38"]);
        assert!(line("CPU s").contains("2.0/2.0/2.0"), "{table}");
        assert!(!table.contains("restart"), "no restart row without memory mode:\n{table}");
        // Columns line up: every row is as wide as the header or narrower.
        let header = table.lines().next().expect("header");
        assert!(header.starts_with("workload") && header.ends_with("errors ours/etcd"), "{table}");
    }

    #[test]
    fn the_single_table_has_every_latency_column() {
        let ours = summarize(Target::Ours, &rounds());
        let table = render(&[ours]);
        let header: Vec<&str> = table.lines().next().expect("header").split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(
            header.iter().map(|c| c.trim()).collect::<Vec<_>>(),
            ["workload", "ours QPS", "avg ms", "p50 ms", "p99 ms", "p99.9 ms", "errors"]
        );
        assert!(table.contains("RSS MB (n1/n2/n3): 50/30/30"), "{table}");
        assert!(table.contains("medians of 3 rounds"), "{table}");
    }

    #[test]
    fn memory_mode_adds_data_and_restart_rows() {
        let mut all = rounds();
        for (i, round) in all.iter_mut().enumerate() {
            let secs = if round.target == Target::Ours { 3.0 + i as f64 } else { 2.0 };
            round.restart = Some(Restart { member: "n2".into(), secs, rss_bytes_after: 1 });
            round.members.iter_mut().for_each(|m| m.data_bytes = 10 * 1024 * 1024);
        }
        let ours = summarize(Target::Ours, &all);
        assert_eq!(ours.restart_secs, Some(6.0), "median of 3, 6 and 7");
        let table = render(&[ours, summarize(Target::Etcd, &all)]);
        let restart = table.lines().find(|l| l.starts_with("follower restart s")).expect("restart row");
        assert_eq!(restart.split_whitespace().skip(3).collect::<Vec<_>>(), ["6.00", "2.00", "3.00"], "{table}");
        assert!(table.contains("10/10/10"), "{table}");
    }

    #[test]
    fn the_leader_stop_row_shows_each_targets_median_and_their_ratio() {
        let mut all = rounds();
        assert!(!render(&[summarize(Target::Ours, &all)]).contains("SIGTERM"), "no probe, no row");
        for (i, round) in all.iter_mut().enumerate() {
            let held_ms = if round.target == Target::Ours { 10.0 + i as f64 } else { 40.0 };
            round.leader_stop = Some(LeaderStop {
                member: "n1".into(),
                held_ms,
                exit_ms: 5.0,
                clean: true,
                errors: 0,
                first_error: None,
            });
        }
        let ours = summarize(Target::Ours, &all);
        assert_eq!(ours.leader_stop_held_ms, Some(13.0), "median of 10, 13 and 14");
        assert!(render(&[ours.clone()]).contains("leader SIGTERM: writes held ms: 13"));
        let table = render(&[ours, summarize(Target::Etcd, &all)]);
        let row = table.lines().find(|l| l.starts_with("leader SIGTERM")).expect("leader-stop row");
        assert_eq!(row.split_whitespace().skip(5).collect::<Vec<_>>(), ["13", "40", "0.33"], "{table}");
    }

    #[test]
    fn ratios_refuse_a_zero_denominator() {
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
        assert_eq!(fmt_ratio(None), "-");
    }
}
