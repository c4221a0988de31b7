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

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

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

/// One element of a leaf page being filled.
struct LeafItem {
    flags: u32,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// Elements waiting for their page, and the bytes they take in it.
struct Fill<T> {
    items: Vec<T>,
    bytes: usize,
}

impl<T> Default for Fill<T> {
    fn default() -> Self {
        Self { items: Vec::new(), bytes: 0 }
    }
}

impl<T> Fill<T> {
    /// Whether an element of `bytes` more would overflow one page (a lone element may: it then spans
    /// several pages). A page counts at most `u16::MAX` elements.
    fn is_full_for(&self, bytes: usize, page_size: usize) -> bool {
        !self.items.is_empty()
            && (PAGE_HEADER + self.bytes + ELEMENT + bytes > page_size || self.items.len() == usize::from(u16::MAX))
    }
}

/// The bucket being written.
struct OpenBucket {
    name: Vec<u8>,
    leaf: Fill<LeafItem>,
    /// First key and page id of every leaf written so far.
    leaves: Vec<(Vec<u8>, u64)>,
    last_key: Option<Vec<u8>>,
}

/// Writes a bbolt database whose root bucket holds flat buckets (see the module doc).
pub struct Writer<W: Write + Seek> {
    out: BufWriter<W>,
    next_page: u64,
    /// Name and root page of every bucket written.
    buckets: Vec<(Vec<u8>, u64)>,
    open: Option<OpenBucket>,
}

impl<W: Write + Seek> Writer<W> {
    /// Starts a database at the current position of `out`, which must be its start.
    pub fn new(out: W) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 20, out);
        // Room for the metas and the freelist, written by `finish`.
        out.write_all(&vec![0; FIRST_DATA_PAGE as usize * PAGE_SIZE])?;
        Ok(Self { out, next_page: FIRST_DATA_PAGE, buckets: Vec::new(), open: None })
    }

    /// Opens a bucket; its entries follow in key order, then [`Writer::end_bucket`].
    pub fn begin_bucket(&mut self, name: &[u8]) -> io::Result<()> {
        if self.open.is_some() {
            self.end_bucket()?;
        }
        if self.buckets.iter().any(|(existing, _)| existing == name) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a bucket written twice"));
        }
        self.open = Some(OpenBucket { name: name.to_vec(), leaf: Fill::default(), leaves: Vec::new(), last_key: None });
        Ok(())
    }

    /// Adds an entry to the open bucket; keys must come in strictly increasing byte order.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let bytes = key.len() + value.len();
        let full = {
            let bucket = self.open.as_mut().ok_or_else(|| io::Error::other("an entry outside any bucket"))?;
            if bucket.last_key.as_deref().is_some_and(|last| last >= key) {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "bucket keys out of order"));
            }
            bucket.last_key = Some(key.to_vec());
            bucket.leaf.is_full_for(bytes, PAGE_SIZE)
        };
        if full {
            self.flush_leaf()?;
        }
        let bucket = self.open.as_mut().expect("checked above");
        bucket.leaf.items.push(LeafItem { flags: 0, key: key.to_vec(), value: value.to_vec() });
        bucket.leaf.bytes += ELEMENT + bytes;
        Ok(())
    }

    /// Closes the open bucket: its last leaf and the branch pages above its leaves.
    pub fn end_bucket(&mut self) -> io::Result<()> {
        let Some(bucket) = self.open.as_ref() else { return Ok(()) };
        // An empty bucket still gets its (empty) root leaf.
        if !bucket.leaf.items.is_empty() || bucket.leaves.is_empty() {
            self.flush_leaf()?;
        }
        let bucket = self.open.take().expect("checked above");
        let root = self.write_branches(bucket.leaves)?;
        self.buckets.push((bucket.name, root));
        Ok(())
    }

    fn flush_leaf(&mut self) -> io::Result<()> {
        let bucket = self.open.as_mut().expect("a bucket is open");
        let leaf = std::mem::take(&mut bucket.leaf);
        let first = leaf.items.first().map(|item| item.key.clone()).unwrap_or_default();
        let pgid = self.write_leaf(&leaf.items)?;
        self.open.as_mut().expect("a bucket is open").leaves.push((first, pgid));
        Ok(())
    }

    fn allocate(&mut self, bytes: usize) -> (u64, usize) {
        let pages = bytes.div_ceil(PAGE_SIZE).max(1);
        let pgid = self.next_page;
        self.next_page += pages as u64;
        (pgid, pages)
    }

    fn write_leaf(&mut self, items: &[LeafItem]) -> io::Result<u64> {
        let data: usize = items.iter().map(|item| item.key.len() + item.value.len()).sum();
        let start = PAGE_HEADER + items.len() * ELEMENT;
        let (pgid, pages) = self.allocate(start + data);
        let mut page = vec![0; pages * PAGE_SIZE];
        page_header(&mut page, pgid, LEAF_PAGE, items.len(), pages - 1);
        let mut at = start;
        for (i, item) in items.iter().enumerate() {
            let element = PAGE_HEADER + i * ELEMENT;
            page[element..element + 4].copy_from_slice(&item.flags.to_le_bytes());
            page[element + 4..element + 8].copy_from_slice(&((at - element) as u32).to_le_bytes());
            page[element + 8..element + 12].copy_from_slice(&(item.key.len() as u32).to_le_bytes());
            page[element + 12..element + 16].copy_from_slice(&(item.value.len() as u32).to_le_bytes());
            page[at..at + item.key.len()].copy_from_slice(&item.key);
            at += item.key.len();
            page[at..at + item.value.len()].copy_from_slice(&item.value);
            at += item.value.len();
        }
        self.out.write_all(&page)?;
        Ok(pgid)
    }

    /// Writes branch levels above `children` until one page is the root; returns the root's id.
    fn write_branches(&mut self, mut children: Vec<(Vec<u8>, u64)>) -> io::Result<u64> {
        while children.len() > 1 {
            let mut parents = Vec::new();
            let mut fill: Fill<(Vec<u8>, u64)> = Fill::default();
            for child in children {
                if fill.is_full_for(child.0.len(), PAGE_SIZE) {
                    parents.push(self.write_branch(std::mem::take(&mut fill).items)?);
                }
                fill.bytes += ELEMENT + child.0.len();
                fill.items.push(child);
            }
            parents.push(self.write_branch(fill.items)?);
            children = parents;
        }
        Ok(children.first().map_or(0, |(_, pgid)| *pgid))
    }

    /// Writes one branch page; returns its first key and id, as an element of the level above.
    fn write_branch(&mut self, items: Vec<(Vec<u8>, u64)>) -> io::Result<(Vec<u8>, u64)> {
        let data: usize = items.iter().map(|(key, _)| key.len()).sum();
        let start = PAGE_HEADER + items.len() * ELEMENT;
        let (pgid, pages) = self.allocate(start + data);
        let mut page = vec![0; pages * PAGE_SIZE];
        page_header(&mut page, pgid, BRANCH_PAGE, items.len(), pages - 1);
        let mut at = start;
        for (i, (key, child)) in items.iter().enumerate() {
            let element = PAGE_HEADER + i * ELEMENT;
            page[element..element + 4].copy_from_slice(&((at - element) as u32).to_le_bytes());
            page[element + 4..element + 8].copy_from_slice(&(key.len() as u32).to_le_bytes());
            page[element + 8..element + 16].copy_from_slice(&child.to_le_bytes());
            page[at..at + key.len()].copy_from_slice(key);
            at += key.len();
        }
        self.out.write_all(&page)?;
        let first = items.into_iter().next().map(|(key, _)| key).unwrap_or_default();
        Ok((first, pgid))
    }

    /// Writes the root bucket, the freelist and the metas. Returns the output and the database's size.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.end_bucket()?;
        let mut buckets = std::mem::take(&mut self.buckets);
        buckets.sort();
        let items: Vec<LeafItem> = buckets
            .into_iter()
            .map(|(name, root)| {
                let mut value = vec![0; BUCKET_HEADER];
                value[..8].copy_from_slice(&root.to_le_bytes());
                LeafItem { flags: BUCKET_FLAG, key: name, value }
            })
            .collect();
        // Ten-odd bucket names fit one page; more would need branches, as any bucket does.
        let mut leaves = Vec::new();
        let mut fill: Fill<LeafItem> = Fill::default();
        for item in items {
            if fill.is_full_for(item.key.len() + item.value.len(), PAGE_SIZE) {
                let page = std::mem::take(&mut fill).items;
                leaves.push((page[0].key.clone(), self.write_leaf(&page)?));
            }
            fill.bytes += ELEMENT + item.key.len() + item.value.len();
            fill.items.push(item);
        }
        let first = fill.items.first().map(|item| item.key.clone()).unwrap_or_default();
        leaves.push((first, self.write_leaf(&fill.items)?));
        let root = self.write_branches(leaves)?;

        let high_water = self.next_page;
        let mut out = self.out.into_inner().map_err(|e| e.into_error())?;
        out.seek(SeekFrom::Start(0))?;
        // bbolt's `Tx.WriteTo` gives the second meta the transaction before the first's.
        for (pgid, txid) in [(0, 2), (1, 1)] {
            let mut page = vec![0; PAGE_SIZE];
            page_header(&mut page, pgid, META_PAGE, 0, 0);
            Meta { page_size: PAGE_SIZE, root, freelist: FREELIST_PGID, high_water, txid }.encode(&mut page);
            out.write_all(&page)?;
        }
        let mut freelist = vec![0; PAGE_SIZE];
        page_header(&mut freelist, FREELIST_PGID, FREELIST_PAGE, 0, 0);
        out.write_all(&freelist)?;
        out.seek(SeekFrom::Start(high_water * PAGE_SIZE as u64))?;
        out.flush()?;
        Ok((out, high_water * PAGE_SIZE as u64))
    }
}

