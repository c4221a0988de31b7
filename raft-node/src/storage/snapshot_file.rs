//! The snapshot file: a point-in-time copy of a member's store, as `Maintenance.Snapshot` streams it,
//! `snapshot save` stores it and `snapshot status|restore` read it.
//!
//! etcd streams its bbolt file, which is a consistent copy by itself. Our sled files are not (sled
//! writes pages in the background, and the Raft log shares them), so a member writes its store's entries
//! out in this format instead.
//!
//! # Format, version 1
//!
//! Integers are big-endian.
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `KVSNAP\0\n` |
//! | 4 | format version: 1 |
//! | 8 | revision: the store's current revision |
//! | 8 | compacted revision (-1 if never compacted) |
//! | 8 | Raft index of the last entry the copy reflects (0 if none) |
//! | 8 | Raft term of that entry |
//! | … | records, then the end record |
//! | … | zero bytes up to a multiple of 512 |
//! | 32 | SHA-256 of everything before it |
//!
//! A record is one entry of a bucket of the MVCC store ([`kv_api::Bucket`]): the bucket's tag (`k` key
//! revisions, `m` bookkeeping such as the compacted revision, `l` leases), the key's length (u32), the
//! value's length (u32), the key, the value. Buckets come in the order key, meta, lease, each in key order.
//! The end record is a zero tag followed by the number of records (u64).
//!
//! From outside, the file looks like etcd's: its size is 32 modulo 512 and its last 32 bytes are the
//! SHA-256 of the rest. That is all `etcdctl snapshot save` (3.4) checks, so it saves ours too.
//!
//! Raft's bookkeeping in the meta bucket (the applied log id and the membership) is left out: it
//! belongs to the cluster the copy came from, and a restore writes the new cluster's. The header's Raft
//! index and term say where in the old cluster's log the copy was taken.
//!
//! # Writing it
//!
//! [`write`] commits what apply staged and scans the store under its read lock (as a snapshot for
//! openraft is built), writing records through a buffer into an unnamed temporary file next to the
//! database: one revision, nothing held in memory, apply paused for as long as the scan takes. The
//! file is then streamed without any lock.
//!
//! # Reading it
//!
//! [`read`] streams the file once, checking its digest (unless asked not to), its structure and its
//! record count, and computes the `hash` that `snapshot status` prints: the CRC-32C (Castagnoli, as
//! etcd's) of each bucket's etcd name (`key`, `meta`, `lease`) followed by its keys and values.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use kv_api::{Bucket, SharedStore};
use openraft::StorageIOError;
use ring::digest;

use crate::storage::state_machine::{is_bookkeeping, read_committed};
use crate::typ::StorageError;

const MAGIC: [u8; 8] = *b"KVSNAP\0\n";
const VERSION: u32 = 1;
/// Magic, version and the four 8-byte header fields.
const HEADER_BYTES: u64 = 8 + 4 + 4 * 8;
const END_TAG: u8 = 0;
/// The body is padded to whole sectors, so that with the digest the size is 32 modulo 512 as etcd's.
const SECTOR: u64 = 512;
pub const DIGEST_BYTES: u64 = 32;
const WRITE_BUFFER: usize = 1 << 20;

/// One entry of a bucket of the store: what a record holds.
pub type Record = (Bucket, Vec<u8>, Vec<u8>);

/// Called on each record read: its bucket, key and value.
pub type Visit<'a> = dyn FnMut(Bucket, &[u8], &[u8]) -> io::Result<()> + 'a;

/// What the header says about the copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// The store's current revision when the copy was taken.
    pub revision: i64,
    pub compact_revision: i64,
    /// Raft index and term of the last log entry applied to the copy, in the cluster it came from.
    pub applied_index: u64,
    pub applied_term: u64,
}

/// What reading a whole file found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub header: Header,
    /// Records (bucket entries), as etcd's status counts every key of every bucket.
    pub records: u64,
    /// CRC-32C of bucket names, keys and values (see the module doc).
    pub hash: u32,
    /// Bytes before the digest (etcd's status reports its database without the digest).
    pub size: u64,
}

