//! Detectors on synthetic streams: each fires on its pattern and stays silent on healthy I/O.

use crate::{
    Aggregator, BlockIo, Comm, Dev, DiskGeometry, FileRef, Input, KernelSample, Op, SampleKind,
    Settings, SyncCall, SyncKind,
    findings::{Evidence, Finding, FindingKind, INFO_MIN_STREAK, Severity},
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const DISK: Dev = Dev::new(7, 0);

fn evidence<'a>(f: &'a Finding, key: &str) -> &'a Evidence {
    &f.evidence
        .iter()
        .find(|(k, _)| *k == key)
        .unwrap_or_else(|| panic!("no {key} in {f:?}"))
        .1
}

/// A stream builder: a process's writes and syncs and the journal's writes, over one second.
struct Stream {
    model: Aggregator,
    logical: Vec<(u32, u64)>,
    block: u32,
}

impl Stream {
    fn new() -> Self {
        Self::on_blocks(4096)
    }

    /// On a filesystem with `block`-byte blocks.
    fn on_blocks(block: u32) -> Self {
        Self {
            model: Aggregator::new(Settings::default(), 0),
            logical: vec![],
            block,
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
            tid: tgid,
            comm: Comm::new(comm),
            created_ns: at_ns,
            issued_ns: at_ns + US,
            completed_ns: at_ns + 50 * US,
            error: 0,
            kernel_thread: kthread,
            cgroup: 0,
            dirtier: None,
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
        self.sync_file(
            tgid,
            kind,
            start_ns,
            end_ns,
            window_bytes,
            writes,
            "/mnt/test/log",
        );
    }

    #[expect(clippy::too_many_arguments, reason = "a terse test builder")]
    fn sync_file(
        &mut self,
        tgid: u32,
        kind: SyncKind,
        start_ns: u64,
        end_ns: u64,
        window_bytes: u64,
        writes: u64,
        file: &str,
    ) {
        let call = self.call_on(tgid, kind, start_ns, end_ns, file);
        self.model.ingest_sync(&SyncCall {
            window_bytes,
            window_writes: writes,
            ..call
        });
    }

    /// A directory's fsync (the names of new files made durable): no payload of its own.
    fn sync_dir(&mut self, tgid: u32, kind: SyncKind, start_ns: u64, end_ns: u64, dir: &str) {
        let call = self.call_on(tgid, kind, start_ns, end_ns, dir);
        self.model.ingest_sync(&SyncCall {
            fd: Some(4),
            dir: true,
            ..call
        });
    }

    /// A sync call of `tgid` on `file`, nothing written before it.
    fn call_on(
        &self,
        tgid: u32,
        kind: SyncKind,
        start_ns: u64,
        end_ns: u64,
        file: &str,
    ) -> SyncCall {
        SyncCall {
            tgid,
            tid: tgid,
            comm: Comm::new("lab001"),
            kind,
            fd: Some(3),
            start_ns,
            end_ns,
            ret: 0,
            window_bytes: 0,
            window_writes: 0,
            file: FileRef::Path(file.into()),
            dev: Some(DISK),
            fs_block_size: self.block,
            // As the kernel names it during the call: one inode per path.
            fs_dev: Some(DISK),
            ino: inode_of(file),
            name: String::new(),
            dir: false,
        }
    }

    fn logical(&mut self, tgid: u32, bytes: u64) {
        self.logical.push((tgid, bytes));
    }

    /// The findings of the second that ends with a final sample (everything settled).
    fn findings(mut self) -> Vec<Finding> {
        let snap = self.model.tick(&KernelSample {
            kind: SampleKind::Final,
            now_ns: 1_000 * MS,
            logical_writes: self.logical,
            names: vec![(DISK, "loop0".into())],
            page_size: 4096,
            ..KernelSample::default()
        });
        snap.findings
    }
}

/// lab001: `record`-byte appends, each followed by a sync: a block written inside the sync,
/// and 8 KiB of journal written by jbd2 while it waits. Every `big_every`-th record is 2 MiB
/// (written inside its sync too), as the workshop's lab001 ships.
fn lab001_mixed(record: u64, kind: SyncKind, count: u64, big_every: Option<u64>) -> Stream {
    let mut s = Stream::new();
    let mut logical = 0;
    for i in 0..count {
        let t = i * MS;
        let big = big_every.is_some_and(|n| i % n == n - 1);
        let (payload, own) = if big {
            (2 << 20, 2 << 20)
        } else {
            (record, 4096)
        };
        s.write_request(42, "lab001", t + 100 * US, own, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 200 * US, 8192, false, true);
        s.sync(42, kind, t + 50 * US, t + 600 * US, payload, 1);
        logical += payload;
    }
    s.logical(42, logical);
    s
}

fn lab001(record: u64, kind: SyncKind, count: u64) -> Stream {
    lab001_mixed(record, kind, count, None)
}

/// A stable, non-zero inode number for a path (FNV-1a).
fn inode_of(path: &str) -> u64 {
    path.bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
        .max(1)
}

fn of_kind(found: &[Finding], kind: FindingKind) -> Vec<&Finding> {
    found.iter().filter(|f| f.kind == kind).collect()
}

#[test]
fn an_installer_syncing_hundreds_of_files_once_is_named_by_its_latest_file_too() {
    // dpkg: each new file written and fsynced once, its database's files several times.
    let mut s = Stream::new();
    for i in 0..300u64 {
        let t = i * MS;
        let file = if i % 30 == 0 {
            "/root/var/lib/dpkg/updates/tmp.i".to_string()
        } else {
            format!("/root/usr/share/doc/pkg/file{i}.dpkg-new")
        };
        s.write_request(42, "lab001", t + 100 * US, 4096, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 200 * US, 8192, false, true);
        s.sync_file(
            42,
            SyncKind::Fsync,
            t + 50 * US,
            t + 600 * US,
            900,
            1,
            &file,
        );
    }
    let found = s.findings();
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "{found:?}");
    let f = wa[0];
    assert!(
        f.summary.contains(
            "9 files or more, the most synced /root/var/lib/dpkg/updates/tmp.i, lately \
             /root/usr/share/doc/pkg/file299.dpkg-new"
        ),
        "{}",
        f.summary
    );
    assert_eq!(f.files[0], "/root/usr/share/doc/pkg/file299.dpkg-new");
}

