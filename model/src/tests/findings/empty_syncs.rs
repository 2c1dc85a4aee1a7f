//! `empty_syncs`: syncs with nothing to write that still flush the disk's cache; and how a
//! sync's own writes and flushes are counted.

use super::*;

/// `sysbench fileio --file-fsync-freq=1` over four files: each write to one file is followed
/// by an fsync of all four; three of them have nothing to write, yet each flushes.
fn fsync_all_files_after_each_write(writes: u64) -> Stream {
    let mut s = Stream::new();
    for i in 0..writes {
        let t = i * 2 * MS;
        for f in 0..4u64 {
            let start = t + f * 400 * US;
            let written = f == i % 4;
            if written {
                s.write_request(42, "sysbench", start + 10 * US, 16_384, true, false);
            }
            s.flush_request(42, "sysbench", start + 50 * US, true, false);
            s.sync_file(
                42,
                SyncKind::Fsync,
                start,
                start + 300 * US,
                if written { 16_384 } else { 0 },
                u64::from(written),
                &format!("/mnt/test/test_file.{f}"),
            );
        }
    }
    s
}

#[test]
fn a_writer_that_fsyncs_every_file_after_each_write_is_named_for_its_empty_syncs() {
    let found = fsync_all_files_after_each_write(200).findings();
    let empty = of_kind(&found, FindingKind::EmptySyncs);
    assert_eq!(empty.len(), 1, "{found:?}");
    let f = empty[0];
    assert_eq!(f.tgid, Some(42));
    assert_eq!(*evidence(f, "empty_syncs"), Evidence::Count(600));
    assert_eq!(*evidence(f, "syncs"), Evidence::Count(800));
    assert_eq!(*evidence(f, "empty_flushes"), Evidence::Count(600));
    assert_eq!(*evidence(f, "empty_share"), Evidence::Ratio(0.75));
    assert!(
        f.summary
            .contains("600 of 800 fsyncs had nothing to make durable"),
        "{}",
        f.summary
    );
    assert_eq!(f.files.len(), 4, "{:?}", f.files);
    assert!(
        f.why.contains("flushes the device's write cache"),
        "{}",
        f.why
    );
}

#[test]
fn a_directory_fsync_after_each_message_is_no_empty_sync() {
    // A maildir delivery: write the message, fsync it, fsync its directory (the entry).
    // The directory's fsync has no write to count, yet it makes the new name durable.
    let mut s = Stream::new();
    for i in 0..200u64 {
        let t = i * 2 * MS;
        s.write_request(42, "lab001", t + 10 * US, 4096, true, false);
        s.flush_request(42, "lab001", t + 50 * US, true, false);
        s.sync_file(
            42,
            SyncKind::Fsync,
            t,
            t + 300 * US,
            300,
            1,
            "/mnt/m/new/msg",
        );
        let start = t + 400 * US;
        // The directory's block, written by its fsync.
        s.write_request(42, "lab001", start + 20 * US, 4096, true, false);
        s.flush_request(42, "lab001", start + 50 * US, true, false);
        s.sync_dir(42, SyncKind::Fsync, start, start + 300 * US, "/mnt/m/new");
    }
    let found = s.findings();
    assert!(
        of_kind(&found, FindingKind::EmptySyncs).is_empty(),
        "{found:?}"
    );
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "the messages' own fsyncs: {found:?}");
    // A 300-byte message costs its block and its directory's: (4096 + 4096) / 300.
    assert_eq!(*evidence(wa[0], "amplification"), Evidence::Ratio(27.3));
    assert!(
        wa[0]
            .summary
            .contains("and 200 directory fsyncs at 4 KiB each"),
        "{}",
        wa[0].summary
    );
}

#[test]
fn empty_syncs_that_flush_nothing_are_not_named() {
    // The same calls, but nothing flushed (a device without a write cache).
    let mut s = Stream::new();
    for i in 0..400u64 {
        let t = i * 2 * MS;
        s.sync(42, SyncKind::Fsync, t, t + 300 * US, 0, 0);
    }
    assert!(of_kind(&s.findings(), FindingKind::EmptySyncs).is_empty());
}

