//! The ledger on synthetic writes and calls.

use super::*;
use crate::{FileRef, SyncKind};

const MS: u64 = 1_000_000;
const LOOP0: Dev = Dev::new(7, 0);

fn write(tgid: u32, comm: &str, at_ms: u64, bytes: u32, kthread: bool, in_sync: bool) -> BlockIo {
    BlockIo {
        dev: LOOP0,
        sector: 0,
        bytes,
        op: Op::Write,
        flags: if in_sync {
            iotop_bpf_common::block::FLAG_IN_SYNC
        } else {
            0
        },
        tgid,
        tid: tgid,
        comm: Comm::new(comm),
        created_ns: at_ms * MS,
        issued_ns: at_ms * MS,
        completed_ns: at_ms * MS + MS,
        error: 0,
        kernel_thread: kthread,
        cgroup: 0,
        dirtier: None,
        file: None,
    }
}

fn journal_write(at_ms: u64, bytes: u32) -> BlockIo {
    write(300, "jbd2/loop0-8", at_ms, bytes, true, false)
}

fn fsync(tgid: u32, from_ms: u64, to_ms: u64, dev: Option<Dev>) -> SyncCall {
    SyncCall {
        tgid,
        tid: tgid,
        comm: Comm::new("lab001"),
        kind: SyncKind::Fsync,
        fd: Some(3),
        start_ns: from_ms * MS,
        end_ns: to_ms * MS,
        ret: 0,
        window_bytes: 128,
        window_writes: 1,
        addr: 0,
        file: FileRef::Path("/data/log".into()),
        dev,
        fs_block_size: 4096,
        fs_dev: None,
        ino: 0,
        name: String::new(),
        dir: false,
    }
}

#[test]
fn one_call_gets_its_own_writes_and_the_journal_it_waited_for() {
    let mut ledger = SyncLedger::default();
    ledger.note_write(&write(42, "lab001", 6, 4096, false, true));
    ledger.note_write(&journal_write(10, 8192));
    ledger.note_sync(&fsync(42, 5, 20, Some(LOOP0)));
    let (settled, charges) = ledger.settle(200 * MS, false);
    assert!(
        settled.is_empty() && charges.is_empty(),
        "still within the grace period"
    );
    assert!(ledger.has_open(42));
    let (settled, charges) = ledger.settle(2_000 * MS, false);
    assert_eq!(settled.len(), 1);
    assert_eq!(
        (settled[0].own_bytes, settled[0].charged_bytes),
        (4096, 8192)
    );
    assert_eq!(settled[0].charged_by[0].0, 300);
    assert_eq!(
        (charges[0].from_tgid, charges[0].to_tgid, charges[0].bytes),
        (300, 42, 8192)
    );
    assert!(!ledger.has_open(42));
    let (settled, charges) = ledger.settle(3_000 * MS, false);
    assert!(settled.is_empty() && charges.is_empty(), "settled once");
}

#[test]
fn group_commit_splits_the_bytes_among_the_calls() {
    let mut ledger = SyncLedger::default();
    ledger.note_write(&journal_write(10, 12_289));
    ledger.note_sync(&fsync(1, 5, 20, Some(LOOP0)));
    ledger.note_sync(&fsync(2, 8, 30, None));
    ledger.note_sync(&fsync(3, 9, 15, Some(LOOP0)));
    let (settled, charges) = ledger.settle(0, true);
    let total: u64 = settled.iter().map(|s| s.charged_bytes).sum();
    assert_eq!(total, 12_289, "nothing lost to rounding");
    assert_eq!(charges.iter().map(|c| c.bytes).sum::<u64>(), 12_289);
    assert!(settled.iter().all(|s| s.charged_bytes >= 4_096));
}

#[test]
fn other_disks_other_times_data_only_calls_and_user_writes_are_not_charged() {
    let mut ledger = SyncLedger::default();
    ledger.note_write(&journal_write(10, 4096));
    ledger.note_sync(&fsync(1, 11, 20, Some(LOOP0))); // began after the write was created
    ledger.note_sync(&fsync(2, 5, 20, Some(Dev::new(8, 0)))); // another disk
    let mut range = fsync(3, 5, 20, Some(LOOP0));
    range.kind = SyncKind::SyncFileRange;
    ledger.note_sync(&range);
    ledger.note_write(&write(9, "dd", 10, 4096, false, false));
    let (settled, charges) = ledger.settle(0, true);
    assert!(charges.is_empty());
    assert!(settled.iter().all(|s| s.device_bytes() == 0));
}

