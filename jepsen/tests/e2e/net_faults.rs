//! The network faults (`one-way`, `client-cut`, `delay`, `loss`) against our cluster.
//!
//! One 20 s run with two-second fault windows; seed 10 draws client-cut, loss, one-way and delay
//! in its first four windows. The run must be valid, every fault must have started, and the
//! history must show two of them acting:
//! - no op sent to a member whose clients are cut completes `ok` while the cut lasts;
//! - every op sent to a member with delayed links that completes `ok` while the delay lasts took at
//!   least two delays (each op crosses a delayed link at least once each way).

use serde_json::Value;

use crate::common::{jepsen_test, start, Report};

/// A fault window from the nemesis log: its kind, detail and [start, stop) in run time.
struct Window {
    fault: String,
    detail: String,
    start_ns: u64,
    stop_ns: u64,
}

fn windows(events: &[Value]) -> Vec<Window> {
    events
        .windows(2)
        .filter(|pair| pair[0]["f"] == "start" && pair[1]["f"] == "stop")
        .map(|pair| Window {
            fault: pair[0]["fault"].as_str().unwrap_or_default().to_string(),
            detail: pair[0]["detail"].as_str().unwrap_or_default().to_string(),
            start_ns: pair[0]["time_ns"].as_u64().unwrap_or_default(),
            stop_ns: pair[1]["time_ns"].as_u64().unwrap_or_default(),
        })
        .collect()
}

/// An op: where it went, how it ended, and when.
struct Done {
    member: String,
    outcome: String,
    error: String,
    invoked_ns: u64,
    completed_ns: u64,
}

/// Invocations paired with their completions (each process has one op outstanding at a time).
fn completed_ops(history: &[Value]) -> Vec<Done> {
    let mut open = std::collections::HashMap::new();
    let mut done = Vec::new();
    for op in history {
        let process = op["process"].as_u64().expect("process");
        if op["type"] == "invoke" {
            open.insert(process, op);
        } else if let Some(invoke) = open.remove(&process) {
            done.push(Done {
                member: invoke["member"].as_str().unwrap_or_default().to_string(),
                outcome: op["type"].as_str().unwrap_or_default().to_string(),
                error: op["error"].as_str().unwrap_or_default().to_string(),
                invoked_ns: invoke["time_ns"].as_u64().expect("time"),
                completed_ns: op["time_ns"].as_u64().expect("time"),
            });
        }
    }
    done
}

/// Whether `op` went to a member the window hit: the one its detail names (`… n2's …`), or any
/// when it names none (`every peer link`).
fn hit(window: &Window, op: &Done) -> bool {
    match window.detail.find("'s ") {
        Some(end) => window.detail[..end].rsplit(' ').next() == Some(op.member.as_str()),
        None => true,
    }
}

/// The register workload on ours with `nemesis`, its delay 50 ± 10 ms each way, and `extra` flags.
fn register_on_ours(nemesis: &str, secs: &str, interval: &str, seed: &str, extra: &[&str]) -> Report {
    let mut args = vec!["--target", "ours", "--workload", "register", "--nemesis", nemesis, "--time-limit", secs];
    args.extend(["--nemesis-interval", interval, "--seed", seed, "--delay-ms", "50", "--delay-jitter-ms", "10"]);
    args.extend(extra);
    jepsen_test(&args)
}

