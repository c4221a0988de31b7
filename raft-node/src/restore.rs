//! `snapshot restore`: a data dir for one member of a new cluster, holding a snapshot file's store
//! (etcd's `snapshot.db`, saved from etcd 3.4, 3.5 or 3.6 or from us: see [`kv_api::snapshot`]).
//!
//! As etcdutl's restore, it takes the new cluster's bootstrap flags (`--name`, `--initial-cluster`,
//! `--initial-cluster-token`, `--initial-advertise-peer-urls`) and writes what the member finds at its
//! first start:
//!
//! - `member/identity.json`: the member and cluster ids a new cluster's member computes from those
//!   flags (see [`crate::bootstrap`]), so the restored cluster is a new cluster with new ids;
//! - `member/db`: the sled database holding the snapshot's store (every revision kept, the compacted
//!   revision, leases, alarms, users, roles and the auth flag; the file's members are dropped, as
//!   etcd's restore drops them) and Raft's bookkeeping for the new cluster: the store reflects
//!   the log up to the very first log id of a new cluster (term 0, index 0, the id openraft gives
//!   the first membership when it initializes one), with the membership of `--initial-cluster`. The
//!   log itself is empty.
//!
//! At its first start openraft finds the store ahead of an empty log: it takes the log as purged up
//! to the store (which a snapshot then covers, built at once for followers that need one), and the
//! member is initialized, so it does not bootstrap again. Members restored from the same file with
//! the same flags hold the same state and elect a leader from there, serving the snapshot's keys at
//! its revision. A member added later receives the store by snapshot install, the log before it
//! being gone.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use kv_api::snapshot::{self, Contents, FileError};
use kv_api::{Backend, Command, MvccStore, WriteBatch};
use openraft::{CommittedLeaderId, Membership};

use crate::bootstrap::initial_members;
use crate::config::{Config, ConfigError};
use crate::identity::Identity;
use crate::member_id::{cluster_id, member_id};
use crate::storage::state_machine::bookkeeping;
use crate::storage::{open_db, SledBackend};
use crate::typ::{LogId, MemberNode, NodeId, StoredMembership};

/// Records written to the new database per batch, at most (the file is streamed, never held whole)...
const BATCH_RECORDS: usize = 10_000;
/// ... and bytes of keys and values.
const BATCH_BYTES: usize = 64 * 1024 * 1024;

/// etcdctl's `snapshot restore` flags.
#[derive(Clone, Debug)]
pub struct RestoreConfig {
    pub snapshot: PathBuf,
    pub name: String,
    /// `<name>.etcd` when not given.
    pub data_dir: Option<PathBuf>,
    pub initial_cluster: String,
    pub initial_cluster_token: String,
    pub initial_advertise_peer_urls: Vec<String>,
    /// Restore even if the file's digest is missing or wrong.
    pub skip_hash_check: bool,
    /// Raise the revision by this much and mark it compacted (etcd's `--bump-revision` with
    /// `--mark-compacted`), so that watchers of the old cluster see "compacted" and start over.
    pub bump_revision: u64,
}

/// What a restore wrote.
#[derive(Clone, Debug)]
pub struct Restored {
    pub data_dir: PathBuf,
    pub identity: Identity,
    pub contents: Contents,
    /// The restored store's revision and compacted revision.
    pub revision: i64,
    pub compacted: i64,
}

/// Why a restore failed, with etcd's texts where it has one.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Flags(String),
    #[error("data-dir {0:?} not empty or could not be read")]
    DataDirExists(String),
    #[error(transparent)]
    File(#[from] FileError),
    /// The new database could not be written.
    #[error("{0}")]
    Storage(String),
}

