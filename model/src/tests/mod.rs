//! The aggregator on synthetic event streams.

use super::*;

mod findings;
mod summed;
mod throttle_findings;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const LOOP0: Dev = Dev::new(7, 0);
const NVME: Dev = Dev::new(259, 0);

#[expect(clippy::too_many_arguments, reason = "a terse event builder for tests")]
fn io(
    tgid: u32,
    comm: &str,
    dev: Dev,
    op: Op,
    bytes: u32,
    at_ns: u64,
    queue: u64,
    device: u64,
) -> BlockIo {
    BlockIo {
        dev,
        sector: at_ns / 512,
        bytes,
        op,
        flags: 0,
        tgid,
        tid: tgid,
        comm: Comm::new(comm),
        created_ns: at_ns,
        issued_ns: at_ns + queue,
        completed_ns: at_ns + queue + device,
        error: 0,
        kernel_thread: false,
        cgroup: 0,
        dirtier: None,
    }
}

fn sample(now_ns: u64, events: &[BlockIo]) -> KernelSample {
    KernelSample {
        now_ns,
        disks: super::fixtures::disk_totals_of(events),
        names: vec![(LOOP0, "loop0".into()), (NVME, "nvme0n1".into())],
        ..KernelSample::default()
    }
}

fn run(events: &[BlockIo], now_ns: u64) -> Snapshot {
    let mut model = Aggregator::new(Settings::default(), 0);
    for e in events {
        model.ingest(e);
    }
    model.tick(&sample(now_ns, events))
}

#[test]
fn requests_are_attributed_to_the_submitting_process_and_disk() {
    let mut events = vec![];
    for i in 0..100 {
        events.push(io(
            42,
            "pg",
            NVME,
            Op::Write,
            8192,
            i * MS,
            10 * US,
            900 * US,
        ));
    }
    for i in 0..1000 {
        events.push(io(
            7,
            "cp",
            LOOP0,
            Op::Read,
            131_072,
            i * MS,
            2 * US,
            90 * US,
        ));
    }
    let snap = run(&events, 1_000 * MS);

    let pg = snap.procs.iter().find(|p| p.tgid == 42).unwrap();
    assert_eq!(pg.comm, "pg");
    assert_eq!(
        (pg.interval.writes, pg.interval.write_bytes),
        (100, 100 * 8192)
    );
    assert_eq!((pg.interval.reads, pg.interval.read_bytes), (0, 0));
    assert_eq!(pg.devices.len(), 1);
    assert_eq!(pg.devices[0].name, "nvme0n1");
    assert_eq!(pg.devices[0].writes, 100);

    let cp = snap.procs.iter().find(|p| p.tgid == 7).unwrap();
    assert_eq!(
        (cp.interval.reads, cp.interval.read_bytes),
        (1000, 1000 * 131_072)
    );
    assert_eq!(cp.devices[0].dev, LOOP0);

    let loop0 = snap.disks.iter().find(|d| d.name == "loop0").unwrap();
    assert_eq!((loop0.interval.reads, loop0.interval.writes), (1000, 0));
    assert_eq!(snap.events.received, 1100);
}

#[test]
fn rates_are_per_second_of_the_interval() {
    let events: Vec<_> = (0..500)
        .map(|i| io(1, "dd", LOOP0, Op::Write, 4096, i * MS, 0, 50 * US))
        .collect();
    let snap = run(&events, 500 * MS); // half a second
    assert!((snap.interval_secs() - 0.5).abs() < 1e-9);
    let dd = &snap.procs[0];
    assert!((snap.rate(dd.interval.writes) - 1000.0).abs() < 1e-6);
    assert!((snap.rate(dd.interval.write_bytes) - 4096.0 * 1000.0).abs() < 1e-3);
}

#[test]
fn histogram_totals_equal_request_counts() {
    let mut events = vec![];
    for i in 0..777u64 {
        events.push(io(
            3,
            "fio",
            LOOP0,
            Op::Read,
            4096,
            i * US,
            (i % 13) * US,
            (i % 97 + 1) * 10 * US,
        ));
    }
    for i in 0..33u64 {
        events.push(io(
            4,
            "jbd2/loop0-8",
            LOOP0,
            Op::Flush,
            0,
            i * US,
            0,
            3 * MS,
        ));
    }
    let snap = run(&events, 1_000 * MS);
    let disk = &snap.disks[0];
    assert_eq!(disk.interval.requests(), 810);
    assert_eq!(disk.interval.total_hist.total(), 810);
    assert_eq!(disk.interval.queue_hist.total(), 810);
    assert_eq!(disk.interval.device_hist.total(), 810);
    assert_eq!(disk.interval.flushes, 33);
    let fio = snap.procs.iter().find(|p| p.tgid == 3).unwrap();
    assert_eq!(fio.interval.total_hist.total(), 777);
    assert_eq!(fio.interval.latency.count, 777);
}

