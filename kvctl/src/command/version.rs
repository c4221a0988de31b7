//! `version`: etcdctl prints its own and the API version without dialing, whatever `-w` says.

use crate::dialect::Dialect;

pub fn output() -> String {
    let (etcdctl, api) = Dialect::current().versions();
    format!("etcdctl version: {etcdctl}\nAPI version: {api}\n")
}
