//! The register workload against our cluster:
//! - linearizable reads under leader partitions: the run is valid;
//! - serializable reads from members cut off by partitions: the register checker must catch the
//!   stale reads (this proves the whole pipeline can see a real anomaly, not only hand-built ones).

use crate::common::{jepsen_test, start};

#[test]
fn linearizable_reads_under_leader_partitions_are_valid() {
    let Some(_one_at_a_time) = start() else { return };
    let report =
        jepsen_test(&["--nemesis", "partition-leader", "--time-limit", "20", "--seed", "1", "--target", "ours"]);
    let summary = &report.summary;
    assert_eq!(summary["valid"], "valid", "{summary:#}");
    assert!(report.fault_started("partition-leader"), "{summary:#}");
    assert!(report.ok_ops() > 100, "{summary:#}");
}

#[test]
fn serializable_reads_from_a_partitioned_member_are_caught() {
    let Some(_one_at_a_time) = start() else { return };
    let report = jepsen_test(&[
        "--nemesis",
        "partition-one",
        "--serializable-reads",
        "--time-limit",
        "20",
        "--seed",
        "1",
        "--target",
        "ours",
    ]);
    let summary = &report.summary;
    let register = report.result("register");
    assert_eq!(register["valid"], "invalid", "{summary:#}");
    let anomalies = register["anomalies"].as_array().expect("anomalies");
    assert!(anomalies.iter().any(|a| a["kind"] == "not-linearizable"), "{summary:#}");
    assert_eq!(summary["valid"], "invalid");
}