/// Why a file cannot be read. The texts are etcd's for the same failure: etcdctl 3.4's `snapshot
/// restore` texts for a missing or wrong digest, bbolt's for a file that is not a database.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// An OS error, printed as Go prints `*os.PathError`.
    #[error("{op} {path}: {}", go_io_text(.source))]
    Io { op: &'static str, path: String, source: io::Error },
    #[error("snapshot missing hash but --skip-hash-check=false")]
    MissingDigest,
    #[error("expected sha256 {}, got {}", go_bytes(.expected), go_bytes(.got))]
    DigestMismatch { expected: Vec<u8>, got: Vec<u8> },
    /// Not a snapshot of ours, or damaged in a way the digest did not catch (it was not checked).
    #[error("invalid database")]
    Invalid(String),
    #[error("version mismatch")]
    VersionMismatch(u32),
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

fn invalid(detail: impl Into<String>) -> FileError {
    FileError::Invalid(detail.into())
}

/// etcd's name of a bucket, which the status hash covers.
fn bucket_name(bucket: Bucket) -> &'static [u8] {
    match bucket {
        Bucket::Key => b"key",
        Bucket::Meta => b"meta",
        Bucket::Lease => b"lease",
        Bucket::Alarm => b"alarm",
        Bucket::Auth => b"auth",
    }
}

/// Writes a consistent copy of `store` into an unnamed temporary file in `dir` (see the module doc).
/// Returns the file, positioned at its start, and its size. Blocking: run it off the async runtime.
pub fn write(store: &SharedStore, dir: &Path) -> Result<(File, u64), StorageError> {
    let write_err = |e: &io::Error| StorageError::from(StorageIOError::write_snapshot(None, e));
    let file = tempfile::tempfile_in(dir).map_err(|e| write_err(&e))?;
    let writer = read_committed(store, |store, applied, _membership| {
        let header = Header {
            revision: store.current_revision(),
            compact_revision: store.compacted_revision(),
            applied_index: applied.map_or(0, |id| id.index),
            applied_term: applied.map_or(0, |id| id.leader_id.term),
        };
        let mut writer =
            Writer::new(BufWriter::with_capacity(WRITE_BUFFER, file), &header).map_err(|e| write_err(&e))?;
        for bucket in Bucket::ALL {
            let mut failure = None;
            store
                .backend()
                .scan(bucket, &mut |key, value| {
                    if is_bookkeeping(bucket, key) {
                        return true;
                    }
                    match writer.record(bucket, key, value) {
                        Ok(()) => true,
                        Err(err) => {
                            failure = Some(err);
                            false
                        }
                    }
                })
                .map_err(|e| StorageIOError::read_state_machine(&e))?;
            if let Some(err) = failure {
                return Err(write_err(&err));
            }
        }
        Ok(writer)
    })?;
    // The copy is complete: the lock is released, the rest needs no store.
    let (out, size) = writer.finish().map_err(|e| write_err(&e))?;
    let mut file = out.into_inner().map_err(|e| write_err(e.error()))?;
    file.seek(SeekFrom::Start(0)).map_err(|e| write_err(&e))?;
    Ok((file, size))
}

/// Writes the format to `out`, hashing as it goes.
pub struct Writer<W: Write> {
    out: W,
    digest: digest::Context,
    len: u64,
    records: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W, header: &Header) -> io::Result<Self> {
        let mut writer = Self { out, digest: digest::Context::new(&digest::SHA256), len: 0, records: 0 };
        writer.put(&MAGIC)?;
        writer.put(&VERSION.to_be_bytes())?;
        writer.put(&header.revision.to_be_bytes())?;
        writer.put(&header.compact_revision.to_be_bytes())?;
        writer.put(&header.applied_index.to_be_bytes())?;
        writer.put(&header.applied_term.to_be_bytes())?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.digest.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    pub fn record(&mut self, bucket: Bucket, key: &[u8], value: &[u8]) -> io::Result<()> {
        let too_long = || io::Error::new(io::ErrorKind::InvalidInput, "a key or value over 4 GiB");
        let key_len = u32::try_from(key.len()).map_err(|_| too_long())?;
        let value_len = u32::try_from(value.len()).map_err(|_| too_long())?;
        self.put(&[bucket.tag()])?;
        self.put(&key_len.to_be_bytes())?;
        self.put(&value_len.to_be_bytes())?;
        self.put(key)?;
        self.put(value)?;
        self.records += 1;
        Ok(())
    }

    /// Writes the end record, the padding and the digest; returns the output and the total size.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.put(&[END_TAG])?;
        self.put(&self.records.to_be_bytes())?;
        let padding = (SECTOR - self.len % SECTOR) % SECTOR;
        self.put(&vec![0; padding as usize])?;
        let digest = self.digest.finish();
        self.out.write_all(digest.as_ref())?;
        self.out.flush()?;
        Ok((self.out, self.len + DIGEST_BYTES))
    }
}

