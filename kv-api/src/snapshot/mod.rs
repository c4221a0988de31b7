//! etcd's snapshot file: what `Maintenance.Snapshot` streams, `snapshot save` stores and
//! `snapshot status|restore` read, for etcd's files and ours alike.
//!
//! The file is a bbolt database laid out as etcd's backend ([`bbolt`] for the pages, [`etcd`] for the
//! buckets), followed by the SHA-256 of the database (32 bytes). A database is a whole number of 4 KiB
//! pages, so a file with the digest is 32 bytes over a multiple of 512, which is how etcd tells a saved
//! snapshot from a database copied out of a data dir (which has no digest).
//!
//! - [`write`] turns a store's buckets into such a file, streaming: only each page's first key is
//!   held in memory.
//! - [`read`] checks a file (its digest unless told not to, then its pages as it walks them) and
//!   hands each entry to the caller as a record of our store, with a summary of what it found
//!   ([`Contents`]); [`status`] is the same walk without a digest check, as etcd's `snapshot status`.

pub mod bbolt;
pub mod etcd;

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use ring::digest;

pub use bbolt::BoltError;
pub use etcd::{Contents, ImportError, LayoutError, MemberRecord, Origin, Visit};

use crate::backend::Backend;

pub const DIGEST_BYTES: u64 = 32;
const SECTOR: u64 = 512;