#[test]
fn percentiles_of_a_known_distribution() {
    // Device times 1..=1000 us, no queueing: p50 = 500 us, p99 = 990 us, max = 1000 us.
    let events: Vec<_> = (1..=1000u64)
        .map(|i| io(9, "db", NVME, Op::Read, 4096, i * MS, 0, i * US))
        .collect();
    let snap = run(&events, 2_000 * MS);
    let lat = snap.procs[0].interval.latency;
    let close = |got: u64, want: u64| got.abs_diff(want) * 100 <= want * 2;
    assert!(close(lat.p50_ns, 500 * US), "p50 {}", lat.p50_ns);
    assert!(close(lat.p99_ns, 990 * US), "p99 {}", lat.p99_ns);
    assert!(close(lat.p999_ns, 999 * US), "p99.9 {}", lat.p999_ns);
    assert_eq!(lat.max_ns, 1000 * US);
    let disk = &snap.disks[0];
    assert!(close(disk.interval.device.p50_ns, 500 * US));
    assert_eq!(disk.interval.queue.max_ns, 0);
    // Mean latency of reads (iostat r_await) is exact: it comes from the kernel sums.
    assert_eq!(disk.interval.read_await_ns, 500_500);
}

#[test]
fn queue_time_and_device_time_are_kept_apart() {
    let events: Vec<_> = (0..100)
        .map(|i| io(5, "tar", LOOP0, Op::Write, 65_536, i * MS, 8 * MS, 100 * US))
        .collect();
    let snap = run(&events, 1_000 * MS);
    let tar = &snap.procs[0].interval;
    assert_eq!(tar.queue.p50_ns / MS, 8);
    assert!(tar.device.p50_ns < 110 * US && tar.device.p50_ns > 90 * US);
    // aqu-sz: 100 requests x 8.1 ms in flight over 1 s = 0.81.
    assert!((snap.disks[0].interval.queue_size - 0.81).abs() < 1e-9);
}

#[test]
fn intervals_reset_and_totals_accumulate() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let first: Vec<_> = (0..10)
        .map(|i| io(1, "a", LOOP0, Op::Read, 512, i * MS, 0, US))
        .collect();
    for e in &first {
        model.ingest(e);
    }
    let s1 = model.tick(&sample(1_000 * MS, &first));
    let second: Vec<_> = (0..5)
        .map(|i| io(1, "a", LOOP0, Op::Read, 512, 1_000 * MS + i * MS, 0, US))
        .collect();
    for e in &second {
        model.ingest(e);
    }
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    let s2 = model.tick(&sample(2_000 * MS, &all));
    assert_eq!(s1.procs[0].interval.reads, 10);
    assert_eq!(s2.procs[0].interval.reads, 5);
    assert_eq!(s2.procs[0].total().reads, 15);
    assert_eq!(
        s2.disks[0].interval.reads, 5,
        "disk interval = kernel delta"
    );
    assert_eq!(s2.disks[0].total.reads, 15);
    assert_eq!(s2.events.received, 5);
    assert_eq!(s2.events.received_total, 15);
    assert_eq!(s2.seq, 2);
    assert_eq!(s2.elapsed_ns, 2_000 * MS);
}

#[test]
fn disk_sums_are_exact_and_request_sizes_accumulate_since_start() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let first: Vec<_> = (0..10u64)
        .map(|i| io(1, "a", LOOP0, Op::Read, 4096, i * MS, 2 * US, 100 * US + i))
        .collect();
    for e in &first {
        model.ingest(e);
    }
    let s1 = model.tick(&sample(1_000 * MS, &first));
    let second = [
        io(1, "a", LOOP0, Op::Write, 1 << 20, 1_000 * MS, 0, 300 * US),
        io(
            4,
            "jbd2/loop0-8",
            LOOP0,
            Op::Flush,
            0,
            1_001 * MS,
            0,
            50 * US,
        ),
    ];
    for e in &second {
        model.ingest(e);
    }
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    let s2 = model.tick(&sample(2_000 * MS, &all));
    let d1 = &s1.disks[0].interval;
    // Queue 2 us each; device 100 us + i ns: the sums are exact, not bucket midpoints.
    assert_eq!(d1.queue_sum_ns, 10 * 2 * US);
    assert_eq!(d1.device_sum_ns, 10 * 100 * US + 45);
    assert_eq!(d1.latency_sum_ns, d1.queue_sum_ns + d1.device_sum_ns);
    assert_eq!(
        (d1.read_size_hist.count(), d1.read_size_hist.slots[3]),
        (10, 10)
    );
    let total = &s2.disks[0].total;
    assert_eq!(
        total.latency_sum_ns,
        10 * 102 * US + 45 + 300 * US + 50 * US
    );
    assert_eq!(total.total_hist.total(), 12);
    assert_eq!(total.read_size_hist.sum_bytes, 10 * 4096);
    assert_eq!(total.write_size_hist.count(), 1, "flushes have no size");
    assert_eq!(total.write_size_hist.slots[11], 1, "1 MiB is <= le 1 MiB");
    let interval = &s2.disks[0].interval;
    assert_eq!(
        interval.read_size_hist.count(),
        0,
        "the interval starts empty"
    );
    assert_eq!(interval.latency_sum_ns, 350 * US);
}

