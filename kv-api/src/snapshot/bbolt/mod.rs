//! bbolt's file format, which etcd's backend and its snapshot files use: a [`Writer`] that lays sorted
//! buckets out in pages, and a [`Reader`] that walks them back.
//!
//! # The format
//!
//! A file is a sequence of pages of one size (4096 bytes here). Integers are in the machine's byte
//! order, little-endian on every machine etcd ships for. Page `n` starts at byte `n * page_size`; a
//! page whose `overflow` is `k` spans `k + 1` pages, with one header.
//!
//! - Every page starts with a 16-byte header: `id` u64, `flags` u16 (branch 0x01, leaf 0x02, meta 0x04,
//!   freelist 0x10), `count` u16, `overflow` u32.
//! - Pages 0 and 1 hold the two meta records (64 bytes after the header): magic `0xED0CDAED`, version 2,
//!   page size, flags, the root bucket (its root page and sequence), the freelist page, the high-water
//!   page id (pages below it are in use or free), the transaction id and an FNV-1a-64 checksum of the
//!   56 bytes before it. A reader takes the valid meta with the higher transaction id.
//! - A leaf page holds `count` 16-byte elements (`flags` u32, `pos` u32, `ksize` u32, `vsize` u32), then
//!   the keys and values; `pos` counts from the element's own address to its key, the value follows the
//!   key. An element with flag 0x01 is a nested bucket: its value is the bucket's root page and sequence
//!   (16 bytes), and a root of 0 means the bucket's own leaf page follows inline in the value.
//! - A branch page holds `count` 16-byte elements (`pos` u32, `ksize` u32, child page id u64), each
//!   keyed by the first key of its child.
//! - The freelist page lists free page ids (`count` u64s; a count of 0xFFFF means the first u64 holds it).
//!
//! etcd's buckets (`key`, `meta`, ...) are the nested buckets of the root bucket.
//!
//! # Writing
//!
//! The writer streams: a bucket's entries arrive in key order and fill leaf pages that are written as
//! they fill, keeping in memory only each page's first key. Closing a bucket writes the branch pages
//! above its leaves. Pages 0 to 2 (the metas and an empty freelist) are written last, once the root is
//! known. Every page below the high-water mark is reachable, so bbolt's own consistency check (`tx.Check`,
//! which `etcdutl snapshot status` runs) finds nothing to report.
//!
//! # Reading
//!
//! The reader reads pages on demand and checks every bound it relies on (page ids below the high-water
//! mark, elements inside their page, a bounded tree depth), so a damaged or hostile file gets an error
//! naming the page, never a panic.

use std::io;

mod reader;
mod writer;

pub use reader::{BucketRoot, Reader};
pub use writer::Writer;

/// The page size we write, the default of bbolt on Linux.
pub const PAGE_SIZE: usize = 4096;
const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
const PAGE_HEADER: usize = 16;
/// Leaf and branch elements are both 16 bytes.
const ELEMENT: usize = 16;
/// The meta record's bytes covered by its checksum (all but the checksum).
const META_SUMMED: usize = 56;
/// A nested bucket's value: its root page id and sequence.
const BUCKET_HEADER: usize = 16;
const BRANCH_PAGE: u16 = 0x01;
const LEAF_PAGE: u16 = 0x02;
const META_PAGE: u16 = 0x04;
const FREELIST_PAGE: u16 = 0x10;
/// A leaf element that is a nested bucket.
pub const BUCKET_FLAG: u32 = 0x01;
/// Deeper trees than this are not B+trees of any real file but a loop in a damaged one.
const MAX_DEPTH: usize = 64;
const FIRST_DATA_PAGE: u64 = 3;
const FREELIST_PGID: u64 = 2;

