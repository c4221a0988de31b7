//! Tests of [`super`]: appends, truncation, purge and restarts of the Raft log, and moving an earlier
//! build's log out of sled.

use openraft::storage::RaftLogStorageExt;
use openraft::{CommittedLeaderId, EntryPayload};

use super::*;
use crate::storage::open;

fn blank(term: u64, index: u64) -> Entry {
    Entry { log_id: LogId::new(CommittedLeaderId::new(term, 1), index), payload: EntryPayload::Blank }
}

/// An entry whose encoding takes several pieces (`kib` KiB of value), at `index` of `term`.
fn large(term: u64, index: u64, kib: usize) -> Entry {
    let put = kv_api::Command::Put(proto::etcdserverpb::PutRequest {
        key: format!("k{index}").into_bytes(),
        value: vec![(index % 251) as u8; kib << 10],
        ..Default::default()
    });
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(std::sync::Arc::new(vec![put])),
    }
}

/// Small and large entries alternating from `from` to `to`, of `term`.
fn mixed(term: u64, from: u64, to: u64) -> Vec<Entry> {
    (from..=to).map(|i| if i.is_multiple_of(2) { large(term, i, 20 + i as usize) } else { blank(term, i) }).collect()
}

fn indexes(entries: &[Entry]) -> Vec<u64> {
    entries.iter().map(|e| e.log_id.index).collect()
}

#[tokio::test]
async fn log_vote_and_pointers_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut log, _sm, _store) = open(dir.path()).expect("open");
        log.blocking_append((1..=10).map(|i| blank(1, i))).await.expect("append");
        log.save_vote(&Vote::new(3, 2)).await.expect("vote");
        log.save_committed(Some(blank(1, 8).log_id)).await.expect("committed");
        log.purge(blank(1, 3).log_id).await.expect("purge");
        log.truncate(blank(1, 9).log_id).await.expect("truncate");
    }
    {
        let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
        let state = log.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(blank(1, 3).log_id));
        assert_eq!(state.last_log_id, Some(blank(1, 8).log_id));
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(3, 2)));
        assert_eq!(log.read_committed().await.expect("committed"), Some(blank(1, 8).log_id));
        let all = log.try_get_log_entries(..).await.expect("read");
        assert_eq!(indexes(&all), (4..=8).collect::<Vec<_>>());
        log.save_vote(&Vote::new_committed(4, 2)).await.expect("vote");
    }
    // A granted vote comes back as not yet granted, so that the member restarts as a follower.
    let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
    assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(4, 2)));
}

#[tokio::test]
async fn the_tail_answers_as_the_files_do_after_truncate_and_purge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _sm, _store) = open(dir.path()).expect("open");
    log.blocking_append((1..=10).map(|i| blank(1, i))).await.expect("append");
    log.truncate(blank(1, 7).log_id).await.expect("truncate");
    log.blocking_append((7..=12).map(|i| blank(2, i))).await.expect("append");
    log.purge(blank(1, 3).log_id).await.expect("purge");
    assert_eq!(log.tail.lock().front().map(|e| e.log_id.index), Some(4), "the tail serves these reads");
    let mut files_only = LogStore { tail: Arc::default(), ..log.clone() };
    let ranges: Vec<(Bound<u64>, Bound<u64>)> = vec![
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Included(4), Bound::Unbounded),
        (Bound::Included(6), Bound::Included(8)),
        (Bound::Excluded(9), Bound::Excluded(12)),
        (Bound::Included(11), Bound::Excluded(20)),
        (Bound::Included(13), Bound::Unbounded),
        (Bound::Included(8), Bound::Excluded(8)),
    ];
    for range in ranges {
        let tail = log.try_get_log_entries(range).await.expect("read");
        let files = files_only.try_get_log_entries(range).await.expect("read");
        let ids = |entries: &[Entry]| entries.iter().map(|e| e.log_id).collect::<Vec<_>>();
        assert_eq!(ids(&tail), ids(&files), "{range:?}");
    }
    let all = log.try_get_log_entries(..).await.expect("read");
    assert_eq!(indexes(&all), (4..=12).collect::<Vec<_>>());
    assert_eq!(all[5].log_id, blank(2, 9).log_id, "the truncated entries are gone");
}