#[test]
fn drops_and_bad_records_are_reported_per_interval() {
    let mut model = Aggregator::new(Settings::default(), 0);
    model.apply(&Input::BadRecords(1));
    let mut s = sample(1_000 * MS, &[]);
    s.counters.ring_dropped = 7;
    let snap = model.tick(&s);
    assert_eq!((snap.events.dropped, snap.events.bad), (7, 1));
    s.now_ns = 2_000 * MS;
    s.counters.ring_dropped = 9;
    let snap = model.tick(&s);
    assert_eq!(
        (
            snap.events.dropped,
            snap.events.dropped_total,
            snap.events.bad_total
        ),
        (2, 9, 1)
    );
}

#[test]
fn the_first_interval_is_measured_from_the_baseline() {
    // A busy disk: 5 s of busy time before iotop-bpf started, 250 ms in its first second.
    let mut model = Aggregator::new(Settings::default(), 0);
    // Merges counted by /proc/diskstats too: a tenth of the busy milliseconds, for the test.
    let stat = |ms| DiskStat {
        dev: LOOP0,
        io_ticks_ms: ms,
        read_merges: ms / 10,
        write_merges: ms / 5,
    };
    let mut baseline = sample(0, &[]);
    baseline.kind = SampleKind::Baseline;
    baseline.diskstats = vec![stat(5_000)];
    baseline.logical_writes = vec![(1, 1 << 20)];
    assert!(model.apply(&Input::Sample(Box::new(baseline))).is_none());
    let events = [io(1, "a", LOOP0, Op::Read, 4096, 0, 0, US)];
    model.ingest(&events[0]);
    let mut s = sample(1_000 * MS, &events);
    s.diskstats = vec![stat(5_250)];
    s.logical_writes = vec![(1, (1 << 20) + 512)];
    let first = model.tick(&s);
    assert_eq!(first.seq, 1);
    assert!((first.disks[0].interval.util_pct - 25.0).abs() < 1e-9);
    assert_eq!(
        (
            first.disks[0].interval.read_merges,
            first.disks[0].interval.write_merges
        ),
        (25, 50)
    );
    assert_eq!(
        first.procs[0].interval.logical_write_bytes, 512,
        "writes before the start are not this interval's"
    );
    s.now_ns = 2_000 * MS;
    s.diskstats = vec![stat(6_250)];
    let second = model.tick(&s);
    assert!((second.disks[0].interval.util_pct - 100.0).abs() < 1e-9);
    assert_eq!(
        second.disks[0].total.write_merges, 250,
        "since start: 50 + 200"
    );
}

#[test]
fn a_process_that_left_the_kernel_map_starts_again_from_zero() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let events = [io(1, "a", LOOP0, Op::Read, 4096, 0, 0, US)];
    model.ingest(&events[0]);
    let mut s = sample(1_000 * MS, &events);
    s.logical_writes = vec![(1, 1000)];
    assert_eq!(model.tick(&s).procs[0].interval.logical_write_bytes, 1000);
    // The LRU map dropped it, then it wrote again: 10 bytes, not a negative or huge delta.
    s.now_ns = 2_000 * MS;
    s.logical_writes = vec![];
    model.tick(&s);
    model.ingest(&io(1, "a", LOOP0, Op::Read, 4096, 2_100 * MS, 0, US));
    s.now_ns = 3_000 * MS;
    s.logical_writes = vec![(1, 10)];
    assert_eq!(model.tick(&s).procs[0].interval.logical_write_bytes, 10);
}

#[test]
fn a_process_that_only_writes_to_the_page_cache_has_a_row_even_after_it_exits() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut baseline = sample(0, &[]);
    baseline.kind = SampleKind::Baseline;
    model.apply(&Input::Sample(Box::new(baseline)));
    // tar's child wrote 6 MiB and exited before the interval closed; it never reached a
    // disk itself (write-back will) and never synced.
    model.apply(&Input::Exit(crate::ProcessExit {
        tgid: 77,
        ts_ns: 500 * MS,
    }));
    let mut s = sample(1_000 * MS, &[]);
    s.logical_writes = vec![(77, 6 << 20), (78, 4096)];
    s.writers = vec![(77, Comm::new("tar"))];
    let snap = model.tick(&s);
    let tar = snap
        .procs
        .iter()
        .find(|p| p.tgid == 77)
        .expect("a row for the writer");
    assert_eq!(tar.interval.logical_write_bytes, 6 << 20);
    assert_eq!(tar.comm, "tar");
    assert!(
        tar.exited,
        "its exit, seen before it had a row, still counts"
    );
    assert!(
        snap.procs.iter().all(|p| p.tgid != 78),
        "no command known: no row rather than a nameless one"
    );
    s.now_ns = 2_000 * MS;
    s.logical_writes = vec![];
    s.writers = vec![];
    let next = model.tick(&s);
    assert!(
        next.procs.iter().all(|p| p.tgid != 77),
        "reported once, then forgotten"
    );
}

/// An fsync of `file` by a single-threaded process, one write of `window` bytes before it.
fn fsync_call(
    tgid: u32,
    comm: &str,
    start_ns: u64,
    end_ns: u64,
    window: u64,
    file: &str,
) -> SyncCall {
    SyncCall {
        tgid,
        tid: tgid,
        comm: Comm::new(comm),
        kind: SyncKind::Fsync,
        fd: Some(3),
        start_ns,
        end_ns,
        ret: 0,
        window_bytes: window,
        window_writes: 1,
        file: FileRef::Path(file.into()),
        dev: Some(LOOP0),
        fs_block_size: 4096,
        fs_dev: None,
        ino: 0,
        name: String::new(),
        dir: false,
    }
}

