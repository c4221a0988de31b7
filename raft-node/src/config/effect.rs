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

use super::settings::Settings;
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
pub fn check(config: &Config, settings: &Settings) -> Result<Vec<String>, Refused> {
    refuse(config, settings)?;
    Ok(no_effect(config, settings))
}

fn refuse(config: &Config, settings: &Settings) -> Result<(), Refused> {
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
    if !config.renamed.discovery_endpoints.is_empty() || !config.renamed.discovery_token.is_empty() {
        return refused("--discovery-endpoints", "v3 discovery is not built; bootstrap with --initial-cluster");
    }
    if !clustering.discovery_proxy.is_empty() {
        return refused("--discovery-proxy", "discovery is not built; bootstrap with --initial-cluster");
    }
    if settings.distributed_tracing {
        return refused(
            "--enable-distributed-tracing",
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

fn no_effect(config: &Config, settings: &Settings) -> Vec<String> {
    let member = &config.member;
    let gates = &settings.gates;
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
        !gates.enabled("TxnModeWriteWithSharedBuffer"),
        "TxnModeWriteWithSharedBuffer=false",
        "transactions read the store they write, with no separate buffer",
    );
    note(
        settings.bootstrap_defrag_threshold_megabytes != 0,
        "--bootstrap-defrag-threshold-megabytes",
        "sled reclaims space as it goes; `etcdctl defrag` compacts the files",
    );
    note(
        gates.enabled("StopGRPCServiceOnDefrag"),
        "StopGRPCServiceOnDefrag",
        "defragmentation does not stop requests here",
    );
    note(settings.downgrade_check_time != five, "--downgrade-check-time", "downgrades are not supported yet");
    note(
        gates.enabled("LeaseCheckpoint") || gates.enabled("LeaseCheckpointPersist"),
        "LeaseCheckpoint/LeaseCheckpointPersist",
        "a new leader restarts every lease's TTL, as etcd without checkpoints",
    );
    note(
        gates.enabled("CompactHashCheck"),
        "CompactHashCheck",
        "use --corrupt-check-time, which compares every member's HashKV",
    );
    note(gates.enabled("SetMemberLocalAddr"), "SetMemberLocalAddr", "peers are dialed from the advertised peer IP");
    note(
        settings.warning_unary_request_duration != Duration::from_millis(300),
        "--warning-unary-request-duration",
        "slow requests are not logged yet",
    );
    note(
        config.monitoring.metrics == "extensive",
        "--metrics=extensive",
        "the gRPC handling-time histograms are not exported yet (the started/handled counters are)",
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
        settings.warning_apply_duration != Duration::from_millis(100),
        "--warning-apply-duration",
        "slow applies are not logged yet",
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

    fn check(config: &Config) -> Result<Vec<String>, Refused> {
        super::check(config, &crate::config::settings::resolve(config).expect("settings"))
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