#[test]
fn own_writes_belong_to_the_thread_that_made_them() {
    let mut ledger = SyncLedger::default();
    ledger.note_write(&write(42, "lab001", 6, 4096, false, true));
    ledger.note_write(&write(43, "other", 6, 8192, false, true));
    ledger.note_sync(&fsync(42, 5, 20, Some(LOOP0)));
    let (settled, _) = ledger.settle(0, true);
    assert_eq!(settled[0].own_bytes, 4096);
}

#[test]
fn a_long_call_far_back_is_still_found() {
    let mut ledger = SyncLedger::default();
    ledger.note_sync(&fsync(1, 0, 10_000, Some(LOOP0)));
    for t in 1..50u32 {
        let at = 9_000 + u64::from(t);
        ledger.note_sync(&fsync(100 + t, at, at, Some(LOOP0)));
    }
    ledger.note_write(&journal_write(5_000, 4096));
    let (settled, _) = ledger.settle(0, true);
    let long = settled.iter().find(|s| s.call.tgid == 1).unwrap();
    assert_eq!(long.charged_bytes, 4096);
}

#[test]
fn a_fast_syncer_gets_its_own_writes_whatever_the_settling_lag() {
    // An O_DSYNC logger on XFS: ~20,000 syncs a second by one thread, each writing a
    // data block and a log block itself. Calls settle `SETTLE_NS` after they end, at the
    // interval's tick, so over a second of its own writes wait for their calls: every
    // call must still get exactly its two (the figure must not depend on how many wait).
    let mut ledger = SyncLedger::default();
    let mut settled = Vec::new();
    let mut next_tick = 500 * MS;
    for i in 0..60_000u64 {
        let start = i * 50_000;
        if start >= next_tick {
            settled.extend(ledger.settle(next_tick, false).0);
            next_tick += 500 * MS;
        }
        let mut data = write(42, "python3", 0, 4096, false, true);
        data.created_ns = start + 5_000;
        let mut log = data;
        log.created_ns = start + 20_000;
        ledger.note_write(&data);
        ledger.note_write(&log);
        let mut call = fsync(42, 0, 0, Some(LOOP0));
        (call.start_ns, call.end_ns) = (start, start + 40_000);
        ledger.note_sync(&call);
    }
    settled.extend(ledger.settle(next_tick + 1_000 * MS, true).0);
    assert_eq!(settled.len(), 60_000);
    let wrong: Vec<(u64, u64)> = settled
        .iter()
        .filter(|s| s.own_bytes != 8192)
        .map(|s| (s.call.start_ns, s.own_bytes))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty(),
        "calls with the wrong own bytes: {wrong:?}"
    );
}

#[test]
fn a_write_completing_after_its_call_returned_is_still_its_own() {
    // sync_file_range(WRITE) returns before its write completes: the write's record comes
    // after the call's, and after the thread's next call's; it is the first call's.
    let mut ledger = SyncLedger::default();
    let mut first = fsync(42, 10, 11, Some(LOOP0));
    first.kind = SyncKind::SyncFileRangeWrite;
    ledger.note_sync(&first);
    let next = fsync(42, 20, 21, Some(LOOP0));
    ledger.note_write(&write(42, "git", 21, 512, false, true)); // the next call's
    ledger.note_sync(&next);
    ledger.note_write(&write(42, "git", 10, 4096, false, true)); // late: the first's
    let (settled, _) = ledger.settle(0, true);
    let own: Vec<u64> = settled.iter().map(|s| s.own_bytes).collect();
    assert_eq!(own, vec![4096, 512]);
}

#[test]
fn waiting_state_is_bounded() {
    let mut ledger = SyncLedger::default();
    for i in 0..(MAX_PENDING_WRITES as u64 + 10) {
        ledger.note_write(&journal_write(i, 512));
    }
    assert_eq!(ledger.pending.len(), MAX_PENDING_WRITES);
    for tid in 0..(MAX_THREADS_WITH_OWN_WRITES as u32 + 10) {
        ledger.note_write(&write(tid + 1, "x", 1, 512, false, true));
    }
    assert!(ledger.own.len() <= MAX_THREADS_WITH_OWN_WRITES);
    // Threads whose sync record never came are forgotten with time.
    ledger.settle(60_000 * MS, false);
    assert!(ledger.own.is_empty());
}

/// A call on file `ino` of the filesystem on loop0.
fn on_file(mut call: SyncCall, ino: u64) -> SyncCall {
    call.fs_dev = Some(LOOP0);
    call.ino = ino;
    call
}

