//! Finding our `kvctl` binary, for tests of what only it does (`snapshot restore` into our data dirs).

use std::path::PathBuf;

use anyhow::{bail, Context};

/// `KVCTL_BIN`, or the `kvctl` next to this test executable's `deps/` directory (build it with
/// `cargo build -p kvctl`).
pub fn kvctl_bin() -> anyhow::Result<PathBuf> {
    let path = match std::env::var_os("KVCTL_BIN") {
        Some(path) => PathBuf::from(path),
        None => {
            // current_exe() is target/<profile>/deps/<test>-<hash>.
            let exe = std::env::current_exe().context("current_exe")?;
            exe.parent().context("test executable has no parent dir")?.join("../kvctl")
        }
    };
    if !path.is_file() {
        bail!("kvctl binary {} not found (build it with `cargo build -p kvctl`, or set KVCTL_BIN)", path.display());
    }
    Ok(path)
}
