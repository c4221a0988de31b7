//! Small helpers shared by the client tests.

use etcd_client::{Client, KeyValue, ResponseHeader};

/// The keys of `kvs` as strings, in order.
pub fn keys(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect()
}

/// The values of `kvs` as strings, in order.
pub fn values(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter().map(|kv| String::from_utf8_lossy(kv.value()).into_owned()).collect()
}

/// The header every response must carry.
#[track_caller]
pub fn header(header: Option<&ResponseHeader>) -> &ResponseHeader {
    header.expect("response without a header")
}

/// The store's current revision, read with a linearizable get of a key nobody writes.
pub async fn current_revision(client: &mut Client) -> anyhow::Result<i64> {
    Ok(header(client.get("\u{1}probe", None).await?.header()).revision())
}

/// Puts each pair in order (one revision each) and returns the revision of the last put.
pub async fn put_all(client: &mut Client, pairs: &[(&str, &str)]) -> anyhow::Result<i64> {
    let mut revision = 0;
    for (key, value) in pairs {
        revision = header(client.put(*key, *value, None).await?.header()).revision();
    }
    Ok(revision)
}
