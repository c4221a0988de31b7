//! kvctl against etcdctl 3.4 for `txn`: the stdin grammar (every comparison target and operator,
//! put/get/del with their flags, quoting), interactive prompts, the error texts and crashes on
//! malformed input, and every output format — on real etcd and on ours.

mod common;

use common::{compare, etcd_tools_present, Step};
use tests::ServerKind;

/// `(extra args before/after "txn", stdin)`; every script line ends in a newline as etcdctl needs.
const TXNS: &[(&[&str], &str)] = &[
    (&["put", "k1", "v1"], ""),
    (&["put", "k2", "v2"], ""),
    // Every target and operator, success and failure branches, in each output format.
    (&["txn"], "value(\"k1\") = \"v1\"\n\nput k2 v22 --prev-kv\nget k1\ndel k3 --prev-kv\n\nput k3 v3\n\n"),
    (&["-w", "json", "txn"], "val(\"k1\") != \"v1\"\n\nput k3 x\n\nput k3 v3\nget k --prefix\nget zz\n\n"),
    (&["-w", "fields", "txn"], "ver(\"k1\") > \"0\"\nversion(\"k2\") < \"9\"\n\nput k4 v4 --prev-kv\nget k --prefix --limit 2\ndel k3 --prev-kv\n\n\n"),
    (&["-w", "json", "txn"], "c(\"k1\") = \"2\"\ncreate(\"k2\") != \"0\"\n\ndel k --prefix --prev-kv\n\n\n"),
    (&["-w", "fields", "txn"], "m(\"k1\") > \"100\"\n\n\nput k1 w\nget k1 --keys-only\n\n"),
    (&["txn"], "mod(\"k1\") < \"100\"\n\nput k5 v5\nget k --from-key --rev 3\ndel k5 k9\n\n\n"),
    (&["--hex", "txn"], "\nput k6 v6 --prev-kv\nget k6\n\n\n"),
    (&["-w", "table", "txn"], "\nput k7 v7\n\n\n"),
    (&["txn"], "\n\n\n"),
    (&["-w", "json", "txn"], "\n\n\n"),
    (&["-w", "fields", "txn"], "\n\n\n"),
    // Quoting: Go's %q and back quotes in comparisons, argify's words in ops.
    (&["txn"], "value(`k1`) = `w` trailing words\n  value(\"\\x6b2\")   =   \"v22\"  \n\nput \"a b\" \"c\\td\"\nget \"a b\"\n\n\n"),
    (&["txn"], "\nput 'ab' 'cd'\nput 'abcdefg' 'cdefgh' --prev-kv\nget a --prefix\n\n\n"),
    (&["txn"], "\nput \"q v\nget q\n\n\n"),
    (&["txn"], "\nget k --prefix=true --keys-only=false\ndel nothing --prev-kv=1\n\n\n"),
    (&["txn"], "\ndel nothing --prev-kv=maybe\n\n\n"),
    (&["-w", "json", "txn"], "\nget k --prefix --sort-by=VALUE --order=DESCEND --limit=1\nget k --prefix --consistency s\n\n\n"),
    // Interactive mode prompts, also when the input ends early.
    (&["txn", "-i"], "mod(\"k1\") > \"0\"\n\nput k1 x\n\nget k1\n\n"),
    (&["txn", "--interactive"], "mod(\"k1\") > \"0\"\n\nput k1 x\n"),
    (&["txn", "-i"], "bad\n"),
    (&["-w", "json", "txn", "-i"], "\nget k1\n\n\n"),
    // Malformed input: etcdctl's texts and exit codes.
    (&["txn"], ""),
    (&["txn"], "\n"),
    (&["txn"], "\n\nput a b"),
    (&["txn"], "value(\"k1\")=\"v1\"\n\n\n\n"),
    (&["txn"], "value(\"k1\") =\n\n\n\n"),
    (&["txn"], "value(\"k1\" ) = \"v1\"\n\n\n\n"),
    (&["txn"], "value(k1) = \"v1\"\n\n\n\n"),
    (&["txn"], "value(\"k1\") = v1\n\n\n\n"),
    (&["txn"], "foo(\"k1\") = \"v1\"\n\n\n\n"),
    (&["txn"], "value \"k1\" = \"v1\"\n\n\n\n"),
    (&["txn"], "ver(\"k1\") = \"x\"\n\n\n\n"),
    (&["txn"], "ver(\"k1\") == \"x\"\n\n\n\n"),
    (&["txn"], "val(\"k\\q1\") = \"v\"\n\n\n\n"),
    (&["txn"], "val(\"k1) = \"v\"\n\n\n\n"),
    (&["txn"], "value(\n\n\n\n"),
    (&["txn"], "\nput\n\n\n"),
    (&["txn"], "\nput a\n\n\n"),
    (&["txn"], "\nfoo a b\n\n\n"),
    (&["txn"], "\nget k1 -w json\n\n\n"),
    (&["txn"], "\nget k1 --limit=x\n\n\n"),
    (&["txn"], "\nput a b --lease=zz\n\n\n"),
    (&["txn"], "\nput a --ignore-value b\n\n\n"),
    (&["txn"], "\nget a --consistency=x\n\n\n"),
    (&["txn"], "\nget a --order=x\n\n\n"),
    (&["txn"], "\nget a --sort-by=x\n\n\n"),
    (&["txn"], "\nget a --prefix --from-key\n\n\n"),
    (&["txn"], "\ndel a b c\n\n\n"),
    (&["txn"], "\nput \"a\\q\" v\n\n\n"),
    // etcdctl crashes (a Go panic, exit status 2) on these.
    (&["txn"], "value(\"k1\") == \"v1\"\n\n\n\n"),
    (&["txn"], "ver(\"k1\") == \"1\"\n\n\n\n"),
    (&["txn"], "lease(\"k1\") = \"0\"\n\n\n\n"),
    (&["txn"], "\nput 'a' v x y\n\n\n"),
    (&["txn"], "\n'abc'\n\n\n"),
    // The server's own refusals.
    (&["txn"], "\nput k1 y\nput k1 z\n\n\n"),
    (&["txn"], "\nget k1 --rev 1000\n\n\n"),
    (&["txn", "extra"], "\n\n\n"),
    (&["get", "", "--prefix", "-w", "json"], ""),
];

fn script() -> Vec<Step<'static>> {
    TXNS.iter()
        .map(|(args, stdin)| Step { args, stdin: (!stdin.is_empty() || args.contains(&"txn")).then_some(*stdin) })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_matches_etcdctl_on_real_etcd() {
    if etcd_tools_present() {
        compare(ServerKind::Etcd, &script()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_matches_etcdctl_on_our_server() {
    if etcd_tools_present() {
        compare(ServerKind::Ours, &script()).await;
    }
}