#[test]
fn exited_processes_are_reported_once_then_forgotten() {
    let mut model = Aggregator::new(Settings::default(), 0);
    model.ingest(&io(7, "short", LOOP0, Op::Write, 4096, 10 * MS, 0, US));
    model.apply(&Input::Exit(ProcessExit {
        tgid: 7,
        ts_ns: 20 * MS,
    }));
    let snap = model.tick(&sample(1_000 * MS, &[]));
    let row = snap
        .procs
        .iter()
        .find(|p| p.tgid == 7)
        .expect("its last interval");
    assert!(row.exited);
    assert_eq!(row.interval.writes, 1);
    assert_eq!(model.process_count(), 0, "forgotten once reported");
}

#[test]
fn an_exited_process_waiting_for_its_sync_to_settle_has_a_row_only_when_it_does() {
    // Its fsync ends 900 ms into the interval, so it settles (SETTLE_NS later) only at the
    // third close: the second has nothing of it to show.
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut w = io(7, "short", LOOP0, Op::Write, 4096, 880 * MS, 0, US);
    w.flags = iotop_bpf_common::block::FLAG_IN_SYNC;
    model.ingest(&w);
    model.ingest_sync(&fsync_call(
        7,
        "short",
        870 * MS,
        900 * MS,
        4096,
        "/tmp/short",
    ));
    model.apply(&Input::Exit(ProcessExit {
        tgid: 7,
        ts_ns: 910 * MS,
    }));
    let rows = |snap: &Snapshot| snap.procs.iter().filter(|p| p.tgid == 7).count();
    let first = model.tick(&sample(1_000 * MS, &[]));
    assert_eq!(rows(&first), 1, "the row that says it exited");
    assert!(first.procs.iter().any(|p| p.tgid == 7 && p.exited));
    // At 1.4 s the call is not settled yet (0.5 s < SETTLE_NS after it ended).
    let quiet = model.tick(&sample(1_400 * MS, &[]));
    assert_eq!(rows(&quiet), 0, "nothing of it happened in this interval");
    assert_eq!(model.process_count(), 1, "kept for its call");
    let settled = model.tick(&sample(2_400 * MS, &[]));
    let row = settled
        .procs
        .iter()
        .find(|p| p.tgid == 7)
        .expect("a row with its settled call");
    assert_eq!(row.interval.sync.large.calls, 1);
    assert_eq!(row.total().sync.large.calls, 1);
    assert_eq!(row.total().writes, 1, "its totals since start");
    assert_eq!(model.process_count(), 0);
}

#[test]
fn thirty_thousand_short_lived_processes_leave_nothing_behind() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut t = 0;
    for second in 0..30u64 {
        for i in 0..1_000u32 {
            let tgid = 10_000 + u32::try_from(second).unwrap() * 1_000 + i;
            t += 30 * US;
            let mut w = io(tgid, "job", LOOP0, Op::Write, 4096, t, 0, 20 * US);
            w.flags = iotop_bpf_common::block::FLAG_IN_SYNC;
            model.ingest(&w);
            model.ingest(&io(
                tgid,
                "job",
                LOOP0,
                Op::Read,
                4096,
                t + 5 * US,
                0,
                20 * US,
            ));
            model.ingest(&io(
                5,
                "jbd2/loop0-8",
                LOOP0,
                Op::Write,
                8192,
                t + 6 * US,
                0,
                20 * US,
            ));
            model.ingest_sync(&fsync_call(
                tgid,
                "job",
                t,
                t + 25 * US,
                100,
                &format!("/tmp/job-{tgid}"),
            ));
            model.apply(&Input::Exit(ProcessExit {
                tgid,
                ts_ns: t + 28 * US,
            }));
        }
        model.tick(&sample((second + 1) * 1_000 * MS, &[]));
    }
    model.tick(&KernelSample {
        kind: SampleKind::Final,
        ..sample(31_000 * MS, &[])
    });
    assert!(
        model.process_count() <= 2,
        "{} processes kept after they all exited",
        model.process_count()
    );
}

#[test]
fn idle_processes_are_forgotten() {
    let settings = Settings {
        forget_after_ns: 5_000 * MS,
        max_procs: 2,
    };
    let mut model = Aggregator::new(settings, 0);
    for (tgid, at) in [(1, 0), (2, 100 * MS), (3, 200 * MS)] {
        model.ingest(&io(tgid, "x", LOOP0, Op::Read, 512, at, 0, US));
    }
    let snap = model.tick(&sample(1_000 * MS, &[]));
    assert_eq!(
        snap.procs.len(),
        3,
        "the snapshot still shows this interval's processes"
    );
    assert_eq!(
        model.process_count(),
        2,
        "the oldest goes when over max_procs"
    );
    let snap = model.tick(&sample(2_000 * MS, &[]));
    let pids: Vec<u32> = snap.procs.iter().map(|p| p.tgid).collect();
    assert_eq!(pids, vec![2, 3], "the oldest goes when over max_procs");
    // pid 2 has now been idle for 5.05 s: shown in this snapshot, gone from the next.
    let snap = model.tick(&sample(5_150 * MS, &[]));
    assert_eq!(snap.procs.len(), 2);
    let snap = model.tick(&sample(5_180 * MS, &[]));
    let pids: Vec<u32> = snap.procs.iter().map(|p| p.tgid).collect();
    assert_eq!(pids, vec![3]);
}

