//! What the plots are made of, independent of any workload and of plotters: [`Sample`]s (one per
//! completed op: its `f`, outcome and times), [`FaultWindow`]s (one per nemesis start and its stop),
//! and the throughput buckets.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::{OpPair, OpType};
use crate::nemesis::NemesisEvent;
use crate::options::FaultKind;

/// The most points in time the throughput plot has; longer runs get wider buckets.
const MAX_BUCKETS: u64 = 300;

/// One op as the plots see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The op's `f` (`read`, `write`, `cas`, ...).
    pub f: String,
    /// `Ok`, `Fail` or `Info`.
    pub outcome: OpType,
    pub start_ns: u64,
    /// When the completion was recorded; for `info`, when the client gave up.
    pub end_ns: u64,
}

impl Sample {
    /// One sample per op that has a completion. Ops the run ended before completing have no latency
    /// to show and are left out.
    pub fn from_pairs<P: Serialize>(pairs: &[OpPair<P>]) -> Vec<Sample> {
        pairs
            .iter()
            .filter_map(|pair| {
                let completion = pair.completion.as_ref()?;
                Some(Sample {
                    f: f_of(&pair.invoke.payload),
                    outcome: completion.kind,
                    start_ns: pair.start_ns(),
                    end_ns: completion.time_ns,
                })
            })
            .collect()
    }

    pub fn latency_ms(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e6
    }
}

/// The `f` tag of a payload's JSON, or `op` when it has none.
pub fn f_of<P: Serialize>(payload: &P) -> String {
    match serde_json::to_value(payload) {
        Ok(serde_json::Value::Object(map)) => match map.get("f") {
            Some(serde_json::Value::String(f)) => f.clone(),
            _ => "op".to_string(),
        },
        _ => "op".to_string(),
    }
}

/// A time span during which a fault was in force.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultWindow {
    pub fault: FaultKind,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The start event's detail (who was hit).
    pub detail: String,
}

/// Pairs every nemesis `start` with the next `stop` of the same fault kind. The final heal (a stop
/// of kind `none`) closes whatever is still open, and a window that never closed (the run failed
/// mid-fault) ends at `end_ns`. A stop without a start draws nothing.
pub fn fault_windows(events: &[NemesisEvent], end_ns: u64) -> Vec<FaultWindow> {
    let mut windows = Vec::new();
    let mut open: Vec<FaultWindow> = Vec::new();
    for event in events {
        match event.f {
            "start" => open.push(FaultWindow {
                fault: event.fault,
                start_ns: event.time_ns,
                end_ns,
                detail: event.detail.clone(),
            }),
            "stop" => {
                let closes = |w: &FaultWindow| event.fault == FaultKind::None || w.fault == event.fault;
                let (closed, still): (Vec<_>, Vec<_>) = open.into_iter().partition(|w| closes(w));
                windows.extend(closed.into_iter().map(|w| FaultWindow { end_ns: event.time_ns, ..w }));
                open = still;
            }
            _ => {}
        }
    }
    windows.extend(open);
    windows.sort_by_key(|w| w.start_ns);
    windows
}

/// The throughput buckets' width: one second, or wider so that a long run has at most
/// [`MAX_BUCKETS`] of them.
pub(super) fn bucket_width_s(end_ns: u64) -> u64 {
    (end_ns / 1_000_000_000).div_ceil(MAX_BUCKETS).max(1)
}

