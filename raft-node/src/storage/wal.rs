//! [`Wal`]: the Raft log's entries in segment files, written and made durable by the appending thread
//! itself (`pwrite`, then `fdatasync`), as etcd keeps its WAL.
//!
//! The entries used to live in a sled tree. sled 0.34 hands every flush to its I/O thread pool, and
//! each hand-off wakes all seven of the pool's idle threads (a `notify_all`): on a three-member cluster
//! serving one client's puts, those threads made about 30 of the ~75 context switches a put cost the
//! machine, and the kernel's task switching was a third of all CPU. Here an append is one `pwrite`
//! of its records and one `fdatasync`, in the calling thread.
//!
//! # Files
//!
//! `<dir>/<seq>-<first>.wal`, both 16 hex digits: `seq` orders the segments, `first` is the index of
//! the first entry the segment holds. A segment is allocated [`SEGMENT_BYTES`] when it is created (so
//! an append's `fdatasync` need not write the file's size) and takes appends until it has passed that
//! size. Each record is
//!
//! ```text
//! length of the payload (u32 LE) | CRC-32C of the index and the payload (u32 LE) | index (u64 LE) | payload
//! ```
//!
//! and a zero length (the allocated space reads as zeros) ends a segment's records.
//!
//! # What a crash can leave, and what opening does with it
//!
//! - Only a segment created by this process takes appends. Opening seals every segment, cuts each to
//!   its last whole record (a record with a bad length, index or checksum ends it) and removes empty
//!   ones; the next append starts a new segment. So a torn record, or whatever a crash left after it,
//!   is never followed by newer records in the same file.
//! - An append that moves to a new segment first syncs the one it leaves, so a segment holds records
//!   only once every earlier segment's records are durable: a torn record can only be in the last one.
//! - A truncation removes the later segments (newest first) and syncs the directory before it cuts
//!   the segment holding the index and syncs it; a crash part way leaves the log as it was or a prefix
//!   of it, never a hole. The next append starts a new segment.
//! - Segments are kept in `seq` order; one may start after the previous one's end (an append after
//!   a snapshot install, below purged entries), never before it: that is refused as corruption.
//! - The directory is synced after segments are created or removed.
//!
//! # Record ends beside each sealed segment
//!
//! Opening needs where each record ends. Reading every record's header costs one small read per entry:
//! after a 10 GiB load the log held 46k entries in 160 segments, out of the page cache, and opening
//! it took 11.7 s. So when appends leave a segment (it is full and synced), the ends of its records
//! go to `<seq>-<first>.ends` beside it, on a thread of its own and unsynced:
//!
//! ```text
//! "KVENDS1\0" | first index (u64 LE) | count (u64 LE) | each record's end (u32 LE) | CRC-32C of all before it (u32 LE)
//! ```
//!
//! Opening takes a segment's ends from that file only if it is whole (its checksum), names the
//! segment's first index, ends within the segment file, the last record it names starts with that
//! record's own header and no record follows it (the two reads it costs); else it reads the headers
//! as before. A segment is
//! never appended to once sealed; a truncation that cuts one removes its ends file first (a cut file
//! is shorter than the ends an older file names, which opening refuses too), and removing a segment
//! removes its ends file first. Opening removes ends files whose segment is gone.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kv_api::hash::Crc32c;
use parking_lot::Mutex;

/// The size a segment is allocated, and past which appends move to a new one.
pub(crate) const SEGMENT_BYTES: u64 = 64 << 20;
/// A record's header: length, checksum, index.
const HEADER: usize = 16;

/// The segment files of one member's Raft log (see the module doc).
#[derive(Debug)]
pub(crate) struct Wal {
    dir: PathBuf,
    segments: Mutex<Vec<Segment>>,
    /// [`SEGMENT_BYTES`], smaller in tests.
    segment_bytes: u64,
    /// The first index not purged: a segment holding purged entries stays until all of its are.
    floor: AtomicU64,
    /// The `seq` of the next segment: past every segment found or created, so names never repeat.
    next_seq: AtomicU64,
}

#[derive(Debug)]
struct Segment {
    /// The index of its first entry.
    first: u64,
    file: Arc<File>,
    path: PathBuf,
    /// `ends[i]`: the offset just after entry `first + i`'s record.
    ends: Vec<u32>,
    /// Created by this process and not cut since: appends may go on in it.
    appendable: bool,
}

impl Segment {
    /// The index after its last entry.
    fn next(&self) -> u64 {
        self.first + self.ends.len() as u64
    }

    fn end(&self) -> u64 {
        self.ends.last().map_or(0, |end| u64::from(*end))
    }

