//! [`ValueLog`]: the store's large values outside sled, appended to segment files of a generation
//! (`<generation>/values/<n>.vlog`), with sled holding a small [`Pointer`] to each in its place.
//!
//! # Why
//!
//! sled 0.34 rewrites a leaf whole each time it splits (at 16 entries) or consolidates, and each
//! rewrite goes to a new place in its log: copying 200k values of 1.1 KB into a fresh database wrote
//! 1,043 MB to the disk for 220 MB of data (1.23 s; `/proc/self/io`), 8 KiB values 793 MB for 220 MB.
//! The same copy with the values appended to a file and 13-byte pointers in sled wrote 303 MB in 0.75 s,
//! and 220 MB in 0.22 s for the 8 KiB values. A defragmentation, a snapshot install and a follower's
//! catch-up are such copies, and the disk (about 380 MB/s here) is what bounds them.
//!
//! # Records and durability
//!
//! A record is the value's CRC-32C and length (4 bytes each, little-endian), then the value. A value is
//! appended to a buffer, written to its segment before any pointer to it reaches sled
//! ([`ValueLog::write_out`]), and made durable before the batch holding that pointer is applied
//! ([`ValueLog::sync`]): sled may persist a batch at any time after it is applied, so a pointer on disk
//! always names a value on disk. A crash leaves at most records no pointer names at a segment's end;
//! appends go on after them. Values no pointer names any more (compacted revisions) stay in their
//! segment until a defragmentation copies the live ones into the next generation.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kv_api::hash::Crc32c;
use parking_lot::{Mutex, RwLock};

/// A segment is closed once it holds this much; the next append starts a new one.
const SEGMENT_BYTES: u64 = 64 << 20;
/// The CRC and the length before each value.
const HEADER: usize = 8;
/// The first byte of a pointer in sled. Values of the key bucket start with their kind, 0 or 1
/// (`kv_api`'s entry encoding), so a stored value starting with this byte is a pointer.
pub(crate) const POINTER_MARK: u8 = 0xfe;
/// Encoded pointer: the mark, the segment, the record's offset and the value's length (big-endian).
const POINTER_BYTES: usize = 1 + 4 + 8 + 4;

/// Where a value is: its record's segment and offset, and the value's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pointer {
    segment: u32,
    offset: u64,
    len: u32,
}

impl Pointer {
    /// The bytes its record takes in the value log.
    pub(crate) fn record_bytes(&self) -> u64 {
        HEADER as u64 + u64::from(self.len)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(POINTER_BYTES);
        out.push(POINTER_MARK);
        out.extend_from_slice(&self.segment.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.len.to_be_bytes());
        out
    }

    /// The pointer `stored` encodes, if it is one.
    pub(crate) fn decode(stored: &[u8]) -> Option<Pointer> {
        if stored.len() != POINTER_BYTES || stored[0] != POINTER_MARK {
            return None;
        }
        let segment = u32::from_be_bytes(stored[1..5].try_into().ok()?);
        let offset = u64::from_be_bytes(stored[5..13].try_into().ok()?);
        let len = u32::from_be_bytes(stored[13..17].try_into().ok()?);
        Some(Pointer { segment, offset, len })
    }
}

/// What appending needs: the segment being filled, its length on disk, and what is not written yet.
#[derive(Debug)]
struct Writer {
    segment: u32,
    written: u64,
    /// The bytes of the segments before it.
    closed: u64,
    buffer: Vec<u8>,
    /// Segments written to since the last sync.
    unsynced: Vec<u32>,
    /// A segment (or the directory) was created since the last sync: its name must be made durable too.
    new_names: bool,
}

/// The value log of one store generation.
#[derive(Debug)]
pub(crate) struct ValueLog {
    dir: PathBuf,
    /// Every segment, by number (read concurrently with `pread`).
    files: RwLock<Vec<Arc<File>>>,
    writer: Mutex<Writer>,
    /// Bytes of records no pointer names any more, counted since the log was opened (those of an
    /// earlier run are not known until a defragmentation leaves only live ones).
    dead: AtomicU64,
}

fn segment_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:08}.vlog"))
}

