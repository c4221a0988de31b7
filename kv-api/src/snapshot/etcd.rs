//! etcd's buckets inside its database, and how our store's buckets map to them, both ways.
//!
//! | etcd bucket | key | value | ours |
//! |---|---|---|---|
//! | `key` | revision: main (8 bytes big-endian), `_`, sub (8 bytes); a tombstone adds `t` | `mvccpb.KeyValue` (a tombstone's holds its key only) | [`Bucket::Key`]: 16-byte revision → a kind byte and the `KeyValue` |
//! | `meta` | `consistent_index`, `term` | u64 big-endian | the Raft log id the copy reflects |
//! |  | `finishedCompactRev`, `scheduledCompactRev` | a revision key (sub 0) | the finished and the compacted (scheduled) revision |
//! |  | `storageVersion` | `3.6.0` | |
//! | `lease` | lease id (8 bytes big-endian) | `leasepb.Lease{ID, TTL, RemainingTTL}` | [`Bucket::Lease`]: id → TTL |
//! | `alarm` | an encoded `AlarmMember` | empty | [`Bucket::Alarm`] |
//! | `auth` | `authEnabled` (1 byte), `authRevision` (u64 big-endian) | | [`Bucket::Auth`] |
//! | `authUsers`, `authRoles` | the name | `authpb.User`, `authpb.Role` | [`Bucket::Auth`] |
//! | `members` | member id in lower-case hex | JSON of the member | the Raft membership |
//! | `members_removed`, `cluster` | | | |
//!
//! Sources: etcd's `server/storage/schema` and `mvcc/revision.go` (v3.6), where etcd writes them.
//!
//! Two choices differ from etcd's own files, both so that a copy of ours restores anywhere:
//!
//! - `cluster` stays empty: etcd writes its cluster version there, and an etcd 3.5 member started on a
//!   file saying 3.6 stops ("cluster cannot be downgraded"). Without it, the restored cluster decides
//!   its version as a new cluster does.
//! - The downgrade target (ours is kept in the meta bucket) is left out, as a restore makes a new
//!   cluster that has no downgrade in progress.
//!
//! Reading an etcd file, membership (`members`, `members_removed`) is skipped, as etcd's restore drops
//! it: the new cluster's comes from the restore's flags. Buckets we do not know are skipped too.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Seek, Write};

use prost::Message;
use proto::authpb;
use proto::etcdserverpb as pb;
use proto::mvccpb::KeyValue;

use super::bbolt::{self, BoltError, Reader, Writer};
use crate::alarm;
use crate::auth::{KEY_ENABLED, KEY_REVISION, ROLE_PREFIX, USER_PREFIX};
use crate::backend::{Backend, Bucket};
use crate::compactor::META_FINISHED_COMPACT_REV;
use crate::downgrade;
use crate::revision::Revision;
use crate::store::{decode_entry, encode_entry, META_COMPACT_REV, META_DOWNGRADE};

pub const KEY: &[u8] = b"key";
pub const META: &[u8] = b"meta";
pub const LEASE: &[u8] = b"lease";
pub const ALARM: &[u8] = b"alarm";
pub const AUTH: &[u8] = b"auth";
pub const AUTH_USERS: &[u8] = b"authUsers";
pub const AUTH_ROLES: &[u8] = b"authRoles";
pub const MEMBERS: &[u8] = b"members";
pub const MEMBERS_REMOVED: &[u8] = b"members_removed";
pub const CLUSTER: &[u8] = b"cluster";

const CONSISTENT_INDEX: &[u8] = b"consistent_index";
const TERM: &[u8] = b"term";
const FINISHED_COMPACT: &[u8] = b"finishedCompactRev";
const SCHEDULED_COMPACT: &[u8] = b"scheduledCompactRev";
const STORAGE_VERSION: &[u8] = b"storageVersion";
const AUTH_ENABLED: &[u8] = b"authEnabled";
const AUTH_REVISION: &[u8] = b"authRevision";
/// A revision key's length, and a tombstone's.
const REV_KEY: usize = 17;
const TOMBSTONE_KEY: usize = 18;