/// Reads the file at `path` to its end, calling `visit` on every record, and checks it (its digest
/// unless `check_digest` is false). `visit` sees records before the digest is known: check a file with
/// a first pass (a `visit` that does nothing) before acting on its records.
pub fn read(path: &Path, check_digest: bool, visit: &mut Visit<'_>) -> Result<Summary, FileError> {
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
    if size % SECTOR != DIGEST_BYTES {
        return Err(if check_digest { FileError::MissingDigest } else { invalid("no digest at the end") });
    }
    let body = size - DIGEST_BYTES;
    let mut expected = vec![0; DIGEST_BYTES as usize];
    file.seek(SeekFrom::Start(body)).map_err(io_err("seek"))?;
    file.read_exact(&mut expected).map_err(io_err("read"))?;
    file.seek(SeekFrom::Start(0)).map_err(io_err("seek"))?;

    let mut reader = BodyReader {
        inner: BufReader::new(file).take(body),
        digest: digest::Context::new(&digest::SHA256),
        left: body,
    };
    let parsed = parse(&mut reader, visit);
    // The digest decides first: a damaged file is reported as such, whatever its parse found.
    if check_digest {
        // Hash what the parse left unread, so a parse that stopped early still compares whole files.
        io::copy(&mut reader, &mut io::sink()).map_err(io_err("read"))?;
        let got = reader.digest.finish().as_ref().to_vec();
        if got != expected {
            return Err(FileError::DigestMismatch { expected, got });
        }
    }
    let (header, records, hash) = parsed.map_err(|err| match err {
        ParseError::Io(source) => FileError::Io { op: "read", path: shown.clone(), source },
        ParseError::File(err) => err,
    })?;
    Ok(Summary { header, records, hash, size: body })
}

enum ParseError {
    Io(io::Error),
    File(FileError),
}

impl From<io::Error> for ParseError {
    fn from(err: io::Error) -> Self {
        ParseError::Io(err)
    }
}

impl From<FileError> for ParseError {
    fn from(err: FileError) -> Self {
        ParseError::File(err)
    }
}

/// The body (everything before the digest), hashed as it is read.
struct BodyReader<R: Read> {
    inner: R,
    digest: digest::Context,
    /// Bytes of the body not read yet.
    left: u64,
}

impl<R: Read> Read for BodyReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.digest.update(&buf[..n]);
        self.left -= n as u64;
        Ok(n)
    }
}

impl<R: Read> BodyReader<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], ParseError> {
        if self.left < N as u64 {
            return Err(invalid("truncated").into());
        }
        let mut out = [0; N];
        self.read_exact(&mut out)?;
        Ok(out)
    }

    /// `len` bytes into `buf`, refusing lengths beyond the body (a damaged length must not allocate).
    fn fill(&mut self, buf: &mut Vec<u8>, len: u32) -> Result<(), ParseError> {
        if u64::from(len) > self.left {
            return Err(invalid("a record runs past the end").into());
        }
        buf.resize(len as usize, 0);
        self.read_exact(buf)?;
        Ok(())
    }
}

