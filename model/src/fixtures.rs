//! Deterministic synthetic snapshots for view and app tests.

use super::{
    Aggregator, BlockIo, Comm, CpuJiffies, DStateNow, Dev, DiskStat, DiskTotals, FileRef,
    HostSample, Input, KernelCounters, KernelSample, LoadAvg, Op, SampleKind, Settings, Snapshot,
    SyncCall, SyncKind,
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// The per-disk totals the probes would have counted for `events`.
pub fn disk_totals_of<'a>(events: impl IntoIterator<Item = &'a BlockIo>) -> Vec<DiskTotals> {
    let mut by_dev: std::collections::BTreeMap<Dev, DiskTotals> = std::collections::BTreeMap::new();
    for e in events {
        let t = by_dev.entry(e.dev).or_insert_with(|| DiskTotals {
            dev: e.dev,
            ..DiskTotals::default()
        });
        let op = match e.op {
            Op::Read => 0,
            Op::Write => 1,
            Op::Flush => 2,
            Op::Discard => 3,
            Op::Other => 4,
        };
        t.requests[op] += 1;
        t.bytes[op] += u64::from(e.bytes);
        t.latency_ns[op] += e.latency_ns();
        t.queue_ns += e.queue_ns();
        t.device_ns += e.device_ns();
        t.total_hist[iotop_bpf_common::hist::log2_slot(e.latency_ns()) as usize] += 1;
        t.queue_hist[iotop_bpf_common::hist::log2_slot(e.queue_ns()) as usize] += 1;
        t.device_hist[iotop_bpf_common::hist::log2_slot(e.device_ns()) as usize] += 1;
    }
    by_dev.into_values().collect()
}

/// A busy host: a database writing pages to nvme0n1, a backup reading big blocks from loop0,
/// lab001 (128-byte appends, each followed by fsync) and the journal threads, and a slow
/// outlier.
pub fn demo_snapshot() -> Snapshot {
    let nvme = Dev::new(259, 0);
    let loop0 = Dev::new(7, 0);
    let mut events = demo_requests(nvme, loop0);
    let syncs = lab001(loop0, &mut events);

    let mut totals = disk_totals_of(&events);
    // nvme0n1 has mq-deadline: every request went through it, plugged 2 us each.
    if let Some(t) = totals.iter_mut().find(|t| t.dev == nvme) {
        t.inserted = t.requests.iter().sum();
        t.g2i_ns = t.inserted * 2 * US;
        t.i2d_ns = t.queue_ns.saturating_sub(t.g2i_ns);
    }
    let mut model = Aggregator::new(Settings::default(), 0);
    let sample = |now_ns, busy| demo_sample(&totals, nvme, loop0, now_ns, busy);
    // The host: 2 CPUs, 7 s: 1400 jiffies, 56 of them in iowait (4%).
    let cpu = |busy, idle, iowait| CpuJiffies {
        user: busy,
        idle,
        iowait,
        ..CpuJiffies::default()
    };
    // The baseline at start.
    model.apply(&Input::Sample(Box::new(KernelSample {
        kind: SampleKind::Baseline,
        disks: vec![],
        host: HostSample {
            cpu: Some(cpu(50_000, 150_000, 1_000)),
            ..HostSample::default()
        },
        ..sample(0, 0)
    })));
    // In stream order: a sync call's record follows the requests it waited for.
    let mut inputs: Vec<(u64, Input)> = events
        .iter()
        .map(|e| (e.completed_ns, Input::Block(*e)))
        .chain(syncs.into_iter().map(|c| (c.end_ns, Input::Sync(c))))
        .collect();
    inputs.sort_by_key(|(at, _)| *at);
    for (_, input) in &inputs {
        model.apply(input);
    }
    let mut last = sample(1_000 * MS, 420);
    last.kind = SampleKind::Final;
    last.logical_writes = vec![(5689, 200 * 128)];
    // A shell stuck in vfork for 7 s, and lab001 caught waiting for its journal commit.
    last.dstate_now = demo_dstate_now();
    last.dstate_time = vec![(5689, 150 * MS)];
    last.host = HostSample {
        load: Some(LoadAvg {
            one_hundredths: 210,
            five_hundredths: 150,
            fifteen_hundredths: 80,
        }),
        procs_running: Some(3),
        procs_blocked: Some(1),
        cpu: Some(cpu(50_900, 150_444, 1_056)),
        psi_io_some_avg10_hundredths: Some(1234),
        psi_io_full_avg10_hundredths: Some(302),
        dirty_bytes: Some(41_943_040 + 12_288),
        writeback_bytes: Some(2_097_152),
    };
    last.now_ns = 7_000 * MS;
    model.tick(&last)
}

