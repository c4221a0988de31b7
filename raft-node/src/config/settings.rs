//! The settings a member runs with, resolved from etcd 3.5's and 3.6's names as etcd 3.6 resolves them:
//! a flag given under its old `--experimental-*` name wins (with 3.6's deprecation warning), both names
//! at once are an error, neither gives etcd's default; the old booleans set their feature gate unless
//! `--feature-gates` names it too (an error then, as in etcd).

use std::collections::BTreeMap;
use std::time::Duration;

use super::gates::{FeatureGates, EXPERIMENTAL_FLAGS};
use super::Config;

/// What the flags come to.
#[derive(Clone, Debug)]
pub struct Settings {
    pub gates: FeatureGates,
    pub watch_progress_notify_interval: Duration,
    pub corrupt_check_time: Duration,
    pub compact_hash_check_time: Duration,
    pub compaction_batch_limit: u64,
    pub compaction_sleep_interval: Duration,
    pub downgrade_check_time: Duration,
    pub memory_mlock: bool,
    pub warning_apply_duration: Duration,
    pub warning_unary_request_duration: Duration,
    pub bootstrap_defrag_threshold_megabytes: u64,
    pub snapshot_catchup_entries: u64,
    pub peer_skip_client_san_verification: bool,
    pub distributed_tracing: bool,
    /// etcd 3.6's deprecation warnings for the old names given.
    pub deprecations: Vec<String>,
}

/// Resolves one renamed flag.
struct Resolver<'a> {
    deprecations: &'a mut Vec<String>,
}

impl Resolver<'_> {
    fn pick<T: Clone>(
        &mut self,
        old: &Option<T>,
        new: &Option<T>,
        names: (&str, &str),
        default: T,
    ) -> Result<T, String> {
        let (old_name, new_name) = names;
        match (old, new) {
            (Some(_), Some(_)) => {
                Err(format!("cannot set --{old_name} and --{new_name} at the same time, please use --{new_name} only"))
            }
            (Some(value), None) => {
                self.deprecations.push(format!(
                    "--{old_name} is deprecated in v3.6 and will be decommissioned in v3.7. Use '--{new_name}' instead."
                ));
                Ok(value.clone())
            }
            (None, Some(value)) => Ok(value.clone()),
            (None, None) => Ok(default),
        }
    }
}