    /// Where the record of `index` (which it holds) starts.
    fn start_of(&self, index: u64) -> u64 {
        match (index - self.first) as usize {
            0 => 0,
            i => u64::from(self.ends[i - 1]),
        }
    }
}

/// A file to sync before an append counts as durable.
pub(crate) type ToSync = Arc<File>;

fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn checksum(index: u64, payload: &[u8]) -> u32 {
    let mut crc = Crc32c::default();
    crc.update(&index.to_le_bytes());
    crc.update(payload);
    crc.finish()
}

/// Appends the record of `index` to `buf`.
fn encode_record(buf: &mut Vec<u8>, index: u64, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len()).map_err(|_| corrupt(format!("log entry {index} too large")))?;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&checksum(index, payload).to_le_bytes());
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(payload);
    Ok(())
}

/// The record of `index` at the start of `bytes`, checked: its payload and length.
fn decode_record(bytes: &[u8], index: u64) -> Option<(&[u8], usize)> {
    let header = bytes.get(..HEADER)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let at = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let payload = bytes.get(HEADER..HEADER + len)?;
    (len > 0 && at == index && checksum(index, payload) == crc).then_some((payload, HEADER + len))
}

/// `<seq>-<first>.wal` parsed.
fn parse_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".wal")?;
    let (seq, first) = stem.split_once('-')?;
    Some((u64::from_str_radix(seq, 16).ok()?, u64::from_str_radix(first, 16).ok()?))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads into `bytes` from `offset` until it is full or the file ends; how many bytes were read.
