//! openraft's storage test suite, on a fresh database per test.

use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

use crate::storage::{open, LogStore, StateMachine};
use crate::typ::{StorageError, TypeConfig};

/// Opens each store in its own temp dir, removed when the suite drops the guard.
struct TempStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for TempStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log_store, state_machine, _store) = open(&dir.path().join("db"))?;
        Ok((dir, log_store, state_machine))
    }
}

#[test]
fn openraft_suite() -> Result<(), StorageError> {
    Suite::test_all(TempStoreBuilder)
}