/// Where a bucket's entries are: a tree of pages, or one leaf page inside its parent's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketRoot {
    Page(u64),
    Inline(Vec<u8>),
}

impl BucketRoot {
    /// Decodes a nested bucket's value.
    fn decode(value: &[u8], page: u64) -> Result<Self, BoltError> {
        if value.len() < BUCKET_HEADER {
            return Err(damaged(page, format!("a bucket value of {} bytes", value.len())));
        }
        Ok(match u64_at(value, 0) {
            0 => BucketRoot::Inline(value[BUCKET_HEADER..].to_vec()),
            root => BucketRoot::Page(root),
        })
    }
}

/// Reads a bbolt database from the first `len` bytes of a file.
pub struct Reader {
    file: File,
    meta: Meta,
}

impl Reader {
    /// Opens the database: finds and validates its meta as bbolt does, and checks the file is as long
    /// as the meta says.
    pub fn open(file: File, len: u64) -> Result<Self, BoltError> {
        let read = |at: u64, bytes: usize| -> Result<Vec<u8>, BoltError> {
            if at + bytes as u64 > len {
                return Err(BoltError::Invalid);
            }
            let mut buf = vec![0; bytes];
            file.read_exact_at(&mut buf, at)?;
            Ok(buf)
        };
        let first = read(0, PAGE_HEADER + META_SUMMED + 8)?;
        let meta0 = Meta::decode(&first[PAGE_HEADER..]);
        // The second meta sits one page further; with the first damaged, probe the sizes bbolt could use.
        let sizes: Vec<usize> = match &meta0 {
            Ok(meta) => vec![meta.page_size],
            Err(_) => (0..7).map(|shift| 1024 << shift).collect(),
        };
        let meta1 = sizes
            .iter()
            .filter_map(|&size| read(size as u64, PAGE_HEADER + META_SUMMED + 8).ok())
            .map(|bytes| Meta::decode(&bytes[PAGE_HEADER..]))
            .find(Result::is_ok)
            .unwrap_or(Err(BoltError::Invalid));
        let meta = match (meta0, meta1) {
            (Ok(a), Ok(b)) => {
                if b.txid > a.txid {
                    b
                } else {
                    a
                }
            }
            (Ok(meta), Err(_)) | (Err(_), Ok(meta)) => meta,
            (Err(err), Err(_)) => return Err(err),
        };
        if !(512..=1 << 20).contains(&meta.page_size) || !meta.page_size.is_power_of_two() {
            return Err(damaged(0, format!("page size {}", meta.page_size)));
        }
        if meta.size() > len {
            return Err(BoltError::Truncated { have: len, want: meta.size() });
        }
        if meta.root < 2 || meta.root >= meta.high_water {
            return Err(damaged(meta.root, "root page out of bounds"));
        }
        Ok(Self { file, meta })
    }

    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// Reads page `pgid` with its overflow pages.
    fn page(&self, pgid: u64) -> Result<Vec<u8>, BoltError> {
        let size = self.meta.page_size as u64;
        if pgid < 2 || pgid >= self.meta.high_water {
            return Err(damaged(pgid, format!("out of bounds (the database has {} pages)", self.meta.high_water)));
        }
        let mut header = [0; PAGE_HEADER];
        self.file.read_exact_at(&mut header, pgid * size)?;
        let overflow = u64::from(u32_at(&header, 12));
        if pgid + overflow >= self.meta.high_water {
            return Err(damaged(pgid, format!("{overflow} overflow pages run past the end")));
        }
        if u64_at(&header, 0) != pgid {
            return Err(damaged(pgid, format!("its header says page {}", u64_at(&header, 0))));
        }
        let mut page = vec![0; ((overflow + 1) * size) as usize];
        self.file.read_exact_at(&mut page, pgid * size)?;
        Ok(page)
    }