fn parse<R: Read>(reader: &mut BodyReader<R>, visit: &mut Visit<'_>) -> Result<(Header, u64, u32), ParseError> {
    if reader.left < HEADER_BYTES || reader.bytes::<8>()? != MAGIC {
        return Err(invalid("not a snapshot file").into());
    }
    let version = u32::from_be_bytes(reader.bytes()?);
    if version != VERSION {
        return Err(FileError::VersionMismatch(version).into());
    }
    let header = Header {
        revision: i64::from_be_bytes(reader.bytes()?),
        compact_revision: i64::from_be_bytes(reader.bytes()?),
        applied_index: u64::from_be_bytes(reader.bytes()?),
        applied_term: u64::from_be_bytes(reader.bytes()?),
    };
    let mut hash = Crc32c::default();
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let mut records = 0u64;
    let mut current = None;
    loop {
        let [tag] = reader.bytes::<1>()?;
        if tag == END_TAG {
            break;
        }
        let bucket = Bucket::ALL.into_iter().find(|b| b.tag() == tag).ok_or_else(|| invalid("unknown bucket"))?;
        let key_len = u32::from_be_bytes(reader.bytes()?);
        let value_len = u32::from_be_bytes(reader.bytes()?);
        reader.fill(&mut key, key_len)?;
        reader.fill(&mut value, value_len)?;
        if current != Some(bucket) {
            hash.update(bucket_name(bucket));
            current = Some(bucket);
        }
        hash.update(&key);
        hash.update(&value);
        visit(bucket, &key, &value)?;
        records += 1;
    }
    if u64::from_be_bytes(reader.bytes()?) != records {
        return Err(invalid("record count mismatch").into());
    }
    if reader.left >= SECTOR {
        return Err(invalid("data after the end record").into());
    }
    let mut padding = Vec::new();
    reader.read_to_end(&mut padding)?;
    if padding.iter().any(|&b| b != 0) {
        return Err(invalid("data after the end record").into());
    }
    Ok((header, records, hash.0))
}

/// CRC-32C (Castagnoli), the checksum etcd's `snapshot status` prints.
#[derive(Default)]
struct Crc32c(u32);

