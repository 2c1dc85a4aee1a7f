//! Small syncs over time: a start-up burst is no cadence, a slow one is named once it
//! persists, the amplification is each interval's; git's loose objects and its batch mode.

use super::*;

/// The `write_amplification` findings of each of `snaps`, as (interval, small syncs,
/// amplification).
fn amplification_by_interval(snaps: &[crate::Snapshot]) -> Vec<(usize, u64, f64)> {
    snaps
        .iter()
        .enumerate()
        .flat_map(|(i, snap)| {
            of_kind(&snap.findings, FindingKind::WriteAmplification)
                .into_iter()
                .filter(|f| f.active)
                .map(move |f| {
                    let (Evidence::Count(n), Evidence::Ratio(x)) =
                        (evidence(f, "small_syncs"), evidence(f, "amplification"))
                    else {
                        panic!("{f:?}")
                    };
                    (i, *n, *x)
                })
        })
        .collect()
}

#[test]
fn a_start_up_burst_of_small_syncs_is_not_a_cadence() {
    // PostgreSQL's postmaster at start: postmaster.pid rewritten (64-131 B) and fsynced 7
    // times within ~0.1 s, each a block and a journal commit; then nothing. SQLite's CREATE
    // TABLE is the same shape (3 small fdatasyncs among 6). 14 a second over a 0.5 s
    // interval, but once: no cadence, no fix to give.
    for start_ms in [100, 470] {
        let mut s = Stream::new();
        for i in 0..7u64 {
            s.synced_record(42, SyncKind::Fsync, (start_ms + i * 15) * MS, 100, 12_288);
        }
        let snaps: Vec<_> = (1..=6u64).map(|k| s.tick(k * 500 * MS)).collect();
        let found = amplification_by_interval(&snaps);
        assert!(found.is_empty(), "burst at {start_ms} ms: {found:?}");
    }
}

#[test]
fn a_slow_cadence_of_small_syncs_is_named_once_it_persists() {
    // A logger fsyncing a 100 B record 8 times a second: 4 calls an interval, fewer than a
    // burst can hold, but interval after interval.
    let mut s = Stream::new();
    for i in 0..24u64 {
        s.synced_record(42, SyncKind::Fsync, i * 125 * MS, 100, 12_288);
    }
    let snaps: Vec<_> = (1..=6u64).map(|k| s.tick(k * 500 * MS)).collect();
    let found = amplification_by_interval(&snaps);
    assert!(!found.is_empty(), "a persisting cadence must be named");
    assert!(
        found
            .iter()
            .all(|&(i, _, x)| i >= 2 && (x - 163.8).abs() < 0.1),
        "named once seen three intervals running, at (4096 + 12288) / 100: {found:?}"
    );
}

#[test]
fn a_short_dense_run_of_small_syncs_is_named_at_once() {
    // dd bs=128 count=300 oflag=dsync: 300 calls inside one interval, then the end.
    let mut s = Stream::new();
    for i in 0..300u64 {
        s.synced_record(42, SyncKind::DsyncWrite, 100 * MS + i * MS, 128, 12_288);
    }
    let snaps: Vec<_> = (1..=4u64).map(|k| s.tick(k * 500 * MS)).collect();
    let found = amplification_by_interval(&snaps);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, 300);
}

#[test]
fn the_amplification_is_the_intervals_however_long_the_finding_lasts() {
    // An O_DSYNC logger on XFS: 10,000 256 B writes a second by one thread, each writing a
    // data block and a log block itself (8 KiB: 32x). Calls settle `SETTLE_NS` after they
    // end, so ~20,000 of its own writes wait for their calls at any time: every interval's
    // figure must still be 32x, not drift with the finding's age.
    let mut s = Stream::new();
    let mut snaps = Vec::new();
    for k in 0..6u64 {
        for i in 0..5_000u64 {
            let t = k * 500 * MS + i * 100 * US;
            s.write_request(42, "python3", t + 10 * US, 4096, true, false);
            s.write_request(42, "python3", t + 40 * US, 4096, true, false);
            s.sync(42, SyncKind::DsyncWrite, t, t + 60 * US, 256, 1);
        }
        snaps.push(s.tick((k + 1) * 500 * MS));
    }
    let found = amplification_by_interval(&snaps);
    assert!(found.len() >= 4, "{found:?}");
    assert!(
        found.iter().all(|&(_, _, x)| (x - 32.0).abs() < 0.01),
        "{found:?}"
    );
}

/// git unpack-objects with core.fsync=all: ~77 B loose objects, each made durable by `kind`
/// (a block written inside the call; an fsync also commits the journal), 3,000 a second.
fn git_objects(kind: SyncKind) -> Stream {
    let mut s = Stream::new();
    let journal = if kind.commits_journal() { 12_288 } else { 0 };
    for i in 0..900u64 {
        s.synced_record(42, kind, i * 300 * US, 77, journal);
    }
    s
}

#[test]
fn sync_file_range_per_small_file_is_not_amplification() {
    // git's fsyncMethod=writeout-only (and batch's per-object step): sync_file_range with
    // WAIT_BEFORE|WRITE|WAIT_AFTER writes the object's block and waits for it, but commits
    // no journal and flushes no cache: the block is what write-back would write anyway.
    let found = git_objects(SyncKind::SyncFileRange).findings();
    for kind in [FindingKind::WriteAmplification, FindingKind::SyncStorm] {
        assert!(of_kind(&found, kind).is_empty(), "{kind:?}: {found:?}");
    }
    // A real fsync per object is amplified: a block and a journal commit per 77 B.
    let found = git_objects(SyncKind::Fsync).findings();
    assert_eq!(
        of_kind(&found, FindingKind::WriteAmplification).len(),
        1,
        "{found:?}"
    );
}

#[test]
fn git_batch_marker_fsync_is_no_empty_sync() {
    // git's fsyncMethod=batch: 200 objects each written out with sync_file_range(WRITE),
    // then one fsync of an empty marker file, which flushes the lot. The marker has nothing
    // of its own, yet it is what makes the objects durable.
    let mut s = Stream::new();
    for batch in 0..40u64 {
        let t = batch * 25 * MS;
        for i in 0..200u64 {
            let at = t + i * 100 * US;
            s.write_request(42, "git", at + 10 * US, 4096, true, false);
            s.sync_file(
                42,
                SyncKind::SyncFileRangeWrite,
                at,
                at + 50 * US,
                900,
                1,
                &format!("/repo/objects/tmp_{batch}_{i}"),
            );
        }
        let marker = t + 20 * MS + 500 * US;
        s.flush_request(42, "git", marker + 100 * US, true, false);
        // The commit it forces: the 200 new files' metadata.
        s.write_request(
            300,
            "jbd2/loop0-8",
            marker + 200 * US,
            160 * 1024,
            false,
            true,
        );
        s.sync_file(
            42,
            SyncKind::Fsync,
            marker,
            marker + 2 * MS,
            0,
            0,
            &format!("/repo/objects/bulk_fsync_{batch}"),
        );
    }
    let found = s.findings();
    // Nor a storm: each marker fsync makes its batch's 200 write-outs durable, ~800 KiB.
    for kind in [
        FindingKind::EmptySyncs,
        FindingKind::SyncStorm,
        FindingKind::WriteAmplification,
    ] {
        assert!(of_kind(&found, kind).is_empty(), "{kind:?}: {found:?}");
    }
}
