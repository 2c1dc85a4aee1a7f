//! The aggregator on synthetic event streams.

use super::*;

mod attribution;
mod dstate;
mod findings;
mod processes;
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
        file: None,
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
                // One run per 100 ns, as a count of its own.
                bpf_runs: bpf_run_ns / 100,
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
    assert_eq!(snap.events.bpf_runs, Some(12_000));
    assert!(!snap.events.bpf_sampled);
    assert!((snap.events.cpu_pct.unwrap() - 5.0).abs() < 1e-9);
    // The next interval is not measured: the figures stay, marked as sampled earlier.
    let snap = model.tick(&with_cost(2_000 * MS, &busy, 1_200_000, false, 60 * MS));
    assert_eq!(snap.events.bpf_ns_per_io, Some(600));
    assert!(snap.events.bpf_sampled);
    assert_eq!(snap.events.bpf_runs, None, "runs are this interval's only");
    // A measured idle interval (no new requests): CPU share updates, per-I/O does not.
    let snap = model.tick(&with_cost(3_000 * MS, &busy, 1_500_000, true, 70 * MS));
    assert_eq!(snap.events.bpf_ns_per_io, Some(600));
    assert!((snap.events.bpf_cpu_pct.unwrap() - 0.03).abs() < 1e-9);
    assert_eq!(snap.events.bpf_runs, Some(3_000));
}

#[test]
fn replayed_samples_without_costs_show_none() {
    let snap = run(&[io(7, "cp", LOOP0, Op::Read, 4096, 0, US, US)], 1_000 * MS);
    assert_eq!(snap.events.cpu_pct, None);
    assert_eq!(snap.events.bpf_ns_per_io, None);
    assert_eq!(snap.events.bpf_cpu_pct, None);
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