#[tokio::test]
async fn reads_take_any_range_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _sm, _store) = open(dir.path()).expect("open");
    log.blocking_append((0..=5).map(|i| blank(1, i))).await.expect("append");
    let cases: Vec<(Vec<Entry>, Vec<u64>)> = vec![
        (log.try_get_log_entries(2..4).await.expect("read"), vec![2, 3]),
        (log.try_get_log_entries(2..=4).await.expect("read"), vec![2, 3, 4]),
        (log.try_get_log_entries(4..).await.expect("read"), vec![4, 5]),
        (log.try_get_log_entries(..2).await.expect("read"), vec![0, 1]),
        (log.try_get_log_entries(3..3).await.expect("read"), vec![]),
        #[allow(clippy::reversed_empty_ranges)]
        (log.try_get_log_entries(4..2).await.expect("read"), vec![]),
        (log.try_get_log_entries(9..).await.expect("read"), vec![]),
    ];
    for (got, want) in cases {
        assert_eq!(indexes(&got), want);
    }
}

#[tokio::test]
async fn large_entries_read_back_whole_after_truncate_purge_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = mixed(1, 1, 12);
    {
        let (mut log, _sm, _store) = open(dir.path()).expect("open");
        log.blocking_append(written.clone()).await.expect("append");
        let mut files_only = LogStore { tail: Arc::default(), ..log.clone() };
        for range in [(Bound::Included(2), Bound::Included(6)), (Bound::Excluded(2), Bound::Excluded(6))] {
            let want: Vec<Entry> = written.iter().filter(|e| range.contains(&e.log_id.index)).cloned().collect();
            assert_eq!(files_only.try_get_log_entries(range).await.expect("read"), want, "{range:?}");
        }
        log.truncate(large(1, 10, 30).log_id).await.expect("truncate");
        log.purge(large(1, 4, 24).log_id).await.expect("purge");
    }
    {
        let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
        let all = log.try_get_log_entries(..).await.expect("read");
        assert_eq!(all, written[4..9].to_vec(), "entries 5 to 9, whole, in order");
        assert_eq!(log.get_log_state().await.expect("state").last_log_id, Some(written[8].log_id));
        // The log goes on after the truncation, and survives another reopen.
        log.blocking_append(mixed(2, 10, 11)).await.expect("append");
    }
    let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
    assert_eq!(indexes(&log.try_get_log_entries(..).await.expect("read")), (5..=11).collect::<Vec<_>>());
}

/// Writes `entries` into the sled tree where earlier builds kept the log, as they stored them (whole,
/// or in pieces of `piece` bytes, the first carrying their count), and the first `partial` pieces of
/// `cut_short` (an append a crash cut short).
fn write_legacy_log(dir: &std::path::Path, entries: &[Entry], piece: usize, cut_short: Option<(&Entry, usize)>) {
    let db = crate::storage::open_db(dir).expect("db");
    let tree = db.open_tree(log_pieces::LOGS).expect("tree");
    let stored = |entry: &Entry, piece: usize| -> Vec<(Vec<u8>, Vec<u8>)> {
        let bytes = encode(entry).expect("encode");
        if bytes.len() <= piece {
            return vec![(entry.log_id.index.to_be_bytes().to_vec(), bytes)];
        }
        let pieces: Vec<&[u8]> = bytes.chunks(piece).collect();
        let count = (pieces.len() as u32).to_be_bytes();
        let value = |n: usize, p: &[u8]| if n == 0 { [&count[..], p].concat() } else { p.to_vec() };
        let key = |n: usize| [&entry.log_id.index.to_be_bytes()[..], &(n as u32).to_be_bytes()].concat();
        pieces.iter().enumerate().map(|(n, p)| (key(n), value(n, p))).collect()
    };
    for entry in entries {
        for (key, value) in stored(entry, piece) {
            tree.insert(key, value).expect("insert");
        }
    }
    if let Some((entry, partial)) = cut_short {
        let pieces = stored(entry, piece);
        assert!(pieces.len() > partial);
        for (key, value) in pieces.into_iter().take(partial) {
            tree.insert(key, value).expect("insert");
        }
    }
    db.flush().expect("flush");
}

