//! kvctl against etcdctl 3.4 for the key-value verbs (`get`, `put`, `del`, `compaction`), `member
//! list`, `endpoint status|hashkv` and `version`, in every output format: the same script runs
//! through both, each against its own fresh server — real etcd, and ours.

mod common;

use common::{compare, etcd_tools_present, steps};
use tests::ServerKind;

const SCRIPT: &[&[&str]] = &[
    &["put", "foo", "bar"],
    &["put", "foo", "baz", "--prev-kv"],
    &["-w", "json", "put", "foo", "qux", "--prev-kv"],
    &["put", "k1", "v1"],
    &["put", "k2", "v2"],
    &["put", "k3", "v3"],
    &["get", "foo"],
    &["-w", "json", "get", "foo"],
    &["get", "k", "--prefix"],
    &["get", "k", "--prefix", "--keys-only"],
    &["get", "k", "--prefix", "--print-value-only"],
    &["get", "k", "--prefix", "--limit", "2", "-w", "json"],
    &["get", "k1", "k3"],
    // etcdctl reads only the first two arguments of get.
    &["get", "k1", "k3", "k9"],
    &["get", "k1", "k3", "--prefix", "--order=x"],
    &["get", "k1", "--rev", "-1"],
    &["get", "k", "--from-key"],
    &["get", "foo", "--rev", "2"],
    &["get", "k", "--prefix", "--order", "DESCEND", "--sort-by", "MODIFY"],
    &["get", "k", "--prefix", "--sort-by=VALUE", "--order=ASCEND", "-w", "json"],
    &["get", "foo", "--consistency", "s"],
    &["get", "foo", "--consistency", "x"],
    &["get", "--hex", "k1"],
    &["put", "odd", "a\x01\"\\é\t\u{2028}"],
    &["get", "odd"],
    &["-w", "json", "get", "odd"],
    &["-w", "fields", "get", "odd"],
    &["-w", "fields", "get", "k", "--prefix", "--limit", "1"],
    &["-w", "fields", "put", "odd", "x", "--prev-kv"],
    &["-w", "table", "get", "odd"],
    &["-w", "table", "put", "odd", "y"],
    &["get", "nope"],
    &["-w", "json", "get", "nope"],
    &["get"],
    &["get", "k", "--prefix", "--from-key"],
    &["put"],
    &["put", "k9", "v", "--lease", "zz"],
    &["del", "k", "--prefix", "--prev-kv"],
    &["-w", "json", "del", "foo", "--prev-kv"],
    &["-w", "json", "del", "absent"],
    &["-w", "fields", "del", "odd", "--prev-kv"],
    &["del"],
    &["compaction", "5"],
    &["get", "foo", "--rev", "5", "-w", "json"],
    &["get", "foo", "--rev", "3"],
    &["get", "foo", "--rev", "100"],
    &["compaction", "3"],
    &["-w", "json", "compaction", "--physical", "7"],
    &["compaction"],
    &["member", "list"],
    &["-w", "json", "member", "list"],
    &["-w", "fields", "member", "list"],
    // Not `endpoint status` in simple form: its humanized db size differs between two servers.
    &["-w", "json", "endpoint", "status"],
    &["-w", "fields", "endpoint", "status"],
    &["endpoint", "hashkv"],
    &["-w", "json", "endpoint", "hashkv", "--rev", "8"],
    &["-w", "fields", "endpoint", "hashkv"],
    // Tables only where no column width depends on the member id (its hex length varies).
    &["-w", "table", "endpoint", "hashkv"],
    &["version"],
    &["-w", "json", "version"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_matches_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare(ServerKind::Etcd, &steps(SCRIPT)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kvctl_matches_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare(ServerKind::Ours, &steps(SCRIPT)).await;
    }
}
