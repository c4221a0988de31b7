//! The member's identity, fixed at first boot and kept in the data dir: as in etcd, a restarted member
//! keeps its ids whatever bootstrap flags it is given.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub member_id: u64,
    pub cluster_id: u64,
}

fn path(member_dir: &Path) -> PathBuf {
    member_dir.join("identity.json")
}

impl Identity {
    /// The identity saved in `member_dir`, if this member booted before.
    pub fn load(member_dir: &Path) -> std::io::Result<Option<Self>> {
        match std::fs::read(path(member_dir)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Saves the identity durably (write to a temp file, fsync, rename).
    pub fn save(&self, member_dir: &Path) -> std::io::Result<()> {
        let tmp = member_dir.join("identity.json.tmp");
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        {
            let mut file = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, &bytes)?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path(member_dir))?;
        std::fs::File::open(member_dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Identity::load(dir.path()).unwrap(), None);
        let id = Identity { member_id: 7, cluster_id: 9 };
        id.save(dir.path()).unwrap();
        assert_eq!(Identity::load(dir.path()).unwrap(), Some(id));
    }
}