    /// The root bucket's entries: every top-level bucket's name and root, in key order.
    pub fn buckets(&self) -> Result<Vec<(Vec<u8>, BucketRoot)>, BoltError> {
        let mut buckets = Vec::new();
        let root = BucketRoot::Page(self.meta.root);
        self.each(&root, &mut |key: &[u8], value: &[u8], flags: u32| {
            if flags & BUCKET_FLAG == 0 {
                return Err(damaged(self.meta.root, "a top-level key that is not a bucket"));
            }
            buckets.push((key.to_vec(), BucketRoot::decode(value, self.meta.root)?));
            Ok(())
        })?;
        Ok(buckets)
    }

    /// Calls `visit` with every entry of a bucket in key order: its key, value and leaf flags (a nested
    /// bucket has [`BUCKET_FLAG`]).
    pub fn each<E: From<BoltError>>(
        &self,
        bucket: &BucketRoot,
        visit: &mut impl FnMut(&[u8], &[u8], u32) -> Result<(), E>,
    ) -> Result<(), E> {
        match bucket {
            BucketRoot::Page(pgid) => {
                let page = self.page(*pgid)?;
                self.walk(&page, *pgid, 0, visit)
            }
            BucketRoot::Inline(page) => {
                if page.len() < PAGE_HEADER || u16_at(page, 8) != LEAF_PAGE {
                    return Err(damaged(0, "an inline bucket that is not a leaf").into());
                }
                self.walk(page, 0, 0, visit)
            }
        }
    }

