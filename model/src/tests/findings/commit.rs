//! Two-phase commits: the data's sync, then a commit record's (LMDB, bbolt). The record is
//! judged with the data it commits: a batched database is healthy, not a false CRIT; a
//! per-record one is a storm of small commits, named with its file; a record synced alone is
//! still small.

use super::*;

const DATA: &str = "/db/data.mdb";

impl Stream {
    /// One LMDB transaction at `t`: its dirty pages (`data` bytes) written and fdatasynced,
    /// then its ~100-byte meta page update written through an `O_DSYNC` fd (a whole block on
    /// the device, and a journal commit when the file grew).
    fn lmdb_commit(&mut self, t: u64, data: u64, journal: u32) {
        let pages = u32::try_from(data).unwrap();
        self.write_request(42, "python3", t + 100 * US, pages, true, false);
        if journal > 0 {
            self.write_request(300, "jbd2/loop0-8", t + 300 * US, journal, false, true);
        }
        self.sync_file(42, SyncKind::Fdatasync, t, t + 400 * US, data, 28, DATA);
        self.write_request(42, "python3", t + 420 * US, 4096, true, false);
        self.sync_file(
            42,
            SyncKind::DsyncWrite,
            t + 410 * US,
            t + 500 * US,
            136,
            1,
            DATA,
        );
    }
}

#[test]
fn a_batched_two_phase_commit_is_healthy_not_a_false_crit() {
    // ~1,000 records per transaction: 110 KiB of pages, then the meta page: 1.1x in all.
    let mut s = Stream::new();
    for i in 0..200u64 {
        s.lmdb_commit(i * 5 * MS, 110 << 10, 4096);
    }
    let found = s.findings();
    assert!(
        found
            .iter()
            .all(|f| f.kind != FindingKind::WriteAmplification && f.severity != Severity::Critical),
        "{found:?}"
    );
    assert!(
        of_kind(&found, FindingKind::SyncStorm).is_empty(),
        "{found:?}"
    );
}

#[test]
fn a_batched_two_phase_commit_counts_its_records_with_its_data() {
    let mut s = Stream::new();
    for i in 0..200u64 {
        s.lmdb_commit(i * 5 * MS, 110 << 10, 4096);
    }
    let snap = s.model.tick(&KernelSample {
        kind: SampleKind::Final,
        now_ns: 1_000 * MS,
        names: vec![(DISK, "loop0".into())],
        page_size: 4096,
        ..KernelSample::default()
    });
    let proc = snap.procs.iter().find(|p| p.tgid == 42).unwrap();
    let sync = &proc.interval.sync;
    assert_eq!(sync.small.calls, 0, "{sync:?}");
    assert_eq!(sync.large.calls, 200, "commits, not calls");
    assert_eq!(sync.commit_records, 200);
    assert_eq!(sync.syncs, 400);
    let amp = sync.amplification().unwrap();
    assert!(
        (1.05..1.2).contains(&amp),
        "the commit's 1.1x, not the record's: {amp}"
    );
}

#[test]
fn per_record_two_phase_commits_are_a_storm_named_with_their_file() {
    // One record per transaction: a page or two of data, then the meta page, 500 a second.
    let mut s = Stream::new();
    for i in 0..500u64 {
        s.lmdb_commit(i * 2 * MS, 8192, 0);
    }
    let found = s.findings();
    assert!(
        of_kind(&found, FindingKind::WriteAmplification).is_empty(),
        "{found:?}"
    );
    let storm = of_kind(&found, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{found:?}");
    assert_eq!(storm[0].files, vec![DATA.to_string()]);
    assert!(storm[0].summary.contains(DATA), "{}", storm[0].summary);
}

#[test]
fn a_record_synced_alone_after_nothing_large_is_still_small() {
    // The same meta-page write and sync, but no data sync before it (or one too long ago):
    // a sub-block record at 30x, as a logger's.
    let mut s = Stream::new();
    for i in 0..300u64 {
        let t = i * 2 * MS;
        s.write_request(42, "python3", t + 100 * US, 4096, true, false);
        s.sync_file(42, SyncKind::DsyncWrite, t, t + 500 * US, 136, 1, DATA);
    }
    let found = s.findings();
    assert_eq!(
        of_kind(&found, FindingKind::WriteAmplification).len(),
        1,
        "{found:?}"
    );
}

#[test]
fn a_loggers_records_after_a_large_one_are_not_its_commit() {
    // 300 B records each fsynced right after the previous, a 1 MiB record every 100th: at
    // most two records join the big one's commit, the rest are judged small.
    let found = lab001_mixed(300, SyncKind::Fsync, 500, Some(100)).findings();
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "{found:?}");
    assert!(
        matches!(evidence(wa[0], "small_syncs"), Evidence::Count(n) if *n >= 485),
        "{:?}",
        wa[0].evidence
    );
}