/// etcd's lease record.
#[derive(Clone, PartialEq, Message)]
struct LeaseRecord {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int64, tag = "2")]
    ttl: i64,
    #[prost(int64, tag = "3")]
    remaining_ttl: i64,
}

/// Called with each record read: the bucket of ours, key and value.
pub type Visit<'a> = dyn FnMut(Bucket, &[u8], &[u8]) -> io::Result<()> + 'a;

/// A member of the cluster the copy was taken in, for the `members` bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl MemberRecord {
    /// etcd's JSON of a member, in its field order: id, peer URLs, the learner flag (when set), name
    /// and client URLs (when any).
    fn to_json(&self) -> Vec<u8> {
        let mut out = format!("{{\"id\":{},\"peerURLs\":{}", self.id, json(&self.peer_urls));
        if self.is_learner {
            out.push_str(",\"isLearner\":true");
        }
        if !self.name.is_empty() {
            out.push_str(&format!(",\"name\":{}", json(&self.name)));
        }
        if !self.client_urls.is_empty() {
            out.push_str(&format!(",\"clientURLs\":{}", json(&self.client_urls)));
        }
        out.push('}');
        out.into_bytes()
    }
}

/// JSON text of a string or a list of strings (which always serialize).
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// What the copy says about the cluster it was taken in, beside the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// Raft index and term of the last entry the copy reflects (etcd's consistent index and term).
    pub applied_index: u64,
    pub applied_term: u64,
    pub members: Vec<MemberRecord>,
}

/// etcd's revision key.
pub fn rev_key(rev: Revision, tombstone: bool) -> Vec<u8> {
    let mut key = Vec::with_capacity(TOMBSTONE_KEY);
    key.extend_from_slice(&rev.main.to_be_bytes());
    key.push(b'_');
    key.extend_from_slice(&rev.sub.to_be_bytes());
    if tombstone {
        key.push(b't');
    }
    key
}

/// The revision an etcd revision key names, and whether it is a tombstone's.
pub fn parse_rev_key(key: &[u8]) -> Option<(Revision, bool)> {
    let tombstone = match key.len() {
        REV_KEY => false,
        TOMBSTONE_KEY if key[REV_KEY] == b't' => true,
        _ => return None,
    };
    let main = i64::from_be_bytes(key[..8].try_into().ok()?);
    let sub = i64::from_be_bytes(key[9..REV_KEY].try_into().ok()?);
    Some((Revision::new(main, sub), tombstone))
}

fn backend_err(err: impl std::fmt::Display) -> io::Error {
    io::Error::other(err.to_string())
}

