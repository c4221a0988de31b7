//! The snapshot format, read and written an entry at a time, and the file type openraft moves.
//!
//! A snapshot is the whole MVCC store ([`kv_api::MvccStore::export_each`], every bucket including
//! `Meta`) with the applied log id and membership it reflects. On disk and on the wire it is one
//! bincode value, a versioned envelope `(version, last_applied, membership, entries)` whose last field
//! is a sequence of `(bucket tag, key, value)`. It is written entry by entry into a file, the
//! sequence's length first reserved at its widest (bincode's 9-byte form) and filled in at the end, so
//! that neither building, sending nor installing a snapshot holds it in memory, and so that members of
//! earlier versions (which decoded the envelope whole) and later ones read each other's snapshots.
//!
//! [`current`](crate::storage::current_snapshot) keeps the member's current snapshot file.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use kv_api::{Bucket, Record};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::storage::bincode_config;
use crate::typ::{LogId, StoredMembership};

const FORMAT_VERSION: u32 = 1;
/// bincode's marker of a varint written as 8 little-endian bytes (its widest form for a length).
const WIDE_VARINT: u8 = 253;
/// Buffered bytes per file when reading and writing: the only memory a snapshot takes beside one entry.
const IO_BUFFER: usize = 1 << 20;

/// What precedes the entries.
#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

fn invalid(err: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err.to_string())
}

/// Writes a snapshot file: [`SnapshotWriter::push`] each entry, then [`SnapshotWriter::finish`].
pub(crate) struct SnapshotWriter {
    out: BufWriter<File>,
    /// Where the entry count goes, and how many entries were pushed.
    count_at: u64,
    count: u64,
}

impl SnapshotWriter {
    /// Starts a snapshot of the store at `last_applied` with `membership` in `file` (empty).
    pub(crate) fn new(file: File, last_applied: Option<LogId>, membership: StoredMembership) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(IO_BUFFER, file);
        let header = Header { version: FORMAT_VERSION, last_applied, membership };
        let count_at = bincode::serde::encode_into_std_write(&header, &mut out, bincode_config()).map_err(invalid)?;
        out.write_all(&[WIDE_VARINT])?;
        out.write_all(&0u64.to_le_bytes())?;
        Ok(Self { out, count_at: count_at as u64, count: 0 })
    }

    pub(crate) fn push(&mut self, bucket: Bucket, key: &[u8], value: &[u8]) -> io::Result<()> {
        bincode::serde::encode_into_std_write((bucket.tag(), key, value), &mut self.out, bincode_config())
            .map_err(invalid)?;
        self.count += 1;
        Ok(())
    }

    /// Writes the entry count and makes the file durable; returns how many entries it holds.
    pub(crate) fn finish(self) -> io::Result<u64> {
        let mut file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(self.count_at + 1))?;
        file.write_all(&self.count.to_le_bytes())?;
        file.sync_all()?;
        Ok(self.count)
    }
}

/// Reads a snapshot file: its header, then its entries as an iterator.
pub(crate) struct SnapshotReader {
    input: BufReader<File>,
    pub(crate) last_applied: Option<LogId>,
    pub(crate) membership: StoredMembership,
    /// Entries still to read; `None` once the end was checked or an error was read.
    remaining: Option<u64>,
}

impl SnapshotReader {
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let mut input = BufReader::with_capacity(IO_BUFFER, File::open(path)?);
        let header: Header = bincode::serde::decode_from_std_read(&mut input, bincode_config()).map_err(invalid)?;
        if header.version != FORMAT_VERSION {
            return Err(invalid(format!("unknown snapshot format version {}", header.version)));
        }
        let remaining: u64 = bincode::decode_from_std_read(&mut input, bincode_config()).map_err(invalid)?;
        Ok(Self { input, last_applied: header.last_applied, membership: header.membership, remaining: Some(remaining) })
    }

    fn next_entry(&mut self) -> io::Result<Record> {
        let (tag, key, value): (u8, Vec<u8>, Vec<u8>) =
            bincode::serde::decode_from_std_read(&mut self.input, bincode_config()).map_err(invalid)?;
        match Bucket::ALL.into_iter().find(|b| b.tag() == tag) {
            Some(bucket) => Ok((bucket, key, value)),
            None => Err(invalid(format!("unknown bucket tag {tag} in snapshot"))),
        }
    }
}

