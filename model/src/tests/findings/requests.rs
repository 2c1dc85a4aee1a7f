//! The detectors that read the requests: sub-block tail writes, unaligned direct I/O, queue
//! time, flushes, bimodal latency, small random I/O; healthy streams raise none.

use super::*;

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
            file: None,
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
            addr: 0,
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

/// fio's layout: `pairs` pairs of 6 KiB direct writes into a fallocated 64 MiB file on
/// 4 KiB blocks; the first of each pair zeroes the rest of its second block (merged with its
/// data into one 8 KiB request), the second ends on a block.
fn into_unwritten_extents(pairs: u64) -> Requests {
    let mut r = Requests::new();
    let isize = 64 << 20;
    for i in 0..pairs {
        let pos = i * 12_288;
        let at = i * 10 * MS;
        r.dio(7, pos, 6144, isize, true, at, 512);
        r.request(
            7,
            "writer",
            Op::Write,
            pos / 512,
            8192,
            at,
            10 * US,
            100 * US,
        );
        r.dio(7, pos + 6144, 6144, isize, true, at + MS, 512);
        r.request(
            7,
            "writer",
            Op::Write,
            (pos + 6144) / 512,
            6144,
            at + MS,
            10 * US,
            100 * US,
        );
    }
    r
}

#[test]
fn a_few_zeroing_writes_into_unwritten_extents_must_keep_coming() {
    let tail = |found: &[(FindingKind, Option<u32>)]| {
        found.contains(&(FindingKind::SubBlockTailWrite, Some(7)))
    };
    // 20 in an interval: a pattern at once.
    assert!(tail(&into_unwritten_extents(20).kinds()));
    // 4 once (MariaDB's redo log at start): nothing; 4 every interval: from the third.
    assert!(!tail(&into_unwritten_extents(4).kinds()));
    assert!(!tail(&into_unwritten_extents(4).kinds_over(2)));
    assert!(tail(&into_unwritten_extents(4).kinds_over(3)));
}