/// Process 42's sync_file_range(WRITE) of inode `ino` at `at_ms`, and the 4 KiB it wrote.
fn write_out(ledger: &mut SyncLedger, ino: u64, at_ms: u64) {
    let mut start = on_file(fsync(42, at_ms, at_ms, Some(LOOP0)), ino);
    start.kind = SyncKind::SyncFileRangeWrite;
    ledger.note_sync(&start);
    let mut w = write(42, "git", 0, 4096, false, true);
    w.created_ns = at_ms * MS;
    ledger.note_write(&w);
}

#[test]
fn what_sync_file_range_wrote_out_is_the_files_next_fsyncs_own() {
    // dpkg: write a small file, sync_file_range(WRITE) it (its data block is created in the
    // call and completes after it returned), later fsync it: the fsync makes that block
    // durable, so it is the fsync's cost, not a free ride.
    let mut ledger = SyncLedger::default();
    let mut start = on_file(fsync(42, 10, 11, Some(LOOP0)), 7);
    start.kind = SyncKind::SyncFileRangeWrite;
    ledger.note_sync(&start);
    ledger.note_write(&write(42, "dpkg", 10, 4096, false, true));
    // Another file written out, never fsynced; another process's fsync of inode 7.
    let mut other = on_file(fsync(42, 12, 13, Some(LOOP0)), 8);
    other.kind = SyncKind::SyncFileRangeWrite;
    ledger.note_sync(&other);
    ledger.note_write(&write(42, "dpkg", 12, 8192, false, true));
    ledger.note_sync(&on_file(fsync(43, 20, 21, Some(LOOP0)), 7));
    // The fsync, in a later settling pass, with a journal commit charged.
    let (first, _) = ledger.settle(1_000 * MS, false);
    assert_eq!(first.len(), 3);
    ledger.note_write(&journal_write(1_500, 8192));
    ledger.note_sync(&on_file(fsync(42, 1_499, 1_502, Some(LOOP0)), 7));
    let (later, _) = ledger.settle(0, true);
    let own = |s: &[SettledSync], tgid: u32, ino: u64| {
        s.iter()
            .find(|c| c.call.tgid == tgid && c.call.ino == ino && c.call.kind == SyncKind::Fsync)
            .map(|c| (c.own_bytes, c.ahead_bytes, c.charged_bytes))
    };
    assert_eq!(own(&later, 42, 7), Some((4096, 4096, 8192)));
    assert_eq!(own(&first, 43, 7), Some((0, 0, 0)), "not its write-out");
    // The write-outs themselves keep their own bytes.
    let starts: Vec<u64> = first
        .iter()
        .filter(|c| c.call.kind == SyncKind::SyncFileRangeWrite)
        .map(|c| c.own_bytes)
        .collect();
    assert_eq!(starts, vec![4096, 8192]);
    // Taken once: a second fsync of the file has nothing written ahead.
    ledger.note_sync(&on_file(fsync(42, 3_000, 3_001, Some(LOOP0)), 7));
    let (again, _) = ledger.settle(0, true);
    assert_eq!(again[0].ahead_bytes, 0);
}

#[test]
fn a_commit_with_nothing_of_its_own_makes_every_write_out_durable() {
    // git's batch mode: 200 objects written out, then one fsync of an empty marker file:
    // that commit makes them all durable, so their write-outs are its cost (and payload).
    let mut ledger = SyncLedger::default();
    for ino in 1..=200u64 {
        write_out(&mut ledger, ino, ino);
    }
    let mut marker = on_file(fsync(42, 300, 301, Some(LOOP0)), 1_000);
    marker.window_bytes = 0;
    ledger.note_sync(&marker);
    let (settled, _) = ledger.settle(0, true);
    let flush = settled.iter().find(|c| c.call.ino == 1_000).unwrap();
    assert_eq!(
        (flush.ahead_bytes, flush.own_bytes),
        (200 * 4096, 200 * 4096)
    );
    assert_eq!(ledger.ahead.files(), 0, "all taken");
}

#[test]
fn files_written_out_and_never_synced_are_bounded_and_expire() {
    use super::ahead::{EXPIRE_NS, MAX_FILES};
    let mut ledger = SyncLedger::default();
    for ino in 1..=(MAX_FILES as u64 + 100) {
        write_out(&mut ledger, ino, ino);
        ledger.settle(ino * MS + SETTLE_NS, false);
    }
    assert!(ledger.ahead.files() <= MAX_FILES);
    assert!(ledger.ahead.order_len() <= 2 * MAX_FILES);
    // The newest files are kept, the oldest made room.
    assert!(ledger.ahead.has((42, LOOP0, MAX_FILES as u64 + 100)));
    assert!(!ledger.ahead.has((42, LOOP0, 1)));
    ledger.settle(EXPIRE_NS + 100_000 * MS, false);
    assert_eq!((ledger.ahead.files(), ledger.ahead.order_len()), (0, 0));
}
