//! The small universes requests draw from most of the time, so that they meet each other: a handful of
//! keys, lease ids, users and roles. The generator and the auth setup both use them.

/// Keys most requests touch (`k0`..`k9` and one with a slash).
pub const KEYS: [&[u8]; 11] = [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5", b"k6", b"k7", b"k8", b"k9", b"/app/x"];

/// Lease ids requests grant, attach, renew and revoke.
pub const LEASE_IDS: [i64; 4] = [1, 2, 3, 1000];

/// Users of the auth-on setup; `root` holds the root role, the others one role each.
pub const USERS: [&str; 4] = ["root", "u0", "u1", "u2"];

/// Roles: `root` (etcd's own, all powers) and three with random key permissions.
pub const ROLES: [&str; 4] = ["root", "r0", "r1", "r2"];

/// Each known user's password.
pub fn password(user: &str) -> String {
    format!("pw-{user}")
}
