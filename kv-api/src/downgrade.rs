//! etcd 3.6's cluster downgrade (`Maintenance.Downgrade`): `VALIDATE` checks that a target version is
//! exactly one minor version below the cluster's and that no downgrade is under way; `ENABLE` records the
//! target through the log (every member, surviving restarts), after which the cluster version is the
//! target; `CANCEL` clears it. Versions are `major.minor` (`3.5` or `3.5.0`, the patch dropped as etcd
//! drops it).

use proto::etcdserverpb as pb;

use crate::error::{Error, Result};

/// The storage schema this member writes (etcd 3.6's `storageVersion`).
pub const STORAGE_VERSION: (u64, u64) = (3, 6);

/// A `major.minor` version.
pub type MinorVersion = (u64, u64);

/// The storage version a member reports and writes. etcd 3.6's version monitor migrates the storage
/// schema to the cluster version, which is the target while a downgrade is enabled (and 3.6 again once
/// it is cancelled).
pub fn storage_version(downgrade_target: Option<MinorVersion>) -> MinorVersion {
    downgrade_target.unwrap_or(STORAGE_VERSION)
}

/// The `storageVersion` a snapshot carries (its meta field, and the `version` of its stream): etcd 3.5's
/// schema has no such field, so a member downgrading to 3.5 writes none.
pub fn storage_version_field(downgrade_target: Option<MinorVersion>) -> Option<String> {
    let version = storage_version(downgrade_target);
    (version >= STORAGE_VERSION).then(|| version_string(version))
}

/// etcd's `convertToClusterVersion`: `3.5` or a full semver such as `3.5.0`; the patch is dropped.
pub fn parse_target(text: &str) -> Result<MinorVersion> {
    let core = text.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    let number = |part: &str| part.parse::<u64>().ok().filter(|_| !part.is_empty() && !part.starts_with('+'));
    match parts.as_slice() {
        [major, minor] | [major, minor, _] if parts.get(2).is_none_or(|patch| number(patch).is_some()) => Ok((
            number(major).ok_or(Error::WrongDowngradeVersionFormat)?,
            number(minor).ok_or(Error::WrongDowngradeVersionFormat)?,
        )),
        _ => Err(Error::WrongDowngradeVersionFormat),
    }
}

/// The `major.minor` of a server version string (`3.6.14` → `(3, 6)`).
pub fn minor_of(version: &str) -> MinorVersion {
    parse_target(version).unwrap_or(STORAGE_VERSION)
}

/// etcd's validation of a downgrade to `target` from `cluster`: one minor version down, none under way.
pub fn validate(cluster: MinorVersion, target: MinorVersion, enabled: Option<MinorVersion>) -> Result<()> {
    if cluster.1 == 0 || target != (cluster.0, cluster.1 - 1) {
        return Err(Error::InvalidDowngradeTargetVersion);
    }
    if enabled.is_some() {
        return Err(Error::DowngradeInProcess);
    }
    Ok(())
}

/// `3.5.0`, as etcd writes cluster versions.
pub fn version_string(version: MinorVersion) -> String {
    format!("{}.{}.0", version.0, version.1)
}

/// The downgrade recorded in the store: the target while one is enabled.
pub fn encode(target: Option<MinorVersion>) -> Vec<u8> {
    target.map(version_string).unwrap_or_default().into_bytes()
}

pub fn decode(bytes: &[u8]) -> Option<MinorVersion> {
    std::str::from_utf8(bytes).ok().and_then(|text| parse_target(text).ok())
}

/// Applies an `ENABLE` or `CANCEL` to the recorded target: the new target.
pub fn apply(current: Option<MinorVersion>, req: &pb::DowngradeRequest) -> Result<Option<MinorVersion>> {
    use pb::downgrade_request::DowngradeAction;
    match req.action() {
        DowngradeAction::Enable if current.is_some() => Err(Error::DowngradeInProcess),
        DowngradeAction::Enable => parse_target(&req.version).map(Some),
        DowngradeAction::Cancel if current.is_none() => Err(Error::NoInflightDowngrade),
        DowngradeAction::Cancel => Ok(None),
        DowngradeAction::Validate => Ok(current),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_storage_version_follows_an_enabled_downgrade() {
        assert_eq!(storage_version(None), (3, 6));
        assert_eq!(storage_version(Some((3, 5))), (3, 5));
        assert_eq!(storage_version_field(None).as_deref(), Some("3.6.0"));
        assert_eq!(storage_version_field(Some((3, 5))), None, "etcd 3.5's schema has no storageVersion");
    }

    #[test]
    fn targets_and_validation_follow_etcd() {
        assert_eq!(parse_target("3.5").ok(), Some((3, 5)));
        assert_eq!(parse_target("3.5.0").ok(), Some((3, 5)));
        assert_eq!(parse_target("3.5.21").ok(), Some((3, 5)));
        assert!(matches!(parse_target("three"), Err(Error::WrongDowngradeVersionFormat)));
        assert!(matches!(parse_target("3"), Err(Error::WrongDowngradeVersionFormat)));
        assert!(validate((3, 6), (3, 5), None).is_ok());
        assert!(matches!(validate((3, 6), (3, 4), None), Err(Error::InvalidDowngradeTargetVersion)));
        assert!(matches!(validate((3, 6), (3, 6), None), Err(Error::InvalidDowngradeTargetVersion)));
        assert!(matches!(validate((3, 6), (3, 5), Some((3, 5))), Err(Error::DowngradeInProcess)));
    }

    #[test]
    fn enable_and_cancel_change_the_target() {
        let enable = pb::DowngradeRequest { action: 1, version: "3.5".into() };
        let cancel = pb::DowngradeRequest { action: 2, version: String::new() };
        assert_eq!(apply(None, &enable).ok(), Some(Some((3, 5))));
        assert!(matches!(apply(Some((3, 5)), &enable), Err(Error::DowngradeInProcess)));
        assert_eq!(apply(Some((3, 5)), &cancel).ok(), Some(None));
        assert!(matches!(apply(None, &cancel), Err(Error::NoInflightDowngrade)));
        assert_eq!(decode(&encode(Some((3, 5)))), Some((3, 5)));
        assert_eq!(decode(&encode(None)), None);
    }
}
