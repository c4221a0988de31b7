//! Edge values for one field, drawn from the seeded generator: bytes and strings (empty, one byte, `\0`,
//! `\xff`, printable, now and then 1.5 MiB + 1), integers at their limits, enums in and out of range,
//! and the small universes of [`super::names`] for keys, leases, users and roles.

use std::sync::LazyLock;

use bytes::Bytes;
use prost_reflect::EnumDescriptor;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use super::names::{password, KEYS, LEASE_IDS, ROLES, USERS};

/// One byte over etcd's default `--max-request-bytes` (1.5 MiB): a request carrying it must be refused.
pub const BIG_LEN: usize = 1024 * 1024 * 3 / 2 + 1;
/// How often a bytes or string value is [`BIG_LEN`] long.
pub const BIG_RATE: f64 = 0.01;
/// How often an enum field holds a number its enum does not define.
pub const OUT_OF_RANGE_RATE: f64 = 0.1;
/// How often a key-like field is drawn from [`KEYS`] (so that requests meet).
pub const KEY_SPACE_RATE: f64 = 0.7;

/// Enum numbers tried out of range (those the enum happens to define are skipped).
const OUT_OF_RANGE: [i32; 5] = [7, -1, 1000, 5, i32::MAX];

/// The big value, shared: each use is a reference count, not 1.5 MiB.
static BIG: LazyLock<Bytes> = LazyLock::new(|| Bytes::from(vec![b'x'; BIG_LEN]));

/// LeaseGrant TTLs: no positive TTL below 600 s, and no TTL <= 0 either (etcd raises those to its
/// minimum TTL, about 2 s here). A lease that short may expire between the call to etcd and the call to
/// ours, or between two requests on one server and not on the other, and their answers would then
/// differ for timing reasons alone. Above etcd's maximum (9,000,000,000 s) is refused by both.
const TTLS: [i64; 6] = [600, 3600, 86_400, 9_000_000_000, 9_000_000_001, i64::MAX];

/// What a field means, read from its message's and its own name, which decides where its value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    Key,
    RangeEnd,
    Revision,
    LeaseId,
    Ttl,
    /// Small counts and ids (`limit`, `watch_id`).
    Small,
    /// Alarm member ids: mostly 0, so that an alarm raised is sometimes cleared again.
    MemberId,
    /// Alarm actions: mostly GET, else DEACTIVATE, rarely ACTIVATE, so that alarms don't hold the store
    /// for most of a run.
    AlarmAction,
    User,
    Role,
    Password,
    /// A field set only now and then (`hashedPassword`: a garbage hash makes a user nobody can log in as).
    Rare,
    Plain,
}

impl Hint {
    pub fn of(message: &str, field: &str) -> Hint {
        match (message, field) {
            ("LeaseGrantRequest", "TTL") => Hint::Ttl,
            ("AlarmRequest", "action") => Hint::AlarmAction,
            (_, "key") => Hint::Key,
            (_, "range_end") => Hint::RangeEnd,
            (_, "lease") => Hint::LeaseId,
            (m, "ID") if m.starts_with("Lease") => Hint::LeaseId,
            (
                _,
                "revision"
                | "start_revision"
                | "min_mod_revision"
                | "max_mod_revision"
                | "min_create_revision"
                | "max_create_revision"
                | "mod_revision"
                | "create_revision"
                | "version",
            ) => Hint::Revision,
            (_, "limit" | "watch_id") => Hint::Small,
            (_, "memberID") => Hint::MemberId,
            (_, "role") => Hint::Role,
            (_, "user") => Hint::User,
            (m, "name") if m.starts_with("AuthRole") => Hint::Role,
            (m, "name") if m.starts_with("Auth") => Hint::User,
            (_, "password") => Hint::Password,
            (_, "hashedPassword") => Hint::Rare,
            _ => Hint::Plain,
        }
    }

    /// How often a field that is not in a oneof is set at all.
    pub fn presence(self) -> f64 {
        match self {
            // An unset TTL is 0: see TTLS.
            Hint::Ttl => 1.0,
            // Without a key nearly every KV request fails validation.
            Hint::Key | Hint::User | Hint::Role => 0.9,
            Hint::Rare => 0.05,
            _ => 0.5,
        }
    }
}