#[test]
fn same_events_give_the_same_snapshot() {
    let events: Vec<_> = (0..200u64)
        .map(|i| {
            io(
                (i % 5) as u32,
                "w",
                LOOP0,
                Op::Write,
                4096,
                i * MS,
                i * US,
                2 * i * US,
            )
        })
        .collect();
    assert_eq!(run(&events, 1_000 * MS), run(&events, 1_000 * MS));
}

mod dstate {
    use super::*;
    use crate::{DStateEpisode, DStateNow, WakeupStack};

    fn now(pid: u32, tgid: u32, start_ns: Option<u64>) -> DStateNow {
        DStateNow {
            tid: pid,
            tgid,
            comm: "stuck".into(),
            start_ns,
            stack: vec!["io_schedule".into(), "folio_wait_bit_common".into()],
            no_stack: None,
        }
    }

    fn tick(
        model: &mut Aggregator,
        at_ns: u64,
        kernel_time: u64,
        in_d: Vec<DStateNow>,
    ) -> Snapshot {
        model.tick(&KernelSample {
            now_ns: at_ns,
            dstate_time: vec![(50, kernel_time)],
            dstate_now: in_d,
            ..sample(at_ns, &[])
        })
    }

    #[test]
    fn a_long_episode_is_spread_over_the_intervals_it_spans_and_counted_once() {
        let mut model = Aggregator::new(Settings::default(), 0);
        // Blocked from 500 ms to 2700 ms.
        let s1 = tick(&mut model, 1_000 * MS, 0, vec![now(51, 50, Some(500 * MS))]);
        let s2 = tick(&mut model, 2_000 * MS, 0, vec![now(51, 50, Some(500 * MS))]);
        model.ingest_dstate(&DStateEpisode {
            tid: 51,
            tgid: 50,
            comm: Comm::new("stuck"),
            start_ns: 500 * MS,
            end_ns: 2_700 * MS,
            stack_id: 1,
            wakeup_stack: WakeupStack::None,
            stack: vec!["io_schedule".into()],
            no_stack: None,
        });
        let s3 = tick(&mut model, 3_000 * MS, 2_200 * MS, vec![]);
        let d = |s: &Snapshot| {
            s.procs
                .iter()
                .find(|p| p.tgid == 50)
                .map_or(0, |p| p.interval.dstate_ns)
        };
        assert_eq!(d(&s1), 500 * MS);
        assert_eq!(d(&s2), 1_000 * MS);
        assert_eq!(
            d(&s3),
            700 * MS,
            "the rest of the episode, not all of it again"
        );
        assert_eq!(
            s3.procs
                .iter()
                .find(|p| p.tgid == 50)
                .unwrap()
                .total()
                .dstate_ns,
            2_200 * MS
        );
        assert_eq!(s1.dstate[0].blocked_ns, Some(500 * MS));
        assert_eq!(s2.dstate[0].blocked_ns, Some(1_500 * MS));
        assert!(s3.dstate.is_empty());
        assert_eq!(s3.dstate_recent[0].duration_ns, 2_200 * MS);
    }

    #[test]
    fn short_episodes_count_through_the_kernel_sum_alone() {
        let mut model = Aggregator::new(Settings::default(), 0);
        model.ingest(&io(50, "db", LOOP0, Op::Read, 4096, 0, 0, US));
        let _ = tick(&mut model, 1_000 * MS, 0, vec![]);
        let s = tick(&mut model, 2_000 * MS, 40 * MS, vec![]);
        assert_eq!(
            s.procs
                .iter()
                .find(|p| p.tgid == 50)
                .unwrap()
                .interval
                .dstate_ns,
            40 * MS
        );
        assert!(
            s.dstate_recent.is_empty(),
            "below the streaming threshold: no episode listed"
        );
    }

    #[test]
    fn a_thread_already_in_d_at_start_is_listed_without_a_start() {
        let mut model = Aggregator::new(Settings::default(), 0);
        let s = tick(
            &mut model,
            1_000 * MS,
            0,
            vec![now(77, 77, None), now(51, 50, Some(900 * MS))],
        );
        assert_eq!(s.dstate.len(), 2);
        assert_eq!(
            (s.dstate[0].tid, s.dstate[0].blocked_ns),
            (77, None),
            "unknown start sorts first"
        );
        assert_eq!(
            crate::wait_site(&s.dstate[1].stack, s.dstate[1].no_stack, 3),
            "io_schedule <- folio_wait_bit_common"
        );
    }

