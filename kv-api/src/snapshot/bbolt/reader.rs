//! The reader: pages read on demand, every bound checked (see the parent module).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{
    damaged, u16_at, u32_at, u64_at, BoltError, Meta, BRANCH_PAGE, BUCKET_FLAG, BUCKET_HEADER, ELEMENT, LEAF_PAGE,
    MAX_DEPTH, META_SUMMED, PAGE_HEADER,
};

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
