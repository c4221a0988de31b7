//! The writer: sorted buckets laid out in pages, streaming (see the parent module).

use std::io::{self, BufWriter, Seek, SeekFrom, Write};

use super::{
    page_header, Meta, BRANCH_PAGE, BUCKET_FLAG, BUCKET_HEADER, ELEMENT, FIRST_DATA_PAGE, FREELIST_PAGE, FREELIST_PGID,
    LEAF_PAGE, META_PAGE, PAGE_HEADER, PAGE_SIZE,
};

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