    #[test]
    fn a_missing_wait_site_says_why_and_is_counted() {
        use crate::{NoStack, wait_site};
        assert_eq!(
            wait_site(&[], Some(NoStack::SymbolsHidden), 3),
            "? symbols hidden"
        );
        assert_eq!(
            wait_site(&[], Some(NoStack::NotSampled), 3),
            "? not sampled"
        );
        assert_eq!(wait_site(&[], None, 3), "?", "an old recording");
        assert_eq!(
            wait_site(&["schedule_timeout".into()], None, 3),
            "schedule_timeout",
            "only a generic wait: still a frame, not a question mark"
        );
        let mut model = Aggregator::new(Settings::default(), 0);
        let episode = |tid: u32, stack: Vec<String>, no_stack| DStateEpisode {
            tid,
            tgid: tid,
            comm: Comm::new("w"),
            start_ns: 100 * MS,
            end_ns: 150 * MS,
            stack_id: -2,
            wakeup_stack: WakeupStack::None,
            stack,
            no_stack,
        };
        model.ingest_dstate(&episode(1, vec!["io_schedule".into()], None));
        model.ingest_dstate(&episode(2, vec![], Some(NoStack::NotSampled)));
        model.ingest_dstate(&episode(3, vec![], Some(NoStack::SymbolsHidden)));
        model.ingest_dstate(&episode(4, vec![], Some(NoStack::Lost)));
        let s = tick(&mut model, 1_000 * MS, 0, vec![]);
        assert_eq!(
            s.dstate_sites,
            crate::SiteCounts {
                episodes: 4,
                resolved: 1,
                not_sampled: 1,
                symbols_hidden: 1,
                lost: 1
            }
        );
        let s = tick(&mut model, 2_000 * MS, 0, vec![]);
        assert_eq!(s.dstate_sites.episodes, 0, "per interval");
        let why: Vec<_> = s.dstate_recent.iter().map(|e| e.no_stack).collect();
        assert!(why.contains(&Some(NoStack::SymbolsHidden)), "{why:?}");
    }

    #[test]
    fn a_task_blocked_for_seconds_raises_long_d_state() {
        let mut model = Aggregator::new(Settings::default(), 0);
        let s = tick(
            &mut model,
            7_000 * MS,
            0,
            vec![now(51, 50, Some(1_000 * MS))],
        );
        let f = s
            .findings
            .iter()
            .find(|f| f.kind == crate::findings::FindingKind::LongDState)
            .unwrap();
        assert_eq!(f.tgid, Some(50));
        assert!(
            f.summary
                .contains("blocked in D for 6.00s, in io_schedule <- folio_wait_bit_common"),
            "{}",
            f.summary
        );
        assert!(f.fix.contains("its own I/O"), "{}", f.fix);
        let s = tick(
            &mut model,
            7_500 * MS,
            0,
            vec![now(51, 50, Some(4_000 * MS))],
        );
        assert!(
            s.findings.iter().all(|f| !f.active),
            "a 3.5 s episode is under the threshold"
        );
    }
}

#[test]
fn d_state_history_stays_bounded() {
    let mut model = Aggregator::new(Settings::default(), 0);
    for tid in 0..20_000u32 {
        let start = u64::from(tid) * 10 * US;
        model.ingest_dstate(&DStateEpisode {
            tid: tid + 1,
            tgid: tid + 1,
            comm: Comm::new("short"),
            start_ns: start,
            end_ns: start + 2 * MS + u64::from(tid % 7) * US,
            stack_id: -1,
            wakeup_stack: WakeupStack::None,
            stack: vec!["io_schedule".into()],
            no_stack: None,
        });
    }
    model.tick(&sample(1_000 * MS, &[]));
    let (recent, threads) = model.dstate_remembered();
    assert!(recent <= 64, "{recent} recent episodes kept");
    assert!(threads <= 4_096, "{threads} threads' histories kept");
}

#[test]
fn bpf_cost_per_io_needs_enough_requests_and_is_kept_while_sampled_off() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let busy: Vec<BlockIo> = (0..2000)
        .map(|i| io(7, "fio", LOOP0, Op::Read, 4096, i * US, US, 10 * US))
        .collect();
    let with_cost =
        |now_ns: u64, events: &[BlockIo], bpf_run_ns: u64, on: bool, cpu_ns: u64| KernelSample {
            self_cost: SelfCost {
                bpf_run_ns,
                bpf_runs: 0,
                bpf_stats_on: on,
                bpf_stats_sampled: true,
                cpu_ns,
            },
            ..sample(now_ns, events)
        };
    // 2000 requests and 1.2 ms of BPF time in one second: 600 ns per I/O, 0.12% of a CPU.
    let snap = model.tick(&with_cost(1_000 * MS, &busy, 1_200_000, true, 50 * MS));
    assert_eq!(snap.events.bpf_ns_per_io, Some(600));
    assert!((snap.events.bpf_cpu_pct.unwrap() - 0.12).abs() < 1e-9);
    assert!(!snap.events.bpf_sampled);
    assert!((snap.events.cpu_pct.unwrap() - 5.0).abs() < 1e-9);
    // The next interval is not measured: the figures stay, marked as sampled earlier.
    let snap = model.tick(&with_cost(2_000 * MS, &busy, 1_200_000, false, 60 * MS));
    assert_eq!(snap.events.bpf_ns_per_io, Some(600));
    assert!(snap.events.bpf_sampled);
    // A measured idle interval (no new requests): CPU share updates, per-I/O does not.
    let snap = model.tick(&with_cost(3_000 * MS, &busy, 1_500_000, true, 70 * MS));
    assert_eq!(snap.events.bpf_ns_per_io, Some(600));
    assert!((snap.events.bpf_cpu_pct.unwrap() - 0.03).abs() < 1e-9);
}