/// The demo's requests but lab001's: postgres's page writes and jbd2's journal on nvme0n1,
/// restic's big reads from loop0, and one slow outlier.
fn demo_requests(nvme: Dev, loop0: Dev) -> Vec<BlockIo> {
    let mut events = Vec::new();
    let mut push = |tgid, comm, dev, op, bytes, i, queue, device| {
        events.push(request(tgid, comm, dev, op, bytes, i, queue, device));
    };
    for i in 0..400 {
        push(
            4242,
            "postgres",
            nvme,
            Op::Write,
            8192,
            i,
            2 * US,
            (80 + i % 50) * US,
        );
    }
    for i in 0..250 {
        push(
            777,
            "restic",
            loop0,
            Op::Read,
            131_072,
            i,
            (i % 7) * US,
            (300 + i % 200) * US,
        );
    }
    for i in 0..60 {
        push(311, "jbd2/nvme0n1-8", nvme, Op::Write, 4096, i, 0, 40 * US);
    }
    for i in 0..30 {
        push(311, "jbd2/nvme0n1-8", nvme, Op::Flush, 0, i, 0, 900 * US);
    }
    push(9001, "slowpoke", nvme, Op::Read, 4096, 1, 40 * MS, 12 * MS);
    events
}

/// lab001: 200 x (128-byte append + fsync): a 4 KiB block written inside each fsync and
/// 12 KiB of journal by jbd2 while it waits. Its requests go to `events`, its calls are
/// returned.
fn lab001(loop0: Dev, events: &mut Vec<BlockIo>) -> Vec<SyncCall> {
    let mut syncs = Vec::new();
    for i in 0..200u64 {
        let t = i * 4 * MS;
        let mut data = request(
            5689,
            "lab001",
            loop0,
            Op::Write,
            4096,
            t / US + 100,
            0,
            60 * US,
        );
        data.flags = iotop_bpf_common::block::FLAG_IN_SYNC;
        let mut journal = request(
            585,
            "jbd2/loop0-8",
            loop0,
            Op::Write,
            12_288,
            t / US + 200,
            0,
            80 * US,
        );
        journal.kernel_thread = true;
        // The commit's cache flush, by jbd2 too.
        let mut flush = request(
            585,
            "jbd2/loop0-8",
            loop0,
            Op::Flush,
            0,
            t / US + 250,
            0,
            30 * US,
        );
        flush.kernel_thread = true;
        events.extend([data, journal, flush]);
        syncs.push(SyncCall {
            tgid: 5689,
            tid: 5689,
            comm: Comm::new("lab001"),
            kind: SyncKind::Fsync,
            fd: Some(3),
            start_ns: t + 50 * US,
            end_ns: t + 50 * US + (300 + i % 40) * US,
            ret: 0,
            window_bytes: 128,
            window_writes: 1,
            addr: 0,
            file: FileRef::Path("/data/lab001.log".into()),
            dev: Some(loop0),
            fs_block_size: 4096,
            fs_dev: None,
            ino: 0,
            name: String::new(),
            dir: false,
        });
    }
    syncs
}

/// The demo's sample at `now_ns`, its disks busy for `busy` ms in all (nvme0n1; loop0 half
/// as long).
fn demo_sample(
    totals: &[DiskTotals],
    nvme: Dev,
    loop0: Dev,
    now_ns: u64,
    busy: u64,
) -> KernelSample {
    KernelSample {
        kind: SampleKind::Interval,
        now_ns,
        counters: KernelCounters::default(),
        disks: totals.to_vec(),
        diskstats: vec![
            DiskStat {
                dev: nvme,
                io_ticks_ms: busy,
                read_merges: 0,
                write_merges: busy / 6,
            },
            DiskStat {
                dev: loop0,
                io_ticks_ms: busy / 2,
                read_merges: busy / 4,
                write_merges: 0,
            },
        ],
        logical_writes: vec![],
        dstate_now: vec![],
        dstate_time: vec![],
        names: vec![(nvme, "nvme0n1".to_string()), (loop0, "loop0".to_string())],
        schedulers: vec![(nvme, "mq-deadline".to_string())],
        cgroups: vec![crate::CgroupInfo {
            id: 9001,
            path: "/system.slice/postgresql.service".to_string(),
            name: "postgresql.service".to_string(),
        }],
        geometry: vec![],
        page_size: 4096,
        self_cost: crate::SelfCost::default(),
        host: HostSample::default(),
        ..KernelSample::default()
    }
}