/// Writes a new member's data dir from the snapshot file (see the module doc). Blocking. Nothing is
/// left behind on failure: the data dir is new, and removed again.
pub fn restore(config: &RestoreConfig) -> Result<Restored, RestoreError> {
    let member = member_config(config)?;
    let initial_cluster = member.initial_cluster()?;
    let members = initial_members(&member, &initial_cluster);
    let identity = Identity {
        member_id: member_id(&member.initial_advertise_peer_urls, &member.initial_cluster_token),
        cluster_id: cluster_id(members.keys().copied()),
    };
    let data_dir = member.data_dir();
    // As etcd: an existing empty dir will do (a mounted volume), anything in it will not.
    let existing = data_dir.exists();
    if existing && std::fs::read_dir(&data_dir).map_or(true, |mut entries| entries.next().is_some()) {
        return Err(RestoreError::DataDirExists(data_dir.display().to_string()));
    }
    // The whole file is checked before anything is written.
    let check_digest = !config.skip_hash_check;
    let contents = snapshot::read(&config.snapshot, check_digest, &mut |_, _, _| Ok(()))?;
    let member_dir = data_dir.join("member");
    let written = std::fs::create_dir_all(&member_dir)
        .map_err(|source| FileError::Io { op: "mkdir", path: member_dir.display().to_string(), source }.into())
        .and_then(|()| write_member(&member_dir, config, &contents, members))
        .and_then(|revisions| {
            identity
                .save(&member_dir)
                .map_err(|e| RestoreError::Storage(format!("saving the member's identity: {e}")))
                .map(|()| revisions)
        });
    match written {
        Ok((revision, compacted)) => Ok(Restored { data_dir, identity, contents, revision, compacted }),
        Err(err) => {
            // Nothing to add if the removal fails too: the first error says what went wrong.
            if existing {
                let _ = std::fs::remove_dir_all(&member_dir);
            } else {
                let _ = std::fs::remove_dir_all(&data_dir);
            }
            Err(err)
        }
    }
}

/// The member's flags, parsed as `raft-node` parses them, so the same checks and ids apply.
fn member_config(config: &RestoreConfig) -> Result<Config, RestoreError> {
    let data_dir = config.data_dir.clone().unwrap_or_else(|| PathBuf::from(format!("{}.etcd", config.name)));
    let args = [
        "raft-node".to_string(),
        format!("--name={}", config.name),
        format!("--data-dir={}", data_dir.display()),
        format!("--initial-cluster={}", config.initial_cluster),
        format!("--initial-cluster-token={}", config.initial_cluster_token),
        format!("--initial-advertise-peer-urls={}", config.initial_advertise_peer_urls.join(",")),
    ];
    Config::try_parse_from(args).map_err(|e| RestoreError::Flags(e.to_string()))
}

/// The log id a restored store reflects: a new cluster's first.
fn restored_log_id() -> LogId {
    LogId::new(CommittedLeaderId::new(0, 0), 0)
}

