//! What each of etcd's flags does here, where that is not simply "the same as etcd".
//!
//! Two kinds of flag need a word at start-up:
//! - **refused**: a feature this member does not have (the v2 API and proxy, discovery bootstrap, ...). A
//!   member started with it would silently run without what the operator asked for, so it does not start,
//!   and one line says why and what to use instead.
//! - **no effect here**: tuning of a part etcd has and this store does not (bbolt's freelist, WAL and snapshot
//!   file retention, ...). The member starts, and says in its log that the value has nothing to act on.
//!
//! Everything else acts as in etcd.

use std::time::Duration;

use super::Config;

/// A flag the member cannot honour: it does not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{flag} is not supported: {instead}")]
pub struct Refused {
    pub flag: &'static str,
    pub instead: &'static str,
}

/// The flags this configuration sets that have no effect here, each with the reason, or the first flag
/// it sets that the member cannot honour.
pub fn check(config: &Config) -> Result<Vec<String>, Refused> {
    refuse(config)?;
    Ok(no_effect(config))
}

fn refuse(config: &Config) -> Result<(), Refused> {
    let (clustering, monitoring) = (&config.clustering, &config.monitoring);
    let refused = |flag, instead| Err(Refused { flag, instead });
    if clustering.enable_v2 {
        return refused("--enable-v2=true", "the v2 API is not served (etcd 3.6 removed it too); use the v3 API");
    }
    if !config.experimental.experimental_enable_v2v3.is_empty() {
        return refused("--experimental-enable-v2v3", "the v2 API is not served; use the v3 API");
    }
    if monitoring.proxy != "off" {
        return refused("--proxy", "the v2 proxy is not built (etcd 3.6 removed it); give clients every member's URL");
    }
    if !clustering.discovery.is_empty() {
        return refused("--discovery", "bootstrap with --initial-cluster listing every member");
    }
    if !clustering.discovery_srv.is_empty() || !clustering.discovery_srv_name.is_empty() {
        return refused("--discovery-srv", "DNS discovery is not built; bootstrap with --initial-cluster");
    }
    if !clustering.discovery_proxy.is_empty() {
        return refused("--discovery-proxy", "discovery is not built; bootstrap with --initial-cluster");
    }
    if monitoring.experimental_enable_distributed_tracing {
        return refused(
            "--experimental-enable-distributed-tracing",
            "no OpenTelemetry exporter is built in; use --log-format json and the metrics",
        );
    }
    if monitoring.enable_log_rotation {
        return refused("--enable-log-rotation", "rotate the --log-outputs file with logrotate (copytruncate)");
    }
    if monitoring.enable_pprof {
        return refused("--enable-pprof", "profile the process with `perf record -g -p PID`");
    }
    Ok(())
}