#[test]
fn a_logger_syncing_one_file_names_that_file_alone() {
    let mut s = Stream::new();
    for i in 0..300u64 {
        let t = i * MS;
        s.write_request(42, "lab001", t + 100 * US, 4096, true, false);
        s.sync_file(
            42,
            SyncKind::Fsync,
            t + 50 * US,
            t + 600 * US,
            128,
            1,
            "/var/log/app.log",
        );
    }
    let found = s.findings();
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "{found:?}");
    assert!(
        wa[0].summary.ends_with("; file /var/log/app.log"),
        "{}",
        wa[0].summary
    );
}

#[test]
fn small_writes_each_followed_by_fsync_are_named() {
    let found = lab001(128, SyncKind::Fsync, 500).findings();
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "{found:?}");
    let f = wa[0];
    assert_eq!(f.tgid, Some(42));
    assert!(
        f.summary.contains(
            "500 of 500 fsyncs made 128 B durable at 96x (4 KiB own + 8 KiB by jbd2/loop0-8 each)"
        ),
        "{}",
        f.summary
    );
    assert_eq!(
        *evidence(f, "amplification"),
        Evidence::Ratio(96.0),
        "(4096 + 8192) / 128"
    );
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.file(), Some("/mnt/test/log"));
    assert!(!f.fix.is_empty() && !f.why.is_empty());
}

#[test]
fn a_big_record_every_200th_does_not_hide_the_small_ones() {
    // lab001 as the workshop ships it: 2 MiB every 200th record. By bytes the 2 MiB records
    // dominate (the interval's mean payload per sync is ~10 KiB); by calls, 199 of 200 syncs
    // make 128 bytes durable at ~96x.
    let found = lab001_mixed(128, SyncKind::Fsync, 800, Some(200)).findings();
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "{found:?}");
    let f = wa[0];
    assert!(
        f.summary
            .contains("796 of 800 fsyncs made 128 B durable at 96x"),
        "{}",
        f.summary
    );
    assert!(
        f.summary.contains("4 of 800 made 2 MiB durable at 1.0x"),
        "both populations named: {}",
        f.summary
    );
    assert_eq!(*evidence(f, "large_syncs"), Evidence::Count(4));
}

#[test]
fn the_amp_column_and_the_finding_share_one_figure() {
    let mut s = lab001_mixed(128, SyncKind::Fsync, 800, Some(200));
    let snap = s.model.tick(&KernelSample {
        kind: SampleKind::Final,
        now_ns: 1_000 * MS,
        names: vec![(DISK, "loop0".into())],
        ..KernelSample::default()
    });
    let proc = snap.procs.iter().find(|p| p.tgid == 42).unwrap();
    let column = proc.interval.sync.amplification().unwrap();
    let f = of_kind(&snap.findings, FindingKind::WriteAmplification)[0];
    assert_eq!(
        *evidence(f, "amplification"),
        Evidence::Ratio((column * 10.0).round() / 10.0)
    );
    assert!((column - 96.0).abs() < 0.01, "{column}");
}