/// Completions per second in buckets of `width_s` seconds by completion time, one line per outcome
/// that occurs. Each point sits at its bucket's middle; empty buckets count as zero.
pub(super) fn throughput(samples: &[Sample], end_ns: u64, width_s: u64) -> Vec<(OpType, Vec<(f64, f64)>)> {
    let width_ns = width_s.max(1) * 1_000_000_000;
    let last = samples.iter().map(|s| s.end_ns).max().unwrap_or(0).max(end_ns);
    // The last bucket ends at the last completion (inclusive), so no bucket lies past the data.
    let buckets = usize::try_from(last.div_ceil(width_ns).max(1)).unwrap_or(usize::MAX);
    let mut counts: BTreeMap<u8, (OpType, Vec<u64>)> = BTreeMap::new();
    for sample in samples {
        let rank = match sample.outcome {
            OpType::Ok => 0,
            OpType::Fail => 1,
            OpType::Info | OpType::Invoke => 2,
        };
        let entry = counts.entry(rank).or_insert_with(|| (sample.outcome, vec![0; buckets]));
        let bucket = usize::try_from(sample.end_ns / width_ns).unwrap_or(usize::MAX).min(buckets - 1);
        if let Some(count) = entry.1.get_mut(bucket) {
            *count += 1;
        }
    }
    counts
        .into_values()
        .map(|(outcome, counts)| {
            let points = counts
                .iter()
                .enumerate()
                .map(|(i, &n)| ((i as f64 + 0.5) * width_s as f64, n as f64 / width_s as f64))
                .collect();
            (outcome, points)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{self, Op, TestKv as Kv};

    fn event(time_ns: u64, f: &'static str, fault: FaultKind) -> NemesisEvent {
        NemesisEvent { time_ns, f, fault, detail: format!("{f} {}", fault.name()) }
    }

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn pairs() -> Vec<OpPair<Kv>> {
        let ops = vec![
            Op::invoke(0, Kv::Write(1), 10 * MS),
            Op::invoke(1, Kv::Read(None), 20 * MS),
            Op::new(0, OpType::Ok, Kv::Write(1), 15 * MS),
            Op::new(1, OpType::Info, Kv::Read(None), 2020 * MS),
            Op::invoke(2, Kv::Write(2), 2100 * MS),
            Op::new(2, OpType::Fail, Kv::Write(2), 2103 * MS),
            Op::invoke(3, Kv::Read(None), 2200 * MS),
        ];
        history::pair(ops).expect("well formed")
    }

    #[test]
    fn samples_keep_f_outcome_and_times() {
        let samples = Sample::from_pairs(&pairs());
        let got: Vec<(&str, OpType, u64, u64)> =
            samples.iter().map(|s| (s.f.as_str(), s.outcome, s.start_ns, s.end_ns)).collect();
        assert_eq!(
            got,
            vec![
                ("write", OpType::Ok, 10 * MS, 15 * MS),
                ("read", OpType::Info, 20 * MS, 2020 * MS),
                ("write", OpType::Fail, 2100 * MS, 2103 * MS),
            ],
            "the op the run never completed is left out"
        );
        assert_eq!(samples[1].latency_ms(), 2000.0);
    }

    #[test]
    fn f_falls_back_for_untagged_payloads() {
        assert_eq!(f_of(&Kv::Read(Some(3))), "read");
        assert_eq!(f_of(&serde_json::json!({"f": "cas", "value": [1, 2]})), "cas");
        assert_eq!(f_of(&7), "op");
        assert_eq!(f_of(&serde_json::json!({"f": 3})), "op");
    }

    #[test]
    fn fault_windows_pair_starts_with_stops() {
        let events = vec![
            event(S, "stop", FaultKind::KillOne), // a stop without a start draws nothing
            event(3 * S, "start", FaultKind::PartitionLeader),
            event(8 * S, "stop", FaultKind::PartitionLeader),
            event(13 * S, "start", FaultKind::KillLeader),
            event(18 * S, "stop", FaultKind::KillLeader),
            event(23 * S, "start", FaultKind::PauseOne),
            event(25 * S, "stop", FaultKind::None),    // the final heal closes it
            event(26 * S, "start", FaultKind::Bridge), // never stopped: runs to the end
        ];
        let windows = fault_windows(&events, 30 * S);
        let got: Vec<(FaultKind, u64, u64)> = windows.iter().map(|w| (w.fault, w.start_ns / S, w.end_ns / S)).collect();
        assert_eq!(
            got,
            vec![
                (FaultKind::PartitionLeader, 3, 8),
                (FaultKind::KillLeader, 13, 18),
                (FaultKind::PauseOne, 23, 25),
                (FaultKind::Bridge, 26, 30),
            ]
        );
        assert_eq!(windows[0].detail, "start partition-leader");
    }

    #[test]
    fn throughput_counts_completions_per_bucket() {
        let sample = |outcome, end_ns| Sample { f: "read".to_string(), outcome, start_ns: 0, end_ns };
        let samples = vec![
            sample(OpType::Ok, 100 * MS),
            sample(OpType::Ok, 900 * MS),
            sample(OpType::Ok, 1500 * MS),
            sample(OpType::Info, 2500 * MS),
        ];
        let lines = throughput(&samples, 3 * S, 1);
        assert_eq!(
            lines,
            vec![
                (OpType::Ok, vec![(0.5, 2.0), (1.5, 1.0), (2.5, 0.0)]),
                (OpType::Info, vec![(0.5, 0.0), (1.5, 0.0), (2.5, 1.0)]),
            ]
        );
        // Two-second buckets: three completions in [0, 2) s make 1.5 per second.
        assert_eq!(throughput(&samples, 3 * S, 2)[0].1, vec![(1.0, 1.5), (3.0, 0.0)]);
        // A completion exactly at the end falls into the last bucket.
        assert_eq!(
            throughput(&[sample(OpType::Fail, 2 * S)], 2 * S, 1),
            vec![(OpType::Fail, vec![(0.5, 0.0), (1.5, 1.0)])]
        );
        assert_eq!(bucket_width_s(20 * S), 1);
        assert_eq!(bucket_width_s(900 * S), 3);
    }
}