/// The threads in D at the demo's end: make stuck in vfork, lab001 in its journal commit.
fn demo_dstate_now() -> Vec<DStateNow> {
    vec![
        DStateNow {
            tid: 4711,
            tgid: 4711,
            comm: "make".into(),
            start_ns: Some(0),
            stack: [
                "schedule_timeout",
                "wait_for_completion_state",
                "kernel_clone",
                "__x64_sys_vfork",
            ]
            .map(String::from)
            .to_vec(),
            no_stack: None,
        },
        DStateNow {
            tid: 5689,
            tgid: 5689,
            comm: "lab001".into(),
            start_ns: Some(6_990 * MS),
            stack: ["jbd2_log_wait_commit", "ext4_sync_file", "do_fsync"]
                .map(String::from)
                .to_vec(),
            no_stack: None,
        },
    ]
}

#[expect(
    clippy::too_many_arguments,
    reason = "a terse event builder for fixtures"
)]
fn request(
    tgid: u32,
    comm: &str,
    dev: Dev,
    op: Op,
    bytes: u32,
    i: u64,
    queue: u64,
    device: u64,
) -> BlockIo {
    BlockIo {
        dev,
        sector: i * 8,
        bytes,
        op,
        flags: 0,
        tgid,
        tid: tgid,
        comm: Comm::new(comm),
        created_ns: i * US,
        issued_ns: i * US + queue,
        completed_ns: i * US + queue + device,
        error: 0,
        kernel_thread: false,
        // The database runs in a systemd unit; the rest in the root cgroup.
        cgroup: if comm == "postgres" { 9001 } else { 0 },
        dirtier: None,
        file: None,
    }
}

/// A host with the wait before the request: fio's libaio writes to loop0 in a cgroup limited
/// to 800 write IOPS (most calls as fast as their requests, one in forty held ~60 ms for the
/// next slice), and dd paused by dirty throttling while the flusher writes back to loop0.
pub fn throttled_snapshot() -> Snapshot {
    use iotop_bpf_common::throttle::{CALL_SLOTS, call_slot};

    use super::{DioCallTotals, DirtyPauseTotals, DirtySettings, IoLimit, IoLimits, LimitKind};

    let loop0 = Dev::new(7, 0);
    let mut events = Vec::new();
    for i in 0..780 {
        events.push(request(
            4321,
            "fio",
            loop0,
            Op::Write,
            4096,
            i,
            5 * US,
            50 * US,
        ));
    }
    for i in 0..300 {
        events.push(request(
            66,
            "kworker/u8:2",
            loop0,
            Op::Write,
            131_072,
            i,
            10 * US,
            900 * US,
        ));
    }
    let mut slots = vec![0u32; CALL_SLOTS];
    let mut sum_ns = 0;
    for latency in std::iter::repeat_n(60 * US, 780).chain(std::iter::repeat_n(60 * MS, 20)) {
        slots[call_slot(latency) as usize] += 1;
        sum_ns += latency;
    }
    let mut model = Aggregator::new(Settings::default(), 0);
    for e in &events {
        model.apply(&Input::Block(*e));
    }
    model.tick(&KernelSample {
        kind: SampleKind::Final,
        now_ns: 1_000 * MS,
        disks: disk_totals_of(&events),
        names: vec![(loop0, "loop0".to_string())],
        page_size: 4096,
        dio_calls: vec![DioCallTotals {
            tgid: 4321,
            comm: "fio".into(),
            fs_dev: loop0,
            disk: loop0,
            calls: 800,
            sum_ns,
            slots,
        }],
        dirty_pauses: vec![DirtyPauseTotals {
            tgid: 5150,
            comm: "dd".into(),
            pauses: 38,
            pause_ms: 760,
            limit_pages: 2048,
            dirty_pages: 2090,
            wb_dirty_pages: 2040,
            bdi: "7:0".into(),
        }],
        dirty_settings: Some(DirtySettings {
            dirty_bytes: 8 << 20,
            dirty_ratio: 0,
            background_bytes: 4 << 20,
            background_ratio: 0,
        }),
        io_limits: vec![IoLimits {
            tgid: 4321,
            cgroup: "blkio:/slow".into(),
            limits: vec![IoLimit {
                dev: loop0,
                kind: LimitKind::WriteIops,
                value: 800,
                file: "/sys/fs/cgroup/blkio/slow/blkio.throttle.write_iops_device".into(),
            }],
            iocost: vec![],
            iolatency: vec![],
        }],
        ..KernelSample::default()
    })
}

