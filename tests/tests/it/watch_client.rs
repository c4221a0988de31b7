//! The Watch protocol through the `etcd-client` crate, response by response, as etcd 3.4 answers:
//! watch ids, created and cancel responses, history replay, `prev_kv`, filters, txns, compaction,
//! progress requests, fragments and slow clients.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, Txn, TxnOp, WatchFilterType, WatchOptions};
use tests::{Member, MemberConfig};

use crate::util::put_all;
use crate::watch_util::{describe, is_fragment, next, recv, within};

/// Long enough for a response that is due to arrive; the server answers in milliseconds.
const QUIET: Duration = Duration::from_millis(500);

#[tokio::test]
async fn ids_created_and_canceled_responses() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    put_all(&mut client, &[("a", "1")]).await?;

    let mut stream = client.watch_client().watch("a", None).await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=2");
    stream.watch("b", Some(WatchOptions::new().with_watch_id(3))).await?;
    assert_eq!(next(&mut stream).await, "id=3 created rev=2");
    stream.watch("c", None).await?;
    assert_eq!(next(&mut stream).await, "id=1 created rev=2");
    // A client id already in use, and a range whose end is not after its key, are refused.
    stream.watch("d", Some(WatchOptions::new().with_watch_id(3))).await?;
    assert_eq!(
        next(&mut stream).await,
        "id=-1 created canceled reason=\"mvcc: duplicate watch ID provided on the WatchStream\" rev=2"
    );
    stream.watch("z", Some(WatchOptions::new().with_range("a"))).await?;
    assert_eq!(next(&mut stream).await, "id=-1 created canceled reason=\"mvcc: watcher range is empty\" rev=2");

    client.put("a", "2", None).await?;
    assert_eq!(next(&mut stream).await, "id=0 rev=3 PUT a=2@3/c2/v2");
    stream.cancel(0).await?;
    assert_eq!(next(&mut stream).await, "id=0 canceled rev=3");
    // Cancelling an unknown id is not answered: the next response is the event below.
    stream.cancel(42).await?;
    client.put("a", "3", None).await?;
    client.put("b", "1", None).await?;
    assert_eq!(next(&mut stream).await, "id=3 rev=5 PUT b=1@5/c5/v1");

    // Server-chosen ids continue after the ones taken, skipping client-chosen ones.
    stream.watch("e", None).await?;
    assert_eq!(next(&mut stream).await, "id=2 created rev=5");
    stream.watch("f", None).await?;
    assert_eq!(next(&mut stream).await, "id=4 created rev=5");
    // A client-chosen id may be reused once cancelled.
    stream.cancel(3).await?;
    assert_eq!(next(&mut stream).await, "id=3 canceled rev=5");
    stream.watch("g", Some(WatchOptions::new().with_watch_id(3))).await?;
    assert_eq!(next(&mut stream).await, "id=3 created rev=5");
    assert_eq!(within(&mut stream, QUIET).await, None);
    Ok(())
}

/// A few writes of every kind: revision 2..=9.
async fn history(client: &mut Client) -> anyhow::Result<()> {
    put_all(client, &[("k/a", "1"), ("k/b", "1"), ("x", "1"), ("k/a", "2")]).await?; // 2..=5
    client.delete("k/b", None).await?; // 6
    let txn = Txn::new().when([Compare::version("k/a", CompareOp::Equal, 2)]).and_then([
        TxnOp::put("k/c", "1", None),
        TxnOp::put("k/a", "3", None),
        TxnOp::delete("x", None),
    ]);
    client.txn(txn).await?; // 7
    client.put("k/b", "2", None).await?; // 8
    client.delete("k/", Some(DeleteOptions::new().with_prefix())).await?; // 9
    Ok(())
}