/// The settings of `config`, or etcd's error for flags that contradict each other.
pub fn resolve(config: &Config) -> Result<Settings, String> {
    let (old, new) = (&config.experimental, &config.renamed);
    let mut deprecations = Vec::new();
    let mut gates = FeatureGates::parse(&new.feature_gates)?;
    let booleans = [
        old.experimental_stop_grpc_service_on_defrag,
        old.experimental_initial_corrupt_check,
        old.experimental_compact_hash_check_enabled,
        old.experimental_txn_mode_write_with_shared_buffer,
        old.experimental_enable_lease_checkpoint,
        old.experimental_enable_lease_checkpoint_persist,
    ];
    let mut from_flags = BTreeMap::new();
    for ((flag, gate), value) in EXPERIMENTAL_FLAGS.iter().zip(booleans) {
        let Some(value) = value else { continue };
        if new.feature_gates.contains(gate) {
            let current = gates.enabled(gate);
            return Err(format!(
                "cannot specify both flags: --{flag}={value} and --feature-gates={gate}={current} at the same time, \
                 please just use --feature-gates={gate}={current}"
            ));
        }
        deprecations.push(format!(
            "--{flag} is deprecated in v3.6 and will be decommissioned in v3.7. Use '--feature-gates={gate}={value}' \
             instead."
        ));
        from_flags.insert(gate.to_string(), value);
    }
    gates.set(&from_flags)?;
    let mut r = Resolver { deprecations: &mut deprecations };
    let tracing = r.pick(
        &old.experimental_enable_distributed_tracing,
        &new.enable_distributed_tracing,
        ("experimental-enable-distributed-tracing", "enable-distributed-tracing"),
        false,
    )?;
    // The tracing details only matter with tracing, which is refused; their old names still warn.
    r.pick(
        &old.experimental_distributed_tracing_address,
        &new.distributed_tracing_address,
        ("experimental-distributed-tracing-address", "distributed-tracing-address"),
        String::new(),
    )?;
    r.pick(
        &old.experimental_distributed_tracing_service_name,
        &new.distributed_tracing_service_name,
        ("experimental-distributed-tracing-service-name", "distributed-tracing-service-name"),
        String::new(),
    )?;
    r.pick(
        &old.experimental_distributed_tracing_instance_id,
        &new.distributed_tracing_instance_id,
        ("experimental-distributed-tracing-instance-id", "distributed-tracing-instance-id"),
        String::new(),
    )?;
    r.pick(
        &old.experimental_distributed_tracing_sampling_rate,
        &new.distributed_tracing_sampling_rate,
        ("experimental-distributed-tracing-sampling-rate", "distributed-tracing-sampling-rate"),
        0,
    )?;
    let settings = Settings {
        watch_progress_notify_interval: r.pick(
            &old.experimental_watch_progress_notify_interval,
            &new.watch_progress_notify_interval,
            ("experimental-watch-progress-notify-interval", "watch-progress-notify-interval"),
            Duration::from_secs(600),
        )?,
        corrupt_check_time: r.pick(
            &old.experimental_corrupt_check_time,
            &new.corrupt_check_time,
            ("experimental-corrupt-check-time", "corrupt-check-time"),
            Duration::ZERO,
        )?,
        compact_hash_check_time: r.pick(
            &old.experimental_compact_hash_check_time,
            &new.compact_hash_check_time,
            ("experimental-compact-hash-check-time", "compact-hash-check-time"),
            Duration::from_secs(60),
        )?,
        compaction_batch_limit: r.pick(
            &old.experimental_compaction_batch_limit,
            &new.compaction_batch_limit,
            ("experimental-compaction-batch-limit", "compaction-batch-limit"),
            1000,
        )?,
        compaction_sleep_interval: r.pick(
            &old.experimental_compaction_sleep_interval,
            &new.compaction_sleep_interval,
            ("experimental-compaction-sleep-interval", "compaction-sleep-interval"),
            Duration::from_millis(10),
        )?,
        downgrade_check_time: r.pick(
            &old.experimental_downgrade_check_time,
            &new.downgrade_check_time,
            ("experimental-downgrade-check-time", "downgrade-check-time"),
            Duration::from_secs(5),
        )?,
        memory_mlock: r.pick(
            &old.experimental_memory_mlock,
            &new.memory_mlock,
            ("experimental-memory-mlock", "memory-mlock"),
            false,
        )?,
        warning_apply_duration: r.pick(
            &old.experimental_warning_apply_duration,
            &new.warning_apply_duration,
            ("experimental-warning-apply-duration", "warning-apply-duration"),
            Duration::from_millis(100),
        )?,
        warning_unary_request_duration: r.pick(
            &old.experimental_warning_unary_request_duration,
            &new.warning_unary_request_duration,
            ("experimental-warning-unary-request-duration", "warning-unary-request-duration"),
            Duration::from_millis(300),
        )?,
        bootstrap_defrag_threshold_megabytes: r.pick(
            &old.experimental_bootstrap_defrag_threshold_megabytes,
            &new.bootstrap_defrag_threshold_megabytes,
            ("experimental-bootstrap-defrag-threshold-megabytes", "bootstrap-defrag-threshold-megabytes"),
            0,
        )?,
        snapshot_catchup_entries: r.pick(
            &old.experimental_snapshot_catchup_entries,
            &new.snapshot_catchup_entries,
            ("experimental-snapshot-catchup-entries", "snapshot-catchup-entries"),
            5000,
        )?,
        peer_skip_client_san_verification: r.pick(
            &old.experimental_peer_skip_client_san_verification,
            &new.peer_skip_client_san_verification,
            ("experimental-peer-skip-client-san-verification", "peer-skip-client-san-verification"),
            false,
        )?,
        distributed_tracing: tracing,
        gates,
        deprecations,
    };
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn settings(args: &[&str]) -> Result<Settings, String> {
        resolve(&Config::try_parse_from(std::iter::once("raft-node").chain(args.iter().copied())).expect("flags"))
    }

    #[test]
    fn old_and_new_names_resolve_as_etcd_3_6() {
        let defaults = settings(&[]).expect("defaults");
        assert_eq!(defaults.watch_progress_notify_interval, Duration::from_secs(600));
        assert_eq!(defaults.snapshot_catchup_entries, 5000);
        assert!(defaults.deprecations.is_empty());
        let new = settings(&["--watch-progress-notify-interval=5s"]).expect("new name");
        assert_eq!(new.watch_progress_notify_interval, Duration::from_secs(5));
        assert!(new.deprecations.is_empty());
        let old = settings(&["--experimental-watch-progress-notify-interval=7s"]).expect("old name");
        assert_eq!(old.watch_progress_notify_interval, Duration::from_secs(7));
        assert_eq!(
            old.deprecations,
            ["--experimental-watch-progress-notify-interval is deprecated in v3.6 and will be decommissioned in v3.7. \
              Use '--watch-progress-notify-interval' instead."]
        );
        let both = settings(&["--experimental-corrupt-check-time=1m", "--corrupt-check-time=2m"]).expect_err("both");
        assert!(both.starts_with("cannot set --experimental-corrupt-check-time and --corrupt-check-time"), "{both}");
    }

    #[test]
    fn experimental_booleans_set_their_gates() {
        assert!(settings(&["--experimental-initial-corrupt-check"]).expect("old").gates.enabled("InitialCorruptCheck"));
        assert!(settings(&["--feature-gates=InitialCorruptCheck=true"])
            .expect("gate")
            .gates
            .enabled("InitialCorruptCheck"));
        let both =
            settings(&["--experimental-initial-corrupt-check=true", "--feature-gates=InitialCorruptCheck=false"]);
        assert!(both.expect_err("both").starts_with("cannot specify both flags"));
        assert_eq!(
            settings(&["--feature-gates=NoSuchGate=true"]).expect_err("unknown"),
            "unrecognized feature gate: NoSuchGate"
        );
    }
}