/// One process making data durable three ways in a second: 120 `O_DSYNC` writes of 128 bytes
/// (each writes a 4 KiB block itself, jbd2 commits), 60 io_uring fsyncs (payload not
/// measured) and 4 FUA writes to an NVMe disk that honours FUA.
pub fn sync_kinds_snapshot() -> Snapshot {
    let nvme = Dev::new(259, 0);
    let loop0 = Dev::new(7, 0);
    let mut inputs: Vec<(u64, Input)> = Vec::new();
    let call = |kind, i: u64, fd, window_bytes, file: &str| SyncCall {
        tgid: 6100,
        tid: if kind == SyncKind::UringFsync {
            6101
        } else {
            6100
        },
        comm: Comm::new("wal-writer"),
        kind,
        fd,
        start_ns: i * 5 * MS + 50 * US,
        end_ns: i * 5 * MS + 50 * US + (200 + i % 30) * US,
        ret: if kind == SyncKind::DsyncWrite { 128 } else { 0 },
        window_bytes,
        window_writes: u64::from(window_bytes > 0),
        addr: 0,
        file: FileRef::Path(file.into()),
        dev: Some(loop0),
        fs_block_size: 4096,
        fs_dev: None,
        ino: 0,
        name: String::new(),
        dir: false,
    };
    for i in 0..180u64 {
        let uring = i % 3 == 2;
        let mut data = request(
            6100,
            "wal-writer",
            loop0,
            Op::Write,
            4096,
            i * 5_000 + 100,
            0,
            60 * US,
        );
        data.flags = iotop_bpf_common::block::FLAG_IN_SYNC;
        data.tid = if uring { 6101 } else { 6100 };
        let mut journal = request(
            585,
            "jbd2/loop0-8",
            loop0,
            Op::Write,
            8192,
            i * 5_000 + 200,
            0,
            80 * US,
        );
        journal.kernel_thread = true;
        inputs.push((data.completed_ns, Input::Block(data)));
        inputs.push((journal.completed_ns, Input::Block(journal)));
        let c = if uring {
            call(SyncKind::UringFsync, i, None, 0, "/data/wal/seg.2")
        } else {
            call(SyncKind::DsyncWrite, i, Some(5), 128, "/data/wal/seg.1")
        };
        inputs.push((c.end_ns, Input::Sync(c)));
    }
    for i in 0..4u64 {
        let mut fua = request(
            6100,
            "wal-writer",
            nvme,
            Op::Write,
            4096,
            950_000 + i * 1_000,
            0,
            30 * US,
        );
        fua.flags = iotop_bpf_common::block::FLAG_FUA;
        inputs.push((fua.completed_ns, Input::Block(fua)));
    }
    inputs.sort_by_key(|(at, _)| *at);
    let events: Vec<BlockIo> = inputs
        .iter()
        .filter_map(|(_, i)| match i {
            Input::Block(io) => Some(*io),
            _ => None,
        })
        .collect();
    let mut model = Aggregator::new(Settings::default(), 0);
    for (_, input) in &inputs {
        model.apply(input);
    }
    let geometry = |dev, fua| crate::DiskGeometry {
        dev,
        logical_block_size: 512,
        physical_block_size: 4096,
        minimum_io_size: 4096,
        fua,
    };
    model.tick(&KernelSample {
        kind: SampleKind::Final,
        now_ns: 1_000 * MS,
        disks: disk_totals_of(&events),
        names: vec![(nvme, "nvme0n1".to_string()), (loop0, "loop0".to_string())],
        geometry: vec![geometry(nvme, true), geometry(loop0, false)],
        logical_writes: vec![(6100, 120 * 128)],
        page_size: 4096,
        ..KernelSample::default()
    })
}
