//! The put every scale probe repeats: request `seq` writes key `seq % keys` of a prefix, so that a
//! total of puts cycles over a key space (the load writes each of its keys `--puts / --keys` times,
//! the watch probe's puts reach every watched key in turn). Shared by the probes, which run it
//! through the benchmark's closed-loop driver ([`crate::bench::workload::drive`]).

use std::future::Future;

use proto::etcdserverpb as pb;
use tonic::transport::Channel;

use crate::bench::options::Stop;
use crate::bench::stats::Stats;
use crate::bench::workload::{connect_all, drive, Caller};
use crate::error::Result;

/// etcd's benchmark shape for a heavy put load (`put --clients 100 --conns 10`).
pub const CLIENTS: usize = 100;
pub const CONNS: usize = 10;

/// Key `n` of `prefix`: the prefix, then `n` in 10 decimal digits (so keys sort as numbers).
pub fn key(prefix: &str, n: u64) -> Vec<u8> {
    format!("{prefix}{n:010}").into_bytes()
}

/// Puts of `key(prefix, seq % keys)` with a fixed value.
pub struct CyclingPut {
    kv: pb::kv_client::KvClient<Channel>,
    prefix: &'static str,
    keys: u64,
    value: Vec<u8>,
}

impl CyclingPut {
    pub fn new(channel: Channel, prefix: &'static str, keys: u64, value_size: usize) -> CyclingPut {
        CyclingPut {
            kv: pb::kv_client::KvClient::new(channel),
            prefix,
            keys: keys.max(1),
            value: vec![b'v'; value_size],
        }
    }
}

impl Caller for CyclingPut {
    fn call(&mut self, seq: u64) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        let request =
            pb::PutRequest { key: key(self.prefix, seq % self.keys), value: self.value.clone(), ..Default::default() };
        async move { self.kv.put(request).await.map(|_| ()) }
    }
}

/// Puts over `keys` keys of `prefix` from [`CLIENTS`] clients on [`CONNS`] connections to `url`
/// until `stop` (a total of puts, or a time); the first error any client saw comes with the stats.
pub async fn put_many(
    url: &str,
    prefix: &'static str,
    keys: u64,
    stop: Stop,
    value_size: usize,
    timeout: std::time::Duration,
) -> Result<(Stats, Option<String>)> {
    let channels = connect_all(&[url.to_string()], CONNS).await?;
    let callers =
        (0..CLIENTS).map(|c| CyclingPut::new(channels[c % channels.len()].clone(), prefix, keys, value_size)).collect();
    Ok(drive(callers, stop, timeout).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_as_their_numbers() {
        assert_eq!(key("load/", 7), b"load/0000000007".to_vec());
        assert!(key("k", 99) < key("k", 100));
    }
}