/// A log an earlier build kept in sled (pieces of 8 KiB, or of 2 KiB as the last builds wrote them)
/// moves into the segment files when the member starts, whole; an entry whose append a crash cut short
/// is left out (it was never reported persisted), and the log goes on after it.
#[tokio::test]
async fn a_log_kept_in_sled_by_an_earlier_build_moves_into_segment_files() {
    for piece in [8 << 10, log_pieces::CHUNK_BYTES] {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = mixed(1, 1, 9);
        write_legacy_log(dir.path(), &written, piece, Some((&large(1, 10, 40), 2)));
        {
            let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
            assert_eq!(log.get_log_state().await.expect("state").last_log_id, Some(written[8].log_id));
            assert_eq!(log.try_get_log_entries(..).await.expect("read"), written, "pieces of {piece} bytes");
            let tree = log.db.open_tree(log_pieces::LOGS).expect("tree");
            assert!(tree.is_empty(), "the sled tree is emptied");
            log.blocking_append([large(2, 10, 40)]).await.expect("the entry is appended again");
        }
        let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
        assert_eq!(indexes(&log.try_get_log_entries(..).await.expect("read")), (1..=10).collect::<Vec<_>>());
    }
}

/// A start that stopped part way through the move (the segment files hold a prefix of the old log, the
/// sled tree all of it) moves the rest at the next start.
#[tokio::test]
async fn a_move_cut_short_goes_on_at_the_next_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = mixed(1, 1, 9);
    write_legacy_log(dir.path(), &written, log_pieces::CHUNK_BYTES, None);
    {
        let wal = Wal::open(&dir.path().join(WAL_DIR)).expect("wal");
        let moved: Vec<(u64, Vec<u8>)> =
            written[..4].iter().map(|entry| (entry.log_id.index, encode(entry).expect("encode"))).collect();
        for file in wal.append(&moved, true).expect("append") {
            file.sync_data().expect("sync");
        }
    }
    let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
    assert_eq!(log.try_get_log_entries(..).await.expect("read"), written);
    assert!(log.db.open_tree(log_pieces::LOGS).expect("tree").is_empty());
}

#[tokio::test]
async fn the_tail_keeps_a_bounded_number_of_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _sm, _store) = open(dir.path()).expect("open");
    // 40 entries of 1 MiB: more than the tail's bytes, fewer than its entries.
    log.blocking_append((1..=40).map(|i| large(1, i, 1024))).await.expect("append");
    let (entries, bytes) = log.tail_size().read();
    let tail = log.tail.lock();
    assert_eq!((entries, bytes), (tail.entries.len(), tail.bytes), "the view reads this store's tail");
    assert!(tail.bytes <= TAIL_BYTES && tail.bytes > TAIL_BYTES / 2, "{} bytes", tail.bytes);
    assert_eq!(tail.back().map(|e| e.log_id.index), Some(40));
    assert_eq!(tail.bytes, tail.entries.iter().map(|(_, size)| size).sum::<usize>());
}

#[tokio::test]
async fn a_key_of_the_earlier_log_that_names_no_entry_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_legacy_log(dir.path(), &mixed(1, 1, 2), log_pieces::CHUNK_BYTES, None);
    {
        let db = crate::storage::open_db(dir.path()).expect("db");
        db.open_tree(log_pieces::LOGS).expect("tree").insert([1u8, 2, 3], &b"junk"[..]).expect("insert");
        db.flush().expect("flush");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let err = loop {
        match open(dir.path()) {
            Err(err) if err.to_string().contains("could not acquire lock") && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(err) => break err,
            Ok(_) => panic!("a junk key was accepted"),
        }
    };
    assert!(err.to_string().contains("a key shorter than an index"), "{err}");
}