/// Why a file cannot be read as a bbolt database. The first three are bbolt's own texts.
#[derive(Debug, thiserror::Error)]
pub enum BoltError {
    #[error("invalid database")]
    Invalid,
    #[error("version mismatch")]
    VersionMismatch,
    #[error("checksum error")]
    Checksum,
    #[error("invalid database: {have} bytes, but its pages need {want} (truncated?)")]
    Truncated { have: u64, want: u64 },
    #[error("invalid database: page {page}: {what}")]
    Damaged { page: u64, what: String },
    #[error(transparent)]
    Io(#[from] io::Error),
}

fn damaged(page: u64, what: impl Into<String>) -> BoltError {
    BoltError::Damaged { page, what: what.into() }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The meta record a reader goes by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub page_size: usize,
    /// Root page of the root bucket.
    pub root: u64,
    pub freelist: u64,
    /// Pages below this id are in use or free: the database is `high_water * page_size` bytes.
    pub high_water: u64,
    pub txid: u64,
}

impl Meta {
    /// The database's size in bytes (bbolt's `tx.Size()`).
    pub fn size(&self) -> u64 {
        self.high_water * self.page_size as u64
    }

    fn encode(&self, page: &mut [u8]) {
        let m = PAGE_HEADER;
        page[m..m + 4].copy_from_slice(&MAGIC.to_le_bytes());
        page[m + 4..m + 8].copy_from_slice(&VERSION.to_le_bytes());
        page[m + 8..m + 12].copy_from_slice(&(self.page_size as u32).to_le_bytes());
        // flags (4 bytes) and the root bucket's sequence (8 bytes at +24) stay zero.
        page[m + 16..m + 24].copy_from_slice(&self.root.to_le_bytes());
        page[m + 32..m + 40].copy_from_slice(&self.freelist.to_le_bytes());
        page[m + 40..m + 48].copy_from_slice(&self.high_water.to_le_bytes());
        page[m + 48..m + 56].copy_from_slice(&self.txid.to_le_bytes());
        let sum = fnv1a64(&page[m..m + META_SUMMED]);
        page[m + 56..m + 64].copy_from_slice(&sum.to_le_bytes());
    }

