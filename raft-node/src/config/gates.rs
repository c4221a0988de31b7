//! etcd 3.6's server feature gates (`--feature-gates=Name=bool,...`): etcd's gates, stages and defaults,
//! `AllAlpha`/`AllBeta` switching every alpha or beta gate not named on its own, and etcd's errors. They
//! are exported as `etcd_server_feature_enabled{name,stage}`.

use std::collections::BTreeMap;

use super::boolean::parse_bool;

/// etcd 3.6's gates: name, default, stage.
const GATES: &[(&str, bool, &str)] = &[
    ("AllAlpha", false, "ALPHA"),
    ("AllBeta", false, "BETA"),
    ("CompactHashCheck", false, "ALPHA"),
    ("InitialCorruptCheck", false, "ALPHA"),
    ("LeaseCheckpoint", false, "ALPHA"),
    ("LeaseCheckpointPersist", false, "ALPHA"),
    ("SetMemberLocalAddr", false, "ALPHA"),
    ("StopGRPCServiceOnDefrag", false, "ALPHA"),
    ("TxnModeWriteWithSharedBuffer", true, "BETA"),
];

/// The 3.5 booleans each gate replaced.
pub const EXPERIMENTAL_FLAGS: &[(&str, &str)] = &[
    ("experimental-stop-grpc-service-on-defrag", "StopGRPCServiceOnDefrag"),
    ("experimental-initial-corrupt-check", "InitialCorruptCheck"),
    ("experimental-compact-hash-check-enabled", "CompactHashCheck"),
    ("experimental-txn-mode-write-with-shared-buffer", "TxnModeWriteWithSharedBuffer"),
    ("experimental-enable-lease-checkpoint", "LeaseCheckpoint"),
    ("experimental-enable-lease-checkpoint-persist", "LeaseCheckpointPersist"),
];

/// Which gates are on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    enabled: BTreeMap<&'static str, bool>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates { enabled: GATES.iter().map(|(name, default, _)| (*name, *default)).collect() }
    }
}

impl FeatureGates {
    /// `--feature-gates` as etcd reads it (`key=value` pairs, Go's booleans), on top of the defaults.
    pub fn parse(text: &str) -> Result<FeatureGates, String> {
        let mut values = BTreeMap::new();
        for pair in text.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = match pair.split_once('=') {
                Some((key, value)) => (key.trim(), value.trim()),
                None => return Err(format!("missing bool value for {}", pair.trim())),
            };
            let value = parse_bool(value).map_err(|_| {
                format!("invalid value of {key}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax")
            })?;
            values.insert(key.to_string(), value);
        }
        let mut gates = FeatureGates::default();
        gates.set(&values)?;
        Ok(gates)
    }

    /// Sets gates by name; `AllAlpha`/`AllBeta` reach the gates of their stage not named themselves.
    pub fn set(&mut self, values: &BTreeMap<String, bool>) -> Result<(), String> {
        for key in values.keys() {
            if !GATES.iter().any(|(name, _, _)| name == key) {
                return Err(format!("unrecognized feature gate: {key}"));
            }
        }
        for (all, stage) in [("AllAlpha", "ALPHA"), ("AllBeta", "BETA")] {
            if let Some(&on) = values.get(all) {
                for (name, _, gate_stage) in GATES {
                    if *gate_stage == stage && !name.starts_with("All") && !values.contains_key(*name) {
                        self.enabled.insert(name, on);
                    }
                }
            }
        }
        for (key, on) in values {
            if let Some((name, _, _)) = GATES.iter().find(|(name, _, _)| name == key) {
                self.enabled.insert(name, *on);
            }
        }
        Ok(())
    }

    pub fn enabled(&self, name: &str) -> bool {
        self.enabled.get(name).copied().unwrap_or(false)
    }

    /// Every gate with its stage and whether it is on, by name.
    pub fn all(&self) -> Vec<(&'static str, &'static str, bool)> {
        GATES.iter().map(|(name, _, stage)| (*name, *stage, self.enabled(name))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_read_as_etcd_reads_them() {
        let defaults = FeatureGates::parse("").expect("defaults");
        assert!(!defaults.enabled("InitialCorruptCheck") && defaults.enabled("TxnModeWriteWithSharedBuffer"));
        let set = FeatureGates::parse("InitialCorruptCheck=true, TxnModeWriteWithSharedBuffer=false").expect("set");
        assert!(set.enabled("InitialCorruptCheck") && !set.enabled("TxnModeWriteWithSharedBuffer"));
        let alpha = FeatureGates::parse("AllAlpha=true,LeaseCheckpoint=false").expect("all alpha");
        assert!(alpha.enabled("CompactHashCheck") && !alpha.enabled("LeaseCheckpoint"));
        assert_eq!(FeatureGates::parse("NoSuchGate=true"), Err("unrecognized feature gate: NoSuchGate".into()));
        assert_eq!(
            FeatureGates::parse("InitialCorruptCheck"),
            Err("missing bool value for InitialCorruptCheck".into())
        );
        assert!(FeatureGates::parse("InitialCorruptCheck=yes").expect_err("bad bool").starts_with("invalid value of"));
    }
}
