//! `version`: etcdctl prints its own and the API version without dialing, whatever `-w` says.

/// The etcdctl release whose output kvctl reproduces.
pub const ETCDCTL_VERSION: &str = "3.4.23";
pub const API_VERSION: &str = "3.4";

pub fn output() -> String {
    format!("etcdctl version: {ETCDCTL_VERSION}\nAPI version: {API_VERSION}\n")
}