    /// Decodes and validates the meta record at the start of `bytes` (bbolt's `meta.validate`).
    fn decode(bytes: &[u8]) -> Result<Self, BoltError> {
        if bytes.len() < META_SUMMED + 8 || u32_at(bytes, 0) != MAGIC {
            return Err(BoltError::Invalid);
        }
        if u32_at(bytes, 4) != VERSION {
            return Err(BoltError::VersionMismatch);
        }
        if u64_at(bytes, META_SUMMED) != fnv1a64(&bytes[..META_SUMMED]) {
            return Err(BoltError::Checksum);
        }
        Ok(Self {
            page_size: u32_at(bytes, 8) as usize,
            root: u64_at(bytes, 16),
            freelist: u64_at(bytes, 32),
            high_water: u64_at(bytes, 40),
            txid: u64_at(bytes, 48),
        })
    }
}

fn page_header(page: &mut [u8], id: u64, flags: u16, count: usize, overflow: usize) {
    page[0..8].copy_from_slice(&id.to_le_bytes());
    page[8..10].copy_from_slice(&flags.to_le_bytes());
    page[10..12].copy_from_slice(&(count as u16).to_le_bytes());
    page[12..16].copy_from_slice(&(overflow as u32).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::os::unix::fs::FileExt;

    use super::*;

    type Buckets = Vec<(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;

    fn write(buckets: &Buckets) -> Vec<u8> {
        let mut writer = Writer::new(Cursor::new(Vec::new())).expect("new");
        for (name, entries) in buckets {
            writer.begin_bucket(name).expect("begin");
            for (key, value) in entries {
                writer.put(key, value).expect("put");
            }
        }
        let (out, size) = writer.finish().expect("finish");
        let bytes = out.into_inner();
        assert_eq!(bytes.len() as u64, size);
        bytes
    }

    fn read(bytes: &[u8]) -> Result<Buckets, BoltError> {
        let file = tempfile::tempfile().expect("tempfile");
        file.write_all_at(bytes, 0).expect("write");
        let reader = Reader::open(file, bytes.len() as u64)?;
        let mut out = Vec::new();
        for (name, root) in reader.buckets()? {
            let mut entries = Vec::new();
            reader.each(&root, &mut |key: &[u8], value: &[u8], _| -> Result<(), BoltError> {
                entries.push((key.to_vec(), value.to_vec()));
                Ok(())
            })?;
            out.push((name, entries));
        }
        Ok(out)
    }

    #[test]
    fn what_is_written_reads_back_across_branches_and_overflow_pages() {
        let many: Vec<(Vec<u8>, Vec<u8>)> =
            (0..20_000u64).map(|i| (i.to_be_bytes().to_vec(), format!("value {i}").into_bytes())).collect();
        let big = vec![(b"big".to_vec(), vec![7; 3 * PAGE_SIZE + 5]), (b"small".to_vec(), b"s".to_vec())];
        let buckets: Buckets = vec![(b"a".to_vec(), Vec::new()), (b"key".to_vec(), many), (b"meta".to_vec(), big)];
        let bytes = write(&buckets);
        assert_eq!(bytes.len() % PAGE_SIZE, 0);
        assert_eq!(read(&bytes).expect("reads"), buckets);
        // Buckets come back in name order, whatever order they were written in.
        let reversed: Buckets = buckets.iter().rev().cloned().collect();
        assert_eq!(read(&write(&reversed)).expect("reads"), buckets);
    }

    #[test]
    fn metas_are_bbolts_and_the_newer_one_wins() {
        let bytes = write(&vec![(b"key".to_vec(), vec![(b"k".to_vec(), b"v".to_vec())])]);
        let meta = Meta::decode(&bytes[PAGE_HEADER..]).expect("meta 0");
        assert_eq!((meta.page_size, meta.freelist, meta.txid), (PAGE_SIZE, 2, 2));
        assert_eq!(meta.size(), bytes.len() as u64);
        assert_eq!(Meta::decode(&bytes[PAGE_SIZE + PAGE_HEADER..]).expect("meta 1").txid, 1);
        // A damaged first meta leaves the second.
        let mut one_bad = bytes.clone();
        one_bad[PAGE_HEADER + 20] ^= 1;
        assert_eq!(read(&one_bad).expect("meta 1 is enough").len(), 1);
    }

    #[test]
    fn damaged_files_get_errors_naming_the_damage() {
        let good =
            write(&vec![(b"key".to_vec(), (0..500u32).map(|i| (i.to_be_bytes().to_vec(), vec![1; 40])).collect())]);
        let text = |bytes: &[u8]| read(bytes).map(|_| ()).expect_err("damaged").to_string();
        assert_eq!(text(&[0; 100]), "invalid database");
        assert_eq!(text(&good[..50]), "invalid database");
        let mut version = good.clone();
        for meta in [PAGE_HEADER, PAGE_SIZE + PAGE_HEADER] {
            version[meta + 4] = 3;
        }
        assert_eq!(text(&version), "version mismatch");
        let mut checksum = good.clone();
        for meta in [PAGE_HEADER, PAGE_SIZE + PAGE_HEADER] {
            checksum[meta + 30] ^= 0xff;
        }
        assert_eq!(text(&checksum), "checksum error");
        assert!(text(&good[..good.len() - PAGE_SIZE]).contains("(truncated?)"));
        // A leaf element pointing past its page, and a branch pointing outside the file.
        let mut element = good.clone();
        let leaf = FIRST_DATA_PAGE as usize * PAGE_SIZE;
        element[leaf + PAGE_HEADER + 4..leaf + PAGE_HEADER + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(text(&element).contains("runs past the page"), "{}", text(&element));
        let mut pages = good.clone();
        for page in (FIRST_DATA_PAGE as usize..good.len() / PAGE_SIZE).map(|p| p * PAGE_SIZE) {
            if u16_at(&pages, page + 8) == BRANCH_PAGE {
                pages[page + PAGE_HEADER + 8..page + PAGE_HEADER + 16].copy_from_slice(&999u64.to_le_bytes());
            }
        }
        assert!(text(&pages).contains("page 999: out of bounds"), "{}", text(&pages));
        // Random damage anywhere never panics.
        let mut seed = 7u64;
        for _ in 0..300 {
            let mut bytes = good.clone();
            for _ in 0..4 {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let at = (seed >> 33) as usize % bytes.len();
                bytes[at] = (seed >> 17) as u8;
            }
            let _ = read(&bytes);
        }
    }

    #[test]
    fn keys_out_of_order_are_refused() {
        let mut writer = Writer::new(Cursor::new(Vec::new())).expect("new");
        writer.begin_bucket(b"b").expect("begin");
        writer.put(b"2", b"").expect("put");
        assert!(writer.put(b"1", b"").is_err());
        assert!(writer.put(b"2", b"").is_err());
    }
}