fn open_segment(dir: &Path, segment: u32) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(segment_path(dir, segment))
}

fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl ValueLog {
    /// Opens the value log in `dir`, created if missing; appends go on at the end of its last segment.
    pub(crate) fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut numbers = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".vlog")) else { continue };
            let number =
                stem.parse::<u32>().map_err(|_| corrupt(format!("{}: not a segment name", name.to_string_lossy())))?;
            numbers.push(number);
        }
        numbers.sort_unstable();
        let new_names = numbers.is_empty();
        // Segments are numbered from 0 without gaps; a gap would leave pointers without their file.
        if numbers.iter().enumerate().any(|(i, n)| *n as usize != i) {
            return Err(corrupt(format!("{}: value segments {numbers:?} are not numbered 0, 1, ...", dir.display())));
        }
        if numbers.is_empty() {
            numbers.push(0);
        }
        let files = numbers.iter().map(|n| open_segment(dir, *n).map(Arc::new)).collect::<io::Result<Vec<_>>>()?;
        let mut lengths = files.iter().map(|f| f.metadata().map(|m| m.len())).collect::<io::Result<Vec<_>>>()?;
        let written = lengths.pop().expect("at least segment 0");
        let last = *numbers.last().expect("at least segment 0");
        let closed = lengths.iter().sum();
        let writer = Writer { segment: last, written, closed, buffer: Vec::new(), unsynced: Vec::new(), new_names };
        Ok(Self {
            dir: dir.to_path_buf(),
            files: RwLock::new(files),
            writer: Mutex::new(writer),
            dead: AtomicU64::new(0),
        })
    }

    /// Appends `value` (not written yet: see [`ValueLog::write_out`]); returns where it will be.
    pub(crate) fn append(&self, value: &[u8]) -> io::Result<Pointer> {
        let len = u32::try_from(value.len()).map_err(|_| corrupt(format!("a value of {} bytes", value.len())))?;
        let mut crc = Crc32c::default();
        crc.update(value);
        self.push(&[&crc.finish().to_le_bytes(), &len.to_le_bytes(), value], len)
    }

    /// Appends a whole record another value log checked ([`Chunks::record`]), as it is.
    pub(crate) fn append_record(&self, record: &[u8]) -> io::Result<Pointer> {
        let len =
            u32::try_from(record.len() - HEADER).map_err(|_| corrupt(format!("a record of {} bytes", record.len())))?;
        self.push(&[record], len)
    }

    /// Appends the pieces of one record of a value of `len` bytes.
    fn push(&self, pieces: &[&[u8]], len: u32) -> io::Result<Pointer> {
        let mut writer = self.writer.lock();
        let record = (HEADER as u64) + u64::from(len);
        let at = writer.written + writer.buffer.len() as u64;
        if at > 0 && at + record > SEGMENT_BYTES {
            self.write_buffer(&mut writer)?;
            let next = writer.segment + 1;
            let file = Arc::new(open_segment(&self.dir, next)?);
            self.files.write().push(file);
            writer.segment = next;
            writer.new_names = true;
            writer.closed += writer.written;
            writer.written = 0;
        }
        let offset = writer.written + writer.buffer.len() as u64;
        pieces.iter().for_each(|piece| writer.buffer.extend_from_slice(piece));
        Ok(Pointer { segment: writer.segment, offset, len })
    }

    /// Writes what was appended to its segment (into the file cache): readers can then follow any
    /// pointer returned so far.
    pub(crate) fn write_out(&self) -> io::Result<()> {
        let mut writer = self.writer.lock();
        self.write_buffer(&mut writer)
    }

    fn write_buffer(&self, writer: &mut Writer) -> io::Result<()> {
        if writer.buffer.is_empty() {
            return Ok(());
        }
        let file = self.files.read()[writer.segment as usize].clone();
        file.write_all_at(&writer.buffer, writer.written)?;
        writer.written += writer.buffer.len() as u64;
        writer.buffer.clear();
        if writer.unsynced.last() != Some(&writer.segment) {
            let segment = writer.segment;
            writer.unsynced.push(segment);
        }
        Ok(())
    }

    /// Writes out and makes durable everything appended so far.
    pub(crate) fn sync(&self) -> io::Result<()> {
        let mut writer = self.writer.lock();
        self.write_buffer(&mut writer)?;
        let files = self.files.read();
        for segment in std::mem::take(&mut writer.unsynced) {
            files[segment as usize].sync_data()?;
        }
        if writer.new_names {
            // The new segment's name, and the directory's own in the generation's.
            File::open(&self.dir)?.sync_all()?;
            if let Some(parent) = self.dir.parent() {
                File::open(parent)?.sync_all()?;
            }
            writer.new_names = false;
        }
        Ok(())
    }

    /// The value `pointer` names, checked against its record's length and CRC.
    pub(crate) fn read(&self, pointer: Pointer) -> io::Result<Vec<u8>> {
        let file = self.segment(pointer)?;
        let mut record = vec![0u8; HEADER + pointer.len as usize];
        file.read_exact_at(&mut record, pointer.offset)?;
        self.check(pointer, &record)?;
        record.drain(..HEADER);
        Ok(record)
    }

    fn segment(&self, pointer: Pointer) -> io::Result<Arc<File>> {
        let files = self.files.read();
        let file = files.get(pointer.segment as usize).cloned();
        file.ok_or_else(|| corrupt(format!("{}: no value segment {}", self.dir.display(), pointer.segment)))
    }

    /// Fails unless `record` is the one `pointer` names: its length, and its value's CRC.
    fn check(&self, pointer: Pointer, record: &[u8]) -> io::Result<()> {
        let crc = u32::from_le_bytes(record[0..4].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(record[4..8].try_into().expect("4 bytes"));
        let mut check = Crc32c::default();
        check.update(&record[HEADER..]);
        if len == pointer.len && check.finish() == crc {
            return Ok(());
        }
        Err(corrupt(format!(
            "{}: the value at segment {} offset {} does not match its pointer (length {len}, expected {})",
            self.dir.display(),
            pointer.segment,
            pointer.offset,
            pointer.len
        )))
    }

    /// A pointer to a record was removed: its bytes are dead.
    pub(crate) fn note_dead(&self, pointer: Pointer) {
        self.dead.fetch_add(pointer.record_bytes(), Ordering::Relaxed);
    }

    /// Bytes known dead (see [`ValueLog::note_dead`]).
    pub(crate) fn dead_bytes(&self) -> u64 {
        self.dead.load(Ordering::Relaxed)
    }

    /// The bytes of every segment, written or still buffered.
    pub(crate) fn size_bytes(&self) -> u64 {
        let writer = self.writer.lock();
        writer.closed + writer.written + writer.buffer.len() as u64
    }
}