#[test]
fn one_way_client_cut_delay_and_loss_against_ours_are_valid_and_visible() {
    let Some(_one_at_a_time) = start() else { return };
    let report = register_on_ours("one-way,client-cut,delay,loss", "20", "2", "10", &["--check-timeout", "60"]);
    let summary = &report.summary;
    assert_eq!(summary["valid"], "valid", "{summary:#}");

    let windows = windows(&report.jsonl("nemesis.jsonl"));
    for fault in ["one-way", "client-cut", "delay", "loss"] {
        assert!(windows.iter().any(|w| w.fault == fault), "{fault} never started: {summary:#}");
    }
    let ops = completed_ops(&report.jsonl("history.jsonl"));
    let within = |w: &Window, op: &Done| w.start_ns <= op.invoked_ns && op.completed_ns < w.stop_ns && hit(w, op);
    for window in windows.iter().filter(|w| w.fault == "client-cut") {
        let served: Vec<&Done> = ops.iter().filter(|op| within(window, op) && op.outcome == "ok").collect();
        assert!(served.is_empty(), "{} ops completed ok through the client cut `{}`", served.len(), window.detail);
    }
    // 50 ms ± 10 ms each way: at least 2 × 40 ms.
    let floor_ns = 80_000_000;
    for window in windows.iter().filter(|w| w.fault == "delay") {
        let delayed: Vec<u64> = ops
            .iter()
            .filter(|op| within(window, op) && op.outcome == "ok")
            .map(|op| op.completed_ns - op.invoked_ns)
            .collect();
        eprintln!("`{}`: {} ok ops, the fastest in {:?} ns", window.detail, delayed.len(), delayed.iter().min());
        assert!(delayed.iter().all(|&ns| ns >= floor_ns), "an op beat the delay `{}`: {delayed:?}", window.detail);
    }
}

/// etcd #7617's complaint, on ours at default timing (heartbeat 100 ms, election 1 s): with every peer
/// link delayed by 50 ± 10 ms each way, or losing 20 % of its packets, the leader keeps its quorum and
/// keeps committing. openraft waited only one heartbeat interval for each answer; the leader then lost
/// its quorum (check-quorum) several times per run and ops timed out (5 of some 25 per window). Later,
/// one TCP connection per peer stalled behind a lost segment's retransmissions and either lost the
/// quorum or timed ops out in a third of the runs; with several connections per peer neither the
/// quorum nor a read is lost, but a write forwarded on a connection in the instant it stalls can still
/// wait out its client's two seconds (3 runs of 22 had one or two; etcd 3.4.23 timed out 14 ops in 4
/// runs of this test). So at most one op in fifty may time out in a window.
#[test]
fn delayed_and_lossy_peer_links_neither_depose_the_leader_nor_time_ops_out() {
    let Some(_one_at_a_time) = start() else { return };
    let report = register_on_ours("delay,loss", "24", "4", "7", &["--loss-percent", "20"]);
    let summary = &report.summary;
    assert_eq!(summary["valid"], "valid", "{summary:#}");
    for member in ["n1", "n2", "n3"] {
        let log = std::fs::read_to_string(report.dir.join(format!("{member}.log"))).expect("member log");
        let lost: Vec<&str> = log.lines().filter(|l| l.contains("no quorum heard for an election timeout")).collect();
        assert!(lost.is_empty(), "{member}'s leader lost its quorum under delay or loss: {lost:#?}");
    }
    let windows: Vec<Window> = windows(&report.jsonl("nemesis.jsonl"))
        .into_iter()
        .filter(|w| w.detail.contains("every peer link") || w.fault == "loss")
        .collect();
    assert!(windows.iter().any(|w| w.fault == "delay") && windows.iter().any(|w| w.fault == "loss"), "{summary:#}");
    let ops = completed_ops(&report.jsonl("history.jsonl"));
    for window in &windows {
        let inside: Vec<&Done> =
            ops.iter().filter(|op| window.start_ns <= op.invoked_ns && op.invoked_ns < window.stop_ns).collect();
        let timed_out = inside.iter().filter(|op| op.outcome == "info").count();
        let ok = inside.iter().filter(|op| op.outcome == "ok").count();
        eprintln!("`{}`: {ok} ok, {timed_out} timed out of {}", window.detail, inside.len());
        assert!(
            timed_out * 50 <= inside.len(),
            "{timed_out} of {} ops timed out under `{}`",
            inside.len(),
            window.detail
        );
        // A read whose leadership round heard no quorum in openraft's window asks again (25 reads failed
        // so in 14 runs before it did, none in 22 after).
        let refused: Vec<&str> =
            inside.iter().filter(|op| op.error.contains("request timed out")).map(|op| op.error.as_str()).collect();
        assert!(refused.is_empty(), "ops failed under `{}`: {refused:?}", window.detail);
        // Six workers at about a fifth of a second per op under delay: far more than one op per second.
        let secs = (window.stop_ns - window.start_ns) / 1_000_000_000;
        assert!(ok as u64 >= 2 * secs, "only {ok} ops ok in {secs} s under `{}`", window.detail);
    }
}
