//! Helpers shared by the watch tests: receiving with a deadline, and a compact text form of watch
//! responses (free of member ids) so that expectations read like etcd's behaviour.

use std::time::Duration;

use etcd_client::{Event, EventType, KeyValue, WatchResponse, WatchStream};

/// How long a test waits for a response it expects.
pub const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// The next response of `stream`; fails the test on timeout, error or end of stream.
pub async fn recv(stream: &mut WatchStream) -> WatchResponse {
    match tokio::time::timeout(RECV_TIMEOUT, stream.message()).await {
        Ok(Ok(Some(resp))) => resp,
        Ok(Ok(None)) => panic!("the watch stream ended"),
        Ok(Err(err)) => panic!("the watch stream failed: {err}"),
        Err(_) => panic!("no watch response within {RECV_TIMEOUT:?}"),
    }
}

/// The next response, described.
pub async fn next(stream: &mut WatchStream) -> String {
    describe(&recv(stream).await)
}

/// The description of whatever arrives within `wait`, or `None`.
pub async fn within(stream: &mut WatchStream, wait: Duration) -> Option<String> {
    match tokio::time::timeout(wait, stream.message()).await {
        Ok(Ok(Some(resp))) => Some(describe(&resp)),
        Ok(Ok(None)) => Some("<end of stream>".to_owned()),
        Ok(Err(err)) => Some(format!("<error: {err}>")),
        Err(_) => None,
    }
}

/// Whether the response carries `fragment = true` (the client crate has no accessor for it).
pub fn is_fragment(resp: &WatchResponse) -> bool {
    format!("{resp:?}").contains("fragment: true")
}

/// `id=0 created rev=2`, `id=3 rev=5 PUT a=1@5/c2/v2 prev=a=0@2/c2/v1 DELETE b@5`, ...
pub fn describe(resp: &WatchResponse) -> String {
    let mut out = format!("id={}", resp.watch_id());
    if resp.created() {
        out.push_str(" created");
    }
    if resp.canceled() {
        out.push_str(" canceled");
    }
    if resp.compact_revision() != 0 {
        out.push_str(&format!(" compact={}", resp.compact_revision()));
    }
    if !resp.cancel_reason().is_empty() {
        out.push_str(&format!(" reason={:?}", resp.cancel_reason()));
    }
    if is_fragment(resp) {
        out.push_str(" fragment");
    }
    out.push_str(&format!(" rev={}", resp.header().map_or(-1, |h| h.revision())));
    for event in resp.events() {
        out.push(' ');
        out.push_str(&describe_event(event));
    }
    out
}

pub fn describe_event(event: &Event) -> String {
    let kv = event.kv().map_or_else(|| "<no kv>".to_owned(), describe_kv);
    let mut out = match event.event_type() {
        EventType::Put => format!("PUT {kv}"),
        EventType::Delete => format!("DELETE {kv}"),
    };
    if let Some(prev) = event.prev_kv() {
        out.push_str(&format!(" prev={}", describe_kv(prev)));
    }
    out
}

/// `key=value@mod/c<create>/v<version>`; a deletion's kv is `key@mod`.
pub fn describe_kv(kv: &KeyValue) -> String {
    let key = String::from_utf8_lossy(kv.key());
    if kv.create_revision() == 0 && kv.version() == 0 && kv.value().is_empty() {
        return format!("{key}@{}", kv.mod_revision());
    }
    format!(
        "{key}={}@{}/c{}/v{}",
        String::from_utf8_lossy(kv.value()),
        kv.mod_revision(),
        kv.create_revision(),
        kv.version()
    )
}