#[tokio::test]
async fn history_is_replayed_then_events_follow_live() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    history(&mut client).await?;

    // From revision 1: everything in one catch-up response, with the store's revision in the header.
    let options = WatchOptions::new().with_prefix().with_start_revision(1);
    let mut stream = client.watch_client().watch("k/", Some(options)).await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=9");
    assert_eq!(
        next(&mut stream).await,
        "id=0 rev=9 PUT k/a=1@2/c2/v1 PUT k/b=1@3/c3/v1 PUT k/a=2@5/c2/v2 DELETE k/b@6 \
         PUT k/c=1@7/c7/v1 PUT k/a=3@7/c2/v3 PUT k/b=2@8/c8/v1 DELETE k/a@9 DELETE k/b@9 DELETE k/c@9"
    );
    // From a later revision, with prev_kv; the single key x.
    let options = WatchOptions::new().with_prefix().with_start_revision(7).with_prev_key();
    stream.watch("k/", Some(options)).await?;
    assert_eq!(next(&mut stream).await, "id=1 created rev=9");
    assert_eq!(
        next(&mut stream).await,
        "id=1 rev=9 PUT k/c=1@7/c7/v1 PUT k/a=3@7/c2/v3 prev=k/a=2@5/c2/v2 PUT k/b=2@8/c8/v1 \
         DELETE k/a@9 prev=k/a=3@7/c2/v3 DELETE k/b@9 prev=k/b=2@8/c8/v1 DELETE k/c@9 prev=k/c=1@7/c7/v1"
    );
    stream.watch("x", Some(WatchOptions::new().with_start_revision(2))).await?;
    assert_eq!(next(&mut stream).await, "id=2 created rev=9");
    assert_eq!(next(&mut stream).await, "id=2 rev=9 PUT x=1@4/c4/v1 DELETE x@7");
    // A start in the future: nothing until then.
    stream.watch("x", Some(WatchOptions::new().with_start_revision(11))).await?;
    assert_eq!(next(&mut stream).await, "id=3 created rev=9");

    // Live: one response per revision and watcher, a txn's events together.
    client.put("x", "2", None).await?; // 10
    assert_eq!(next(&mut stream).await, "id=2 rev=10 PUT x=2@10/c10/v1");
    let txn =
        Txn::new().and_then([TxnOp::put("k/z", "1", None), TxnOp::put("x", "3", None), TxnOp::put("k/y", "1", None)]);
    client.txn(txn).await?; // 11
    let mut got =
        vec![next(&mut stream).await, next(&mut stream).await, next(&mut stream).await, next(&mut stream).await];
    got.sort();
    assert_eq!(
        got,
        [
            "id=0 rev=11 PUT k/z=1@11/c11/v1 PUT k/y=1@11/c11/v1",
            "id=1 rev=11 PUT k/z=1@11/c11/v1 PUT k/y=1@11/c11/v1",
            "id=2 rev=11 PUT x=3@11/c10/v2",
            "id=3 rev=11 PUT x=3@11/c10/v2",
        ]
    );
    assert_eq!(within(&mut stream, QUIET).await, None);
    Ok(())
}

#[tokio::test]
async fn prev_kv_filters_and_key_ranges() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let mut stream = client.watch_client().watch("b", Some(WatchOptions::new().with_prev_key())).await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=1");
    let watches = [
        WatchOptions::new().with_all_keys().with_filters([WatchFilterType::NoPut]),
        WatchOptions::new().with_from_key().with_filters([WatchFilterType::NoDelete]),
        WatchOptions::new().with_range("c"),
    ];
    for (i, options) in watches.into_iter().enumerate() {
        stream.watch("b", Some(options)).await?;
        assert_eq!(next(&mut stream).await, format!("id={} created rev=1", i + 1));
    }
    client.put("a", "1", None).await?; // 2: only the all-keys watcher would see it, but it filters puts
    client.put("b", "1", None).await?; // 3
    let mut got = vec![next(&mut stream).await, next(&mut stream).await, next(&mut stream).await];
    got.sort();
    assert_eq!(got, ["id=0 rev=3 PUT b=1@3/c3/v1", "id=2 rev=3 PUT b=1@3/c3/v1", "id=3 rev=3 PUT b=1@3/c3/v1",]);
    client.put("b", "2", None).await?; // 4
    let mut got = vec![next(&mut stream).await, next(&mut stream).await, next(&mut stream).await];
    got.sort();
    assert_eq!(
        got,
        ["id=0 rev=4 PUT b=2@4/c3/v2 prev=b=1@3/c3/v1", "id=2 rev=4 PUT b=2@4/c3/v2", "id=3 rev=4 PUT b=2@4/c3/v2",]
    );
    client.delete("", Some(DeleteOptions::new().with_from_key())).await?; // 5
    let mut got = vec![next(&mut stream).await, next(&mut stream).await, next(&mut stream).await];
    got.sort();
    assert_eq!(
        got,
        ["id=0 rev=5 DELETE b@5 prev=b=2@4/c3/v2", "id=1 rev=5 DELETE a@5 DELETE b@5", "id=3 rev=5 DELETE b@5",]
    );
    client.put("c", "1", None).await?; // 6: outside [b, c)
    assert_eq!(next(&mut stream).await, "id=2 rev=6 PUT c=1@6/c6/v1");
    assert_eq!(within(&mut stream, QUIET).await, None);
    Ok(())
}

