//! Range, Put and DeleteRange through the etcd-client crate: every option, checked against a
//! store whose revisions are known exactly.

use etcd_client::{Client, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget};
use tests::Member;

use crate::util::{header, keys, put_all, values};

/// Fills a fresh store so that key, create, mod, value and version orders all differ.
///
/// | key | value | create | mod | version |
/// |-----|-------|--------|-----|---------|
/// | k/a | 7     | 3      | 6   | 2       |
/// | k/b | 5     | 5      | 5   | 1       |
/// | k/c | 4     | 2      | 8   | 3       |
/// | k/d | 0     | 4      | 4   | 1       |
///
/// Plus `z` (rev 9) after the prefix and `j` (rev 10) before it. Current revision: 10.
async fn fixture() -> anyhow::Result<(Member, Client)> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    let last = put_all(
        &mut client,
        &[
            ("k/c", "2"), // 2
            ("k/a", "9"), // 3
            ("k/d", "0"), // 4
            ("k/b", "5"), // 5
            ("k/a", "7"), // 6
            ("k/c", "3"), // 7
            ("k/c", "4"), // 8
            ("z", "outside"),
            ("j", "before"),
        ],
    )
    .await?;
    assert_eq!(last, 10);
    Ok((member, client))
}

fn prefix() -> GetOptions {
    GetOptions::new().with_prefix()
}

#[tokio::test]
async fn range_selects_keys() -> anyhow::Result<()> {
    let (_member, mut client) = fixture().await?;

    let single = client.get("k/a", None).await?;
    assert_eq!(keys(single.kvs()), ["k/a"]);
    let kv = &single.kvs()[0];
    assert_eq!(
        (kv.value(), kv.create_revision(), kv.mod_revision(), kv.version(), kv.lease()),
        (&b"7"[..], 3, 6, 2, 0)
    );
    assert_eq!((single.count(), single.more()), (1, false));

    let missing = client.get("k/", None).await?;
    assert!(missing.kvs().is_empty());
    assert_eq!(missing.count(), 0);

    let cases: [(&str, GetOptions, &[&str]); 5] = [
        ("k/", prefix(), &["k/a", "k/b", "k/c", "k/d"]),
        ("k/c", GetOptions::new().with_from_key(), &["k/c", "k/d", "z"]),
        ("k/b", GetOptions::new().with_range("k/d"), &["k/b", "k/c"]),
        ("", GetOptions::new().with_all_keys(), &["j", "k/a", "k/b", "k/c", "k/d", "z"]),
        // A range_end at or before the key selects nothing.
        ("k/c", GetOptions::new().with_range("k/b"), &[]),
    ];
    for (key, options, want) in cases {
        let resp = client.get(key, Some(options.clone())).await?;
        assert_eq!(keys(resp.kvs()), want, "{key:?} {options:?}");
        assert_eq!(resp.count(), want.len() as i64, "{key:?} {options:?}");
        assert!(!resp.more());
        assert_eq!(header(resp.header()).revision(), 10);
    }
    Ok(())
}

#[tokio::test]
async fn range_limit_counts_the_whole_range() -> anyhow::Result<()> {
    let (_member, mut client) = fixture().await?;
    for (limit, want, more) in [
        (1, &["k/a"][..], true),
        (3, &["k/a", "k/b", "k/c"], true),
        (4, &["k/a", "k/b", "k/c", "k/d"], false),
        (10, &["k/a", "k/b", "k/c", "k/d"], false),
        (0, &["k/a", "k/b", "k/c", "k/d"], false),
    ] {
        let resp = client.get("k/", Some(prefix().with_limit(limit))).await?;
        assert_eq!(keys(resp.kvs()), want, "limit {limit}");
        assert_eq!((resp.count(), resp.more()), (4, more), "limit {limit}");
    }
    Ok(())
}

#[tokio::test]
async fn range_at_a_past_revision() -> anyhow::Result<()> {
    let (_member, mut client) = fixture().await?;
    let at5 = client.get("k/", Some(prefix().with_revision(5))).await?;
    assert_eq!(keys(at5.kvs()), ["k/a", "k/b", "k/c", "k/d"]);
    assert_eq!(values(at5.kvs()), ["9", "5", "2", "0"]);
    // The header carries the current revision, not the one read.
    assert_eq!(header(at5.header()).revision(), 10);

    let at4 = client.get("k/", Some(prefix().with_revision(4))).await?;
    assert_eq!(keys(at4.kvs()), ["k/a", "k/c", "k/d"]);
    assert_eq!(at4.count(), 3);

    let at1 = client.get("", Some(GetOptions::new().with_all_keys().with_revision(1))).await?;
    assert!(at1.kvs().is_empty());

    let kv = &client.get("k/c", Some(GetOptions::new().with_revision(7))).await?.kvs()[0].clone();
    assert_eq!((kv.value(), kv.mod_revision(), kv.version()), (&b"3"[..], 7, 2));

    // Revision 10 is the current one; 0 and negative mean "current".
    for revision in [10, 0, -1] {
        let resp = client.get("j", Some(GetOptions::new().with_revision(revision))).await?;
        assert_eq!(values(resp.kvs()), ["before"], "revision {revision}");
    }
    Ok(())
}

