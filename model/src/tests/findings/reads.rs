//! `read_amplification`: random page faults on a mapped file whose reads are read around
//! are named with their file; the same faults read as asked (MADV_RANDOM), a sequential scan
//! and read calls that use what they read are not. `noisy_neighbour`: a syncing process whose
//! latency rose behind a bulk writer is named with it; alone, or without a baseline, never.

use super::*;
use crate::{Dirtier, FileKey, ProcReadTotals};

const INDEX: FileKey = FileKey {
    fs_dev: Dev::new(7, 0),
    ino: 12,
};

/// `count` reads of `bytes` by pid 42 in second `second`, readahead or not, at random
/// places or one after the other.
fn reads_in(
    model: &mut Aggregator,
    second: u64,
    count: u64,
    bytes: u32,
    readahead: bool,
    sequential: bool,
) {
    for i in 0..count {
        let t = second * 1_000 * MS + i * (900 * MS / count);
        let sector = if sequential {
            (second * count + i) * u64::from(bytes / 512)
        } else {
            (i * 7_919 % 100_000) * 2_048
        };
        model.ingest(&BlockIo {
            dev: DISK,
            sector,
            bytes,
            op: Op::Read,
            flags: if readahead {
                iotop_bpf_common::block::FLAG_READAHEAD
            } else {
                0
            },
            tgid: 42,
            tid: 42,
            comm: Comm::new("python3"),
            created_ns: t,
            issued_ns: t + US,
            completed_ns: t + 200 * US,
            error: 0,
            kernel_thread: false,
            cgroup: 0,
            dirtier: None,
            file: readahead.then_some(INDEX),
        });
    }
}

/// The same reads two seconds running, and per second `major_faults`, `minor_faults` and
/// `read_chars` asked (a finding must be seen two intervals running): the findings.
fn reads(
    model: &mut Aggregator,
    count: u64,
    bytes: u32,
    readahead: bool,
    sequential: bool,
    asked: (u64, u64, u64),
) -> Vec<Finding> {
    let mut found = Vec::new();
    for second in 0..2 {
        reads_in(model, second, count, bytes, readahead, sequential);
        let n = second + 1;
        found = model
            .tick(&KernelSample {
                kind: if n == 2 {
                    SampleKind::Final
                } else {
                    SampleKind::Interval
                },
                now_ns: n * 1_000 * MS,
                names: vec![(DISK, "loop0".into())],
                page_size: 4096,
                proc_reads: vec![ProcReadTotals {
                    tgid: 42,
                    major_faults: asked.0 * n,
                    minor_faults: asked.1 * n,
                    read_chars: asked.2 * n,
                    young: true,
                }],
                file_names: vec![(INDEX, "/mnt/idx/index.dat".into())],
                ..KernelSample::default()
            })
            .findings;
    }
    found
}

#[test]
fn random_faults_read_around_are_named_with_their_file() {
    let mut model = Aggregator::new(Settings::default(), 0);
    // 1,000 faults, each read around: 124 KiB a read.
    let found = reads(
        &mut model,
        1_000,
        124 << 10,
        true,
        false,
        (1_000, 20, 200_000),
    );
    let ra = of_kind(&found, FindingKind::ReadAmplification);
    assert_eq!(ra.len(), 1, "{found:?}");
    let f = ra[0];
    assert_eq!(f.severity, Severity::Critical, "{}", f.summary);
    assert_eq!(f.files, vec!["/mnt/idx/index.dat".to_string()]);
    assert!(
        f.summary.contains("1020 page faults (1000 major)"),
        "{}",
        f.summary
    );
    assert!(f.fix.contains("MADV_RANDOM"), "{}", f.fix);
    assert!(
        matches!(evidence(f, "amplification"), Evidence::Ratio(r) if (28.0..31.0).contains(r)),
        "{:?}",
        f.evidence
    );
}

#[test]
fn faults_read_as_asked_are_healthy() {
    // MADV_RANDOM: a page per fault, not flagged readahead.
    let mut model = Aggregator::new(Settings::default(), 0);
    let found = reads(&mut model, 3_000, 4096, false, false, (3_000, 0, 0));
    assert!(
        of_kind(&found, FindingKind::ReadAmplification).is_empty(),
        "{found:?}"
    );
}

#[test]
fn a_sequential_scan_uses_what_it_reads_ahead() {
    // A mapping scanned in order: few major faults, 128 KiB readahead reads one after another.
    let mut model = Aggregator::new(Settings::default(), 0);
    let found = reads(&mut model, 1_600, 128 << 10, true, true, (40, 0, 0));
    assert!(
        of_kind(&found, FindingKind::ReadAmplification).is_empty(),
        "{found:?}"
    );
}

#[test]
fn a_program_loading_its_code_is_not_judged_by_its_major_faults() {
    // A cold start: a few major faults read its binary around them, and thousands of minor
    // faults use what they read.
    let mut model = Aggregator::new(Settings::default(), 0);
    let found = reads(&mut model, 70, 120 << 10, true, false, (6, 3_000, 50_000));
    assert!(
        of_kind(&found, FindingKind::ReadAmplification).is_empty(),
        "{found:?}"
    );
}

