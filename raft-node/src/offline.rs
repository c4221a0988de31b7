//! What `kvutl` does to the data dir of a stopped member: defragment its store, hash it.
//!
//! The store is `<data-dir>/member/db.kv` (see [`crate::storage::sled_backend`]); the Raft log is not
//! needed. sled locks a database while a process has it open, so a running member's store is refused
//! ("could not acquire lock"), as etcdutl waits on bbolt's lock.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kv_api::hash::KvHash;
use kv_api::{Backend, MvccStore};

use crate::storage::SledBackend;

/// Why an offline tool could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("{0}")]
    Storage(String),
    #[error(transparent)]
    Store(#[from] kv_api::Error),
}

/// Where a member keeps its store, in `data_dir`.
pub fn store_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("member").join("db.kv")
}

fn open_backend(data_dir: &Path) -> Result<SledBackend, OfflineError> {
    SledBackend::open_existing(&store_dir(data_dir)).map_err(|e| OfflineError::Storage(e.to_string()))
}

/// Rewrites the store into a fresh database holding only what is live, as `Defragment` does online.
pub fn defrag(data_dir: &Path) -> Result<(), OfflineError> {
    let backend = open_backend(data_dir)?;
    backend.defragment().map_err(|e| OfflineError::Storage(e.to_string()))?;
    backend.sync().map_err(|e| OfflineError::Storage(e.to_string()))
}

/// The store's `HashKV` at `rev` (0: the current revision), the value the member answers online.
pub fn hash_kv(data_dir: &Path, rev: i64) -> Result<KvHash, OfflineError> {
    let store = MvccStore::open(Arc::new(open_backend(data_dir)?))?;
    Ok(kv_api::hash::hash_kv(&store, rev)?)
}

#[cfg(test)]
mod tests {
    use proto::etcdserverpb as pb;

    use super::*;
    use crate::storage::open;

    #[test]
    fn a_stopped_members_store_hashes_as_it_did_online_and_survives_defrag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let want = {
            let (_log, _sm, store) = open(&dir.path().join("member/db")).expect("open");
            let mut store = store.write();
            for i in 0..50 {
                let put =
                    pb::PutRequest { key: format!("k{}", i % 5).into(), value: vec![1; 100], ..Default::default() };
                store.apply(&kv_api::Command::Put(put)).expect("put");
            }
            store.commit().expect("commit");
            store.backend().sync().expect("sync");
            (kv_api::hash::hash_kv(&store, 0).expect("hash"), kv_api::hash::hash_kv(&store, 20).expect("hash"))
        };
        // sled lets go of its lock once its flusher drops the handle.
        let mut hashed = Err(OfflineError::Storage("not tried".into()));
        for _ in 0..50 {
            hashed = hash_kv(dir.path(), 0);
            if hashed.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(hashed.expect("hashes"), want.0);
        assert_eq!(hash_kv(dir.path(), 20).expect("hashes"), want.1);
        defrag(dir.path()).expect("defrag");
        assert_eq!(hash_kv(dir.path(), 0).expect("hashes after defrag"), want.0);
        let missing = dir.path().join("none");
        let err = hash_kv(&missing, 0).expect_err("no store");
        assert!(err.to_string().contains("no such file or directory"), "{err}");
    }
}