fn no_effect(config: &Config) -> Vec<String> {
    let (member, experimental) = (&config.member, &config.experimental);
    let mut notes = Vec::new();
    let mut note = |set: bool, flag: &str, why: &str| {
        if set {
            notes.push(format!("{flag} has no effect here: {why}"));
        }
    };
    let no_files = "the Raft log and the data live in one sled database, not in snapshot and WAL files";
    note(member.max_snapshots != 5, "--max-snapshots", no_files);
    note(member.max_wals != 5, "--max-wals", no_files);
    note(
        member.backend_bbolt_freelist_type != "map",
        "--backend-bbolt-freelist-type",
        "the backend is sled, not bbolt",
    );
    note(
        member.backend_batch_limit != 0,
        "--backend-batch-limit",
        "the backend commits every 100 ms whatever the count",
    );
    note(
        member.backend_batch_interval.is_some(),
        "--backend-batch-interval",
        "the backend commits every 100 ms; applied writes are durable through the Raft log",
    );
    let five = Duration::from_secs(5);
    note(
        member.raft_read_timeout != five || member.raft_write_timeout != five,
        "--raft-read-timeout/--raft-write-timeout",
        "peers speak gRPC, whose requests time out after one heartbeat interval",
    );
    note(
        member.grpc_keepalive_min_time != five,
        "--grpc-keepalive-min-time",
        "the HTTP/2 server does not police how often clients ping",
    );
    note(
        config.tls.client_cert_file.is_some() || config.tls.client_key_file.is_some(),
        "--client-cert-file/--client-key-file",
        "the member never dials its own client port (the gateway is served in-process)",
    );
    note(
        config.clustering.v2_deprecation != "not-yet" || config.clustering.discovery_fallback != "proxy",
        "--v2-deprecation/--discovery-fallback",
        "there is no v2 store and no discovery",
    );
    note(
        !experimental.experimental_txn_mode_write_with_shared_buffer,
        "--experimental-txn-mode-write-with-shared-buffer",
        "transactions read the store they write, with no separate buffer",
    );
    note(
        experimental.experimental_bootstrap_defrag_threshold_megabytes != 0,
        "--experimental-bootstrap-defrag-threshold-megabytes",
        "sled reclaims space as it goes; `etcdctl defrag` compacts the files",
    );
    note(
        experimental.experimental_stop_grpc_service_on_defrag,
        "--experimental-stop-grpc-service-on-defrag",
        "defragmentation does not stop requests here",
    );
    note(
        experimental.experimental_compaction_batch_limit != 1000
            || experimental.experimental_compaction_sleep_interval != Duration::from_millis(10),
        "--experimental-compaction-batch-limit/--experimental-compaction-sleep-interval",
        "compaction removes a revision range in one pass",
    );
    note(
        experimental.experimental_downgrade_check_time != five,
        "--experimental-downgrade-check-time",
        "downgrades are not supported yet",
    );
    note(
        experimental.experimental_enable_lease_checkpoint || experimental.experimental_enable_lease_checkpoint_persist,
        "--experimental-enable-lease-checkpoint(-persist)",
        "a new leader restarts every lease's TTL, as etcd without checkpoints",
    );
    note(
        experimental.experimental_compact_hash_check_enabled,
        "--experimental-compact-hash-check-enabled",
        "use --experimental-corrupt-check-time, which compares every member's HashKV",
    );
    note(
        !config.clustering.pre_vote,
        "--pre-vote=false",
        "every election starts with a pre-vote here, which keeps a member that rejoins from disrupting the leader",
    );
    note(
        !config.member.initial_election_tick_advance,
        "--initial-election-tick-advance=false",
        "a member that starts waits an election timeout for a leader before it campaigns either way",
    );
    note(
        experimental.experimental_warning_apply_duration != Duration::from_millis(100),
        "--experimental-warning-apply-duration",
        "slow requests are not logged yet",
    );
    for key in &config.ignored_file_keys {
        notes.push(format!("config file key {key:?} names no flag; ignored, as etcd ignores it"));
    }
    notes
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn config(args: &[&str]) -> Config {
        Config::try_parse_from(std::iter::once("raft-node").chain(args.iter().copied())).expect("valid flags")
    }

    #[test]
    fn defaults_start_without_notes() {
        assert_eq!(check(&config(&[])), Ok(Vec::new()));
    }

    #[test]
    fn features_not_built_stop_the_member_with_what_to_use_instead() {
        for (args, flag) in [
            (&["--enable-v2"][..], "--enable-v2=true"),
            (&["--proxy=on"], "--proxy"),
            (&["--discovery=https://discovery.example/abc"], "--discovery"),
            (&["--discovery-srv=example.com"], "--discovery-srv"),
        ] {
            let refused = check(&config(args)).expect_err("refused");
            assert_eq!(refused.flag, flag, "{args:?}");
            assert!(!refused.instead.is_empty());
        }
        // The v2 flags at their off values start.
        assert!(check(&config(&["--enable-v2=false", "--proxy=off"])).is_ok());
    }

    #[test]
    fn tuning_of_parts_this_store_lacks_is_noted() {
        let notes = check(&config(&["--max-wals=0", "--backend-bbolt-freelist-type=array"])).expect("starts");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("--max-wals has no effect here"), "{notes:?}");
        assert!(notes[1].starts_with("--backend-bbolt-freelist-type has no effect here"), "{notes:?}");
    }
}
