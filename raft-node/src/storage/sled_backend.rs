//! [`SledBackend`]: the MVCC store's buckets in one sled tree, each key prefixed by its bucket's tag.
//!
//! Writes are sled batches, atomic across a crash. Nothing here flushes: the log store's flush persists
//! these writes too, as they share one database (see [`crate::storage`]).

use kv_api::{Backend, BackendError, Bucket, WriteBatch};

const TREE: &str = "kv";

/// The [`Backend`] of a member, on the tree `kv` of its sled database.
#[derive(Clone, Debug)]
pub struct SledBackend {
    db: sled::Db,
    tree: sled::Tree,
}

impl SledBackend {
    pub fn open(db: &sled::Db) -> Result<Self, sled::Error> {
        Ok(Self { db: db.clone(), tree: db.open_tree(TREE)? })
    }

    fn add(batch: &mut sled::Batch, ops: WriteBatch) {
        for (bucket, key, value) in ops.ops {
            let key = tagged(bucket, &key);
            match value {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
    }
}

fn tagged(bucket: Bucket, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(bucket.tag());
    out.extend_from_slice(key);
    out
}

fn backend_error(err: sled::Error) -> BackendError {
    BackendError(err.to_string())
}

impl Backend for SledBackend {
    fn get(&self, bucket: Bucket, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let value = self.tree.get(tagged(bucket, key)).map_err(backend_error)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn scan(&self, bucket: Bucket, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        for item in self.tree.scan_prefix([bucket.tag()]) {
            let (key, value) = item.map_err(backend_error)?;
            if !visit(&key[1..], &value) {
                break;
            }
        }
        Ok(())
    }

    fn write(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let mut sled_batch = sled::Batch::default();
        Self::add(&mut sled_batch, batch);
        self.tree.apply_batch(sled_batch).map_err(backend_error)
    }

    /// One sled batch removes every existing key and inserts the new content: a crash leaves either the
    /// old store or the new one. (A later insert of the same key overrides its removal in a sled batch.)
    fn replace_all(&self, batch: WriteBatch) -> Result<(), BackendError> {
        let mut sled_batch = sled::Batch::default();
        for key in self.tree.iter().keys() {
            sled_batch.remove(key.map_err(backend_error)?);
        }
        Self::add(&mut sled_batch, batch);
        self.tree.apply_batch(sled_batch).map_err(backend_error)
    }

    fn size_bytes(&self) -> u64 {
        // The files of the whole database (log included), as etcd reports its one bbolt file. sled may
        // report 0 before its first flush; never report an empty database (etcdctl divides by the size).
        self.db.size_on_disk().unwrap_or(0).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> (tempfile::TempDir, SledBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::Config::new().path(dir.path()).open().expect("open sled");
        (dir, SledBackend::open(&db).expect("open tree"))
    }

    fn all(backend: &SledBackend, bucket: Bucket) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        backend
            .scan(bucket, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                true
            })
            .expect("scan");
        out
    }

    fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn buckets_are_separate_keyspaces() {
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"a".to_vec(), b"1".to_vec());
        batch.put(Bucket::Meta, b"a".to_vec(), b"meta".to_vec());
        batch.put(Bucket::Key, b"b".to_vec(), b"2".to_vec());
        backend.write(batch).expect("write");

        assert_eq!(backend.get(Bucket::Key, b"a").expect("get"), Some(b"1".to_vec()));
        assert_eq!(backend.get(Bucket::Meta, b"a").expect("get"), Some(b"meta".to_vec()));
        assert_eq!(backend.get(Bucket::Meta, b"b").expect("get"), None);
        assert_eq!(all(&backend, Bucket::Key), vec![kv("a", "1"), kv("b", "2")]);
        assert_eq!(all(&backend, Bucket::Meta), vec![kv("a", "meta")]);

        let mut batch = WriteBatch::default();
        batch.delete(Bucket::Key, b"a".to_vec());
        backend.write(batch).expect("write");
        assert_eq!(all(&backend, Bucket::Key), vec![kv("b", "2")]);
        assert!(backend.size_bytes() > 0);
    }

    #[test]
    fn scan_stops_when_asked() {
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        for k in ["a", "b", "c"] {
            batch.put(Bucket::Key, k.as_bytes().to_vec(), b"v".to_vec());
        }
        backend.write(batch).expect("write");
        let mut seen = 0;
        backend
            .scan(Bucket::Key, &mut |_, _| {
                seen += 1;
                seen < 2
            })
            .expect("scan");
        assert_eq!(seen, 2);
    }

    #[test]
    fn replace_all_keeps_only_the_new_content() {
        let (_dir, backend) = backend();
        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"old".to_vec(), b"1".to_vec());
        batch.put(Bucket::Key, b"both".to_vec(), b"old".to_vec());
        batch.put(Bucket::Meta, b"m".to_vec(), b"old".to_vec());
        backend.write(batch).expect("write");

        let mut batch = WriteBatch::default();
        batch.put(Bucket::Key, b"both".to_vec(), b"new".to_vec());
        batch.put(Bucket::Key, b"new".to_vec(), b"2".to_vec());
        backend.replace_all(batch).expect("replace");

        assert_eq!(all(&backend, Bucket::Key), vec![kv("both", "new"), kv("new", "2")]);
        assert!(all(&backend, Bucket::Meta).is_empty());
    }
}
