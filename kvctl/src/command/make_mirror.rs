//! `make-mirror [options] <destination>`
//!
//! Copies the keys under `--prefix` to another cluster as of one revision, then follows the
//! source with a watch and replays every revision's changes there in one txn (clientv3's
//! `mirror.Syncer`). Every 30 seconds it prints how many keys it has copied so far.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Args};
use proto::etcdserverpb as pb;
use proto::mvccpb::event::EventType;

use super::watch::write_stdout;
use crate::concurrency::watcher::ERR_COMPACTED;
use crate::concurrency::{Delivery, WatchStream};
use crate::error::{CliError, EXIT_ERROR};
use crate::global::{parse_go_bool, Conn, GlobalFlags};
use crate::prefix::prefix_end;

#[derive(Debug, Clone, Args)]
pub struct MakeMirrorCommand {
    /// Key-value prefix to mirror
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// destination prefix to mirror a prefix to a different prefix in the destination cluster
    #[arg(long, default_value = "")]
    pub dest_prefix: String,
    /// mirror key-values to the root of the destination cluster
    #[arg(long)]
    pub no_dest_prefix: bool,
    /// Identify secure client using this TLS certificate file for the destination cluster
    #[arg(long)]
    pub dest_cert: Option<String>,
    /// Identify secure client using this TLS key file
    #[arg(long)]
    pub dest_key: Option<String>,
    /// Verify certificates of TLS enabled secure servers using this CA bundle
    #[arg(long)]
    pub dest_cacert: Option<String>,
    /// Disable transport security for client connections
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = parse_go_bool,
        action = ArgAction::Set
    )]
    pub dest_insecure_transport: bool,

    /// <destination>
    pub args: Vec<String>,
}

/// clientv3's `mirror` page size.
const BATCH_LIMIT: i64 = 1000;
const REPORT_EVERY: Duration = Duration::from_secs(30);

type KvClient = pb::kv_client::KvClient<Conn>;

impl MakeMirrorCommand {
    pub async fn run(&self, global: &GlobalFlags) -> Result<String, CliError> {
        let [destination] = self.args.as_slice() else {
            return Err(CliError::bad_args("make-mirror takes one destination argument"));
        };
        let dest = KvClient::new(self.destination_flags(global, destination).connect().await?);
        let source = global.connect().await?;
        let total = Arc::new(AtomicI64::new(0));
        let reporter = tokio::spawn(report(total.clone()));
        let result = self.mirror(&source, dest, &total).await;
        reporter.abort();
        result.map(|()| String::new())
    }

    /// The destination is dialed with the `--dest-*` TLS flags and no credentials, the other
    /// global flags (timeouts, keepalive) as given.
    fn destination_flags(&self, global: &GlobalFlags, destination: &str) -> GlobalFlags {
        GlobalFlags {
            endpoints: vec![destination.to_string()],
            cert: self.dest_cert.clone(),
            key: self.dest_key.clone(),
            cacert: self.dest_cacert.clone(),
            insecure_transport: self.dest_insecure_transport,
            insecure_skip_tls_verify: false,
            user: String::new(),
            password: String::new(),
            ..global.clone()
        }
    }

    /// The destination key for a source key: the first occurrence of `--prefix` replaced by the
    /// destination prefix (Go's `strings.Replace(key, prefix, dest, 1)`, which puts `dest` in
    /// front when `prefix` is empty).
    fn dest_key(&self, dest_prefix: &[u8], key: &[u8]) -> Vec<u8> {
        let prefix = self.prefix.as_bytes();
        let at = if prefix.is_empty() { Some(0) } else { key.windows(prefix.len()).position(|w| w == prefix) };
        match at {
            Some(at) => [&key[..at], dest_prefix, &key[at + prefix.len()..]].concat(),
            None => key.to_vec(),
        }
    }

    /// etcdctl's `makeMirror`: only returns with an error (a watch that just ends is Go's
    /// `Error: <nil>`).
    async fn mirror(&self, source: &Conn, mut dest: KvClient, total: &AtomicI64) -> Result<(), CliError> {
        let mut kv = KvClient::new(source.clone());
        // The revision everything is copied at: the current one.
        let probe = pb::RangeRequest { key: b"foo".to_vec(), ..Default::default() };
        let rev = kv.range(probe).await?.into_inner().header.map_or(0, |h| h.revision);
        if self.no_dest_prefix && !self.dest_prefix.is_empty() {
            return Err(CliError::bad_args(
                "`--dest-prefix` and `--no-dest-prefix` cannot be set at the same time, choose one",
            ));
        }
        let dest_prefix = if !self.no_dest_prefix && self.dest_prefix.is_empty() {
            self.prefix.as_bytes()
        } else {
            self.dest_prefix.as_bytes()
        };
        let (key, range_end) = self.source_range();
        self.sync_base(&mut kv, &mut dest, dest_prefix, (key.clone(), range_end.clone()), rev, total).await?;
        let request = pb::WatchCreateRequest { key, range_end, start_revision: rev + 1, ..Default::default() };
        let (mut stream, _) = WatchStream::open(source, false, request).await?;
        while let Some(delivery) = stream.next().await {
            let Delivery::Response(_, resp) = delivery else { continue };
            if resp.compact_revision != 0 {
                return Err(CliError::new(EXIT_ERROR, ERR_COMPACTED));
            }
            self.replay(&mut dest, dest_prefix, resp.events(), total).await?;
        }
        Err(CliError::new(EXIT_ERROR, "<nil>"))
    }