#[tokio::test]
async fn range_sorts() -> anyhow::Result<()> {
    let (_member, mut client) = fixture().await?;
    use SortOrder::{Ascend, Descend};
    let cases: [(SortTarget, SortOrder, [&str; 4]); 9] = [
        (SortTarget::Key, Ascend, ["k/a", "k/b", "k/c", "k/d"]),
        (SortTarget::Key, Descend, ["k/d", "k/c", "k/b", "k/a"]),
        (SortTarget::Create, Ascend, ["k/c", "k/a", "k/d", "k/b"]),
        (SortTarget::Create, Descend, ["k/b", "k/d", "k/a", "k/c"]),
        (SortTarget::Mod, Ascend, ["k/d", "k/b", "k/a", "k/c"]),
        (SortTarget::Mod, Descend, ["k/c", "k/a", "k/b", "k/d"]),
        (SortTarget::Value, Ascend, ["k/d", "k/c", "k/b", "k/a"]),
        (SortTarget::Value, Descend, ["k/a", "k/b", "k/c", "k/d"]),
        // A target other than KEY with order NONE sorts ascending.
        (SortTarget::Create, SortOrder::None, ["k/c", "k/a", "k/d", "k/b"]),
    ];
    for (target, order, want) in cases {
        let resp = client.get("k/", Some(prefix().with_sort(target, order))).await?;
        assert_eq!(keys(resp.kvs()), want, "{target:?} {order:?}");
        assert_eq!(resp.count(), 4);
    }

    // Versions tie (k/b and k/d are both 1), so only the versions' order is defined.
    for (order, want) in [(Ascend, [1, 1, 2, 3]), (Descend, [3, 2, 1, 1])] {
        let resp = client.get("k/", Some(prefix().with_sort(SortTarget::Version, order))).await?;
        let versions: Vec<i64> = resp.kvs().iter().map(|kv| kv.version()).collect();
        assert_eq!(versions, want, "{order:?}");
    }

    // The limit applies after sorting.
    let top = client.get("k/", Some(prefix().with_sort(SortTarget::Value, Descend).with_limit(2))).await?;
    assert_eq!(keys(top.kvs()), ["k/a", "k/b"]);
    assert_eq!((top.count(), top.more()), (4, true));
    Ok(())
}

#[tokio::test]
async fn range_filters_by_revision_then_limits() -> anyhow::Result<()> {
    let (_member, mut client) = fixture().await?;
    let cases: [(GetOptions, &[&str]); 6] = [
        (prefix().with_min_mod_revision(6), &["k/a", "k/c"]),
        (prefix().with_max_mod_revision(5), &["k/b", "k/d"]),
        (prefix().with_min_create_revision(4), &["k/b", "k/d"]),
        (prefix().with_max_create_revision(3), &["k/a", "k/c"]),
        (prefix().with_min_mod_revision(5).with_max_mod_revision(6), &["k/a", "k/b"]),
        (prefix().with_min_create_revision(3).with_max_create_revision(4), &["k/a", "k/d"]),
    ];
    for (options, want) in cases {
        let resp = client.get("k/", Some(options.clone())).await?;
        assert_eq!(keys(resp.kvs()), want, "{options:?}");
        // count ignores the filters.
        assert_eq!((resp.count(), resp.more()), (4, false), "{options:?}");
    }

    // With a filter the limit truncates the filtered result.
    let resp = client.get("k/", Some(prefix().with_min_mod_revision(5).with_limit(1))).await?;
    assert_eq!(keys(resp.kvs()), ["k/a"]);
    assert_eq!((resp.count(), resp.more()), (4, true));

    // The lock recipe: the oldest key of a prefix created at or before a revision.
    let oldest = prefix().with_sort(SortTarget::Create, SortOrder::Descend).with_max_create_revision(4).with_limit(1);
    let resp = client.get("k/", Some(oldest)).await?;
    assert_eq!(keys(resp.kvs()), ["k/d"]);
    Ok(())
}