#[test]
fn read_calls_that_get_what_they_read_are_healthy() {
    // cat: 200 MiB asked in read calls, 200 MiB read.
    let mut model = Aggregator::new(Settings::default(), 0);
    let found = reads(
        &mut model,
        1_600,
        128 << 10,
        true,
        false,
        (0, 0, 1_600 * (128 << 10)),
    );
    assert!(
        of_kind(&found, FindingKind::ReadAmplification).is_empty(),
        "{found:?}"
    );
}

#[test]
fn a_reader_whose_asks_were_not_sampled_is_not_judged() {
    let mut model = Aggregator::new(Settings::default(), 0);
    reads_in(&mut model, 0, 1_000, 124 << 10, true, false);
    let found = model
        .tick(&KernelSample {
            kind: SampleKind::Final,
            now_ns: 1_000 * MS,
            page_size: 4096,
            ..KernelSample::default()
        })
        .findings;
    assert!(
        of_kind(&found, FindingKind::ReadAmplification).is_empty(),
        "{found:?}"
    );
}

/// Second `i` of a logger (pid 42) syncing 200 small records, each taking `sync_ns`, and,
/// with `bulk`, fio (pid 77) writing 1 MiB direct blocks that hold the disk `busy_ns` each.
fn second(s: &mut Stream, i: u64, sync_ns: u64, bulk: bool) {
    let base = i * 1_000 * MS;
    for k in 0..200u64 {
        let t = base + k * 4 * MS;
        s.write_request(42, "logger", t + 10 * US, 4096, true, false);
        s.sync(42, SyncKind::Fsync, t, t + sync_ns, 100, 1);
    }
    if bulk {
        for k in 0..90u64 {
            let t = base + k * 10 * MS;
            s.model.ingest(&BlockIo {
                dev: DISK,
                sector: (1 << 30) + k * 2_048,
                bytes: 1 << 20,
                op: Op::Write,
                flags: 0,
                tgid: 77,
                tid: 77,
                comm: Comm::new("fio"),
                created_ns: t,
                issued_ns: t + US,
                completed_ns: t + 10 * MS,
                error: 0,
                kernel_thread: false,
                cgroup: 0,
                dirtier: None,
                file: None,
            });
        }
    }
}

/// One second of a flusher writing back pages: 90 requests of 1 MiB, 10 ms each on the
/// device, from a kernel thread, for `dirtier` (dd, pid 77) or for nobody it could name.
fn write_back(s: &mut Stream, i: u64, dirtier: Option<Dirtier>) {
    let base = i * 1_000 * MS;
    for k in 0..90u64 {
        let t = base + k * 10 * MS;
        s.model.ingest(&BlockIo {
            dev: DISK,
            sector: (1 << 30) + k * 2_048,
            bytes: 1 << 20,
            op: Op::Write,
            flags: 0,
            tgid: 91,
            tid: 91,
            comm: Comm::new("kworker/u8:6"),
            created_ns: t,
            issued_ns: t + US,
            completed_ns: t + 10 * MS,
            error: 0,
            kernel_thread: true,
            cgroup: 0,
            dirtier,
            file: None,
        });
    }
}

fn dd() -> Option<Dirtier> {
    Some(Dirtier {
        tgid: 77,
        comm: Comm::new("dd"),
    })
}

#[test]
fn a_buffered_bulk_writer_is_named_through_its_write_back() {
    // dd writes through the page cache: every request on the disk is a flusher's. Its time
    // on the disk is dd's, and dd is the neighbour named, with a fix that reaches
    // write-back (ionice does not).
    let mut s = Stream::new();
    let mut found = Vec::new();
    for i in 0..8u64 {
        if i >= 5 {
            second(&mut s, i, 11 * MS, false);
            write_back(&mut s, i, dd());
        } else {
            second(&mut s, i, 400 * US, false);
        }
        found = s.tick((i + 1) * 1_000 * MS).findings;
    }
    let nn = of_kind(&found, FindingKind::NoisyNeighbour);
    assert_eq!(nn.len(), 1, "{found:?}");
    let f = nn[0];
    assert_eq!(f.tgid, Some(42), "who waits");
    assert!(
        f.summary.contains("waits behind dd (pid 77)") && f.summary.contains("written back"),
        "{}",
        f.summary
    );
    assert!(
        f.fix.contains("io.max") && f.fix.contains("dirty_background") && !f.fix.contains("ionice"),
        "{}",
        f.fix
    );
}

