//! etcd's watch gauges (`etcd_debugging_mvcc_watch_stream_total`, `etcd_debugging_mvcc_watcher_total`)
//! follow the streams and watchers a member holds, and a stream a client drops while it keeps its
//! connection (as kube-apiserver does when it stops a watch) gives its watchers back.

use std::time::{Duration, Instant};

use tests::http::{self, Metrics};
use tests::Member;

use crate::watch_util::next;

/// The member's (streams, watchers) once they equal `want`, or what they were at the deadline.
async fn gauges_become(member: &Member, want: (f64, f64)) -> anyhow::Result<(f64, f64)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let scraped = Metrics::parse(&http::get(&member.client_url(), "/metrics").await?.body)?;
        let now = (
            scraped.value("etcd_debugging_mvcc_watch_stream_total", &[]),
            scraped.value("etcd_debugging_mvcc_watcher_total", &[]),
        );
        if now == want || Instant::now() > deadline {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn streams_and_watchers_are_counted_until_their_client_lets_go() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    assert_eq!(gauges_become(&member, (0.0, 0.0)).await?, (0.0, 0.0));

    // Three streams on one connection: two watchers each.
    let mut streams = Vec::new();
    for s in 0..3 {
        let mut stream = client.watch_client().watch(format!("s{s}/a"), None).await?;
        assert_eq!(next(&mut stream).await, "id=0 created rev=1");
        stream.watch(format!("s{s}/b"), None).await?;
        assert_eq!(next(&mut stream).await, "id=1 created rev=1");
        streams.push(stream);
    }
    assert_eq!(gauges_become(&member, (3.0, 6.0)).await?, (3.0, 6.0));

    // A cancelled watcher goes; its stream stays.
    streams[0].cancel(1).await?;
    assert_eq!(next(&mut streams[0]).await, "id=1 canceled rev=1");
    assert_eq!(gauges_become(&member, (3.0, 5.0)).await?, (3.0, 5.0));

    // A stream dropped while the connection stays open (its HTTP/2 stream is reset) takes its watchers
    // along, however many events wait unread for them.
    for i in 0..200 {
        client.put("s1/a", vec![b'v'; 1024 + i], None).await?;
    }
    drop(streams.remove(1));
    assert_eq!(gauges_become(&member, (2.0, 3.0)).await?, (2.0, 3.0));
    client.put("still", "served", None).await?;

    // A client that goes away takes the rest.
    drop(streams);
    drop(client);
    assert_eq!(gauges_become(&member, (0.0, 0.0)).await?, (0.0, 0.0));
    Ok(())
}