impl Iterator for SnapshotReader {
    type Item = io::Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        let remaining = self.remaining?;
        let item = if remaining == 0 {
            // A longer file is not a snapshot this member wrote or received whole.
            match self.input.read(&mut [0u8]) {
                Ok(0) => None,
                Ok(_) => Some(Err(invalid("trailing bytes after the snapshot's entries"))),
                Err(err) => Some(Err(err)),
            }
        } else {
            Some(self.next_entry())
        };
        self.remaining = match &item {
            Some(Ok(_)) => Some(remaining - 1),
            _ => None,
        };
        item
    }
}

/// openraft's snapshot data: an open snapshot file and its path (an install takes the file it received
/// as the member's current snapshot, by name).
#[derive(Debug)]
pub struct SnapshotFile {
    file: tokio::fs::File,
    path: PathBuf,
}

impl SnapshotFile {
    pub(crate) fn new(file: File, path: PathBuf) -> Self {
        Self { file: tokio::fs::File::from_std(file), path }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl AsyncRead for SnapshotFile {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.file).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(mut self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.file).start_seek(position)
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Pin::new(&mut self.file).poll_complete(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{decode, encode};

    /// The envelope as members before streamed snapshots encoded and decoded it, whole.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Envelope {
        version: u32,
        last_applied: Option<LogId>,
        membership: StoredMembership,
        entries: Vec<(u8, Vec<u8>, Vec<u8>)>,
    }

    fn entries(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| {
                let bucket = Bucket::ALL[i % Bucket::ALL.len()];
                (bucket, format!("key-{i}").into_bytes(), vec![(i % 251) as u8; i % 700])
            })
            .collect()
    }

    fn applied() -> Option<LogId> {
        Some(openraft::LogId::new(openraft::CommittedLeaderId::new(3, 1), 42))
    }

    fn write_file(dir: &Path, content: &[Record]) -> PathBuf {
        let path = dir.join("s.snap");
        let mut writer =
            SnapshotWriter::new(File::create(&path).expect("create"), applied(), StoredMembership::default())
                .expect("header");
        for (bucket, key, value) in content {
            writer.push(*bucket, key, value).expect("push");
        }
        assert_eq!(writer.finish().expect("finish"), content.len() as u64);
        path
    }

    #[test]
    fn entries_read_back_as_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in [0, 1, 3000] {
            let content = entries(n);
            let path = write_file(dir.path(), &content);
            let reader = SnapshotReader::open(&path).expect("open");
            assert_eq!((reader.last_applied, &reader.membership), (applied(), &StoredMembership::default()));
            let read: Vec<Record> = reader.collect::<io::Result<_>>().expect("read");
            assert_eq!(read, content);
        }
    }

    #[test]
    fn members_before_and_after_streaming_read_each_others_snapshots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let content = entries(500);
        let tagged: Vec<_> = content.iter().map(|(b, k, v)| (b.tag(), k.clone(), v.clone())).collect();
        let whole = Envelope {
            version: FORMAT_VERSION,
            last_applied: applied(),
            membership: StoredMembership::default(),
            entries: tagged,
        };
        // A streamed file, decoded whole as an earlier member does.
        let streamed = std::fs::read(write_file(dir.path(), &content)).expect("read");
        assert_eq!(decode::<Envelope>(&streamed).expect("decode whole"), whole);
        // An earlier member's snapshot, read entry by entry.
        let path = dir.path().join("old.snap");
        std::fs::write(&path, encode(&whole).expect("encode")).expect("write");
        let read: Vec<Record> = SnapshotReader::open(&path).expect("open").collect::<io::Result<_>>().expect("read");
        assert_eq!(read, content);
    }

    #[test]
    fn a_cut_or_padded_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(dir.path(), &entries(100));
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 10]).expect("cut");
        let read: io::Result<Vec<Record>> = SnapshotReader::open(&path).expect("open").collect();
        assert!(read.is_err(), "a cut file reads as an error");
        std::fs::write(&path, [bytes.as_slice(), b"x"].concat()).expect("pad");
        let err = SnapshotReader::open(&path).expect("open").collect::<io::Result<Vec<_>>>().expect_err("padded");
        assert!(err.to_string().contains("trailing bytes"), "{err}");
        // An unknown bucket tag.
        let mut bytes =
            std::fs::read(write_file(dir.path(), &[(Bucket::Key, b"k".to_vec(), b"v".to_vec())])).expect("read");
        let tag_at = bytes.len() - 5; // tag, key length, key, value length, value
        bytes[tag_at] = 200;
        std::fs::write(&path, bytes).expect("write");
        let err = SnapshotReader::open(&path).expect("open").collect::<io::Result<Vec<_>>>().expect_err("bad tag");
        assert!(err.to_string().contains("unknown bucket tag 200"), "{err}");
    }
}