#[test]
fn replayed_samples_without_costs_show_none() {
    let snap = run(&[io(7, "cp", LOOP0, Op::Read, 4096, 0, US, US)], 1_000 * MS);
    assert_eq!(snap.events.cpu_pct, None);
    assert_eq!(snap.events.bpf_ns_per_io, None);
    assert_eq!(snap.events.bpf_cpu_pct, None);
}

#[test]
fn write_back_is_charged_to_the_process_that_dirtied_the_pages() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut events = Vec::new();
    for i in 0..48 {
        let mut flush = io(
            900,
            "kworker/u8:3",
            LOOP0,
            Op::Write,
            1 << 20,
            i * MS,
            US,
            MS,
        );
        flush.kernel_thread = true;
        flush.dirtier = Some(Dirtier {
            tgid: 4242,
            comm: Comm::new("dd"),
        });
        events.push(flush);
    }
    // A flusher request whose pages nobody the probes saw dirtied stays the flusher's.
    let mut unknown = io(900, "kworker/u8:3", LOOP0, Op::Write, 4096, 60 * MS, US, MS);
    unknown.kernel_thread = true;
    events.push(unknown);
    // A sync call in progress meanwhile is not charged the write-back as journal.
    model.ingest_sync(&SyncCall {
        tgid: 77,
        tid: 77,
        comm: Comm::new("sync"),
        kind: SyncKind::Syncfs,
        fd: None,
        file: FileRef::NoFile,
        start_ns: 0,
        end_ns: 70 * MS,
        ret: 0,
        window_bytes: 0,
        window_writes: 0,
        fs_block_size: 0,
        dev: None,
        fs_dev: None,
        ino: 0,
        name: String::new(),
        dir: false,
    });
    for e in &events {
        model.ingest(e);
    }
    let snap = model.tick(&sample(1_000 * MS, &events));
    let row = |tgid: u32| snap.procs.iter().find(|p| p.tgid == tgid).unwrap();
    let (dd, flusher) = (row(4242), row(900));
    assert_eq!(dd.comm, "dd");
    assert_eq!(dd.interval.writeback_bytes, 48 << 20);
    assert_eq!(dd.interval.written_back_by[0].comm, "kworker/u8:3");
    assert_eq!(dd.interval.write_bytes, 0, "its own requests: none");
    assert_eq!(flusher.interval.write_bytes, (48 << 20) + 4096);
    assert_eq!(flusher.interval.wrote_back_bytes, 48 << 20);
    assert_eq!(flusher.interval.wrote_back_for[0].tgid, 4242);
    assert_eq!(
        dd.interval.write_bytes_caused() + flusher.interval.write_bytes_caused(),
        (48 << 20) + 4096,
        "each byte counted once, on the process that caused it"
    );
    assert_eq!(flusher.interval.write_bytes_caused(), 4096);
    let sync = row(77);
    assert_eq!(
        sync.interval.sync.charged_write_bytes, 4096,
        "only the unknown request"
    );
}

#[test]
fn cgroup_names_are_bounded_and_the_active_ones_come_back() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut last = None;
    // A node where containers come and go: 100 new cgroups every interval.
    for tick in 0..100u64 {
        let cgroups = (0..100)
            .map(|i| {
                let id = tick * 100 + i;
                CgroupInfo {
                    id,
                    path: format!("/docker/{id}"),
                    name: format!("c{id}"),
                }
            })
            .collect();
        let events = [BlockIo {
            cgroup: tick * 100,
            ..io(1, "dd", LOOP0, Op::Read, 4096, tick * 1000 * MS, 0, US)
        }];
        for e in &events {
            model.ingest(e);
        }
        last = Some(model.tick(&KernelSample {
            cgroups,
            ..sample((tick + 1) * 1000 * MS, &events)
        }));
        assert!(model.cgroup_count() <= 4096, "{}", model.cgroup_count());
    }
    let dd = &last.unwrap().procs[0];
    assert_eq!(dd.cgroup.as_ref().map(|c| c.name.as_str()), Some("c9900"));
}

