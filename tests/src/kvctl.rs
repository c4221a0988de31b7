//! Finding our `kvctl` and `kvutl` binaries, for tests of what only they do (`snapshot restore` into our
//! data dirs, `snapshot status` of etcd's files).

use std::path::PathBuf;

use anyhow::{bail, Context};

/// `KVCTL_BIN`, or the `kvctl` next to this test executable's `deps/` directory (build it with
/// `cargo build -p kvctl`).
pub fn kvctl_bin() -> anyhow::Result<PathBuf> {
    workspace_bin("kvctl", "KVCTL_BIN")
}

/// `KVUTL_BIN`, or the `kvutl` next to this test executable's `deps/` directory (build it with
/// `cargo build -p kvutl`).
pub fn kvutl_bin() -> anyhow::Result<PathBuf> {
    workspace_bin("kvutl", "KVUTL_BIN")
}

fn workspace_bin(name: &str, variable: &str) -> anyhow::Result<PathBuf> {
    let path = match std::env::var_os(variable) {
        Some(path) => PathBuf::from(path),
        None => {
            // current_exe() is target/<profile>/deps/<test>-<hash>.
            let exe = std::env::current_exe().context("current_exe")?;
            exe.parent().context("test executable has no parent dir")?.join("..").join(name)
        }
    };
    if !path.is_file() {
        bail!("{name} binary {} not found (build it with `cargo build -p {name}`, or set {variable})", path.display());
    }
    Ok(path)
}