#[test]
fn fdatasync_on_a_1k_block_filesystem_too() {
    // 512-byte records are small on a 1 KiB-block filesystem: a whole 1 KiB block each.
    let mut s = Stream::on_blocks(1024);
    for i in 0..100u64 {
        let t = i * 5 * MS;
        s.write_request(42, "logger", t + 100 * US, 1024, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 200 * US, 3072, false, true);
        s.sync(42, SyncKind::Fdatasync, t + 50 * US, t + 600 * US, 512, 1);
    }
    let found = s.findings();
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "{found:?}");
    assert!(
        wa[0]
            .summary
            .contains("100 of 100 fdatasyncs made 512 B durable at 8.0x"),
        "{}",
        wa[0].summary
    );
    assert_eq!(*evidence(wa[0], "fs_block_size"), Evidence::Count(1024));
}

#[test]
fn whole_block_records_are_not_small() {
    // The same cadence with 4 KiB records: each sync makes a whole block durable.
    let found = lab001(4096, SyncKind::Fsync, 500).findings();
    assert!(
        of_kind(&found, FindingKind::WriteAmplification).is_empty(),
        "{found:?}"
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

#[test]
fn autocommit_inserts_are_a_sync_storm_named_with_their_files() {
    // SQLite in autocommit mode, as it does it per row: the rollback journal (a page or two
    // and its header), the directory, and the database page, each fdatasynced.
    let mut s = Stream::new();
    for i in 0..60u64 {
        let t = i * 16 * MS;
        let journal = "/data/app.db-journal";
        // Each sync writes its pages itself; the journal commits for the first one.
        s.write_request(42, "sqlite3", t + MS, 8192, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 2 * MS, 8192, false, true);
        s.sync_file(42, SyncKind::Fdatasync, t, t + 5 * MS, 8720, 3, journal);
        // The directory's sync writes a log tree of its own on btrfs: its cost, no payload.
        s.write_request(42, "sqlite3", t + 5 * MS + 500 * US, 65_536, true, false);
        s.sync_dir(42, SyncKind::Fdatasync, t + 5 * MS, t + 6 * MS, "/data");
        s.write_request(42, "sqlite3", t + 7 * MS, 4096, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 6 * MS,
            t + 8 * MS,
            12,
            1,
            journal,
        );
        s.write_request(42, "sqlite3", t + 9 * MS, 8192, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 8 * MS,
            t + 15 * MS,
            8192,
            2,
            "/data/app.db",
        );
    }
    let found = s.findings();
    let storm = of_kind(&found, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{found:?}");
    assert!(
        storm[0].files.contains(&"/data/app.db".to_string()),
        "{:?}",
        storm[0].files
    );
    assert!(
        storm[0].summary.contains("/data/app.db"),
        "{}",
        storm[0].summary
    );
    assert_eq!(
        storm[0].severity,
        Severity::Critical,
        "waiting ~90% of the time"
    );
}

#[test]
fn a_storm_over_hundreds_of_files_names_the_latest_too() {
    // An installer: each new file written (8 KiB) and fdatasynced once, back to back, and
    // its status file every tenth.
    let mut s = Stream::new();
    for i in 0..120u64 {
        let t = i * 8 * MS;
        let file = if i % 10 == 0 {
            "/root/var/lib/dpkg/status".to_string()
        } else {
            format!("/root/usr/lib/pkg/mod{i}.py.dpkg-new")
        };
        s.write_request(42, "lab001", t + MS, 8192, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 2 * MS, 8192, false, true);
        s.sync_file(42, SyncKind::Fdatasync, t, t + 7 * MS, 8192, 2, &file);
    }
    let found = s.findings();
    let storm = of_kind(&found, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{found:?}");
    assert!(
        storm[0].summary.contains(
            "on 9 files or more, the most synced /root/var/lib/dpkg/status (12x), lately \
             /root/usr/lib/pkg/mod119.py.dpkg-new"
        ),
        "{}",
        storm[0].summary
    );
}

#[test]
fn a_burst_is_judged_when_it_settles_after_the_process_exited() {
    // sqlite3 ran for 100 ms at the end of one interval and exited; its calls settle in the
    // next interval, which judges them (and still names the file).
    let mut s = Stream::new();
    for i in 0..100u64 {
        let t = 900 * MS + i * MS;
        s.write_request(42, "sqlite3", t + 100 * US, 8192, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t,
            t + 800 * US,
            8192,
            2,
            "/data/app.db",
        );
    }
    s.model.apply(&Input::Exit(crate::ProcessExit {
        tgid: 42,
        ts_ns: 1_000 * MS,
    }));
    let first = s.model.tick(&KernelSample {
        now_ns: 1_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    assert!(
        of_kind(&first.findings, FindingKind::SyncStorm).is_empty(),
        "not settled yet"
    );
    let second = s.model.tick(&KernelSample {
        now_ns: 2_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    let storm = of_kind(&second.findings, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{:?}", second.findings);
    assert_eq!(storm[0].file(), Some("/data/app.db"));
    assert!(
        second.procs.iter().any(|p| p.tgid == 42),
        "kept until its calls settled"
    );
    let third = s.model.tick(&KernelSample {
        now_ns: 3_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    assert!(third.procs.iter().all(|p| p.tgid != 42), "then forgotten");
}

#[test]
fn a_storm_judged_in_the_next_interval_names_the_files_it_judged() {
    // dpkg: 100 small files fsynced at the end of one interval settle in the next, where it
    // syncs only its database: the finding judges the 100 and must name theirs.
    let mut s = Stream::new();
    for i in 0..100u64 {
        let t = 900 * MS + i * MS;
        let file = format!("/root/usr/lib/pkg/mod{i}.py.dpkg-new");
        s.write_request(42, "dpkg", t + 100 * US, 8192, true, false);
        s.sync_file(42, SyncKind::Fsync, t, t + 800 * US, 2048, 1, &file);
    }
    let first = s.model.tick(&KernelSample {
        now_ns: 1_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    assert!(
        of_kind(&first.findings, FindingKind::SyncStorm).is_empty(),
        "not settled yet"
    );
    for i in 0..3u64 {
        let t = 1_100 * MS + i * MS;
        s.sync_file(
            42,
            SyncKind::Fsync,
            t,
            t + 800 * US,
            2048,
            1,
            "/root/var/lib/dpkg/status",
        );
    }
    let second = s.model.tick(&KernelSample {
        now_ns: 2_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    let storm = of_kind(&second.findings, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{:?}", second.findings);
    assert!(
        storm[0].summary.contains("on 9 files or more") && storm[0].summary.contains(".dpkg-new"),
        "{}",
        storm[0].summary
    );
    assert_eq!(
        storm[0].fix,
        crate::findings::write_amplification::MANY_FILES_FIX
    );
}

#[test]
fn a_batched_writer_is_not_a_storm() {
    // The same inserts, 1000 rows per transaction, as SQLite does it: ~13 KiB of journal,
    // the directory, the journal header, ~53 KiB of database per commit. The process still
    // waits in its syncs most of the time, but each commit carries plenty of payload.
    let mut s = Stream::new();
    for i in 0..30u64 {
        let t = i * 33 * MS;
        let journal = "/data/app.db-journal";
        s.write_request(42, "sqlite3", t + MS, 12_288, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 2 * MS, 8192, false, true);
        s.sync_file(42, SyncKind::Fdatasync, t, t + 9 * MS, 12_824, 4, journal);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 9 * MS,
            t + 10 * MS,
            0,
            0,
            "/data",
        );
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 10 * MS,
            t + 12 * MS,
            12,
            1,
            journal,
        );
        s.write_request(42, "sqlite3", t + 13 * MS, 53_248, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 12 * MS,
            t + 31 * MS,
            53_248,
            13,
            "/data/app.db",
        );
    }
    let found = s.findings();
    assert!(
        found.iter().all(|f| f.severity == Severity::Info),
        "a batched writer raised {found:?}"
    );
}

#[test]
fn a_flush_after_each_aligned_direct_write_is_not_a_storm() {
    // The data is on the device already: each fdatasync only flushes the cache (flush_heavy
    // judges that), it writes nothing itself.
    let mut s = Stream::new();
    for i in 0..500 {
        s.write_request(42, "db", i * MS, 4096, false, false);
        s.sync(
            42,
            SyncKind::Fdatasync,
            i * MS + 60 * US,
            i * MS + 900 * US,
            4096,
            1,
        );
    }
    let found = s.findings();
    assert!(
        of_kind(&found, FindingKind::SyncStorm).is_empty(),
        "{found:?}"
    );
}

/// A richer builder for the remaining detectors: requests with chosen latency and sector,
/// replayed over as many one-second intervals as asked.
struct Requests {
    inputs: Vec<Input>,
    requests: Vec<BlockIo>,
}

impl Requests {
    fn new() -> Self {
        Self {
            inputs: Vec::new(),
            requests: Vec::new(),
        }
    }

    #[expect(clippy::too_many_arguments, reason = "a terse test builder")]
    fn request(
        &mut self,
        tgid: u32,
        comm: &str,
        op: Op,
        sector: u64,
        bytes: u32,
        at_ns: u64,
        queue_ns: u64,
        device_ns: u64,
    ) {
        let io = BlockIo {
            dev: DISK,
            sector,
            bytes,
            op,
            flags: 0,
            tgid,
            tid: tgid,
            comm: Comm::new(comm),
            created_ns: at_ns,
            issued_ns: at_ns + queue_ns,
            completed_ns: at_ns + queue_ns + device_ns,
            error: 0,
            kernel_thread: comm.starts_with("kworker") || comm.starts_with("jbd2"),
            cgroup: 0,
            dirtier: None,
        };
        self.inputs.push(Input::Block(io));
        self.requests.push(io);
    }

    #[expect(clippy::too_many_arguments, reason = "a terse test builder")]
    fn dio(
        &mut self,
        tgid: u32,
        pos: u64,
        count: u64,
        isize: u64,
        write: bool,
        at_ns: u64,
        physical: u32,
    ) {
        self.inputs.push(Input::Dio(crate::DioCall {
            tgid,
            tid: tgid,
            comm: Comm::new("writer"),
            ts_ns: at_ns,
            fs_dev: DISK,
            disk: DISK,
            ino: 12,
            isize,
            pos,
            count,
            write,
            overwrite_only: false,
            fs_block_size: 4096,
            logical_block_size: 512,
            physical_block_size: physical,
            fs_start_sector: 0,
            file: Some("/data/f".into()),
            name: String::new(),
        }));
    }

    fn sync(&mut self, tgid: u32, start_ns: u64, end_ns: u64) {
        self.inputs.push(Input::Sync(SyncCall {
            tgid,
            tid: tgid,
            comm: Comm::new("db"),
            kind: SyncKind::Fdatasync,
            fd: Some(5),
            start_ns,
            end_ns,
            ret: 0,
            window_bytes: 8192 * 64,
            window_writes: 64,
            file: FileRef::Path("/db/wal".into()),
            dev: Some(DISK),
            fs_block_size: 4096,
            fs_dev: None,
            ino: 0,
            name: String::new(),
            dir: false,
        }));
    }

    /// The active findings of the last of `intervals` one-second intervals, each carrying the
    /// same stream (shifted in time).
    fn kinds_over(self, intervals: u64) -> Vec<(FindingKind, Option<u32>)> {
        let mut model = Aggregator::new(Settings::default(), 0);
        let mut snap = None;
        let shift = |ns: &mut u64, k: u64| *ns += k * 1_000 * MS;
        for k in 0..intervals {
            for input in &self.inputs {
                let mut input = input.clone();
                match &mut input {
                    Input::Block(io) => {
                        shift(&mut io.created_ns, k);
                        shift(&mut io.issued_ns, k);
                        shift(&mut io.completed_ns, k);
                    }
                    Input::Dio(call) => shift(&mut call.ts_ns, k),
                    Input::Sync(call) => {
                        shift(&mut call.start_ns, k);
                        shift(&mut call.end_ns, k);
                    }
                    _ => {}
                }
                model.apply(&input);
            }
            let mut disks = crate::fixtures::disk_totals_of(&self.requests);
            for d in &mut disks {
                for n in d.requests.iter_mut().chain(d.bytes.iter_mut()) {
                    *n *= k + 1;
                }
                for n in d
                    .total_hist
                    .iter_mut()
                    .chain(d.queue_hist.iter_mut())
                    .chain(d.device_hist.iter_mut())
                {
                    *n *= k + 1;
                }
            }
            snap = Some(model.tick(&KernelSample {
                kind: if k + 1 == intervals {
                    SampleKind::Final
                } else {
                    SampleKind::Interval
                },
                now_ns: (k + 1) * 1_000 * MS,
                disks,
                names: vec![(DISK, "loop0".into())],
                page_size: 4096,
                geometry: vec![DiskGeometry {
                    dev: DISK,
                    logical_block_size: 512,
                    physical_block_size: 4096,
                    minimum_io_size: 4096,
                    fua: false,
                }],
                ..KernelSample::default()
            }));
        }
        snap.map(|snap| {
            snap.findings
                .iter()
                .filter(|f| f.active)
                .map(|f| (f.kind, f.tgid))
                .collect()
        })
        .unwrap_or_default()
    }

    fn kinds(self) -> Vec<(FindingKind, Option<u32>)> {
        self.kinds_over(1)
    }
}

/// 2 MiB O_DIRECT appends starting at 3584: each predicts a 512-byte tail; `confirm` of them
/// show up as 512-byte write requests.
fn dio_tail(confirm: u64) -> Requests {
    let mut r = Requests::new();
    let size = 2u64 << 20;
    for i in 0..20u64 {
        let pos = 3584 + i * size;
        r.dio(7, pos, size, pos, true, i * 40 * MS, 512);
        // The data request ends inside a block (3584 bytes into it) ...
        r.request(
            7,
            "writer",
            Op::Write,
            pos / 512,
            2 << 20,
            i * 40 * MS,
            10 * US,
            2 * MS,
        );
        // ... and the zero write finishes that block.
        if i < confirm {
            r.request(
                7,
                "writer",
                Op::Write,
                (pos + size) / 512,
                512,
                i * 40 * MS + MS,
                5 * US,
                100 * US,
            );
        }
    }
    r
}

#[test]
fn sub_block_tail_writes_are_named_with_their_pad() {
    let mut r = dio_tail(19);
    // xfsaild's own 512-byte metadata writes do not confirm anything for the writer.
    r.request(99, "xfsaild/loop0", Op::Write, 8, 512, 0, 0, 50 * US);
    let found = r.kinds();
    assert!(
        found.contains(&(FindingKind::SubBlockTailWrite, Some(7))),
        "{found:?}"
    );
    assert!(!found.iter().any(|(_, tgid)| *tgid == Some(99)));
}

#[test]
fn a_zero_write_merged_into_its_data_write_still_confirms() {
    let mut r = Requests::new();
    let size = 1u64 << 20;
    for i in 0..20u64 {
        let pos = 1024 + i * size;
        r.dio(7, pos, size, pos, true, i * 40 * MS, 512);
        // One request: the data (from 1024 into a block) plus the 3072-byte zero tail.
        r.request(
            7,
            "writer",
            Op::Write,
            pos / 512,
            1_051_648,
            i * 40 * MS,
            10 * US,
            2 * MS,
        );
    }
    let found = r.kinds();
    assert!(
        found.contains(&(FindingKind::SubBlockTailWrite, Some(7))),
        "{found:?}"
    );
}

#[test]
fn predicted_zeroing_without_small_requests_is_not_claimed() {
    let found = dio_tail(0).kinds();
    assert!(
        !found
            .iter()
            .any(|(k, _)| *k == FindingKind::SubBlockTailWrite),
        "{found:?}"
    );
}

#[test]
fn unaligned_direct_io_on_a_4k_physical_disk() {
    let mut r = Requests::new();
    for i in 0..50u64 {
        r.dio(8, 512 * (i * 7 + 1), 512, 1 << 30, i % 2 == 0, i * MS, 4096);
    }
    assert!(
        r.kinds()
            .contains(&(FindingKind::UnalignedDirectIo, Some(8)))
    );
}

#[test]
fn queue_time_far_above_device_time_is_queue_dominated() {
    let mut r = Requests::new();
    for i in 0..200u64 {
        r.request(
            10,
            "tar",
            Op::Read,
            i * 1000,
            65_536,
            i * 4 * MS,
            8 * MS,
            200 * US,
        );
    }
    assert!(r.kinds().contains(&(FindingKind::QueueDominated, None)));
}

#[test]
fn a_flush_every_other_write_is_flush_heavy() {
    // Each flush takes 2 ms on this device (a volatile cache to drain): 200 ms per second.
    let flushes = |flush_ns| {
        let mut r = Requests::new();
        for i in 0..200u64 {
            r.request(
                11,
                "sqlite",
                Op::Write,
                i * 8,
                4096,
                i * 4 * MS,
                0,
                100 * US,
            );
            if i % 2 == 0 {
                r.request(12, "jbd2/loop0-8", Op::Flush, 0, 0, i * 4 * MS, 0, flush_ns);
            }
        }
        r
    };
    assert!(
        flushes(2 * MS)
            .kinds()
            .contains(&(FindingKind::FlushHeavy, None))
    );
    assert!(
        !flushes(20 * US)
            .kinds()
            .contains(&(FindingKind::FlushHeavy, None)),
        "flushes a RAM-backed device serves in microseconds cost nothing"
    );
}

#[test]
fn two_latency_populations_are_bimodal() {
    let mut r = Requests::new();
    for i in 0..400u64 {
        // Cache-hit-like 20 us and miss-like 5 ms reads.
        let device = if i % 3 == 0 { 5 * MS } else { 20 * US };
        r.request(
            13,
            "app",
            Op::Read,
            (i * 7919) % 100_000 * 8,
            8192,
            i * 2 * MS,
            0,
            device,
        );
    }
    let once = Requests {
        inputs: r.inputs.clone(),
        requests: r.requests.clone(),
    }
    .kinds();
    assert!(
        !once.iter().any(|(k, _)| *k == FindingKind::BimodalLatency),
        "an INFO shape is listed only once it persists: {once:?}"
    );
    let found = r.kinds_over(u64::from(INFO_MIN_STREAK));
    assert!(
        found.contains(&(FindingKind::BimodalLatency, Some(13))),
        "{found:?}"
    );
    assert!(
        found.contains(&(FindingKind::BimodalLatency, None)),
        "the disk too: {found:?}"
    );
}

#[test]
fn sub_page_random_requests_are_small_random_io() {
    let mut r = Requests::new();
    for i in 0..500u64 {
        r.request(
            14,
            "scanner",
            Op::Read,
            (i * 104_729) % 1_000_000,
            512,
            i * MS,
            0,
            80 * US,
        );
    }
    assert!(
        r.kinds_over(u64::from(INFO_MIN_STREAK))
            .contains(&(FindingKind::SmallRandomIo, Some(14)))
    );
}

/// Healthy streams: no detector may fire.
#[test]
fn healthy_streams_raise_nothing() {
    let mut r = Requests::new();
    // Aligned 4 KiB O_DIRECT writes into a preallocated file (aligned calls are not even
    // streamed by the probes; the requests alone must not trip anything).
    for i in 0..500u64 {
        r.request(
            20,
            "aligned-dio",
            Op::Write,
            i * 8,
            4096,
            i * 2 * MS,
            2 * US,
            60 * US,
        );
    }
    // Big sequential buffered writes, written back by a kworker, one fsync at the end.
    for i in 0..200u64 {
        r.request(
            21,
            "kworker/u8:1",
            Op::Write,
            1_000_000 + i * 2048,
            1 << 20,
            i * 5 * MS,
            5 * US,
            900 * US,
        );
    }
    // A database: 8 KiB random reads and writes, fdatasync every 64 writes.
    for i in 0..1000u64 {
        let sector = (i * 7919) % 500_000 * 16;
        let op = if i % 3 == 0 { Op::Write } else { Op::Read };
        r.request(
            22,
            "postgres",
            op,
            sector,
            8192,
            i * MS,
            3 * US,
            90 * US + (i % 40) * US,
        );
        if i % 64 == 63 {
            r.sync(22, i * MS, i * MS + 400 * US);
            r.request(23, "jbd2/loop0-8", Op::Flush, 0, 0, i * MS, 0, 300 * US);
        }
    }
    let found = r.kinds_over(u64::from(INFO_MIN_STREAK));
    assert!(found.is_empty(), "healthy streams raised {found:?}");
}

#[test]
fn small_o_dsync_writes_are_named_like_fsynced_ones() {
    // `dd bs=128 oflag=dsync`: each 128-byte write runs the filesystem's fsync before it
    // returns; the probes report each as one sync of kind `O_DSYNC write`.
    let found = lab001(128, SyncKind::DsyncWrite, 500).findings();
    let wa = of_kind(&found, FindingKind::WriteAmplification);
    assert_eq!(wa.len(), 1, "{found:?}");
    let f = wa[0];
    assert!(
        f.summary
            .contains("96x write amplification, 128 B O_DSYNC writes: 500 of 500 O_DSYNC writes made 128 B durable at 96x"),
        "{}",
        f.summary
    );
    assert_eq!(
        *evidence(f, "sync_kind"),
        Evidence::Text("O_DSYNC write".into())
    );
    assert!(f.fix.contains("without O_DSYNC"), "{}", f.fix);
    let found = lab001(128, SyncKind::OsyncWrite, 500).findings();
    let f = of_kind(&found, FindingKind::WriteAmplification)[0];
    assert!(f.summary.contains("128 B O_SYNC writes"), "{}", f.summary);
    assert!(f.fix.contains("without O_SYNC"), "{}", f.fix);
}

#[test]
fn whole_block_o_dsync_writes_are_not_amplified() {
    let found = lab001(4096, SyncKind::DsyncWrite, 500).findings();
    assert!(
        of_kind(&found, FindingKind::WriteAmplification).is_empty(),
        "{found:?}"
    );
}

#[test]
fn calls_settled_in_a_later_interval_keep_their_kind() {
    // A short `dd oflag=dsync` ends before the interval does; its calls settle in the next
    // one, which has no calls of its own: the finding still says what they were.
    let mut s = lab001(128, SyncKind::DsyncWrite, 300);
    let first = s.model.tick(&KernelSample {
        now_ns: 400 * MS,
        names: vec![(DISK, "loop0".into())],
        page_size: 4096,
        ..KernelSample::default()
    });
    let proc = first.procs.iter().find(|p| p.tgid == 42).unwrap();
    assert_eq!(proc.interval.sync.kinds, vec![("O_DSYNC write", 300)]);
    let found = s.findings();
    let f = of_kind(&found, FindingKind::WriteAmplification)[0];
    assert!(f.summary.contains("O_DSYNC writes"), "{}", f.summary);
}

#[test]
fn io_uring_fsyncs_are_counted_but_their_payload_is_not_judged() {
    // fio --ioengine=io_uring --bs=4k --fsync=1: the io-wq worker writes the 4 KiB page inside
    // each fsync; jbd2 commits. io_uring's writes are not system calls: no payload measured.
    let mut s = Stream::new();
    for i in 0..500u64 {
        let t = i * MS;
        s.write_request(42, "iou-wrk-42", t + 100 * US, 4096, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 200 * US, 8192, false, true);
        s.sync(42, SyncKind::UringFsync, t + 50 * US, t + 700 * US, 0, 0);
    }
    let snap = s.model.tick(&KernelSample {
        kind: SampleKind::Final,
        now_ns: 1_000 * MS,
        names: vec![(DISK, "loop0".into())],
        page_size: 4096,
        ..KernelSample::default()
    });
    let sync = &snap
        .procs
        .iter()
        .find(|p| p.tgid == 42)
        .unwrap()
        .interval
        .sync;
    assert_eq!(sync.kinds, vec![("io_uring fsync", 500)]);
    assert_eq!(
        (sync.unmeasured.calls, sync.empty),
        (500, 0),
        "not empty: unknown"
    );
    assert_eq!(sync.unmeasured.own_bytes, 500 * 4096);
    assert_eq!(sync.amplification(), None, "no payload, no ratio");
    assert!(of_kind(&snap.findings, FindingKind::WriteAmplification).is_empty());
    // 500 syncs in half a second, each writing one page itself, 65% of the time inside them.
    let storm = of_kind(&snap.findings, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{:?}", snap.findings);
    assert!(
        storm[0].summary.contains(
            "500 io_uring fsyncs in 500ms on /mnt/test/log, each writing ~4.1 KiB itself"
        ),
        "{}",
        storm[0].summary
    );
}

#[test]
fn batched_io_uring_fsyncs_are_no_storm() {
    // 1 MiB written back inside each of 20 fsyncs a second: each carries plenty.
    let mut s = Stream::new();
    for i in 0..20u64 {
        let t = i * 50 * MS;
        s.write_request(42, "iou-wrk-42", t + 100 * US, 1 << 20, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 200 * US, 8192, false, true);
        s.sync(42, SyncKind::UringFsync, t + 50 * US, t + 5 * MS, 0, 0);
    }
    assert!(s.findings().is_empty());
}

impl Stream {
    /// A cache flush: a write without data, by `tgid` (inside its sync call or not).
    fn flush_request(&mut self, tgid: u32, comm: &str, at_ns: u64, in_sync: bool, kthread: bool) {
        self.write_request(tgid, comm, at_ns, 0, in_sync, kthread);
    }
}

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

impl Stream {
    /// Closes an interval at `now_ns` (not the last: calls settle `SETTLE_NS` after they end).
    fn tick(&mut self, now_ns: u64) -> crate::Snapshot {
        self.model.tick(&KernelSample {
            now_ns,
            names: vec![(DISK, "loop0".into())],
            page_size: 4096,
            ..KernelSample::default()
        })
    }

    /// One small record synced by `kind` at `t`: a block written inside the call, and
    /// `journal` bytes by jbd2 while it waits.
    fn synced_record(&mut self, tgid: u32, kind: SyncKind, t: u64, record: u64, journal: u32) {
        self.write_request(tgid, "app", t + 100 * US, 4096, true, false);
        if journal > 0 {
            self.write_request(300, "jbd2/loop0-8", t + 200 * US, journal, false, true);
        }
        self.sync(tgid, kind, t + 50 * US, t + 600 * US, record, 1);
    }
}

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