/// Fills `member_dir/db` with the snapshot's records and the new cluster's bookkeeping, finishes the
/// compaction the file scheduled (or the one `--bump-revision` marks). Returns the store's revision and
/// compacted revision.
fn write_member(
    member_dir: &Path,
    config: &RestoreConfig,
    contents: &Contents,
    members: BTreeMap<NodeId, MemberNode>,
) -> Result<(i64, i64), RestoreError> {
    let storage = |what: &str, e: &dyn std::fmt::Display| RestoreError::Storage(format!("{what}: {e}"));
    let db = open_db(&member_dir.join("db")).map_err(|e| storage("creating the database", &e))?;
    let backend = Arc::new(
        SledBackend::open(&member_dir.join("db").with_extension("kv"), &db)
            .map_err(|e| storage("creating the database", &e))?,
    );
    let (mut batch, mut batch_bytes) = (WriteBatch::default(), 0);
    snapshot::read(&config.snapshot, !config.skip_hash_check, &mut |bucket, key, value| {
        batch.put(bucket, key, value);
        batch_bytes += key.len() + value.len();
        if batch.ops.len() >= BATCH_RECORDS || batch_bytes >= BATCH_BYTES {
            backend.write(std::mem::take(&mut batch)).map_err(io::Error::other)?;
            batch_bytes = 0;
        }
        Ok(())
    })?;
    let applied = Some(restored_log_id());
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let membership = StoredMembership::new(applied, Membership::new(vec![voters], members));
    for (bucket, key, value) in bookkeeping(&applied, &membership).map_err(|e| storage("encoding", &e))? {
        batch.put(bucket, key, value);
    }
    backend.write(batch).map_err(|e| storage("writing the database", &e))?;

    // Loading the store decodes every revision and lease: the restored member will start.
    let undecodable = |e: kv_api::Error| FileError::Layout(snapshot::LayoutError(format!("undecodable records: {e}")));
    let mut store = MvccStore::open(backend.clone()).map_err(undecodable)?;
    let current = contents.current_revision();
    // etcd finishes a scheduled compaction at start; a bump compacts everything below the new revision.
    let compact_to = if config.bump_revision > 0 { current } else { contents.scheduled_compact };
    if compact_to > store.compacted_revision() && compact_to <= store.current_revision() {
        let req = proto::etcdserverpb::CompactionRequest { revision: compact_to, ..Default::default() };
        store.apply(&Command::Compact(req)).map_err(|e| storage("compacting", &e))?;
        store.commit().map_err(|e| storage("compacting", &e))?;
        // The index and the compactor work in the background: the restored files hold only what is needed.
        store.finish_index_compaction();
        store.wait_compacted();
    }
    let mut want = (current, contents.finished_compact.max(contents.scheduled_compact));
    if config.bump_revision > 0 {
        let bumped = i64::try_from(config.bump_revision)
            .ok()
            .and_then(|bump| current.checked_add(bump))
            .ok_or_else(|| RestoreError::Flags(format!("--bump-revision {} is too large", config.bump_revision)))?;
        store.stage_meta(kv_api::store::META_COMPACT_REV, bumped.to_be_bytes().to_vec());
        store.commit().map_err(|e| storage("bumping the revision", &e))?;
        want = (bumped, bumped);
    }
    let store = MvccStore::open(backend.clone()).map_err(undecodable)?;
    let loaded = (store.current_revision(), store.compacted_revision());
    if loaded != want {
        return Err(FileError::Layout(snapshot::LayoutError(format!(
            "the records hold revision {} (compacted {}), the file says {} (compacted {})",
            loaded.0, loaded.1, want.0, want.1
        )))
        .into());
    }
    backend.sync().map_err(|e| storage("flushing the database", &e))?;
    db.flush().map_err(|e| storage("flushing the database", &e))?;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kv_api::{Command, SharedStore};
    use openraft::storage::RaftStateMachine;
    use parking_lot::RwLock;
    use proto::etcdserverpb as pb;

    use super::*;
    use crate::storage::{open, snapshot_file};

    fn put(store: &SharedStore, key: &str, value: &str, lease: i64) {
        let req = pb::PutRequest { key: key.into(), value: value.into(), lease, ..Default::default() };
        store.write().apply(&Command::Put(req)).expect("put");
    }

    /// A snapshot file of a store with a lease, a compaction, a deletion and several revisions.
    fn snapshot(dir: &Path) -> PathBuf {
        let db = open_db(&dir.join("source")).expect("db");
        let backend = SledBackend::open(&dir.join("source.kv"), &db).expect("backend");
        let store = MvccStore::open(Arc::new(backend)).expect("store");
        let store: SharedStore = Arc::new(RwLock::new(store));
        let grant = pb::LeaseGrantRequest { id: 42, ttl: 600 };
        store.write().apply(&Command::LeaseGrant(grant)).expect("grant");
        put(&store, "a", "1", 0);
        put(&store, "a", "2", 0);
        put(&store, "b", "1", 42);
        let compact = pb::CompactionRequest { revision: 3, ..Default::default() };
        store.write().apply(&Command::Compact(compact)).expect("compact");
        put(&store, "c", "1", 0);
        let delete = pb::DeleteRangeRequest { key: b"c".to_vec(), ..Default::default() };
        store.write().apply(&Command::DeleteRange(delete)).expect("delete");
        let (mut file, _size) = snapshot_file::write(&store, dir).expect("write");
        let path = dir.join("s.db");
        io::copy(&mut file, &mut std::fs::File::create(&path).expect("create")).expect("copy");
        path
    }

    fn config(snapshot: PathBuf, data_dir: Option<PathBuf>) -> RestoreConfig {
        RestoreConfig {
            snapshot,
            name: "n2".into(),
            data_dir,
            initial_cluster: "n1=http://127.0.0.1:1,n2=http://127.0.0.1:2".into(),
            initial_cluster_token: "new-token".into(),
            initial_advertise_peer_urls: vec!["http://127.0.0.1:2".into()],
            skip_hash_check: false,
            bump_revision: 0,
        }
    }

    /// Key, value, create and mod revisions, lease.
    type Row = (Vec<u8>, Vec<u8>, i64, i64, i64);

    fn kvs(store: &SharedStore) -> Vec<Row> {
        let req = pb::RangeRequest { key: vec![0], range_end: vec![0], ..Default::default() };
        let resp = store.read().range(&req).expect("range");
        resp.kvs.into_iter().map(|kv| (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.lease)).collect()
    }

    #[tokio::test]
    async fn a_restored_member_holds_the_store_and_the_new_clusters_membership() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = snapshot(dir.path());
        let data_dir = dir.path().join("restored");
        let restored = restore(&config(path, Some(data_dir.clone()))).expect("restores");

        let peer = |port: u16| vec![format!("http://127.0.0.1:{port}")];
        let (n1, n2) = (member_id(&peer(1), "new-token"), member_id(&peer(2), "new-token"));
        assert_eq!(restored.identity, Identity { member_id: n2, cluster_id: cluster_id([n1, n2]) });
        assert_eq!(Identity::load(&data_dir.join("member")).expect("identity"), Some(restored.identity));
        assert_eq!((restored.contents.revision, restored.revision, restored.compacted), (6, 6, 3));

        let (_log, mut sm, store) = open(&data_dir.join("member/db")).expect("open");
        assert_eq!(
            kvs(&store),
            vec![(b"a".to_vec(), b"2".to_vec(), 2, 3, 0), (b"b".to_vec(), b"1".to_vec(), 4, 4, 42)]
        );
        {
            let store = store.read();
            assert_eq!((store.current_revision(), store.compacted_revision()), (6, 3));
            assert_eq!(store.leases(), vec![(42, 600)]);
            assert_eq!(store.lease(42).map(|l| l.keys.len()), Some(1));
        }
        let (applied, membership) = sm.applied_state().await.expect("applied");
        assert_eq!(applied, Some(restored_log_id()));
        let voters: Vec<_> = membership.membership().voter_ids().collect();
        assert_eq!(voters, { [n1, n2].into_iter().collect::<BTreeSet<_>>().into_iter().collect::<Vec<_>>() });
        assert_eq!(membership.membership().get_node(&n2).map(|n| n.name.as_str()), Some("n2"));
    }

    #[test]
    fn refuses_like_etcdctl() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = snapshot(dir.path());
        let err = restore(&config(path.clone(), Some(dir.path().to_path_buf()))).expect_err("exists");
        assert_eq!(
            err.to_string(),
            format!("data-dir {:?} not empty or could not be read", dir.path().display().to_string())
        );
        // An empty one (a mounted volume) will do, and stays when the restore fails.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).expect("mkdir");
        restore(&config(path.clone(), Some(empty.clone()))).expect("restores into an empty dir");

        let mut wrong_name = config(path.clone(), Some(dir.path().join("x")));
        wrong_name.name = "n3".into();
        let err = restore(&wrong_name).expect_err("name");
        assert_eq!(err.to_string(), "couldn't find local name \"n3\" in the initial cluster configuration");

        let mut bytes = std::fs::read(&path).expect("read");
        bytes[5000] ^= 1;
        let damaged = dir.path().join("damaged.db");
        std::fs::write(&damaged, &bytes).expect("write");
        let target = dir.path().join("from-damaged");
        let err = restore(&config(damaged, Some(target.clone()))).expect_err("digest");
        assert!(err.to_string().starts_with("expected sha256 ["), "{err}");
        assert!(!target.exists(), "nothing is left behind");

        let err = restore(&config(dir.path().join("absent.db"), Some(target))).expect_err("missing");
        assert_eq!(
            err.to_string(),
            format!("open {}: no such file or directory", dir.path().join("absent.db").display())
        );
    }

    #[tokio::test]
    async fn a_bumped_revision_is_marked_compacted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = snapshot(dir.path());
        let data_dir = dir.path().join("bumped");
        let mut bumped = config(path, Some(data_dir.clone()));
        bumped.bump_revision = 1000;
        let restored = restore(&bumped).expect("restores");
        assert_eq!((restored.revision, restored.compacted), (1006, 1006));
        let (_log, _sm, store) = open(&data_dir.join("member/db")).expect("open");
        assert_eq!(kvs(&store).len(), 2, "the keys stay");
        let old = pb::RangeRequest { key: b"a".to_vec(), revision: 5, ..Default::default() };
        assert!(matches!(store.read().range(&old), Err(kv_api::Error::Compacted)));
    }

    #[test]
    fn the_data_dir_defaults_to_the_name() {
        let restore_config = config(PathBuf::from("s.db"), None);
        assert_eq!(member_config(&restore_config).expect("flags").data_dir(), PathBuf::from("n2.etcd"));
    }
}
