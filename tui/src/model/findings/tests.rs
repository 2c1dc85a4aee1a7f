//! Detectors on synthetic streams: each fires on its pattern and stays silent on healthy I/O.

use crate::model::{
    Aggregator, BlockIo, Comm, Dev, FileRef, KernelCounters, KernelSample, Op, Settings, SyncCall,
    SyncKind, findings::FindingKind,
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const DISK: Dev = Dev::new(7, 0);

/// A stream builder: a process's writes, syncs and the journal's writes, over one second.
struct Stream {
    model: Aggregator,
    logical: Vec<(u32, u64)>,
}

impl Stream {
    fn new() -> Self {
        Self {
            model: Aggregator::new(Settings::default(), 0),
            logical: vec![],
        }
    }

    fn write_request(
        &mut self,
        tgid: u32,
        comm: &str,
        at_ns: u64,
        bytes: u32,
        in_sync: bool,
        kthread: bool,
    ) {
        self.model.ingest(&BlockIo {
            dev: DISK,
            sector: at_ns / 512,
            bytes,
            op: Op::Write,
            flags: if in_sync {
                iotop_bpf_common::block::FLAG_IN_SYNC
            } else {
                0
            },
            tgid,
            pid: tgid,
            comm: Comm::new(comm),
            created_ns: at_ns,
            issued_ns: at_ns + US,
            completed_ns: at_ns + 50 * US,
            error: 0,
            kernel_thread: kthread,
        });
    }

    fn sync(
        &mut self,
        tgid: u32,
        kind: SyncKind,
        start_ns: u64,
        end_ns: u64,
        window_bytes: u64,
        writes: u64,
    ) {
        self.model.ingest_sync(&SyncCall {
            tgid,
            pid: tgid,
            comm: Comm::new("lab001"),
            kind,
            fd: Some(3),
            start_ns,
            end_ns,
            ret: 0,
            window_bytes,
            window_writes: writes,
            file: FileRef::Path("/mnt/test/log".into()),
            dev: Some(DISK),
        });
    }

    fn logical(&mut self, tgid: u32, bytes: u64) {
        self.logical.push((tgid, bytes));
    }

    fn findings(mut self) -> Vec<crate::model::findings::Finding> {
        self.model.settle_all(u64::MAX / 2);
        let snap = self.model.tick(&KernelSample {
            now_ns: 1_000 * MS,
            counters: KernelCounters::default(),
            disks: vec![],
            diskstats: vec![],
            logical_writes: self.logical,
            dstate_now: vec![],
            dstate_time: vec![],
            names: vec![(DISK, "loop0".into())],
        });
        snap.findings
    }
}

/// lab001: 128-byte appends, each followed by fsync: a 4 KiB data block written inside the
/// fsync, and 8 KiB of journal written by jbd2 while it waits.
fn lab001(record: u64, kind: SyncKind, count: u64) -> Stream {
    let mut s = Stream::new();
    for i in 0..count {
        let t = i * MS;
        s.write_request(42, "lab001", t + 100 * US, 4096, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 200 * US, 8192, false, true);
        s.sync(42, kind, t + 50 * US, t + 600 * US, record, 1);
    }
    s.logical(42, record * count);
    s
}

#[test]
fn small_writes_each_followed_by_fsync_are_named() {
    let found = lab001(128, SyncKind::Fsync, 500).findings();
    let wa: Vec<_> = found
        .iter()
        .filter(|f| f.kind == FindingKind::WriteAmplification)
        .collect();
    assert_eq!(wa.len(), 1, "{found:?}");
    let f = wa[0];
    assert_eq!(f.tgid, Some(42));
    assert!(
        f.summary
            .contains("128-byte writes, each followed by fsync"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("jbd2/loop0-8"), "{}", f.summary);
    let ratio = f
        .evidence
        .iter()
        .find(|(k, _)| *k == "amplification")
        .unwrap();
    assert_eq!(ratio.1, super::Evidence::Ratio(96.0), "(4096 + 8192) / 128");
    assert_eq!(f.severity, super::Severity::Critical);
    assert!(!f.fix.is_empty() && !f.why.is_empty());
}

#[test]
fn fdatasync_and_other_record_sizes_too() {
    let found = lab001(512, SyncKind::Fdatasync, 100).findings();
    assert_eq!(found.len(), 1);
    assert!(
        found[0]
            .summary
            .contains("512-byte writes, each followed by fdatasync"),
        "{}",
        found[0].summary
    );
}

#[test]
fn large_writes_with_one_final_fsync_are_healthy() {
    let mut s = Stream::new();
    for i in 0..256 {
        s.write_request(42, "cp", i * MS, 1 << 20, false, false);
    }
    s.write_request(42, "cp", 900 * MS, 4096, true, false);
    s.write_request(300, "jbd2/loop0-8", 900 * MS, 8192, false, true);
    s.sync(42, SyncKind::Fsync, 899 * MS, 950 * MS, 256 << 20, 256);
    s.logical(42, 256 << 20);
    assert!(s.findings().is_empty());
}

#[test]
fn buffered_writes_without_sync_are_healthy() {
    let mut s = Stream::new();
    for i in 0..1000 {
        s.write_request(77, "kworker/u8:2", i * MS, 4096, false, true);
    }
    s.logical(42, 1000 * 128);
    assert!(s.findings().is_empty());
}

#[test]
fn aligned_direct_writes_are_healthy() {
    // 4 KiB O_DIRECT writes (in write(), not in a sync), each followed by fdatasync that only
    // flushes: payload per sync is a whole block, nothing is amplified.
    let mut s = Stream::new();
    for i in 0..500 {
        s.write_request(42, "db", i * MS, 4096, false, false);
        s.sync(
            42,
            SyncKind::Fdatasync,
            i * MS + 60 * US,
            i * MS + 90 * US,
            4096,
            1,
        );
    }
    s.logical(42, 500 * 4096);
    assert!(s.findings().is_empty());
}

#[test]
fn occasional_small_syncs_are_not_a_pattern() {
    let found = lab001(128, SyncKind::Fsync, 3).findings();
    assert!(
        found.is_empty(),
        "3 syncs in a second is below the cadence threshold"
    );
}