/// Scans a bucket of ours, stopping at the first error `visit` returns.
fn scan(
    backend: &dyn Backend,
    bucket: Bucket,
    mut visit: impl FnMut(&[u8], &[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut failure = None;
    backend
        .scan(bucket, &mut |key, value| match visit(key, value) {
            Ok(()) => true,
            Err(err) => {
                failure = Some(err);
                false
            }
        })
        .map_err(backend_err)?;
    failure.map_or(Ok(()), Err)
}

fn put_all<W: Write + Seek>(
    writer: &mut Writer<W>,
    name: &[u8],
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
) -> io::Result<()> {
    writer.begin_bucket(name)?;
    for (key, value) in entries {
        writer.put(&key, &value)?;
    }
    writer.end_bucket()
}

/// Writes our store's buckets as etcd's (see the module doc), each bucket in key order.
pub fn export<W: Write + Seek>(backend: &dyn Backend, origin: &Origin, writer: &mut Writer<W>) -> io::Result<()> {
    let mut alarms = BTreeMap::new();
    scan(backend, Bucket::Alarm, |key, _| {
        let (member_id, alarm) = alarm::from_key(key).ok_or_else(|| backend_err("a corrupt alarm key"))?;
        alarms.insert(pb::AlarmMember { member_id, alarm }.encode_to_vec(), Vec::new());
        Ok(())
    })?;
    put_all(writer, ALARM, alarms)?;

    let (mut auth, mut users, mut roles) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    scan(backend, Bucket::Auth, |key, value| {
        if key == KEY_ENABLED {
            auth.insert(AUTH_ENABLED.to_vec(), value.to_vec());
        } else if key == KEY_REVISION {
            auth.insert(AUTH_REVISION.to_vec(), value.to_vec());
        } else if let Some(name) = key.strip_prefix(USER_PREFIX) {
            users.insert(name.to_vec(), value.to_vec());
        } else if let Some(name) = key.strip_prefix(ROLE_PREFIX) {
            roles.insert(name.to_vec(), value.to_vec());
        }
        Ok(())
    })?;
    put_all(writer, AUTH, auth)?;
    put_all(writer, AUTH_ROLES, roles)?;
    put_all(writer, AUTH_USERS, users)?;
    put_all(writer, CLUSTER, BTreeMap::new())?;

    writer.begin_bucket(KEY)?;
    scan(backend, Bucket::Key, |key, value| {
        let rev = Revision::from_bytes(key).ok_or_else(|| backend_err("a corrupt revision key"))?;
        let (tombstone, kv) = decode_entry(value).map_err(backend_err)?;
        if tombstone {
            writer.put(&rev_key(rev, true), &KeyValue { key: kv.key, ..Default::default() }.encode_to_vec())
        } else {
            writer.put(&rev_key(rev, false), &value[1..])
        }
    })?;
    writer.end_bucket()?;

    writer.begin_bucket(LEASE)?;
    scan(backend, Bucket::Lease, |id, ttl| {
        let id_value = i64::from_be_bytes(id.try_into().map_err(|_| backend_err("a corrupt lease id"))?);
        let ttl = i64::from_be_bytes(ttl.try_into().map_err(|_| backend_err("a corrupt lease TTL"))?);
        writer.put(id, &LeaseRecord { id: id_value, ttl, remaining_ttl: 0 }.encode_to_vec())
    })?;
    writer.end_bucket()?;

    let members = origin.members.iter().map(|m| (format!("{:x}", m.id).into_bytes(), m.to_json())).collect();
    put_all(writer, MEMBERS, members)?;
    put_all(writer, MEMBERS_REMOVED, BTreeMap::new())?;

    let mut meta = BTreeMap::new();
    meta.insert(CONSISTENT_INDEX.to_vec(), origin.applied_index.to_be_bytes().to_vec());
    meta.insert(TERM.to_vec(), origin.applied_term.to_be_bytes().to_vec());
    let downgrade = backend.get(Bucket::Meta, META_DOWNGRADE).map_err(backend_err)?;
    if let Some(version) = downgrade::storage_version_field(downgrade.as_deref().and_then(downgrade::decode)) {
        meta.insert(STORAGE_VERSION.to_vec(), version.into_bytes());
    }
    let revision_at = |key: &[u8]| -> io::Result<Option<i64>> {
        match backend.get(Bucket::Meta, key).map_err(backend_err)? {
            Some(bytes) => Ok(Some(i64::from_be_bytes(
                bytes.try_into().map_err(|_| backend_err("a corrupt compaction revision"))?,
            ))),
            None => Ok(None),
        }
    };
    // Ours deletes what a compaction freed in the background, as etcd: until it is done the file holds
    // some of it, and says so as etcd's would (finished behind scheduled), so that a restore finishes it.
    for (ours, theirs) in [(META_COMPACT_REV, SCHEDULED_COMPACT), (META_FINISHED_COMPACT_REV, FINISHED_COMPACT)] {
        if let Some(revision) = revision_at(ours)?.filter(|&rev| rev > 0) {
            meta.insert(theirs.to_vec(), rev_key(Revision::new(revision, 0), false));
        }
    }
    put_all(writer, META, meta)
}

/// What reading a whole etcd database found: what `snapshot status` prints, and what a restore needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// CRC-32C (Castagnoli) of every bucket's name, keys and values, in the file's order (etcd's).
    pub hash: u32,
    /// The main revision of the key bucket's last entry (etcd's status revision).
    pub revision: i64,
    /// Entries of every bucket (what etcd 3.4 and 3.5 print as total keys).
    pub entries: u64,
    /// Keys alive at the last revision (what etcd 3.6 prints as total keys).
    pub live_keys: u64,
    /// The database's size in bytes (without the digest).
    pub size: u64,
    /// The meta bucket's storage version (etcd 3.6 and later), empty before.
    pub storage_version: String,
    /// The highest main revision in the key bucket, empty revision markers included.
    pub latest: i64,
    /// etcd's finished and scheduled compactions (-1 when none).
    pub finished_compact: i64,
    pub scheduled_compact: i64,
}

impl Contents {
    /// The store's current revision once restored, before any `--bump-revision` (etcd's `restore`).
    pub fn current_revision(&self) -> i64 {
        self.latest.max(self.finished_compact).max(self.scheduled_compact).max(1)
    }
}

/// Why a database is not an etcd one.
fn layout(what: impl Into<String>) -> LayoutError {
    LayoutError(what.into())
}

/// A bbolt database that does not hold etcd's buckets as etcd lays them out.
#[derive(Debug, thiserror::Error)]
#[error("not an etcd database: {0}")]
pub struct LayoutError(pub String);

/// A failure while reading: the file, its layout, or the visitor's own.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Bolt(#[from] BoltError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Visit(#[from] io::Error),
}