/// The host figures go from the samples to the snapshot through the aggregator: iowait from
/// the baseline's CPU times to the first interval's, then interval to interval; the rest as
/// sampled at each interval's end.
#[test]
fn host_figures_are_measured_from_the_baseline_then_from_interval_to_interval() {
    let host = |iowait: u64, total: u64, blocked: u32| HostSample {
        procs_blocked: Some(blocked),
        cpu: Some(CpuJiffies {
            idle: total - iowait,
            iowait,
            ..CpuJiffies::default()
        }),
        dirty_bytes: Some(u64::from(blocked) << 20),
        ..HostSample::default()
    };
    let mut model = Aggregator::new(Settings::default(), 0);
    model.apply(&Input::Sample(Box::new(KernelSample {
        kind: SampleKind::Baseline,
        host: host(100, 1_000, 0),
        ..sample(0, &[])
    })));
    let first = model.tick(&KernelSample {
        host: host(150, 1_200, 2),
        ..sample(1_000 * MS, &[])
    });
    assert_eq!(first.host.iowait_pct, Some(25.0), "50 of 200 jiffies");
    assert_eq!(first.host.procs_blocked, Some(2));
    assert_eq!(first.host.dirty_bytes, Some(2 << 20));
    assert_eq!(first.host.load1, None, "not sampled: unknown, not 0");
    let second = model.tick(&KernelSample {
        host: host(150, 1_400, 0),
        ..sample(2_000 * MS, &[])
    });
    assert_eq!(second.host.iowait_pct, Some(0.0));
    assert_eq!(second.host.procs_blocked, Some(0));
}

#[test]
fn only_a_disk_with_a_scheduler_splits_its_queue_time() {
    let events = [io(1, "fio", LOOP0, Op::Write, 4096, 0, 10 * US, 50 * US)];
    let mut model = Aggregator::new(Settings::default(), 0);
    model.ingest(&events[0]);
    let mut s = sample(1_000 * MS, &events);
    // The kernel timed an insert (the split was on for another disk's sake).
    s.disks[0].inserted = 1;
    s.disks[0].g2i_ns = 2 * US;
    s.disks[0].i2d_ns = 8 * US;
    let none = model.tick(&s);
    assert_eq!(none.disks[0].scheduler, None);
    assert_eq!(none.disks[0].interval.scheduler_split_ns(), None);

    let mut model = Aggregator::new(Settings::default(), 0);
    model.ingest(&events[0]);
    s.schedulers = vec![(LOOP0, "mq-deadline".to_string())];
    let deadline = model.tick(&s);
    assert_eq!(deadline.disks[0].scheduler.as_deref(), Some("mq-deadline"));
    assert_eq!(
        deadline.disks[0].interval.scheduler_split_ns(),
        Some((2 * US, 8 * US))
    );
}

#[test]
fn fua_writes_are_counted_per_process_where_the_disk_honours_them() {
    let mut events = vec![];
    for (i, dev) in [NVME, NVME, NVME, LOOP0].into_iter().enumerate() {
        let mut e = io(42, "db", dev, Op::Write, 4096, i as u64 * MS, US, 20 * US);
        e.flags = iotop_bpf_common::block::FLAG_FUA;
        events.push(e);
    }
    events.push(io(42, "db", NVME, Op::Write, 4096, 9 * MS, US, 20 * US));
    let mut model = Aggregator::new(Settings::default(), 0);
    for e in &events {
        model.ingest(e);
    }
    let geometry = |dev, fua| DiskGeometry {
        dev,
        logical_block_size: 512,
        physical_block_size: 4096,
        minimum_io_size: 4096,
        fua,
    };
    let snap = model.tick(&KernelSample {
        geometry: vec![geometry(NVME, true), geometry(LOOP0, false)],
        ..sample(1_000 * MS, &events)
    });
    let proc = snap.procs.iter().find(|p| p.tgid == 42).unwrap();
    assert_eq!(
        proc.interval.fua_writes, 3,
        "the loop device does not honour FUA"
    );
    assert_eq!(proc.total().fua_writes, 3);
    let on = |dev| proc.devices.iter().find(|d| d.dev == dev).unwrap();
    assert_eq!((on(NVME).fua_writes, on(NVME).fua_supported), (3, true));
    assert_eq!((on(LOOP0).fua_writes, on(LOOP0).fua_supported), (1, false));
    let nvme = snap.disks.iter().find(|d| d.dev == NVME).unwrap();
    assert!(nvme.geometry.fua);
}

#[test]
fn a_group_of_processes_sums_its_members() {
    let snap = fixtures::demo_snapshot();
    let members: Vec<&ProcFigures> = snap.procs.iter().map(|p| &p.interval).collect();
    let sum = ProcFigures::sum(members.iter().copied());
    let total = |f: fn(&ProcFigures) -> u64| members.iter().map(|m| f(m)).sum::<u64>();
    assert_eq!(sum.reads, total(|f| f.reads));
    assert_eq!(sum.writes, total(|f| f.writes));
    assert_eq!(
        sum.write_bytes_caused(),
        total(ProcFigures::write_bytes_caused)
    );
    assert_eq!(sum.sync.syncs, total(|f| f.sync.syncs));
    assert_eq!(sum.dstate_ns, total(|f| f.dstate_ns));
    assert_eq!(sum.total_hist.total(), total(|f| f.total_hist.total()));
    assert_eq!(sum.device_hist.total(), total(|f| f.device_hist.total()));
    assert_eq!(sum.latency.count, sum.total_hist.total());
    let max = members.iter().map(|m| m.latency.max_ns).max().unwrap();
    assert_eq!(sum.latency.max_ns, max);
    assert!(sum.latency.p99_ns <= max && sum.latency.p50_ns > 0);
    assert!(sum.active());
    assert!(!ProcFigures::default().active());
}
