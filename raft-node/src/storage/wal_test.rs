use super::*;

/// Segments this small roll over every few entries.
const SMALL: u64 = 200;

fn entry(index: u64, tag: u8) -> (u64, Vec<u8>) {
    (index, vec![tag; 40 + (index % 7) as usize])
}

fn entries(range: std::ops::Range<u64>, tag: u8) -> Vec<(u64, Vec<u8>)> {
    range.map(|index| entry(index, tag)).collect()
}

fn append(wal: &Wal, items: &[(u64, Vec<u8>)]) {
    for file in wal.append(items, true).expect("append") {
        file.sync_data().expect("sync");
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|item| item.expect("item").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "wal"))
        .collect();
    files.sort();
    files
}

#[test]
fn entries_survive_a_reopen_across_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SMALL).expect("open");
    append(&wal, &entries(1..4, 1));
    append(&wal, &entries(4..20, 1));
    assert!(segment_files(dir.path()).len() > 3, "small segments roll over");
    assert_eq!(wal.read(1, 20).expect("read"), entries(1..20, 1));
    assert_eq!(wal.read(5, 9).expect("read"), entries(5..9, 1));
    drop(wal);

    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    assert_eq!(wal.bounds(), Some((1, 19)));
    assert_eq!(wal.read(0, 100).expect("read"), entries(1..20, 1));
    // Appends after a reopen go to a new segment and read back with the rest.
    let before = segment_files(dir.path()).len();
    append(&wal, &entries(20..22, 2));
    assert_eq!(segment_files(dir.path()).len(), before + 1);
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    assert_eq!(wal.read(18, 22).expect("read"), [entries(18..20, 1), entries(20..22, 2)].concat());
}

#[test]
fn a_torn_record_ends_the_log_and_what_followed_it_is_cut_away() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SEGMENT_BYTES).expect("open");
    append(&wal, &entries(1..6, 1));
    drop(wal);
    // Flip a byte in the payload of entry 3: entries 3, 4 and 5 are gone, never to come back.
    let file = segment_files(dir.path()).pop().expect("a segment");
    let mut bytes = std::fs::read(&file).expect("read");
    let at = (HEADER + entry(1, 1).1.len()) + (HEADER + entry(2, 1).1.len()) + HEADER + 3;
    bytes[at] ^= 0xff;
    std::fs::write(&file, &bytes).expect("write");

    let wal = Wal::open_with(dir.path(), SEGMENT_BYTES).expect("reopen");
    assert_eq!(wal.bounds(), Some((1, 2)));
    assert_eq!(wal.read(1, 10).expect("read"), entries(1..3, 1));
    let cut = (HEADER + entry(1, 1).1.len()) + (HEADER + entry(2, 1).1.len());
    assert_eq!(std::fs::metadata(&file).expect("metadata").len(), cut as u64, "cut to its whole records");
    // The log goes on from entry 3, in a new segment.
    append(&wal, &entries(3..5, 9));
    drop(wal);
    let wal = Wal::open_with(dir.path(), SEGMENT_BYTES).expect("reopen");
    assert_eq!(wal.read(1, 10).expect("read"), [entries(1..3, 1), entries(3..5, 9)].concat());
}

#[test]
fn a_truncation_survives_a_reopen_and_the_log_goes_on_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SMALL).expect("open");
    append(&wal, &entries(1..20, 1));
    wal.truncate(8).expect("truncate");
    assert_eq!(wal.bounds(), Some((1, 7)));
    assert!(wal.append(&[entry(5, 2)], true).is_err(), "an append over entries the log holds is refused");
    append(&wal, &entries(8..12, 2));
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    assert_eq!(wal.read(1, 30).expect("read"), [entries(1..8, 1), entries(8..12, 2)].concat());
    // Truncating at a segment's first entry removes that segment whole.
    wal.truncate(1).expect("truncate all");
    assert_eq!(wal.bounds(), None);
    assert!(segment_files(dir.path()).is_empty());
}

#[test]
fn a_purge_removes_whole_segments_and_an_append_may_start_after_a_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SMALL).expect("open");
    append(&wal, &entries(1..20, 1));
    let files = segment_files(dir.path()).len();
    wal.purge(10).expect("purge");
    assert_eq!(wal.bounds(), Some((11, 19)));
    assert!(segment_files(dir.path()).len() < files, "segments holding only purged entries are gone");
    assert_eq!(wal.read(0, 20).expect("read"), entries(11..20, 1), "purged entries are not read");
    // After a snapshot install: everything purged, the next entry far later, in a segment named after
    // every earlier one (a name is never used twice).
    let newest = segment_files(dir.path()).pop().expect("a segment");
    wal.purge(100).expect("purge all");
    assert_eq!(wal.bounds(), None);
    assert!(segment_files(dir.path()).is_empty());
    append(&wal, &entries(101..103, 3));
    assert!(segment_files(dir.path())[0] > newest, "{:?}", segment_files(dir.path()));
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    assert_eq!(wal.read(0, 200).expect("read"), entries(101..103, 3));
}

