//! Leases in the MVCC store: grants, keys attached by puts, revokes deleting them in one revision, and
//! all of it surviving a reopen and a snapshot install.

use std::sync::Arc;

use kv_api::{Command, CommandResponse, Error, MemBackend, MvccStore};
use proto::etcdserverpb as pb;
use proto::mvccpb::event::EventType;

fn apply(store: &mut MvccStore, cmd: Command) -> Result<CommandResponse, Error> {
    let resp = store.apply(&cmd);
    store.commit().expect("commit");
    resp
}

fn grant(id: i64, ttl: i64) -> Command {
    Command::LeaseGrant(pb::LeaseGrantRequest { ttl, id })
}

fn revoke(id: i64) -> Command {
    Command::LeaseRevoke(pb::LeaseRevokeRequest { id })
}

fn put(key: &str, lease: i64) -> Command {
    Command::Put(pb::PutRequest { key: key.into(), value: b"v".to_vec(), lease, ..Default::default() })
}

fn keys(store: &MvccStore, id: i64) -> Option<Vec<String>> {
    let lease = store.lease(id)?;
    Some(lease.keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect())
}

#[test]
fn leases_hold_their_keys_and_revoke_deletes_them_at_one_revision() {
    let backend = Arc::new(MemBackend::default());
    let mut store = MvccStore::open(backend.clone()).expect("open");
    apply(&mut store, grant(1, 10)).expect("grant");
    apply(&mut store, grant(2, 20)).expect("grant");
    assert_eq!(store.current_revision(), 1, "a grant takes no revision");
    assert_eq!(apply(&mut store, grant(1, 5)), Err(Error::LeaseExists));
    assert_eq!(apply(&mut store, put("x", 3)), Err(Error::LeaseNotFound));

    apply(&mut store, put("a", 1)).expect("put"); // 2
    apply(&mut store, put("b", 1)).expect("put"); // 3
    apply(&mut store, put("c", 2)).expect("put"); // 4
    apply(&mut store, put("b", 2)).expect("put"); // 5: b moves to lease 2
    apply(&mut store, put("c", 0)).expect("put"); // 6: c leaves its lease
    assert_eq!(keys(&store, 1), Some(vec!["a".into()]));
    assert_eq!(keys(&store, 2), Some(vec!["b".into()]));
    assert_eq!(store.leases(), vec![(1, 10), (2, 20)]);

    // A reopened store and an installed snapshot know the same leases and keys.
    let reopened = MvccStore::open(backend.clone()).expect("reopen");
    assert_eq!(keys(&reopened, 2), Some(vec!["b".into()]));
    let mut installed = MvccStore::open(Arc::new(MemBackend::default())).expect("open");
    installed.install(store.export().expect("export")).expect("install");
    assert_eq!(keys(&installed, 1), Some(vec!["a".into()]));

    store.take_events();
    let CommandResponse::LeaseRevoke(resp) = apply(&mut store, revoke(2)).expect("revoke") else {
        panic!("a revoke answers with a revoke response")
    };
    assert_eq!(resp.header.map(|h| h.revision), Some(7), "the revoke's deletes take one revision");
    let events = store.take_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].r#type, EventType::Delete as i32);
    assert_eq!(events[0].kv.as_ref().map(|kv| (kv.key.clone(), kv.mod_revision)), Some((b"b".to_vec(), 7)));
    assert_eq!(store.lease(2), None);
    assert_eq!(apply(&mut store, revoke(2)), Err(Error::LeaseNotFound));

    // Revoking a lease without keys takes no revision.
    apply(&mut store, put("a", 0)).expect("put"); // 8
    apply(&mut store, revoke(1)).expect("revoke");
    assert_eq!(store.current_revision(), 8);
    assert!(MvccStore::open(backend).expect("reopen").leases().is_empty());
}