#[tokio::test]
async fn a_compacted_start_is_created_then_canceled() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    put_all(&mut client, &[("a", "1"), ("a", "2"), ("a", "3"), ("a", "4")]).await?; // 2..=5
    client.compact(4, None).await?;

    let mut stream = client.watch_client().watch("a", Some(WatchOptions::new().with_start_revision(3))).await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=5");
    assert_eq!(next(&mut stream).await, "id=0 canceled compact=4 rev=0");
    // The compacted revision itself is still there.
    stream.watch("a", Some(WatchOptions::new().with_start_revision(4))).await?;
    assert_eq!(next(&mut stream).await, "id=1 created rev=5");
    assert_eq!(next(&mut stream).await, "id=1 rev=5 PUT a=3@4/c2/v3 PUT a=4@5/c2/v4");
    assert_eq!(within(&mut stream, QUIET).await, None);
    Ok(())
}

#[tokio::test]
async fn progress_requests_report_the_current_revision() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    put_all(&mut client, &[("a", "1"), ("b", "1")]).await?; // 2, 3

    let mut stream = client.watch_client().watch("a", Some(WatchOptions::new().with_start_revision(1))).await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=3");
    assert_eq!(next(&mut stream).await, "id=0 rev=3 PUT a=1@2/c2/v1");
    stream.request_progress().await?;
    assert_eq!(next(&mut stream).await, "id=-1 rev=3");
    client.put("b", "2", None).await?; // 4: not watched
    stream.request_progress().await?;
    assert_eq!(next(&mut stream).await, "id=-1 rev=4");
    // A stream without watchers is answered too.
    stream.cancel(0).await?;
    assert_eq!(next(&mut stream).await, "id=0 canceled rev=4");
    stream.request_progress().await?;
    assert_eq!(next(&mut stream).await, "id=-1 rev=4");
    Ok(())
}

#[tokio::test]
async fn fragments_cut_large_revisions_at_the_receive_limit() -> anyhow::Result<()> {
    // etcd cuts at --max-request-bytes plus 512 KiB of gRPC overhead: 526,336 bytes here.
    let member = Member::start_with(MemberConfig { max_request_bytes: Some(2048), ..MemberConfig::default() }).await?;
    let mut client = member.client().await?;
    let value = "v".repeat(1500);
    for i in 0..400 {
        client.put(format!("f/{i:03}"), value.as_str(), None).await?; // 2..=401
    }
    let mut stream = client
        .watch_client()
        .watch("f/", Some(WatchOptions::new().with_prefix().with_prev_key().with_fragment()))
        .await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=401");
    stream.watch("f/", Some(WatchOptions::new().with_prefix().with_prev_key())).await?;
    assert_eq!(next(&mut stream).await, "id=1 created rev=401");
    client.delete("f/", Some(DeleteOptions::new().with_prefix())).await?; // 402: 400 events of ~1.5 KB

    let mut pieces = Vec::new();
    let mut whole = None;
    while whole.is_none() || pieces.last().is_none_or(|(_, fragment, _)| *fragment) {
        let resp = recv(&mut stream).await;
        let size = resp.events().len();
        match resp.watch_id() {
            0 => pieces.push((size, is_fragment(&resp), resp.header().map(|h| h.revision()))),
            _ => whole = Some(size),
        }
    }
    assert_eq!(whole, Some(400), "without fragment the revision comes whole");
    assert_eq!(pieces, [(342, true, Some(402)), (58, false, Some(402))]);
    Ok(())
}