/// A tick at which the logger (42) has been blocked in D since `since_ns`.
fn tick_blocked(s: &mut Stream, now_ns: u64, since_ns: u64) -> Vec<Finding> {
    s.model
        .tick(&KernelSample {
            now_ns,
            names: vec![(DISK, "loop0".into())],
            page_size: 4096,
            dstate_time: vec![(42, now_ns - since_ns)],
            dstate_now: vec![crate::DStateNow {
                tid: 42,
                tgid: 42,
                comm: "logger".into(),
                start_ns: Some(since_ns),
                stack: vec![
                    "wb_wait_for_completion".into(),
                    "ext4_da_write_begin".into(),
                ],
                no_stack: None,
            }],
            ..KernelSample::default()
        })
        .findings
}

#[test]
fn a_call_stalled_behind_write_back_names_the_writer_as_a_warning() {
    // Seen on ext4 with a buffered dd beside a logger: the logger's write blocked 1.7 s
    // waiting for write-back, and finished no call in the interval, so it had no p50. Its
    // wait so far is its latency: dd is named, as a warning (a stall's cause is not always
    // the disk).
    let mut s = Stream::new();
    for i in 0..5u64 {
        second(&mut s, i, 400 * US, false);
        s.tick((i + 1) * 1_000 * MS);
    }
    write_back(&mut s, 5, dd());
    let found = tick_blocked(&mut s, 6_000 * MS, 5_000 * MS + 300 * MS);
    let nn = of_kind(&found, FindingKind::NoisyNeighbour);
    assert_eq!(nn.len(), 1, "{found:?}");
    let f = nn[0];
    assert_eq!(f.tgid, Some(42), "who waits");
    assert_eq!(f.severity, Severity::Warning, "{}", f.summary);
    assert!(
        f.summary.contains("waits behind dd (pid 77)")
            && f.summary.contains("one call blocked 700ms so far"),
        "{}",
        f.summary
    );
    // A shorter block is no stall: nothing is said.
    let mut s = Stream::new();
    for i in 0..5u64 {
        second(&mut s, i, 400 * US, false);
        s.tick((i + 1) * 1_000 * MS);
    }
    write_back(&mut s, 5, dd());
    let found = tick_blocked(&mut s, 6_000 * MS, 6_000 * MS - 100 * MS);
    assert!(
        of_kind(&found, FindingKind::NoisyNeighbour).is_empty(),
        "{found:?}"
    );
}

#[test]
fn a_flusher_writing_for_nobody_named_makes_no_neighbour() {
    // The same write-back, its dirtier unknown: the disk is busy, but nobody is named (a
    // flusher is never the neighbour), and the logger's intervals are not calm either.
    let mut s = Stream::new();
    for i in 0..8u64 {
        if i >= 5 {
            second(&mut s, i, 11 * MS, false);
            write_back(&mut s, i, None);
        } else {
            second(&mut s, i, 400 * US, false);
        }
        let found = s.tick((i + 1) * 1_000 * MS).findings;
        assert!(
            of_kind(&found, FindingKind::NoisyNeighbour).is_empty(),
            "{found:?}"
        );
    }
}

fn neighbour_findings(
    s: &mut Stream,
    seconds: std::ops::Range<u64>,
    bulk_from: u64,
) -> Vec<Finding> {
    let mut found = Vec::new();
    for i in seconds {
        let bulk = i >= bulk_from;
        second(s, i, if bulk { 11 * MS } else { 400 * US }, bulk);
        found = s.tick((i + 1) * 1_000 * MS).findings;
    }
    found
}

#[test]
fn a_syncing_process_behind_a_bulk_writer_is_named_with_it() {
    let mut s = Stream::new();
    let found = neighbour_findings(&mut s, 0..8, 5);
    let nn = of_kind(&found, FindingKind::NoisyNeighbour);
    assert_eq!(nn.len(), 1, "{found:?}");
    let f = nn[0];
    assert_eq!(f.tgid, Some(42), "who waits");
    assert!(
        f.summary
            .contains("(pid 42), syncing /mnt/test/log, waits behind fio (pid 77)"),
        "{}",
        f.summary
    );
    assert!(
        f.fix.contains("io.max") && f.fix.contains("fio"),
        "{}",
        f.fix
    );
    assert_eq!(f.severity, Severity::Critical, "{}", f.summary);
}

#[test]
fn no_baseline_no_victim() {
    // The bulk writer was there from the start: nothing says what the logger saw alone.
    let mut s = Stream::new();
    let found = neighbour_findings(&mut s, 0..6, 0);
    assert!(
        of_kind(&found, FindingKind::NoisyNeighbour).is_empty(),
        "{found:?}"
    );
}

#[test]
fn a_process_alone_on_its_disk_is_no_victim() {
    // Its syncs got slower (a slower device), with nobody else on the disk.
    let mut s = Stream::new();
    for i in 0..8u64 {
        second(&mut s, i, if i >= 5 { 11 * MS } else { 400 * US }, false);
        let found = s.tick((i + 1) * 1_000 * MS).findings;
        assert!(
            of_kind(&found, FindingKind::NoisyNeighbour).is_empty(),
            "{found:?}"
        );
    }
}