/// Reads records of a value log in about the order they were appended, a large piece of a segment at a
/// time: a defragmentation follows the pointers in key order, which is revision order, which is the
/// order apply appended them in (one `pread` per value took a third of a copy's time).
pub(crate) struct Chunks<'a> {
    log: &'a ValueLog,
    segment: u32,
    start: u64,
    bytes: Vec<u8>,
}

/// What [`Chunks`] reads at a time, at least.
const CHUNK_BYTES: usize = 1 << 20;

impl<'a> Chunks<'a> {
    pub(crate) fn new(log: &'a ValueLog) -> Self {
        Self { log, segment: u32::MAX, start: 0, bytes: Vec::new() }
    }

    /// The whole record `pointer` names (header and value), checked.
    pub(crate) fn record(&mut self, pointer: Pointer) -> io::Result<&[u8]> {
        let size = pointer.record_bytes() as usize;
        let inside = pointer.segment == self.segment
            && pointer.offset >= self.start
            && pointer.offset + size as u64 <= self.start + self.bytes.len() as u64;
        if !inside {
            let file = self.log.segment(pointer)?;
            self.bytes.resize(size.max(CHUNK_BYTES), 0);
            let mut filled = 0;
            while filled < self.bytes.len() {
                match file.read_at(&mut self.bytes[filled..], pointer.offset + filled as u64)? {
                    0 => break,
                    n => filled += n,
                }
            }
            self.bytes.truncate(filled);
            (self.segment, self.start) = (pointer.segment, pointer.offset);
            if filled < size {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a value record past its segment's end"));
            }
        }
        let at = (pointer.offset - self.start) as usize;
        let record = &self.bytes[at..at + size];
        self.log.check(pointer, record)?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_across_segments_and_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = ValueLog::open(dir.path()).expect("open");
        // 3 MiB values: the 22nd does not fit in the first segment.
        let value = |i: u8| vec![i; 3 << 20];
        let pointers: Vec<Pointer> = (0..25u8).map(|i| log.append(&value(i)).expect("append")).collect();
        log.sync().expect("sync");
        assert_eq!(pointers[21].segment, 1, "a record never straddles two segments");
        assert_eq!(pointers[21].offset, 0);
        for (i, pointer) in pointers.iter().enumerate() {
            assert_eq!(Pointer::decode(&pointer.encode()), Some(*pointer));
            assert_eq!(log.read(*pointer).expect("read"), value(i as u8));
        }
        // In order, as a defragmentation reads them: records larger than a chunk, across segments.
        let mut chunks = Chunks::new(&log);
        for (i, pointer) in pointers.iter().enumerate() {
            assert_eq!(&chunks.record(*pointer).expect("record")[HEADER..], value(i as u8).as_slice());
        }
        // Copied as records into another log, they read back alike.
        let other_dir = tempfile::tempdir().expect("tempdir");
        let other = ValueLog::open(other_dir.path()).expect("open");
        let small: Vec<Pointer> =
            (0..500u32).map(|i| log.append(&i.to_be_bytes().repeat(300)).expect("append")).collect();
        log.write_out().expect("write");
        let mut chunks = Chunks::new(&log);
        let copied: Vec<Pointer> =
            small.iter().map(|p| other.append_record(chunks.record(*p).expect("record")).expect("copy")).collect();
        other.sync().expect("sync");
        for (i, pointer) in copied.iter().enumerate() {
            assert_eq!(other.read(*pointer).expect("read"), (i as u32).to_be_bytes().repeat(300));
        }
        drop(log);
        let log = ValueLog::open(dir.path()).expect("reopen");
        assert_eq!(log.read(pointers[3]).expect("read"), value(3));
        let next = log.append(b"after the reopen").expect("append");
        assert_eq!(next.segment, 1);
        let small_bytes = 500 * (1200 + HEADER as u64);
        assert_eq!(next.offset, 4 * ((3 << 20) + HEADER as u64) + small_bytes, "appends go on after the last record");
        log.write_out().expect("write");
        assert_eq!(log.read(next).expect("read"), b"after the reopen");
        let first_segment = 21 * ((3 << 20) + HEADER as u64);
        assert_eq!(log.size_bytes(), first_segment + next.offset + HEADER as u64 + 16);
        drop(other);
    }

