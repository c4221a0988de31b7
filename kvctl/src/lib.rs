//! `kvctl`: an etcdctl 3.4 look-alike that speaks etcd's v3 gRPC API directly.
//!
//! The promise: whatever a user types into `etcdctl`, they can type into `kvctl` and see the same
//! bytes on stdout, the same `Error:` line on stderr and the same exit code.
//!
//! # Layout
//!
//! - [`dialect`]: etcdctl 3.6's output (the default) or 3.4's (`KVCTL_ETCDCTL_VERSION=3.4`) where they differ.
//! - [`args`]: clap parsing with cobra's edges (Go bool values, cobra's error texts and exit codes).
//! - [`global`]: etcdctl's global flags (`--endpoints`, timeouts, keepalive, `-w`, `--hex`, TLS,
//!   `--user`), each also read from `ETCDCTL_<FLAG>`, and dialing.
//! - [`transport`]: TLS as clientv3 sets it up (`--cacert/--cert/--key`, `https://`, skip-verify).
//! - [`auth`]: `--user` login (Authenticate, then the token on every request) and password prompts
//!   as etcdctl's (speakeasy) ask them.
//! - [`prefix`]: clientv3's prefix-to-range rule (`--prefix`), which verbs and printers share.
//! - [`token`]: the auth token attached to every request after a login.
//! - [`error`]: [`CliError`], an exit code plus the message etcdctl would print after `Error: `.
//! - [`command`]: one file per verb (`get`, `put`, `del`, `compaction`, `member list`,
//!   `endpoint status|hashkv`, `version`, `auth`, `user`, `role`, …); each builds the request
//!   exactly as etcdctl's clientv3 would, sends it and hands the response to a printer.
//! - [`concurrency`]: clientv3's client-side recipes (session, mutex, election) and its watch
//!   stream semantics, for `lock`, `elect`, `watch` and `make-mirror`.
//! - [`printer`]: one module per output format (`simple`, `json`, `fields`, `table`, and
//!   `protobuf`, which only the `auth`/`user`/`role` verbs print so far).

pub mod args;
pub mod auth;
pub mod command;
pub mod concurrency;
pub mod dialect;
pub mod error;
pub mod global;
pub mod prefix;
pub mod printer;
pub mod token;
pub mod transport;

pub use command::Cli;
pub use error::CliError;

#[cfg(test)]
mod tests {
    /// The CLI sits beside the member, not on top of it: `snapshot restore` runs `kvutl` instead of
    /// linking the member's storage.
    #[test]
    fn kvctl_links_neither_the_member_nor_raft_nor_sled() {
        let out = std::process::Command::new(env!("CARGO"))
            .args(["tree", "--package", "kvctl", "--edges", "normal", "--prefix", "none"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo tree");
        assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
        let tree = String::from_utf8_lossy(&out.stdout);
        assert!(tree.lines().any(|line| line.starts_with("kv-api ")), "the tree lists kvctl's dependencies:\n{tree}");
        for crate_name in ["raft-node ", "openraft ", "sled "] {
            assert!(!tree.lines().any(|line| line.starts_with(crate_name)), "kvctl links {crate_name}");
        }
    }
}
