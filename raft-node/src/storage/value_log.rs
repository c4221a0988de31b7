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
//! segment until a defragmentation gives their space back ([`crate::storage::value_gc`]): a segment no
//! pointer names any more is removed, and one mostly dead has its live records moved to the end of the
//! log first; or a full defragmentation copies the live ones into the next generation.
//!
//! # Removing segments while readers follow pointers
//!
//! A reader takes a pointer from sled, then reads the record it names; a segment may only go once no
//! reader can hold a pointer into it. Readers hold [`ValueLog::pin`] from the lookup to the read, and
//! a segment is taken out of the log under the same lock, exclusively, after the collector saw no
//! pointer into it left in the tree (none is ever added to a closed segment): a lookup that starts
//! after that finds none, and one that started before has finished its read.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kv_api::hash::Crc32c;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

/// A segment is closed once it holds this much; the next append starts a new one (smaller in unit
/// tests, so that a few megabytes span several).
const SEGMENT_BYTES: u64 = if cfg!(test) { 4 << 20 } else { 64 << 20 };
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

    pub(crate) fn segment(&self) -> u32 {
        self.segment
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
    /// Every segment, by number (read concurrently with `pread`); numbers of removed ones are gaps.
    files: RwLock<BTreeMap<u32, Arc<File>>>,
    /// Held shared by readers from their lookup of a pointer to their read, exclusively to remove
    /// segments (see the module doc).
    removal: RwLock<()>,
    writer: Mutex<Writer>,
    /// Bytes of records no pointer names any more, counted since the log was opened (those of an
    /// earlier run are not known until a collection counts them).
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
        // Gaps are segments a collection removed: no pointer names them (a pointer that did would read
        // as an error, never as another value).
        if numbers.is_empty() {
            numbers.push(0);
        }
        let mut files = BTreeMap::new();
        let mut closed = 0;
        for number in &numbers {
            let file = open_segment(dir, *number)?;
            closed += file.metadata()?.len();
            files.insert(*number, Arc::new(file));
        }
        let last = *numbers.last().expect("at least one segment");
        let written = files[&last].metadata()?.len();
        closed -= written;
        let writer = Writer { segment: last, written, closed, buffer: Vec::new(), unsynced: Vec::new(), new_names };
        Ok(Self {
            dir: dir.to_path_buf(),
            files: RwLock::new(files),
            removal: RwLock::new(()),
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
            self.roll(&mut writer)?;
        }
        let offset = writer.written + writer.buffer.len() as u64;
        pieces.iter().for_each(|piece| writer.buffer.extend_from_slice(piece));
        Ok(Pointer { segment: writer.segment, offset, len })
    }

    /// Closes the segment being appended to; appends go on in a new one.
    fn roll(&self, writer: &mut Writer) -> io::Result<()> {
        self.write_buffer(writer)?;
        let next = writer.segment + 1;
        let file = Arc::new(open_segment(&self.dir, next)?);
        self.files.write().insert(next, file);
        writer.segment = next;
        writer.new_names = true;
        writer.closed += writer.written;
        writer.written = 0;
        Ok(())
    }

    /// Closes the segment being appended to if it holds anything (a collection may then take it);
    /// returns its number.
    pub(crate) fn seal(&self) -> io::Result<Option<u32>> {
        let mut writer = self.writer.lock();
        if writer.written + writer.buffer.len() as u64 == 0 {
            return Ok(None);
        }
        let sealed = writer.segment;
        self.roll(&mut writer)?;
        Ok(Some(sealed))
    }

    /// The segment being appended to, and its bytes (written or buffered).
    pub(crate) fn appending(&self) -> (u32, u64) {
        let writer = self.writer.lock();
        (writer.segment, writer.written + writer.buffer.len() as u64)
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
        let file = self.files.read()[&writer.segment].clone();
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
            files[&segment].sync_data()?;
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
        let file = self.files.read().get(&pointer.segment).cloned();
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

    /// Sets the dead bytes to a count a collection made.
    pub(crate) fn set_dead_bytes(&self, bytes: u64) {
        self.dead.store(bytes, Ordering::Relaxed);
    }

    /// The bytes of every segment, written or still buffered.
    pub(crate) fn size_bytes(&self) -> u64 {
        let writer = self.writer.lock();
        writer.closed + writer.written + writer.buffer.len() as u64
    }

    /// Holds back the removal of segments: take it before looking a pointer up, keep it until the
    /// record is read (see the module doc). Recursive: a reader may hold two.
    pub(crate) fn pin(&self) -> RwLockReadGuard<'_, ()> {
        self.removal.read_recursive()
    }

    /// The closed segments (every one but the one appended to), each with its size.
    pub(crate) fn closed_segments(&self) -> io::Result<Vec<(u32, u64)>> {
        let current = self.writer.lock().segment;
        let files: Vec<(u32, Arc<File>)> =
            self.files.read().iter().filter(|(n, _)| **n != current).map(|(n, f)| (*n, f.clone())).collect();
        files.into_iter().map(|(number, file)| Ok((number, file.metadata()?.len()))).collect()
    }

    /// Removes closed segments no pointer in the tree names any more; returns the bytes they held.
    /// The caller saw to that, and made the tree without them durable (a crash must not bring back a
    /// pointer into a removed segment).
    pub(crate) fn remove_segments(&self, segments: &[u32]) -> io::Result<u64> {
        let current = self.writer.lock().segment;
        let removed: Vec<(u32, Arc<File>)> = {
            let _no_reader = self.removal.write();
            let mut files = self.files.write();
            segments.iter().filter(|n| **n != current).filter_map(|n| files.remove(n).map(|f| (*n, f))).collect()
        };
        let mut freed = 0;
        for (number, file) in removed {
            let bytes = file.metadata()?.len();
            drop(file);
            std::fs::remove_file(segment_path(&self.dir, number))?;
            let mut writer = self.writer.lock();
            writer.closed = writer.closed.saturating_sub(bytes);
            freed += bytes;
        }
        File::open(&self.dir)?.sync_all()?;
        Ok(freed)
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
        // Values larger than a chunk, a few to a segment.
        let size = CHUNK_BYTES * 3 / 2;
        let record = (size + HEADER) as u64;
        let per_segment = (SEGMENT_BYTES / record) as usize;
        let value = |i: u8| vec![i; size];
        let pointers: Vec<Pointer> = (0..25u8).map(|i| log.append(&value(i)).expect("append")).collect();
        log.sync().expect("sync");
        assert_eq!(pointers[per_segment].segment, 1, "a record never straddles two segments");
        assert_eq!(pointers[per_segment].offset, 0);
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
        let last = pointers[24].segment;
        assert_eq!(small[499].segment, last, "the small values fit after the last large one");
        assert_eq!(next.segment, last);
        let small_bytes = 500 * (1200 + HEADER as u64);
        let in_last = (25 - per_segment * last as usize) as u64;
        assert_eq!(next.offset, in_last * record + small_bytes, "appends go on after the last record");
        log.write_out().expect("write");
        assert_eq!(log.read(next).expect("read"), b"after the reopen");
        let full_segments = u64::from(last) * per_segment as u64 * record;
        assert_eq!(log.size_bytes(), full_segments + next.offset + HEADER as u64 + 16);
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
    fn removed_segments_go_and_the_log_reopens_around_the_gap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = ValueLog::open(dir.path()).expect("open");
        let value = |i: u8| vec![i; CHUNK_BYTES];
        let pointers: Vec<Pointer> = (0..10u8).map(|i| log.append(&value(i)).expect("append")).collect();
        log.sync().expect("sync");
        let segments = log.closed_segments().expect("segments");
        let last = pointers[9].segment;
        assert_eq!(segments.iter().map(|(n, _)| *n).collect::<Vec<_>>(), (0..last).collect::<Vec<_>>());
        let size = log.size_bytes();
        let first = pointers.iter().filter(|p| p.segment == 1).count() as u64;
        // The segment appended to is never removed, whatever the caller asks.
        let freed = log.remove_segments(&[1, last]).expect("remove");
        assert_eq!(freed, first * (CHUNK_BYTES + HEADER) as u64);
        assert_eq!(log.size_bytes(), size - freed);
        assert!(!segment_path(dir.path(), 1).exists());
        let read_all = |log: &ValueLog| {
            for (i, pointer) in pointers.iter().enumerate() {
                let read = log.read(*pointer);
                if pointer.segment == 1 {
                    assert!(read.expect_err("removed").to_string().contains("no value segment 1"));
                } else {
                    assert_eq!(read.expect("read"), value(i as u8));
                }
            }
        };
        read_all(&log);
        drop(log);
        let log = ValueLog::open(dir.path()).expect("reopened with a gap");
        read_all(&log);
        assert_eq!(log.size_bytes(), size - freed);
        assert_eq!(log.append(b"next").expect("append").segment, last, "appends go on in the last segment");
    }
}