    #[test]
    fn a_damaged_record_or_a_wrong_pointer_is_an_error_not_a_value() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = ValueLog::open(dir.path()).expect("open");
        let first = log.append(b"first value").expect("append");
        let second = log.append(b"second value").expect("append");
        log.sync().expect("sync");
        let file = OpenOptions::new().write(true).open(segment_path(dir.path(), 0)).expect("segment");
        file.write_all_at(b"X", second.offset + HEADER as u64 + 2).expect("damage");
        assert_eq!(log.read(first).expect("read"), b"first value");
        let damaged = log.read(second).expect_err("damaged");
        assert_eq!(damaged.kind(), io::ErrorKind::InvalidData);
        let elsewhere = Pointer { segment: 0, offset: second.offset, len: first.len };
        assert!(log.read(elsewhere).is_err(), "a length that differs from the record's");
        assert!(log.read(Pointer { segment: 7, ..first }).is_err(), "a segment that does not exist");
        assert_eq!(Pointer::decode(b"\x00an inline value of 17"), None);
    }

    #[test]
    fn a_gap_in_the_segments_stops_the_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(segment_path(dir.path(), 0), b"").expect("segment 0");
        std::fs::write(segment_path(dir.path(), 2), b"").expect("segment 2");
        let err = ValueLog::open(dir.path()).expect_err("gap");
        assert!(err.to_string().contains("not numbered 0, 1"), "{err}");
    }
}