    /// `[key, range_end)` of `--prefix`; the whole keyspace without one.
    fn source_range(&self) -> (Vec<u8>, Vec<u8>) {
        if self.prefix.is_empty() {
            (vec![0], vec![0])
        } else {
            (self.prefix.as_bytes().to_vec(), prefix_end(self.prefix.as_bytes()))
        }
    }

    /// Copies every key in the range as of `rev`, page by page.
    async fn sync_base(
        &self,
        kv: &mut KvClient,
        dest: &mut KvClient,
        dest_prefix: &[u8],
        (mut key, range_end): (Vec<u8>, Vec<u8>),
        rev: i64,
        total: &AtomicI64,
    ) -> Result<(), CliError> {
        loop {
            let page = pb::RangeRequest {
                key: key.clone(),
                range_end: range_end.clone(),
                limit: BATCH_LIMIT,
                revision: rev,
                ..Default::default()
            };
            let resp = kv.range(page).await?.into_inner();
            for item in &resp.kvs {
                let put = pb::PutRequest {
                    key: self.dest_key(dest_prefix, &item.key),
                    value: item.value.clone(),
                    ..Default::default()
                };
                dest.put(put).await?;
                total.fetch_add(1, Ordering::Relaxed);
            }
            match resp.kvs.last() {
                Some(last) if resp.more => key = [last.key.as_slice(), &[0]].concat(),
                _ => return Ok(()),
            }
        }
    }

    /// Applies a watch response's events, one txn per source revision.
    async fn replay(
        &self,
        dest: &mut KvClient,
        dest_prefix: &[u8],
        events: &[proto::mvccpb::Event],
        total: &AtomicI64,
    ) -> Result<(), CliError> {
        let mut ops = Vec::new();
        let mut last_rev = 0;
        for event in events {
            let kv = event.kv.clone().unwrap_or_default();
            if last_rev != 0 && kv.mod_revision > last_rev {
                commit(dest, std::mem::take(&mut ops)).await?;
            }
            last_rev = kv.mod_revision;
            let key = self.dest_key(dest_prefix, &kv.key);
            let request = if event.r#type == EventType::Delete as i32 {
                pb::request_op::Request::RequestDeleteRange(pb::DeleteRangeRequest { key, ..Default::default() })
            } else {
                pb::request_op::Request::RequestPut(pb::PutRequest { key, value: kv.value, ..Default::default() })
            };
            ops.push(pb::RequestOp { request: Some(request) });
            total.fetch_add(1, Ordering::Relaxed);
        }
        if !ops.is_empty() {
            commit(dest, ops).await?;
        }
        Ok(())
    }
}

async fn commit(dest: &mut KvClient, ops: Vec<pb::RequestOp>) -> Result<(), CliError> {
    dest.txn(pb::TxnRequest { compare: Vec::new(), success: ops, failure: Vec::new() }).await?;
    Ok(())
}

/// Prints the number of keys copied so far, every 30 seconds, as etcdctl does.
async fn report(total: Arc<AtomicI64>) {
    loop {
        tokio::time::sleep(REPORT_EVERY).await;
        write_stdout(&format!("{}\n", total.load(Ordering::Relaxed)));
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::command::{Cli, Command};

    fn parse(argv: &[&str]) -> MakeMirrorCommand {
        let cli = Cli::try_parse_from(argv).expect("parses");
        let Command::MakeMirror(mirror) = cli.command else { panic!("not make-mirror") };
        mirror
    }

    #[test]
    fn flags_parse_like_etcdctl() {
        let cmd = parse(&["kvctl", "make-mirror", "--prefix", "a/", "--dest-prefix=b/", "127.0.0.1:1"]);
        assert_eq!((cmd.prefix.as_str(), cmd.dest_prefix.as_str()), ("a/", "b/"));
        assert!(cmd.dest_insecure_transport && !cmd.no_dest_prefix);
        assert_eq!(cmd.args, ["127.0.0.1:1"]);
        let cmd = parse(&[
            "kvctl",
            "make-mirror",
            "--no-dest-prefix",
            "--dest-insecure-transport=false",
            "--dest-cacert",
            "ca.pem",
            "--dest-cert=c.pem",
            "--dest-key",
            "k.pem",
            "d:2",
        ]);
        assert!(cmd.no_dest_prefix && !cmd.dest_insecure_transport);
        assert_eq!(
            (cmd.dest_cacert.as_deref(), cmd.dest_cert.as_deref(), cmd.dest_key.as_deref()),
            (Some("ca.pem"), Some("c.pem"), Some("k.pem"))
        );
    }

    #[test]
    fn destination_keys_like_strings_replace() {
        let cmd = parse(&["kvctl", "make-mirror", "--prefix", "a/", "d"]);
        assert_eq!(cmd.dest_key(b"b/", b"a/x"), b"b/x");
        assert_eq!(cmd.dest_key(b"", b"a/x"), b"x");
        let no_prefix = parse(&["kvctl", "make-mirror", "d"]);
        assert_eq!(no_prefix.dest_key(b"p/", b"x"), b"p/x");
        assert_eq!(no_prefix.dest_key(b"", b"x"), b"x");
        assert_eq!(no_prefix.source_range(), (vec![0], vec![0]));
        assert_eq!(cmd.source_range(), (b"a/".to_vec(), b"a0".to_vec()));
    }

    #[tokio::test]
    async fn one_destination() {
        let global = Cli::try_parse_from(["kvctl", "get", "x"]).expect("parses").global;
        for argv in [&["kvctl", "make-mirror"][..], &["kvctl", "make-mirror", "a", "b"]] {
            let err = parse(argv).run(&global).await.expect_err("bad count");
            assert_eq!((err.code, err.message.as_str()), (128, "make-mirror takes one destination argument"));
        }
    }
}