#[tokio::test]
async fn a_replication_reader_leaves_the_middle_of_long_reads_outside_the_tail_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut written = mixed(1, 1, 30);
    written.extend(mixed(2, 31, 60));
    {
        let (mut log, _sm, _store) = open(dir.path()).expect("open");
        log.blocking_append(written.clone()).await.expect("append");
    }
    // Reopened: the tail is empty, every read goes to the segment files.
    let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
    let mut reader = log.get_log_reader().await;
    let read = reader.limited_get_log_entries(10, 50).await.expect("read");
    assert_eq!(indexes(&read), (10..50).collect::<Vec<_>>());
    assert_eq!((&read[0], &read[39]), (&written[9], &written[48]), "the first and last entries are read whole");
    assert!(read[1..39].iter().all(is_unread), "the middle is left unread");
    assert!(!written.iter().any(is_unread));
    let whole = log.filled(&read).expect("fill").expect("some were unread");
    assert_eq!(whole, written[9..49].to_vec(), "filled, the entries are the log's");
    assert_eq!(log.filled(&whole).expect("fill"), None, "nothing left to read");

    // Short reads, reads clipped short by the log's end, and the store's own reads are read whole.
    assert_eq!(reader.limited_get_log_entries(10, 25).await.expect("read"), written[9..24].to_vec());
    assert_eq!(reader.limited_get_log_entries(50, 100).await.expect("read"), written[49..].to_vec());
    assert_eq!(log.limited_get_log_entries(10, 50).await.expect("read"), written[9..49].to_vec());
    // (From 40: what is left of the log takes less than an append's bytes, see the test below.)
    let clipped = reader.limited_get_log_entries(40, 100).await.expect("read");
    assert_eq!((indexes(&clipped).first(), clipped.last()), (Some(&40), written.last()));

    // Entries the tail holds are read whole.
    log.blocking_append(mixed(2, 61, 90)).await.expect("append");
    let tail = reader.limited_get_log_entries(61, 80).await.expect("read");
    assert!(!tail.iter().any(is_unread));
    assert_eq!(tail, log.try_get_log_entries(61..80).await.expect("read"));

    // Replaced since the read: filling it fails instead of sending other entries.
    log.truncate(written[44].log_id).await.expect("truncate");
    log.blocking_append(mixed(3, 45, 60)).await.expect("append");
    let err = log.filled(&read).expect_err("replaced");
    assert!(err.to_string().contains("were replaced while being replicated"), "{err}");
}

#[tokio::test]
async fn an_append_to_a_follower_carries_at_most_a_mebibyte_one_entry_at_least() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 40 entries of a quarter MiB of value (a little more encoded), then one of 2 MiB.
    let mut written: Vec<Entry> = (1..=40).map(|i| large(1, i, 256)).collect();
    written.push(large(1, 41, 2048));
    let whole = |from: u64, to: u64| written[(from - 1) as usize..(to - 1) as usize].to_vec();
    let check = |read: Vec<Entry>, from: u64, to: u64, how: &str| {
        assert_eq!(indexes(&read), (from..to).collect::<Vec<_>>(), "{how}");
        assert!(read.iter().all(|entry| !is_unread(entry)), "{how}: short appends are read whole");
    };
    {
        let (mut log, _sm, _store) = open(dir.path()).expect("open");
        log.blocking_append(written.clone()).await.expect("append");
        // The tail holds the newest 8 MiB: a run from it, and one reaching past it into the files.
        let mut reader = log.get_log_reader().await;
        check(reader.limited_get_log_entries(20, 42).await.expect("read"), 20, 23, "from the tail");
        check(reader.limited_get_log_entries(2, 42).await.expect("read"), 2, 5, "from the files");
        check(reader.limited_get_log_entries(41, 42).await.expect("read"), 41, 42, "one entry over the budget");
        check(reader.limited_get_log_entries(39, 42).await.expect("read"), 39, 41, "stops before the large one");
        check(reader.limited_get_log_entries(30, 30).await.expect("read"), 30, 30, "an empty range");
    }
    let (mut log, _sm, _store) = crate::storage::reopen(dir.path());
    let mut reader = log.get_log_reader().await;
    let read = reader.limited_get_log_entries(1, 42).await.expect("read");
    check(read.clone(), 1, 4, "reopened");
    assert_eq!(read, whole(1, 4));
    assert_eq!(log.limited_get_log_entries(37, 40).await.expect("read"), whole(37, 40), "three fit");
    assert_eq!(log.try_get_log_entries(1..42).await.expect("read"), whole(1, 42), "other reads are not cut");
}