    fn walk<E: From<BoltError>>(
        &self,
        page: &[u8],
        pgid: u64,
        depth: usize,
        visit: &mut impl FnMut(&[u8], &[u8], u32) -> Result<(), E>,
    ) -> Result<(), E> {
        if depth > MAX_DEPTH {
            return Err(damaged(pgid, "the tree is deeper than any real one (a loop?)").into());
        }
        let (flags, count) = (u16_at(page, 8), usize::from(u16_at(page, 10)));
        if PAGE_HEADER + count * ELEMENT > page.len() {
            return Err(damaged(pgid, format!("{count} elements do not fit the page")).into());
        }
        let span = |element: usize, pos: u32, bytes: usize| -> Result<std::ops::Range<usize>, BoltError> {
            let start = element + pos as usize;
            match start.checked_add(bytes) {
                Some(end) if end <= page.len() => Ok(start..end),
                _ => Err(damaged(pgid, "an element runs past the page")),
            }
        };
        match flags {
            LEAF_PAGE => {
                for i in 0..count {
                    let element = PAGE_HEADER + i * ELEMENT;
                    let (key_len, value_len) =
                        (u32_at(page, element + 8) as usize, u32_at(page, element + 12) as usize);
                    let range = span(element, u32_at(page, element + 4), key_len + value_len)?;
                    let (key, value) = page[range].split_at(key_len);
                    visit(key, value, u32_at(page, element))?;
                }
            }
            BRANCH_PAGE if pgid != 0 => {
                for i in 0..count {
                    let element = PAGE_HEADER + i * ELEMENT;
                    let child = u64_at(page, element + 8);
                    let child_page = self.page(child)?;
                    self.walk(&child_page, child, depth + 1, visit)?;
                }
            }
            other => return Err(damaged(pgid, format!("invalid page type {other:#x}")).into()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

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
