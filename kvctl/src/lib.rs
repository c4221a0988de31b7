//! `kvctl`: an etcdctl 3.4 look-alike that speaks etcd's v3 gRPC API directly.
//!
//! The promise: whatever a user types into `etcdctl`, they can type into `kvctl` and see the same
//! bytes on stdout, the same `Error:` line on stderr and the same exit code.
//!
//! # Layout
//!
//! - [`args`]: clap parsing with cobra's edges (Go bool values, cobra's error texts and exit codes).
//! - [`global`]: etcdctl's global flags (`--endpoints`, timeouts, keepalive, `-w`, `--hex`, TLS,
//!   `--user`), each also read from `ETCDCTL_<FLAG>`, and dialing.
//! - [`transport`]: TLS as clientv3 sets it up (`--cacert/--cert/--key`, `https://`, skip-verify).
//! - [`auth`]: `--user` login (Authenticate, then the token on every request) and password prompts
//!   as etcdctl's (speakeasy) ask them.
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
pub mod error;
pub mod global;
pub mod printer;
pub mod transport;

pub use command::Cli;
pub use error::CliError;