/// Bytes: empty, one random byte, `\0`, `\xff`, printable, or (1%) 1.5 MiB + 1.
pub fn bytes(rng: &mut StdRng) -> Bytes {
    if rng.gen_bool(BIG_RATE) {
        return BIG.clone();
    }
    match rng.gen_range(0..100) {
        0..20 => Bytes::new(),
        20..35 => Bytes::from(vec![rng.gen::<u8>()]),
        35..45 => Bytes::from_static(b"\0"),
        45..55 => Bytes::from_static(b"\xff"),
        _ => Bytes::from(printable(rng).into_bytes()),
    }
}

/// Strings as [`bytes`], kept valid UTF-8 (`\xff` becomes `ÿ`; raw `\xff` goes through
/// [`super::request::Request::invalid_utf8_field`]).
pub fn string(rng: &mut StdRng) -> String {
    if rng.gen_bool(BIG_RATE) {
        return "x".repeat(BIG_LEN);
    }
    match rng.gen_range(0..100) {
        0..20 => String::new(),
        20..35 => char::from(rng.gen_range(0x20u8..0x7f)).to_string(),
        35..45 => "\0".to_string(),
        45..55 => "\u{ff}".to_string(),
        _ => printable(rng),
    }
}

/// 1 to 16 letters, digits and punctuation.
fn printable(rng: &mut StdRng) -> String {
    let len = rng.gen_range(1..=16);
    (0..len).map(|_| char::from(rng.gen_range(0x21u8..0x7f))).collect()
}

/// A key: mostly one of [`KEYS`].
pub fn key(rng: &mut StdRng) -> Bytes {
    if rng.gen_bool(KEY_SPACE_RATE) {
        Bytes::from_static(pick(rng, &KEYS))
    } else {
        bytes(rng)
    }
}

/// A range end: empty (one key), `\0` (to the end), one of [`KEYS`], or any bytes.
pub fn range_end(rng: &mut StdRng) -> Bytes {
    match rng.gen_range(0..10) {
        0..3 => Bytes::new(),
        3..5 => Bytes::from_static(b"\0"),
        5..7 => Bytes::from_static(pick(rng, &KEYS)),
        _ => bytes(rng),
    }
}

/// 0, 1, -1, small, or a limit.
pub fn int64(rng: &mut StdRng) -> i64 {
    match rng.gen_range(0..8) {
        0 => 0,
        1 => 1,
        2 => -1,
        3 => i64::MIN,
        4 => i64::MAX,
        _ => rng.gen_range(2..=100),
    }
}

pub fn uint64(rng: &mut StdRng) -> u64 {
    match rng.gen_range(0..7) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => u64::from(u32::MAX),
        4 => 1 << 63,
        _ => rng.gen_range(2..=100),
    }
}

pub fn int32(rng: &mut StdRng) -> i32 {
    match rng.gen_range(0..7) {
        0 => 0,
        1 => 1,
        2 => -1,
        3 => i32::MIN,
        4 => i32::MAX,
        _ => rng.gen_range(2..=100),
    }
}

pub fn uint32(rng: &mut StdRng) -> u32 {
    match rng.gen_range(0..5) {
        0 => 0,
        1 => 1,
        2 => u32::MAX,
        _ => rng.gen_range(2..=100),
    }
}

/// An int64 as its hint wants it.
pub fn hinted_int64(rng: &mut StdRng, hint: Hint) -> i64 {
    match hint {
        // Revisions of a fuzzing run stay small; most reads and compactions land near them.
        Hint::Revision if rng.gen_bool(0.7) => rng.gen_range(0..=40),
        Hint::LeaseId if rng.gen_bool(KEY_SPACE_RATE) => pick(rng, &LEASE_IDS),
        Hint::Ttl => pick(rng, &TTLS),
        Hint::Small if rng.gen_bool(0.7) => rng.gen_range(-1..=3),
        _ => int64(rng),
    }
}

pub fn hinted_uint64(rng: &mut StdRng, hint: Hint) -> u64 {
    match hint {
        Hint::MemberId if rng.gen_bool(0.8) => 0,
        _ => uint64(rng),
    }
}