#[test]
fn a_segment_starting_inside_the_previous_one_is_refused_as_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SEGMENT_BYTES).expect("open");
    append(&wal, &entries(1..6, 1));
    drop(wal);
    let file = segment_files(dir.path()).pop().expect("a segment");
    std::fs::copy(&file, dir.path().join(format!("{:016x}-{:016x}.wal", 7, 3))).expect("copy");
    let err = Wal::open_with(dir.path(), SEGMENT_BYTES).expect_err("refused");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("inside the previous segment"), "{err}");
}

#[test]
fn a_read_of_entries_cut_meanwhile_returns_those_before_the_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SEGMENT_BYTES).expect("open");
    append(&wal, &entries(1..10, 1));
    // What a truncation does to the file after a read found its offsets and released the lock.
    let file = segment_files(dir.path()).pop().expect("a segment");
    let cut: usize = (1..5).map(|i| HEADER + entry(i, 1).1.len()).sum();
    std::fs::OpenOptions::new().write(true).open(&file).expect("open").set_len(cut as u64).expect("cut");
    assert_eq!(wal.read(1, 10).expect("read"), entries(1..5, 1));
    assert_eq!(wal.read(3, 5).expect("read"), entries(3..5, 1));
    assert_eq!(wal.read(6, 10).expect("read"), Vec::new());
}

/// `fits` says whether an append stays in the current segment: never after an open (no segment takes
/// appends yet), nor past the segment's size, nor after a gap; and where it says so, no file is made.
#[test]
fn fits_says_whether_an_append_stays_in_the_current_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SMALL).expect("open");
    assert!(!wal.fits(&entries(1..2, 1)), "an empty log has no segment to append to");
    append(&wal, &entries(1..2, 1));
    assert!(wal.fits(&entries(2..3, 1)));
    assert!(!wal.fits(&entries(3..4, 1)), "a gap starts a new segment");
    assert!(!wal.fits(&entries(2..5, 1)), "past SMALL bytes");
    let files = segment_files(dir.path());
    append(&wal, &entries(2..3, 1));
    assert_eq!(segment_files(dir.path()), files, "what fits made no file");
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    assert!(!wal.fits(&entries(3..4, 1)), "segments of an earlier run take no appends");
}

#[test]
fn a_run_within_a_byte_budget_ends_where_the_next_record_would_go_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SMALL).expect("open");
    append(&wal, &entries(1..30, 1));
    assert!(segment_files(dir.path()).len() > 5, "the runs below cross segments");
    let record = |index: u64| (HEADER + entry(index, 1).1.len()) as u64;
    let bytes = |start: u64, end: u64| (start..end).map(record).sum::<u64>();
    for start in [1, 3, 4, 10] {
        for end in start + 1..=30 {
            // Exactly the bytes of `start..end`, and one byte short of them.
            assert_eq!(wal.end_within(start, 30, bytes(start, end)), end, "{start}..{end}");
            assert_eq!(
                wal.end_within(start, 30, bytes(start, end) - 1),
                (end - 1).max(start + 1),
                "{start}..{end} - 1"
            );
        }
        assert_eq!(wal.end_within(start, 30, u64::MAX), 30, "a budget over the log's size ends at `end`");
        assert_eq!(wal.end_within(start, start + 2, u64::MAX), start + 2, "never past `end`");
        assert_eq!(wal.end_within(start, 30, 0), start + 1, "one entry at least");
        assert_eq!(wal.end_within(start, start, 0), start, "an empty range stays empty");
    }
}