fn read_until_end(file: &File, bytes: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut read = 0;
    while read < bytes.len() {
        match file.read_at(&mut bytes[read..], offset + read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(read)
}

/// The ends of the whole records of the segment in `file` whose first entry is `first`, read from the
/// start; the first record that is not whole, or not the next index, ends them. With `verify`, every
/// payload is read and checked against its checksum; without, only the headers are read (a segment
/// followed by another was synced whole before the next one took a record).
fn scan(file: &File, first: u64, verify: bool) -> io::Result<Vec<u32>> {
    let len = file.metadata()?.len();
    // Small reads when skipping payloads: a header is all that is needed of a record.
    let capacity = if verify { 1 << 20 } else { 4 << 10 };
    let mut reader = BufReader::with_capacity(capacity, file);
    let (mut ends, mut offset, mut record) = (Vec::new(), 0u64, Vec::new());
    loop {
        let mut header = [0u8; HEADER];
        if offset + HEADER as u64 > len || reader.read_exact(&mut header).is_err() {
            break;
        }
        let size = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as u64;
        let index = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        let end = offset + HEADER as u64 + size;
        if size == 0 || end > len || end > u64::from(u32::MAX) || index != first + ends.len() as u64 {
            break;
        }
        if verify {
            record.clear();
            record.extend_from_slice(&header);
            record.resize(HEADER + size as usize, 0);
            if reader.read_exact(&mut record[HEADER..]).is_err() || decode_record(&record, index).is_none() {
                break;
            }
        } else {
            reader.seek_relative(size as i64)?;
        }
        offset = end;
        ends.push(end as u32);
    }
    Ok(ends)
}

/// The first bytes of an ends file.
const ENDS_MAGIC: &[u8; 8] = b"KVENDS1\0";

/// The ends file of the segment at `segment` (see the module doc).
fn ends_path(segment: &Path) -> PathBuf {
    segment.with_extension("ends")
}

/// An ends file's bytes for a segment whose first entry is `first`.
fn encode_ends(first: u64, ends: &[u32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(28 + 4 * ends.len());
    bytes.extend_from_slice(ENDS_MAGIC);
    bytes.extend_from_slice(&first.to_le_bytes());
    bytes.extend_from_slice(&(ends.len() as u64).to_le_bytes());
    for end in ends {
        bytes.extend_from_slice(&end.to_le_bytes());
    }
    let mut crc = Crc32c::default();
    crc.update(&bytes);
    bytes.extend_from_slice(&crc.finish().to_le_bytes());
    bytes
}

/// The ends an ends file names for the segment in `file` (first entry `first`), if they can be
/// trusted: the file is whole, names `first`, its ends grow and lie within the segment, the last
/// record's header is where they say and no record follows it. `None` sends the caller back to [`scan`].
fn read_ends(path: &Path, file: &File, first: u64) -> Option<Vec<u32>> {
    let bytes = std::fs::read(path).ok()?;
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    let mut check = Crc32c::default();
    check.update(body);
    if crc != check.finish().to_le_bytes() || body.len() < 24 || &body[..8] != ENDS_MAGIC {
        return None;
    }
    let named_first = u64::from_le_bytes(body[8..16].try_into().ok()?);
    let count = usize::try_from(u64::from_le_bytes(body[16..24].try_into().ok()?)).ok()?;
    let list = &body[24..];
    if named_first != first || count == 0 || list.len() != count.checked_mul(4)? {
        return None;
    }
    let ends: Vec<u32> = list.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
    let grows = ends.windows(2).all(|pair| pair[0] < pair[1]) && u64::from(ends[0]) > HEADER as u64;
    let last_end = u64::from(*ends.last()?);
    if !grows || file.metadata().ok()?.len() < last_end {
        return None;
    }
    let last_start = if count == 1 { 0 } else { u64::from(ends[count - 2]) };
    let mut header = [0u8; HEADER];
    file.read_exact_at(&mut header, last_start).ok()?;
    let size = u64::from(u32::from_le_bytes(header[0..4].try_into().ok()?));
    let index = u64::from_le_bytes(header[8..16].try_into().ok()?);
    // And no record after it: the file ends there, or its allocated space reads as a zero length.
    let mut after = [0u8; 4];
    let nothing_after = read_until_end(file, &mut after, last_end).ok()? < 4 || after == [0; 4];
    (index == first + count as u64 - 1 && last_start + HEADER as u64 + size == last_end && nothing_after)
        .then_some(ends)
}

/// Writes the ends file of a segment just sealed, on a thread of its own (an ends file that is missing
/// or torn only makes the next opening read that segment's headers).
fn write_ends_later(segment: &Segment) {
    let (path, bytes) = (ends_path(&segment.path), encode_ends(segment.first, &segment.ends));
    let spawned = std::thread::Builder::new().name("wal-ends".into()).spawn(move || {
        if let Err(err) = std::fs::write(&path, bytes) {
            tracing::debug!(%err, path = %path.display(), "could not write a Raft log segment's record ends");
        }
    });
    if let Err(err) = spawned {
        tracing::debug!(%err, "could not start the thread that writes a segment's record ends");
    }
}

/// Removes the ends file of the segment at `segment`, if there is one.
fn remove_ends(segment: &Path) -> io::Result<()> {
    match std::fs::remove_file(ends_path(segment)) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

impl Wal {
    /// Opens the segments in `dir` (created if missing), sealing each at its last whole record.
    pub(crate) fn open(dir: &Path) -> io::Result<Self> {
        Self::open_with(dir, SEGMENT_BYTES)
    }

    /// [`Wal::open`] with segments of `segment_bytes`.
    pub(crate) fn open_with(dir: &Path, segment_bytes: u64) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        let mut ends_files = Vec::new();
        for item in std::fs::read_dir(dir)? {
            let item = item?;
            let path = item.path();
            if path.extension().is_some_and(|ext| ext == "ends") {
                ends_files.push(path);
            } else if let Some((seq, first)) = item.file_name().to_str().and_then(parse_name) {
                found.push((seq, first, path));
            }
        }
        for orphan in ends_files.iter().filter(|path| !path.with_extension("wal").exists()) {
            std::fs::remove_file(orphan)?;
        }
        found.sort();
        let next_seq = found.last().map_or(0, |(seq, _, _)| seq + 1);
        let mut segments: Vec<Segment> = Vec::new();
        let mut removed = false;
        let count = found.len();
        for (n, (_, first, path)) in found.into_iter().enumerate() {
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            // Only the last segment can hold a torn record; the one before it is checked too, in case
            // the last was created just before a crash.
            let verify = n + 2 >= count;
            let known = if verify { None } else { read_ends(&ends_path(&path), &file, first) };
            let from_file = known.is_some();
            let ends = match known {
                Some(ends) => ends,
                None => scan(&file, first, verify)?,
            };
            let segment = Segment { first, file: Arc::new(file), path, ends, appendable: false };
            if let Some(previous) = segments.last() {
                if segment.first < previous.next() {
                    return Err(corrupt(format!(
                        "Raft log segment {} starts at entry {} inside the previous segment (entries up to {})",
                        segment.path.display(),
                        segment.first,
                        previous.next().saturating_sub(1)
                    )));
                }
            }
            if segment.ends.is_empty() {
                remove_ends(&segment.path)?;
                std::fs::remove_file(&segment.path)?;
                removed = true;
                continue;
            }
            if segment.file.metadata()?.len() > segment.end() {
                segment.file.set_len(segment.end())?;
                segment.file.sync_all()?;
            }
            if !from_file {
                write_ends_later(&segment);
            }
            segments.push(segment);
        }
        if removed {
            sync_dir(dir)?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            segments: Mutex::new(segments),
            segment_bytes,
            floor: AtomicU64::new(0),
            next_seq: AtomicU64::new(next_seq),
        })
    }

    /// The indexes of the first and the last entries held (and not purged), if any.
    pub(crate) fn bounds(&self) -> Option<(u64, u64)> {
        let segments = self.segments.lock();
        let first = segments.first()?.first.max(self.floor.load(Ordering::Relaxed));
        Some((first, segments.last()?.next() - 1))
    }

    /// The end of the longest run of entries from `start` (the log's, up to `end`) whose records take
    /// `budget` bytes at most, one entry at least: an append to a follower far behind is cut where it
    /// would go over. Entries the log does not hold end the run; an empty range stays empty.
    pub(crate) fn end_within(&self, start: u64, end: u64, budget: u64) -> u64 {
        if start >= end {
            return end;
        }
        let segments = self.segments.lock();
        let (mut at, mut left) = (start, budget);
        for segment in segments.iter().filter(|segment| segment.next() > start && segment.first < end) {
            if at != start.max(segment.first) {
                break;
            }
            let base = segment.start_of(at);
            let (from, to) = ((at - segment.first) as usize, (end.min(segment.next()) - segment.first) as usize);
            // Records `at..at + n` end at `ends[from + n - 1]`; the longest `n` within what is left.
            let fit = segment.ends[from..to].partition_point(|&record_end| u64::from(record_end) - base <= left);
            let taken = if fit == 0 && at == start { 1 } else { fit };
            at += taken as u64;
            if taken < to - from {
                break;
            }
            left = left.saturating_sub(u64::from(segment.ends[from + taken - 1]) - base);
        }
        at.max(start + 1)
    }

    /// Whether `entries` would all go into the current segment, without moving to a new one (which
    /// allocates its file: tens of milliseconds under write-back). Conservative: `false` may still fit.
    pub(crate) fn fits(&self, entries: &[(u64, Vec<u8>)]) -> bool {
        let segments = self.segments.lock();
        let Some(last) = segments.last() else { return false };
        let bytes: u64 = entries.iter().map(|(_, payload)| (HEADER + payload.len()) as u64).sum();
        last.appendable
            && entries.first().is_some_and(|(index, _)| *index == last.next())
            && last.end() + bytes < self.segment_bytes
    }

    /// Writes the records of `entries` (index, encoded entry; consecutive indexes, starting at the
    /// log's next one or after a gap) and returns the files to sync before they count as durable.
    pub(crate) fn append(&self, entries: &[(u64, Vec<u8>)], sync: bool) -> io::Result<Vec<ToSync>> {
        let mut segments = self.segments.lock();
        let mut to_sync: Vec<ToSync> = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut pending_ends: Vec<u32> = Vec::new();
        for (index, payload) in entries {
            let last = segments.last();
            if let Some(last) = last {
                if *index < last.next() + pending_ends.len() as u64 {
                    return Err(corrupt(format!(
                        "an append of log entry {index} over entries up to {}",
                        last.next() + pending_ends.len() as u64 - 1
                    )));
                }
            }
            let fits = last.is_some_and(|last| {
                let end = pending_ends.last().map_or(last.end(), |end| u64::from(*end));
                last.appendable && last.next() + pending_ends.len() as u64 == *index && end < self.segment_bytes
            });
            if !fits {
                Self::write_pending(&mut segments, &mut pending, &mut pending_ends, &mut to_sync)?;
                if sync {
                    // Every earlier segment's records are durable before the next one holds any.
                    for file in to_sync.drain(..) {
                        file.sync_data()?;
                    }
                }
                if let Some(left) = segments.last().filter(|last| last.appendable && !last.ends.is_empty()) {
                    write_ends_later(left);
                }
                let segment = self.create(self.next_seq.fetch_add(1, Ordering::Relaxed), *index)?;
                segments.push(segment);
            }
            let last = segments.last().expect("a segment to append to");
            let base = pending_ends.last().map_or(last.end(), |end| u64::from(*end));
            encode_record(&mut pending, *index, payload)?;
            let end = base + (HEADER + payload.len()) as u64;
            let end = u32::try_from(end).map_err(|_| corrupt(format!("log entry {index} too large")))?;
            pending_ends.push(end);
        }
        Self::write_pending(&mut segments, &mut pending, &mut pending_ends, &mut to_sync)?;
        Ok(to_sync)
    }

    /// Writes `pending` (records for the last segment) after its end, then counts them in it.
    fn write_pending(
        segments: &mut [Segment],
        pending: &mut Vec<u8>,
        pending_ends: &mut Vec<u32>,
        to_sync: &mut Vec<ToSync>,
    ) -> io::Result<()> {
        if pending_ends.is_empty() {
            return Ok(());
        }
        let last = segments.last_mut().expect("a segment to append to");
        last.file.write_all_at(pending, last.end())?;
        last.ends.append(pending_ends);
        pending.clear();
        if !to_sync.iter().any(|file| Arc::ptr_eq(file, &last.file)) {
            to_sync.push(last.file.clone());
        }
        Ok(())
    }

    /// A new, empty segment whose first entry will be `first`, its space allocated and its name durable.
    fn create(&self, seq: u64, first: u64) -> io::Result<Segment> {
        let path = self.dir.join(format!("{seq:016x}-{first:016x}.wal"));
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        if let Err(err) = nix::fcntl::posix_fallocate(&file, 0, self.segment_bytes as i64) {
            // Appends still work; their syncs may cost more.
            tracing::debug!(%err, path = %path.display(), "could not allocate a Raft log segment");
        }
        file.sync_all()?;
        sync_dir(&self.dir)?;
        Ok(Segment { first, file: Arc::new(file), path, ends: Vec::new(), appendable: true })
    }

    /// The encoded entries with indexes in `[start, end)` that the log holds, in order.
    pub(crate) fn read(&self, start: u64, end: u64) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let start = start.max(self.floor.load(Ordering::Relaxed));
        if start >= end {
            return Ok(Vec::new());
        }
        // Where to read, found under the lock; read after it (a segment removed meanwhile stays
        // readable through its open file).
        let pieces: Vec<(Arc<File>, u64, u64, Vec<u32>)> = {
            let segments = self.segments.lock();
            segments
                .iter()
                .filter(|segment| segment.first < end && segment.next() > start)
                .map(|segment| {
                    let (from, to) = (start.max(segment.first), end.min(segment.next()));
                    let ends = segment.ends[(from - segment.first) as usize..(to - segment.first) as usize].to_vec();
                    (segment.file.clone(), from, segment.start_of(from), ends)
                })
                .collect()
        };
        let mut entries = Vec::new();
        for (file, from, offset, ends) in pieces {
            let mut bytes = vec![0; (u64::from(*ends.last().expect("a piece holds entries")) - offset) as usize];
            let read = read_until_end(&file, &mut bytes, offset)?;
            let mut at = 0;
            for (index, end) in (from..).zip(&ends) {
                // Cut by a truncation since the lock was released: the entries from here are gone.
                if u64::from(*end) - offset > read as u64 {
                    return Ok(entries);
                }
                let (payload, size) = decode_record(&bytes[at..], index)
                    .ok_or_else(|| corrupt(format!("Raft log entry {index} does not match its checksum")))?;
                entries.push((index, payload.to_vec()));
                at += size;
            }
        }
        Ok(entries)
    }

    /// Removes the entry `index` and every later one (see the module doc for the order).
    pub(crate) fn truncate(&self, index: u64) -> io::Result<()> {
        let mut segments = self.segments.lock();
        let mut removed = false;
        while segments.last().is_some_and(|last| last.first >= index) {
            let last = segments.pop().expect("a last segment");
            remove_ends(&last.path)?;
            std::fs::remove_file(&last.path)?;
            removed = true;
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        if let Some(last) = segments.last_mut() {
            if last.next() > index {
                let keep = (index - last.first) as usize;
                let cut = last.start_of(index);
                remove_ends(&last.path)?;
                last.file.set_len(cut)?;
                last.file.sync_all()?;
                last.ends.truncate(keep);
                last.appendable = false;
            }
        }
        Ok(())
    }

    /// Purges the entries up to `index`: they are no longer read, and the segments holding only such
    /// entries are removed (the caller has made the purge durable).
    pub(crate) fn purge(&self, index: u64) -> io::Result<()> {
        let mut segments = self.segments.lock();
        self.floor.fetch_max(index + 1, Ordering::Relaxed);
        let purged = segments.iter().take_while(|segment| segment.next() <= index + 1).count();
        if purged == 0 {
            return Ok(());
        }
        for segment in segments.drain(..purged) {
            remove_ends(&segment.path)?;
            std::fs::remove_file(&segment.path)?;
        }
        sync_dir(&self.dir)
    }
}

#[cfg(test)]
#[path = "wal_test.rs"]
mod tests;