/// A string as its hint wants it: mostly a known user, role or password.
pub fn hinted_string(rng: &mut StdRng, hint: Hint) -> String {
    let known = rng.gen_bool(0.8);
    match hint {
        Hint::User if known => pick(rng, &USERS).to_string(),
        Hint::Role if known => pick(rng, &ROLES).to_string(),
        Hint::Password if known => password(pick(rng, &USERS)),
        _ => string(rng),
    }
}

pub fn hinted_bytes(rng: &mut StdRng, hint: Hint) -> Bytes {
    match hint {
        Hint::Key => key(rng),
        Hint::RangeEnd => range_end(rng),
        _ => bytes(rng),
    }
}

/// A number the enum defines, or (10%) one it does not.
pub fn enum_number(rng: &mut StdRng, descriptor: &EnumDescriptor, hint: Hint) -> i32 {
    if rng.gen_bool(OUT_OF_RANGE_RATE) {
        let unknown: Vec<i32> = OUT_OF_RANGE.into_iter().filter(|n| descriptor.get_value(*n).is_none()).collect();
        if let Some(n) = unknown.choose(rng) {
            return *n;
        }
    }
    if hint == Hint::AlarmAction {
        // GET = 0, ACTIVATE = 1, DEACTIVATE = 2.
        return match rng.gen_range(0..10) {
            0 => 1,
            1..4 => 2,
            _ => 0,
        };
    }
    let numbers: Vec<i32> = descriptor.values().map(|v| v.number()).collect();
    numbers.choose(rng).copied().unwrap_or(0)
}

fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> T {
    // Every list passed here is a non-empty constant.
    items[rng.gen_range(0..items.len())]
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::super::catalog::Catalog;
    use super::*;

    const DRAWS: u32 = 100_000;

    fn rate(count: u32) -> f64 {
        f64::from(count) / f64::from(DRAWS)
    }

    #[test]
    fn big_values_come_at_about_one_percent() {
        let mut rng = StdRng::seed_from_u64(7);
        let big = (0..DRAWS).filter(|_| bytes(&mut rng).len() == BIG_LEN).count();
        let big = rate(u32::try_from(big).expect("fits"));
        assert!((0.007..0.013).contains(&big), "big bytes rate {big}");
        let strings = (0..DRAWS / 10).filter(|_| string(&mut rng).len() == BIG_LEN).count();
        assert!((40..170).contains(&strings), "{strings} big strings in {}", DRAWS / 10);
    }

    #[test]
    fn out_of_range_enums_come_at_about_ten_percent_and_are_really_unknown() {
        let catalog = Catalog::load().expect("descriptors");
        let sort_order = catalog.pool.get_enum_by_name("etcdserverpb.RangeRequest.SortOrder").expect("SortOrder");
        let mut rng = StdRng::seed_from_u64(8);
        let unknown = (0..DRAWS)
            .filter(|_| sort_order.get_value(enum_number(&mut rng, &sort_order, Hint::Plain)).is_none())
            .count();
        let unknown = rate(u32::try_from(unknown).expect("fits"));
        assert!((0.09..0.11).contains(&unknown), "out-of-range rate {unknown}");
    }

    #[test]
    fn keys_mostly_come_from_the_key_space_and_ttls_are_never_short() {
        let mut rng = StdRng::seed_from_u64(9);
        let known = (0..DRAWS).filter(|_| KEYS.contains(&key(&mut rng).as_ref())).count();
        let known = rate(u32::try_from(known).expect("fits"));
        assert!((0.68..0.73).contains(&known), "key-space rate {known}");
        for _ in 0..1000 {
            assert!(hinted_int64(&mut rng, Hint::Ttl) >= 600);
        }
        assert_eq!(Hint::of("LeaseGrantRequest", "TTL"), Hint::Ttl);
        assert_eq!(Hint::of("AuthRoleAddRequest", "name"), Hint::Role);
        assert_eq!(Hint::of("AuthUserAddRequest", "name"), Hint::User);
        assert_eq!(Hint::of("LeaseRevokeRequest", "ID"), Hint::LeaseId);
        assert_eq!(Hint::of("PutRequest", "lease"), Hint::LeaseId);
    }
}