/// Waits until every sealed segment of `dir` (all but the newest) has its ends file.
fn wait_for_ends_files(dir: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let segments = segment_files(dir);
        let sealed = &segments[..segments.len().saturating_sub(1)];
        if sealed.iter().all(|path| ends_path(path).exists()) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "ends files not written: {segments:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn sealed_segments_get_ends_files_that_opening_trusts_only_when_they_match() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SMALL).expect("open");
    append(&wal, &entries(1..30, 1));
    wait_for_ends_files(dir.path());
    drop(wal);
    let segments = segment_files(dir.path());
    let path = segments[1].clone();
    let first = parse_name(path.file_name().and_then(|n| n.to_str()).expect("name")).expect("parsed").1;
    let file = File::open(&path).expect("segment");
    let scanned = scan(&file, first, true).expect("scan");
    assert_eq!(read_ends(&ends_path(&path), &file, first), Some(scanned.clone()), "a sound ends file is read");

    let ends_bytes = std::fs::read(ends_path(&path)).expect("ends file");
    let bad = |bytes: &[u8], first: u64, what: &str| {
        let other = dir.path().join("other.ends");
        std::fs::write(&other, bytes).expect("write");
        assert_eq!(read_ends(&other, &file, first), None, "{what}");
    };
    bad(&ends_bytes[..ends_bytes.len() - 1], first, "torn");
    let mut flipped = ends_bytes.clone();
    flipped[30] ^= 1;
    bad(&flipped, first, "a bit flipped");
    bad(&ends_bytes, first + 1, "another segment's");
    let mut shifted: Vec<u32> = scanned.clone();
    *shifted.last_mut().expect("an end") += 1;
    bad(&encode_ends(first, &shifted), first, "the last record is not where it says");
    bad(&encode_ends(first, &scanned[..scanned.len() - 1]), first, "fewer records: the last named is not the last");
    bad(&encode_ends(first, &[]), first, "no record");

    // A segment cut shorter than its ends file says (a truncation racing the file's writer).
    let copy = dir.path().join("copy.wal");
    std::fs::copy(&path, &copy).expect("copy");
    let cut = OpenOptions::new().read(true).write(true).open(&copy).expect("copy");
    cut.set_len(u64::from(scanned[0])).expect("cut");
    assert_eq!(read_ends(&ends_path(&path), &cut, first), None, "ends past the file's end");

    // Opening takes the ends from the file: a record header spoilt since (its length) no longer
    // decides where that segment's records end, as it would when the headers are read.
    drop(file);
    let spoilt = OpenOptions::new().write(true).open(&path).expect("segment");
    spoilt.write_all_at(&[0xff; 4], u64::from(scanned[0])).expect("spoil the second record's length");
    drop(spoilt);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    let last = first + scanned.len() as u64 - 1;
    assert_eq!(wal.read(last, last + 1).expect("read"), entries(last..last + 1, 1), "read past the spoilt header");
}

#[test]
fn the_log_reads_the_same_through_ends_files_after_truncation_and_purge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = Wal::open_with(dir.path(), SMALL).expect("open");
    append(&wal, &entries(1..40, 1));
    wait_for_ends_files(dir.path());
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen through ends files");
    assert_eq!(wal.read(1, 40).expect("read"), entries(1..40, 1));
    // A truncation inside a sealed segment removes its ends file before the cut.
    let segments = segment_files(dir.path());
    let middle = parse_name(segments[3].file_name().and_then(|n| n.to_str()).expect("name")).expect("parsed").1 + 1;
    wal.truncate(middle).expect("truncate");
    assert!(!ends_path(&segments[3]).exists(), "the cut segment's ends file is gone");
    // (An ends file the opening's writer thread writes after this removal is an orphan; the next
    // opening removes it, checked below.)
    assert!(segments[4..].iter().all(|path| !path.exists()));
    append(&wal, &entries(middle..50, 2));
    wal.purge(5).expect("purge");
    assert!(!ends_path(&segments[0]).exists(), "a purged segment's ends file is gone");
    let mut expected = entries(6..middle, 1);
    expected.extend(entries(middle..50, 2));
    // The cut segment gets its ends file back when the log next opens (it is sealed, and read whole).
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen, reading the cut segment's headers");
    assert_eq!(wal.read(6, 50).expect("read"), expected);
    wait_for_ends_files(dir.path());
    assert!(ends_path(&segments[3]).exists());
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    assert_eq!(wal.read(6, 50).expect("read"), expected);
    // An ends file whose segment is gone is removed when the log opens.
    let orphan = dir.path().join(format!("{:016x}-{:016x}.ends", 999, 999));
    std::fs::write(&orphan, b"junk").expect("write");
    drop(wal);
    let wal = Wal::open_with(dir.path(), SMALL).expect("reopen");
    assert!(!orphan.exists());
    assert!(segments[4..].iter().all(|path| !ends_path(path).exists()), "orphans removed");
    assert_eq!(wal.read(6, 50).expect("read"), expected);
}