#[test]
fn flushes_are_not_counted_as_writes() {
    let s = fsync_all_files_after_each_write(100);
    let snap = {
        let mut s = s;
        s.model.tick(&KernelSample {
            kind: SampleKind::Final,
            now_ns: 1_000 * MS,
            names: vec![(DISK, "loop0".into())],
            page_size: 4096,
            ..KernelSample::default()
        })
    };
    let p = snap.procs.iter().find(|p| p.tgid == 42).unwrap();
    assert_eq!((p.interval.writes, p.interval.flushes), (100, 400));
    assert!(
        p.interval.write_sizes.iter().all(|&(size, _)| size > 0),
        "no 0-byte write size: {:?}",
        p.interval.write_sizes
    );
}

#[test]
fn write_back_starts_are_not_syncs_and_keep_their_writes() {
    // git's batch mode: each object written, then sync_file_range(SYNC_FILE_RANGE_WRITE),
    // whose writes complete after it returns; one fsync at the end.
    let mut s = Stream::new();
    for i in 0..300u64 {
        let t = i * 3 * MS;
        s.sync_file(
            42,
            SyncKind::SyncFileRangeWrite,
            t,
            t + 20 * US,
            300,
            1,
            &format!("/mnt/test/objects/{i}"),
        );
        // Created inside the call, completed (and reported) after it returned.
        s.write_request(42, "git", t + 10 * US, 4096, true, false);
    }
    s.sync(42, SyncKind::Fsync, 950 * MS, 951 * MS, 0, 0);
    let found = s.findings();
    for kind in [
        FindingKind::WriteAmplification,
        FindingKind::SyncStorm,
        FindingKind::EmptySyncs,
    ] {
        assert!(of_kind(&found, kind).is_empty(), "{kind:?}: {found:?}");
    }
}

#[test]
fn own_writes_go_to_the_call_they_were_created_in_not_the_next_one() {
    // A large file's write-back, started inside its call and completing after it, must not
    // be booked to the next, small call (dpkg: sync_file_range per file, then fsyncs).
    let mut s = Stream::new();
    for i in 0..100u64 {
        let t = i * 8 * MS;
        // A 1 MiB file: its call creates 256 KiB-requests that complete after it returns.
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t,
            t + MS,
            1 << 20,
            1,
            "/mnt/test/big",
        );
        for r in 0..4 {
            s.write_request(
                42,
                "dpkg",
                t + 100 * US + r * 10 * US,
                256 << 10,
                true,
                false,
            );
        }
        // Then a 1 KiB file synced on its own, 4 KiB written inside.
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 4 * MS,
            t + 5 * MS,
            1_000,
            1,
            "/mnt/test/small",
        );
        s.write_request(42, "dpkg", t + 4 * MS + 100 * US, 4096, true, false);
    }
    let snap = s.model.tick(&KernelSample {
        kind: SampleKind::Final,
        now_ns: 1_000 * MS,
        names: vec![(DISK, "loop0".into())],
        page_size: 4096,
        ..KernelSample::default()
    });
    let p = snap.procs.iter().find(|p| p.tgid == 42).unwrap();
    let (small, large) = (&p.interval.sync.small, &p.interval.sync.large);
    assert_eq!((small.calls, large.calls), (100, 100));
    assert_eq!(small.mean_own(), 4096, "one block per small file");
    assert_eq!(large.mean_own(), 1 << 20, "its own 1 MiB per large file");
}

#[test]
fn a_shutdowns_empty_syncs_are_a_burst_not_a_habit() {
    // 10 writes: 30 empty fsyncs in one interval (a server syncing every file it has open
    // as it exits) are not named; 200 writes (600 empty) are.
    let found = fsync_all_files_after_each_write(10).findings();
    assert!(
        of_kind(&found, FindingKind::EmptySyncs).is_empty(),
        "{found:?}"
    );
    let found = fsync_all_files_after_each_write(200).findings();
    assert_eq!(of_kind(&found, FindingKind::EmptySyncs).len(), 1);
}
