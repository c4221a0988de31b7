//! One member of a cluster: openraft on sled, serving etcd's gRPC API.
//!
//! # Layout
//!
//! - [`typ`]: the openraft type configuration and aliases.
//! - [`storage`]: the sled log store, the sled [`kv_api::Backend`] and the state machine (with snapshots).

pub mod storage;
pub mod typ;
