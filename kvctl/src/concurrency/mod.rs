//! Client-side recipes built only on KV, Watch and Lease, as clientv3's `concurrency` package
//! builds them, so `lock` and `elect` work against any etcd-compatible server (no Lock or
//! Election service needed).
//!
//! # Layout
//!
//! - [`watcher`]: one gRPC Watch stream with clientv3's watch semantics (also used by `watch`
//!   and `make-mirror`).
//! - [`session`]: a lease kept alive in the background.
//! - [`mutex`]: the distributed lock (`lock`).
//! - [`election`]: campaign, proclaim, resign, observe (`elect`).
//! - `key`: the ranges, txn pieces and delete-waiting the recipes share.

pub mod election;
mod key;
pub mod mutex;
pub mod session;
pub mod watcher;

pub use election::Election;
pub use mutex::Mutex;
pub use session::Session;
pub use watcher::{Delivery, WatchHandle, WatchResponse, WatchStream};