/// Why a snapshot file cannot be read, with etcd's texts where etcd has one.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// An OS error, printed as Go prints `*os.PathError`.
    #[error("{op} {path}: {}", go_io_text(.source))]
    Io { op: &'static str, path: String, source: io::Error },
    #[error("snapshot missing hash but --skip-hash-check=false")]
    MissingDigest,
    #[error("expected sha256 {}, got {}", go_bytes(.expected), go_bytes(.got))]
    DigestMismatch { expected: Vec<u8>, got: Vec<u8> },
    /// Not a bbolt database, or a damaged one.
    #[error(transparent)]
    Bolt(#[from] BoltError),
    /// A bbolt database, but not etcd's.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// An OS error as Go's `syscall.Errno` prints it: the C library's text, lower-cased, without Rust's
/// ` (os error N)` suffix.
pub fn go_io_text(err: &io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    chars.next().map(|first| first.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

/// Bytes as Go's `%v` prints a `[]byte`: `[1 2 3]`.
fn go_bytes(bytes: &[u8]) -> String {
    let items: Vec<String> = bytes.iter().map(u8::to_string).collect();
    format!("[{}]", items.join(" "))
}

/// Whether a file of `size` bytes ends with the digest (etcd's `hasChecksum`).
pub fn has_digest(size: u64) -> bool {
    size % SECTOR == DIGEST_BYTES
}

/// Writes a snapshot of the store on `backend` into `file` (empty, at its start): the database, then
/// its digest. Returns the file, positioned at its start, and its size. Blocking, and the caller keeps
/// the store from changing meanwhile.
pub fn write(backend: &dyn Backend, origin: &Origin, file: File) -> io::Result<(File, u64)> {
    let (file, size) = write_database(backend, origin, file)?;
    seal(file, size)
}

/// The part of [`write`] that reads the store: the database alone. Returns the file and its size.
pub fn write_database(backend: &dyn Backend, origin: &Origin, file: File) -> io::Result<(File, u64)> {
    let mut writer = bbolt::Writer::new(file)?;
    etcd::export(backend, origin, &mut writer)?;
    writer.finish()
}

/// The rest of [`write`]: appends the digest of the `size`-byte database in `file`. Returns the file,
/// positioned at its start, and its size.
pub fn seal(mut file: File, size: u64) -> io::Result<(File, u64)> {
    file.seek(SeekFrom::Start(0))?;
    let sum = sha256(&mut file, size)?;
    file.seek(SeekFrom::Start(size))?;
    file.write_all(sum.as_ref())?;
    file.flush()?;
    file.seek(SeekFrom::Start(0))?;
    Ok((file, size + DIGEST_BYTES))
}

/// SHA-256 of the next `len` bytes of `input`.
fn sha256(input: &mut impl Read, len: u64) -> io::Result<digest::Digest> {
    let mut context = digest::Context::new(&digest::SHA256);
    let mut input = input.take(len);
    let mut buf = vec![0; 1 << 20];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        context.update(&buf[..n]);
    }
    Ok(context.finish())
}

/// Opens the file at `path` as etcd's restore does: the last 32 bytes are the digest when the size says
/// so; it must match unless `check_digest` is false, and must be there unless so too. Returns the file
/// and the length of the database in it.
fn open(path: &Path, check_digest: bool) -> Result<(File, u64), FileError> {
    let shown = path.display().to_string();
    let io_err = |op: &'static str| {
        let path = shown.clone();
        move |source: io::Error| FileError::Io { op, path, source }
    };
    let mut file = File::open(path).map_err(io_err("open"))?;
    let size = file.metadata().map_err(io_err("stat"))?.len();
    if size < DIGEST_BYTES {
        // etcd seeks to the digest first, and a file shorter than it fails there (EINVAL).
        return Err(io_err("seek")(io::Error::from_raw_os_error(22)));
    }
    if !has_digest(size) {
        return if check_digest { Err(FileError::MissingDigest) } else { Ok((file, size)) };
    }
    let body = size - DIGEST_BYTES;
    if check_digest {
        let mut expected = vec![0; DIGEST_BYTES as usize];
        file.seek(SeekFrom::Start(body)).map_err(io_err("seek"))?;
        file.read_exact(&mut expected).map_err(io_err("read"))?;
        file.seek(SeekFrom::Start(0)).map_err(io_err("seek"))?;
        let got = sha256(&mut file, body).map_err(io_err("read"))?.as_ref().to_vec();
        if got != expected {
            return Err(FileError::DigestMismatch { expected, got });
        }
    }
    Ok((file, body))
}

/// Reads the snapshot at `path` (see the module doc), calling `visit` on each record of ours. `visit`
/// sees records while the walk goes on: check a file with a first pass (a `visit` that does nothing)
/// before acting on its records.
pub fn read(path: &Path, check_digest: bool, visit: &mut Visit<'_>) -> Result<Contents, FileError> {
    let (file, len) = open(path, check_digest)?;
    let reader = bbolt::Reader::open(file, len)?;
    etcd::import(&reader, visit).map_err(|err| match err {
        ImportError::Bolt(err) => FileError::Bolt(err),
        ImportError::Layout(err) => FileError::Layout(err),
        ImportError::Visit(source) => FileError::Io { op: "read", path: path.display().to_string(), source },
    })
}

/// What `snapshot status` reports: the whole file walked, its digest not checked (etcd's neither).
pub fn status(path: &Path) -> Result<Contents, FileError> {
    read(path, false, &mut |_, _, _| Ok(()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proto::etcdserverpb as pb;

    use super::*;
    use crate::backend::{Bucket, MemBackend};
    use crate::{Command, MvccStore};

    /// A store with revisions, a deletion, a compaction (finished), a lease, an alarm and auth state.
    fn store() -> MvccStore {
        let store = store_with(crate::compactor::CompactionConfig::default());
        store.wait_compacted();
        store
    }

    fn store_with(compaction: crate::compactor::CompactionConfig) -> MvccStore {
        let mut store = MvccStore::open_with(Arc::new(MemBackend::default()), compaction).expect("open");
        let mut apply = |command: Command| {
            store.apply(&command).expect("apply");
        };
        apply(Command::LeaseGrant(pb::LeaseGrantRequest { id: 42, ttl: 600 }));
        for (key, value, lease) in [("a", "1", 0), ("a", "2", 0), ("b", "1", 42), ("c", "1", 0)] {
            apply(Command::Put(pb::PutRequest { key: key.into(), value: value.into(), lease, ..Default::default() }));
        }
        apply(Command::Compact(pb::CompactionRequest { revision: 3, ..Default::default() }));
        apply(Command::DeleteRange(pb::DeleteRangeRequest { key: b"c".to_vec(), ..Default::default() }));
        apply(Command::Alarm(pb::AlarmRequest {
            action: pb::alarm_request::AlarmAction::Activate as i32,
            member_id: 9,
            alarm: pb::AlarmType::Nospace as i32,
        }));
        apply(Command::Auth(crate::auth::AuthCommand::UserAdd(pb::AuthUserAddRequest {
            name: "u".into(),
            password: "p".into(),
            ..Default::default()
        })));
        store.commit().expect("commit");
        store
    }

    type Record = (Bucket, Vec<u8>, Vec<u8>);

    fn records(path: &Path, check: bool) -> Result<(Vec<Record>, Contents), FileError> {
        let mut out = Vec::new();
        let contents = read(path, check, &mut |bucket, key, value| {
            out.push((bucket, key.to_vec(), value.to_vec()));
            Ok(())
        })?;
        Ok((out, contents))
    }

    fn ours(store: &MvccStore) -> Vec<Record> {
        let mut out = Vec::new();
        for bucket in Bucket::ALL {
            store
                .backend()
                .scan(bucket, &mut |key, value| {
                    out.push((bucket, key.to_vec(), value.to_vec()));
                    true
                })
                .expect("scan");
        }
        out
    }

    #[test]
    fn a_store_goes_through_the_file_and_comes_back_the_same() {
        let store = store();
        let dir = tempfile::tempdir().expect("tempdir");
        let origin = Origin { applied_index: 12, applied_term: 3, members: Vec::new() };
        let (mut file, size) = write(&**store.backend(), &origin, tempfile::tempfile().expect("file")).expect("write");
        assert!(has_digest(size));
        let path = dir.path().join("s.db");
        io::copy(&mut file, &mut File::create(&path).expect("create")).expect("copy");

        let (mut back, contents) = records(&path, true).expect("reads");
        let mut want = ours(&store);
        // The meta bucket carries the compacted revision only; the downgrade target stays behind.
        want.retain(|(bucket, key, _)| *bucket != Bucket::Meta || key == crate::store::META_COMPACT_REV);
        back.sort();
        want.sort();
        assert_eq!(back, want);
        assert_eq!((contents.revision, contents.latest, contents.current_revision()), (6, 6, 6));
        assert_eq!((contents.finished_compact, contents.scheduled_compact), (3, 3));
        assert_eq!(contents.live_keys, 2, "a and b; c was deleted");
        assert_eq!(contents.storage_version, "3.6.0");
        assert_eq!(contents.size, size - DIGEST_BYTES);
        assert_eq!(status(&path).expect("status"), contents);
    }

    /// Until the compactor has deleted what the compaction freed, the file says the compaction is
    /// scheduled and not finished, as etcd's would: a restore finishes it.
    #[test]
    fn a_file_written_while_the_compactor_deletes_says_so() {
        let stalled =
            crate::compactor::CompactionConfig { batch_limit: 1, sleep_interval: std::time::Duration::from_secs(3600) };
        let mut store = store_with(stalled);
        // A compaction that frees several revisions: with one per batch and an hour between batches, its
        // deletion stays unfinished (the one in `store_with` frees a single revision, which the compactor
        // may already have deleted). Deletes, as the store's NOSPACE alarm refuses puts.
        for key in ["a", "b"] {
            let delete = pb::DeleteRangeRequest { key: key.into(), ..Default::default() };
            store.apply(&Command::DeleteRange(delete)).expect("delete");
        }
        let latest = store.current_revision();
        store
            .apply(&Command::Compact(pb::CompactionRequest { revision: latest, ..Default::default() }))
            .expect("compact");
        store.commit().expect("commit");
        let origin = Origin { applied_index: 12, applied_term: 3, members: Vec::new() };
        let (file, size) = {
            let _paused = store.compactor().pause();
            write(&**store.backend(), &origin, tempfile::tempfile().expect("file")).expect("write")
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.db");
        io::copy(&mut { file }, &mut File::create(&path).expect("create")).expect("copy");
        let contents = status(&path).expect("status");
        assert!(has_digest(size));
        assert_eq!(contents.scheduled_compact, latest);
        assert!(contents.finished_compact < latest, "finished at {}", contents.finished_compact);
    }

    #[test]
    fn arbitrary_damage_is_read_or_refused_in_one_line() {
        use rand::{Rng, SeedableRng};
        let store = store();
        let (mut file, _) =
            write(&**store.backend(), &Origin::default(), tempfile::tempfile().expect("file")).expect("write");
        let mut good = Vec::new();
        file.read_to_end(&mut good).expect("read");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.db");
        let mut rng = rand::rngs::StdRng::seed_from_u64(53);
        let mut refused = 0;
        for round in 0..2000 {
            let bytes = match round % 4 {
                // Bytes of any kind and length.
                0 => (0..rng.gen_range(0..20_000)).map(|_| rng.gen::<u8>()).collect(),
                // A truncated copy.
                1 => good[..rng.gen_range(0..good.len())].to_vec(),
                // A few bytes changed anywhere, headers and values alike.
                _ => {
                    let mut bytes = good.clone();
                    for _ in 0..rng.gen_range(1..8) {
                        let at = rng.gen_range(0..bytes.len());
                        bytes[at] = rng.gen();
                    }
                    bytes
                }
            };
            std::fs::write(&path, &bytes).expect("write");
            for check in [true, false] {
                if let Err(err) = records(&path, check) {
                    refused += 1;
                    let text = err.to_string();
                    assert!(!text.is_empty() && !text.contains('\n'), "{text:?}");
                }
            }
        }
        assert!(refused > 2000, "most damage is caught: {refused} of 4000 reads refused");
    }

    #[test]
    fn digests_are_checked_as_etcds_restore_checks_them() {
        let store = store();
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut file, _) =
            write(&**store.backend(), &Origin::default(), tempfile::tempfile().expect("file")).expect("write");
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).expect("read");
        let path = dir.path().join("s.db");

        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        std::fs::write(&path, &damaged).expect("write");
        let err = records(&path, true).expect_err("digest");
        assert!(err.to_string().starts_with("expected sha256 ["), "{err}");
        assert!(records(&path, false).is_ok(), "--skip-hash-check reads it");

        std::fs::write(&path, &bytes[..bytes.len() - 32]).expect("write");
        let err = records(&path, true).expect_err("no digest");
        assert_eq!(err.to_string(), "snapshot missing hash but --skip-hash-check=false");
        assert!(records(&path, false).is_ok(), "a database copied from a data dir, with --skip-hash-check");

        // A bbolt database that is not etcd's.
        let mut writer = bbolt::Writer::new(tempfile::tempfile().expect("file")).expect("writer");
        writer.begin_bucket(b"widgets").expect("bucket");
        writer.put(b"a", b"1").expect("put");
        let (mut file, size) = writer.finish().expect("finish");
        let mut foreign = Vec::new();
        file.seek(SeekFrom::Start(0)).expect("seek");
        file.read_to_end(&mut foreign).expect("read");
        assert_eq!(foreign.len() as u64, size);
        std::fs::write(&path, &foreign).expect("write");
        let err = records(&path, false).expect_err("foreign");
        assert_eq!(err.to_string(), "not an etcd database: it has no \"key\" bucket");

        std::fs::write(&path, b"short").expect("write");
        assert_eq!(
            records(&path, false).expect_err("short").to_string(),
            format!("seek {}: invalid argument", path.display())
        );
        std::fs::write(&path, vec![0; 4096 * 4]).expect("write");
        assert_eq!(records(&path, false).expect_err("zeros").to_string(), "invalid database");
    }
}