#[tokio::test]
async fn a_slow_client_catches_up_without_blocking_others() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    // Two streams on their own connections: `slow` is not read while the writes happen.
    let mut slow = member
        .client()
        .await?
        .watch_client()
        .watch("s/", Some(WatchOptions::new().with_prefix().with_prev_key()))
        .await?;
    let mut fast = member.client().await?.watch_client().watch("s/", Some(WatchOptions::new().with_prefix())).await?;
    assert_eq!(next(&mut fast).await, "id=0 created rev=1");

    // 100 txns of 100 puts of 1 KiB: 10,000 events, 10 MB, beyond every buffer on the way.
    let value = "x".repeat(1024);
    let (txns, per_txn) = (100, 100);
    for t in 0..txns {
        let ops: Vec<TxnOp> =
            (0..per_txn).map(|i| TxnOp::put(format!("s/{i:03}"), format!("{t}{value}"), None)).collect();
        client.txn(Txn::new().and_then(ops)).await?;
        // The fast watcher keeps up: each revision arrives whole while the slow one is not read.
        let resp = recv(&mut fast).await;
        assert_eq!(resp.events().len(), per_txn, "txn {t}");
        assert!(resp.events().iter().all(|e| e.kv().map(|kv| kv.mod_revision()) == Some(t as i64 + 2)));
    }

    assert_eq!(next(&mut slow).await, "id=0 created rev=1");
    let mut expected_rev = 2;
    let mut count = 0;
    while expected_rev < txns as i64 + 2 {
        let resp = recv(&mut slow).await;
        for event in resp.events() {
            let kv = event.kv().expect("kv");
            let prev = event.prev_kv();
            assert_eq!(kv.mod_revision(), expected_rev, "event {count}: in revision order, none missing");
            assert_eq!(kv.key(), format!("s/{:03}", count % per_txn).as_bytes());
            if expected_rev == 2 {
                assert!(prev.is_none());
            } else {
                let prev = prev.expect("prev_kv of an update");
                assert_eq!(prev.mod_revision(), expected_rev - 1);
            }
            count += 1;
            if count % per_txn == 0 {
                expected_rev += 1;
            }
        }
        assert_eq!(count % per_txn, 0, "a revision is never split across responses");
    }
    assert_eq!(count, txns * per_txn);
    assert_eq!(within(&mut slow, QUIET).await, None);
    let summary = describe(&{
        client.put("s/end", "1", None).await?;
        recv(&mut slow).await
    });
    assert!(summary.starts_with("id=0 rev=102 PUT s/end=1@102"), "{summary}");
    Ok(())
}

#[tokio::test]
async fn timed_progress_notifications() -> anyhow::Result<()> {
    // etcd's flag, through its environment variable (each test runs in its own process with nextest).
    std::env::set_var("ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL", "1s");
    let member = Member::start().await;
    std::env::remove_var("ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL");
    let member = member?;
    let mut client = member.client().await?;
    put_all(&mut client, &[("a", "1")]).await?; // 2
    let mut stream = client.watch_client().watch("a", Some(WatchOptions::new().with_progress_notify())).await?;
    assert_eq!(next(&mut stream).await, "id=0 created rev=2");
    stream.watch("b", None).await?;
    assert_eq!(next(&mut stream).await, "id=1 created rev=2");
    client.put("c", "1", None).await?; // 3: watched by neither
                                       // Within about a second: a notification for watcher 0 only, with the current revision.
    assert_eq!(next(&mut stream).await, "id=0 rev=3");
    assert_eq!(next(&mut stream).await, "id=0 rev=3");
    Ok(())
}

#[tokio::test]
async fn compaction_cancels_a_watcher_that_fell_behind() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    // 30 revisions of 100 keys of 10 KiB: 30 MB, more than any buffer between the store and a client.
    let value = "x".repeat(10 * 1024);
    for t in 0..30 {
        let ops: Vec<TxnOp> = (0..100).map(|i| TxnOp::put(format!("c/{i:03}"), format!("{t}{value}"), None)).collect();
        client.txn(Txn::new().and_then(ops)).await?; // 2..=31
    }
    let mut stream = member
        .client()
        .await?
        .watch_client()
        .max_decoding_message_size(usize::MAX)
        .watch("c/", Some(WatchOptions::new().with_prefix().with_start_revision(2)))
        .await?;
    // Not read: the watcher is somewhere in its catch-up when the history goes.
    tokio::time::sleep(QUIET).await;
    client.compact(31, None).await?;

    assert_eq!(next(&mut stream).await, "id=0 created rev=31");
    let mut expected_rev = 2;
    let canceled = loop {
        let resp = recv(&mut stream).await;
        if resp.canceled() {
            break Some(describe(&resp));
        }
        for event in resp.events() {
            let rev = event.kv().map_or(0, |kv| kv.mod_revision());
            assert!(rev == expected_rev || rev == expected_rev + 1, "{rev} after {expected_rev}");
            expected_rev = rev;
        }
        if expected_rev == 31 {
            assert_eq!(within(&mut stream, QUIET).await, None, "a watcher that caught up stays");
            break None;
        }
    };
    match canceled {
        Some(canceled) => assert_eq!(canceled, "id=0 canceled compact=31 rev=0"),
        // etcd may have sent the whole history in one response before the compaction.
        None => assert_eq!(member.kind(), tests::ServerKind::Etcd, "the watcher was not cancelled"),
    }
    Ok(())
}