#[tokio::test]
async fn range_keys_only_count_only_serializable() -> anyhow::Result<()> {
    let (_member, mut client) = fixture().await?;

    let keys_only = client.get("k/", Some(prefix().with_keys_only())).await?;
    assert_eq!(keys(keys_only.kvs()), ["k/a", "k/b", "k/c", "k/d"]);
    assert!(keys_only.kvs().iter().all(|kv| kv.value().is_empty()));
    let kv = &keys_only.kvs()[0];
    assert_eq!((kv.create_revision(), kv.mod_revision(), kv.version()), (3, 6, 2));

    let count_only = client.get("k/", Some(prefix().with_count_only())).await?;
    assert!(count_only.kvs().is_empty());
    assert_eq!((count_only.count(), count_only.more()), (4, false));

    let count_limited = client.get("k/", Some(prefix().with_count_only().with_limit(1))).await?;
    assert!(count_limited.kvs().is_empty());
    assert_eq!(count_limited.count(), 4);

    let serializable = client.get("k/", Some(prefix().with_serializable())).await?;
    assert_eq!(values(serializable.kvs()), ["7", "5", "4", "0"]);
    assert_eq!(header(serializable.header()).revision(), 10);
    Ok(())
}

#[tokio::test]
async fn put_prev_kv_and_ignore_value() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;

    let first = client.put("k", "v1", Some(PutOptions::new().with_prev_key())).await?;
    assert!(first.prev_key().is_none());
    assert_eq!(header(first.header()).revision(), 2);

    let second = client.put("k", "v2", Some(PutOptions::new().with_prev_key())).await?;
    let prev = second.prev_key().expect("prev_kv of an existing key");
    assert_eq!((prev.key(), prev.value(), prev.mod_revision(), prev.version()), (&b"k"[..], &b"v1"[..], 2, 1));

    let without = client.put("k", "v3", None).await?;
    assert!(without.prev_key().is_none());

    // ignore_value keeps the value but still writes a new version.
    client.put("k", "", Some(PutOptions::new().with_ignore_value())).await?;
    let kv = client.get("k", None).await?.kvs()[0].clone();
    assert_eq!((kv.value(), kv.version(), kv.mod_revision(), kv.create_revision()), (&b"v3"[..], 4, 5, 2));
    Ok(())
}

#[tokio::test]
async fn put_ignore_lease_keeps_the_lease() -> anyhow::Result<()> {
    let member = Member::start().await?;
    let mut client = member.client().await?;
    // ignore_lease keeps the lease; a plain put drops it.
    let lease = client.lease_grant(60, None).await?.id();
    client.put("k", "v4", Some(PutOptions::new().with_lease(lease))).await?;
    client.put("k", "v5", Some(PutOptions::new().with_ignore_lease())).await?;
    let kv = client.get("k", None).await?.kvs()[0].clone();
    assert_eq!((kv.value(), kv.lease()), (&b"v5"[..], lease));
    client.put("k", "v6", None).await?;
    assert_eq!(client.get("k", None).await?.kvs()[0].lease(), 0);
    Ok(())
}

#[tokio::test]
async fn delete_ranges_with_prev_kv() -> anyhow::Result<()> {
    let (_member, mut client) = fixture().await?;

    // A missing key deletes nothing and keeps the revision.
    let none = client.delete("k/zz", None).await?;
    assert_eq!((none.deleted(), header(none.header()).revision()), (0, 10));

    let range = client.delete("k/a", Some(DeleteOptions::new().with_range("k/c").with_prev_key())).await?;
    assert_eq!(range.deleted(), 2);
    assert_eq!(keys(range.prev_kvs()), ["k/a", "k/b"]);
    assert_eq!(values(range.prev_kvs()), ["7", "5"]);
    assert_eq!(header(range.header()).revision(), 11);

    let rest = client.delete("k/", Some(DeleteOptions::new().with_prefix())).await?;
    assert_eq!(rest.deleted(), 2);
    assert!(rest.prev_kvs().is_empty(), "prev_kvs only when asked");
    assert_eq!(header(rest.header()).revision(), 12);

    assert_eq!(client.get("k/", Some(prefix())).await?.count(), 0);
    // Old revisions still see the deleted keys.
    assert_eq!(client.get("k/", Some(prefix().with_revision(10))).await?.count(), 4);

    // A re-created key starts a new generation.
    client.put("k/a", "new", None).await?;
    let kv = client.get("k/a", None).await?.kvs()[0].clone();
    assert_eq!((kv.create_revision(), kv.mod_revision(), kv.version()), (13, 13, 1));

    let from = client.delete("k/", Some(DeleteOptions::new().with_from_key().with_prev_key())).await?;
    assert_eq!(keys(from.prev_kvs()), ["k/a", "z"]);
    assert_eq!(keys(client.get("", Some(GetOptions::new().with_all_keys())).await?.kvs()), ["j"]);
    Ok(())
}