const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { 0x82f6_3b78 ^ (crc >> 1) } else { crc >> 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

impl Crc32c {
    fn update(&mut self, bytes: &[u8]) {
        let mut crc = !self.0;
        for &byte in bytes {
            crc = CRC32C_TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
        }
        self.0 = !crc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Header = Header { revision: 9, compact_revision: 4, applied_index: 17, applied_term: 3 };

    fn records() -> Vec<Record> {
        vec![
            (Bucket::Key, b"rev-1".to_vec(), b"value one".to_vec()),
            (Bucket::Key, b"rev-2".to_vec(), vec![0; 3000]),
            (Bucket::Meta, b"compact_rev".to_vec(), 4i64.to_be_bytes().to_vec()),
            (Bucket::Lease, 7i64.to_be_bytes().to_vec(), Vec::new()),
        ]
    }

    fn encoded() -> Vec<u8> {
        let mut writer = Writer::new(Vec::new(), &HEADER).expect("header");
        for (bucket, key, value) in records() {
            writer.record(bucket, &key, &value).expect("record");
        }
        let (bytes, size) = writer.finish().expect("finish");
        assert_eq!(size, bytes.len() as u64);
        bytes
    }

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.db");
        std::fs::write(&path, bytes).expect("write");
        (dir, path)
    }

    fn read_all(bytes: &[u8], check_digest: bool) -> Result<(Summary, Vec<Record>), FileError> {
        let (_dir, path) = file_with(bytes);
        let mut seen = Vec::new();
        let summary = read(&path, check_digest, &mut |bucket, key, value| {
            seen.push((bucket, key.to_vec(), value.to_vec()));
            Ok(())
        })?;
        Ok((summary, seen))
    }

    #[test]
    fn round_trips_with_etcds_size_and_digest() {
        let bytes = encoded();
        // What etcdctl 3.4 checks of a saved snapshot.
        assert_eq!(bytes.len() % 512, 32);
        let (body, digest) = bytes.split_at(bytes.len() - 32);
        assert_eq!(digest, digest::digest(&digest::SHA256, body).as_ref());

        let (summary, seen) = read_all(&bytes, true).expect("reads");
        assert_eq!(seen, records());
        assert_eq!(summary.header, HEADER);
        assert_eq!(summary.records, 4);
        assert_eq!(summary.size, bytes.len() as u64 - 32);
        let mut hash = Crc32c::default();
        for part in [&b"key"[..], b"rev-1", b"value one", b"rev-2", &[0; 3000], b"meta", b"compact_rev"] {
            hash.update(part);
        }
        for part in [&4i64.to_be_bytes()[..], b"lease", &7i64.to_be_bytes(), b""] {
            hash.update(part);
        }
        assert_eq!(summary.hash, hash.0);
    }

    #[test]
    fn crc32c_is_castagnoli() {
        let mut crc = Crc32c::default();
        crc.update(b"123456789");
        assert_eq!(crc.0, 0xe306_9283);
        let mut split = Crc32c::default();
        split.update(b"1234");
        split.update(b"56789");
        assert_eq!(split.0, crc.0);
    }

    #[test]
    fn damaged_files_are_refused_with_etcds_texts() {
        let good = encoded();
        let mut flipped = good.clone();
        flipped[60] ^= 0x01;
        let mut bad_magic = good.clone();
        bad_magic[0] = b'X';
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            // Still 32 modulo 512: the digest check catches it.
            ("truncated by a sector", good[..good.len() - 512].to_vec(), "expected sha256 "),
            (
                "truncated by a byte",
                good[..good.len() - 1].to_vec(),
                "snapshot missing hash but --skip-hash-check=false",
            ),
            ("a byte flipped", flipped, "expected sha256 "),
            ("empty", Vec::new(), "seek "),
            ("shorter than a digest", good[..31].to_vec(), "seek "),
        ];
        for (what, bytes, want) in cases {
            let err = read_all(&bytes, true).expect_err(what);
            assert!(err.to_string().starts_with(want), "{what}: {err}");
        }
        let err = read_all(&bad_magic, true).expect_err("bad magic");
        let FileError::DigestMismatch { expected, got } = &err else { panic!("{err:?}") };
        assert_eq!(expected.as_slice(), &good[good.len() - 32..]);
        assert_ne!(expected, got);
        assert!(err.to_string().contains(&format!("{}, got [", go_bytes(expected))), "{err}");
    }

    #[test]
    fn without_the_digest_check_the_structure_is_still_checked() {
        let good = encoded();
        let mut bad_magic = good.clone();
        bad_magic[0] = b'X';
        assert!(matches!(read_all(&bad_magic, false), Err(FileError::Invalid(_))));
        let mut version = good.clone();
        version[11] = 2;
        assert_eq!(read_all(&version, false).expect_err("version").to_string(), "version mismatch");
        // A record length pointing past the end must not allocate it.
        let mut long = good.clone();
        long[HEADER_BYTES as usize + 1..HEADER_BYTES as usize + 5].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(read_all(&long, false), Err(FileError::Invalid(_))));
        let mut padding = good.clone();
        let at = padding.len() - 33;
        padding[at] = 1;
        assert!(matches!(read_all(&padding, false), Err(FileError::Invalid(_))));
        let (summary, _) = read_all(&good, false).expect("a good file reads unchecked");
        assert_eq!(summary.records, 4);
        // A file that is not ours (here a text file padded to etcd's size) with a valid digest.
        let mut text = b"hello".to_vec();
        text.resize(512, 0);
        let digest = digest::digest(&digest::SHA256, &text);
        text.extend_from_slice(digest.as_ref());
        assert_eq!(read_all(&text, true).expect_err("not ours").to_string(), "invalid database");
    }

    #[test]
    fn missing_files_are_reported_like_go() {
        let err = read(Path::new("/nonexistent/s.db"), true, &mut |_, _, _| Ok(())).expect_err("missing");
        assert_eq!(err.to_string(), "open /nonexistent/s.db: no such file or directory");
        assert_eq!(go_bytes(&[1, 2, 255]), "[1 2 255]");
        assert_eq!(go_io_text(&io::Error::from_raw_os_error(22)), "invalid argument");
    }
}