fn be_i64(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// Reads every bucket of an etcd database, calling `visit` with each entry turned into one of our
/// store's records (see the module doc), and sums up what it found. Entries of ours come in etcd's key
/// order within each bucket.
pub fn import(reader: &Reader, visit: &mut Visit<'_>) -> Result<Contents, ImportError> {
    let mut crc = crate::hash::Crc32c::default();
    let mut contents =
        Contents { size: reader.meta().size(), finished_compact: -1, scheduled_compact: -1, ..Contents::default() };
    let mut live: HashSet<Vec<u8>> = HashSet::new();
    let buckets = reader.buckets()?;
    if !buckets.iter().any(|(name, _)| name == KEY) {
        return Err(layout("it has no \"key\" bucket").into());
    }
    for (name, root) in &buckets {
        crc.update(name);
        let shown = String::from_utf8_lossy(name).into_owned();
        reader.each(root, &mut |key: &[u8], value: &[u8], flags: u32| -> Result<(), ImportError> {
            crc.update(key);
            crc.update(value);
            contents.entries += 1;
            if flags & bbolt::BUCKET_FLAG != 0 {
                return Err(layout(format!("bucket {shown:?} holds a nested bucket")).into());
            }
            import_entry(name, key, value, &mut contents, &mut live, visit)
        })?;
    }
    contents.hash = crc.finish();
    contents.live_keys = live.len() as u64;
    Ok(contents)
}

fn import_entry(
    bucket: &[u8],
    key: &[u8],
    value: &[u8],
    contents: &mut Contents,
    live: &mut HashSet<Vec<u8>>,
    visit: &mut Visit<'_>,
) -> Result<(), ImportError> {
    match bucket {
        KEY => {
            let (rev, tombstone) = parse_rev_key(key)
                .ok_or_else(|| layout(format!("a key bucket key of {} bytes is not a revision", key.len())))?;
            contents.revision = rev.main;
            contents.latest = contents.latest.max(rev.main);
            // `restore --bump-revision` leaves an empty value at the new revision: no key's.
            if value.is_empty() {
                return Ok(());
            }
            let mut kv = KeyValue::decode(value)
                .map_err(|_| layout(format!("revision {}_{}: the value is not a KeyValue", rev.main, rev.sub)))?;
            if tombstone {
                live.remove(&kv.key);
                kv = KeyValue { key: kv.key, mod_revision: rev.main, ..Default::default() };
            } else {
                live.insert(kv.key.clone());
            }
            visit(Bucket::Key, &rev.to_bytes(), &encode_entry(tombstone, &kv))?;
        }
        META => {
            let revision_of = |what: &str| {
                be_i64(value).ok_or_else(|| layout(format!("meta {what}: {} bytes are not a revision", value.len())))
            };
            match key {
                FINISHED_COMPACT => {
                    contents.finished_compact = revision_of("finishedCompactRev")?;
                    visit(Bucket::Meta, META_COMPACT_REV, &contents.finished_compact.to_be_bytes())?;
                }
                SCHEDULED_COMPACT => contents.scheduled_compact = revision_of("scheduledCompactRev")?,
                STORAGE_VERSION => contents.storage_version = String::from_utf8_lossy(value).into_owned(),
                _ => {}
            }
        }
        LEASE => {
            let lease = LeaseRecord::decode(value).map_err(|_| layout("a lease that is not a leasepb.Lease"))?;
            visit(Bucket::Lease, &lease.id.to_be_bytes(), &lease.ttl.to_be_bytes())?;
        }
        ALARM => {
            let member = pb::AlarmMember::decode(key).map_err(|_| layout("an alarm key that is not an AlarmMember"))?;
            visit(Bucket::Alarm, &alarm::key(member.member_id, member.alarm), &[])?;
        }
        AUTH => match key {
            AUTH_ENABLED => visit(Bucket::Auth, KEY_ENABLED, &[u8::from(value == [1])])?,
            AUTH_REVISION => {
                let revision = be_i64(value).ok_or_else(|| layout("authRevision is not 8 bytes"))?;
                visit(Bucket::Auth, KEY_REVISION, &revision.to_be_bytes())?;
            }
            _ => {}
        },
        AUTH_USERS => {
            authpb::User::decode(value).map_err(|_| layout("a user that is not an authpb.User"))?;
            visit(Bucket::Auth, &[USER_PREFIX, key].concat(), value)?;
        }
        AUTH_ROLES => {
            authpb::Role::decode(value).map_err(|_| layout("a role that is not an authpb.Role"))?;
            visit(Bucket::Auth, &[ROLE_PREFIX, key].concat(), value)?;
        }
        // Membership is the restore's, not the copy's; other buckets are not ours to know.
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_keys_are_etcds() {
        let key = rev_key(Revision::new(5, 2), false);
        assert_eq!(key, [0, 0, 0, 0, 0, 0, 0, 5, b'_', 0, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(parse_rev_key(&key), Some((Revision::new(5, 2), false)));
        let tombstone = rev_key(Revision::new(7, 0), true);
        assert_eq!((tombstone.len(), tombstone[17]), (18, b't'));
        assert_eq!(parse_rev_key(&tombstone), Some((Revision::new(7, 0), true)));
        assert_eq!(parse_rev_key(&key[..16]), None);
        assert!(rev_key(Revision::new(5, 2), false) < rev_key(Revision::new(5, 3), true));
    }

    #[test]
    fn members_are_etcds_json() {
        let member = MemberRecord {
            id: 0x8e9e_05c5_2164_694d,
            name: "m1".into(),
            peer_urls: vec!["http://127.0.0.1:2380".into()],
            client_urls: vec!["http://127.0.0.1:2379".into()],
            is_learner: false,
        };
        assert_eq!(
            String::from_utf8(member.to_json()).expect("utf-8"),
            "{\"id\":10276657743932975437,\"peerURLs\":[\"http://127.0.0.1:2380\"],\"name\":\"m1\",\"clientURLs\":[\"http://127.0.0.1:2379\"]}"
        );
    }
}
