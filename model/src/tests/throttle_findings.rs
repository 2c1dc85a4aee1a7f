//! `io_throttled` and `dirty_throttled` on synthetic streams: the kernel's cumulative call
//! and pause aggregates in each sample, next to the requests the processes made.

use iotop_bpf_common::throttle::{CALL_SLOTS, call_slot};

use crate::{
    Aggregator, BlockIo, Comm, Dev, DioCallTotals, DirtyPauseTotals, DirtySettings, Input, IoLimit,
    IoLimits, KernelSample, LimitKind, Op, SampleKind, Settings, Snapshot,
    findings::{Evidence, Finding, FindingKind, Severity},
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const SECOND: u64 = 1_000 * MS;
const DISK: Dev = Dev::new(7, 0);
const FIO: u32 = 4321;
const DD: u32 = 777;

fn evidence<'a>(f: &'a Finding, key: &str) -> &'a Evidence {
    &f.evidence
        .iter()
        .find(|(k, _)| *k == key)
        .unwrap_or_else(|| panic!("no {key} in {f:?}"))
        .1
}

/// One second of I/O, repeated for as many intervals as asked.
#[derive(Default)]
struct Second {
    requests: Vec<BlockIo>,
    /// Latencies of the process's direct I/O calls.
    calls: Vec<u64>,
    limits: Option<IoLimits>,
    /// (pauses, ms) of dirty throttling.
    pauses: Option<(u64, u64)>,
    settings: Option<DirtySettings>,
    /// Other paused writers (their figures of one second).
    other_writers: Vec<DirtyPauseTotals>,
}

impl Second {
    fn request(&mut self, tgid: u32, comm: &str, at_ns: u64, latency_ns: u64) {
        self.requests.push(BlockIo {
            dev: DISK,
            sector: at_ns / 512,
            bytes: 4096,
            op: Op::Write,
            flags: 0,
            tgid,
            tid: tgid,
            comm: Comm::new(comm),
            created_ns: at_ns,
            issued_ns: at_ns + latency_ns / 10,
            completed_ns: at_ns + latency_ns,
            error: 0,
            kernel_thread: comm.starts_with("kworker"),
            cgroup: 0,
            dirtier: None,
            file: None,
        });
    }

    /// `n` calls of `latency_ns`, each with a request of `request_ns` made by the caller.
    fn calls(&mut self, n: u64, latency_ns: u64, request_ns: u64) {
        for i in 0..n {
            self.calls.push(latency_ns);
            self.request(FIO, "fio", i * SECOND / n.max(1), request_ns);
        }
    }

    fn write_iops_limit(&mut self, value: u64) {
        self.limits = Some(IoLimits {
            tgid: FIO,
            cgroup: "blkio:/slow".into(),
            limits: vec![IoLimit {
                dev: DISK,
                kind: LimitKind::WriteIops,
                value,
                file: "/sys/fs/cgroup/blkio/slow/blkio.throttle.write_iops_device".into(),
            }],
            iocost: vec![],
            iolatency: vec![],
        });
    }

    /// The snapshots of `intervals` one-second intervals.
    fn run(&self, intervals: u64) -> Vec<Snapshot> {
        let mut model = Aggregator::new(Settings::default(), 0);
        model.apply(&Input::Sample(Box::new(KernelSample {
            kind: SampleKind::Baseline,
            ..KernelSample::default()
        })));
        let mut slots = vec![0u32; CALL_SLOTS];
        let (mut calls, mut sum_ns) = (0, 0);
        let mut snaps = Vec::new();
        for k in 0..intervals {
            let shift = k * SECOND;
            for io in &self.requests {
                let mut io = *io;
                io.created_ns += shift;
                io.issued_ns += shift;
                io.completed_ns += shift;
                model.apply(&Input::Block(io));
            }
            for &latency in &self.calls {
                slots[call_slot(latency) as usize] += 1;
                calls += 1;
                sum_ns += latency;
            }
            let disks = crate::fixtures::disk_totals_of(&self.requests)
                .into_iter()
                .map(|mut d| {
                    for n in d.requests.iter_mut().chain(d.bytes.iter_mut()) {
                        *n *= k + 1;
                    }
                    d
                })
                .collect();
            snaps.push(
                model.tick(&KernelSample {
                    kind: SampleKind::Interval,
                    now_ns: shift + SECOND,
                    disks,
                    names: vec![(DISK, "loop0".into())],
                    page_size: 4096,
                    dio_calls: if self.calls.is_empty() {
                        vec![]
                    } else {
                        vec![DioCallTotals {
                            tgid: FIO,
                            comm: "fio".into(),
                            fs_dev: DISK,
                            disk: DISK,
                            calls,
                            sum_ns,
                            slots: slots.clone(),
                        }]
                    },
                    io_limits: self.limits.iter().cloned().collect(),
                    dirty_pauses: self
                        .pauses
                        .map(|(n, ms)| DirtyPauseTotals {
                            tgid: DD,
                            comm: "dd".into(),
                            pauses: n * (k + 1),
                            pause_ms: ms * (k + 1),
                            limit_pages: 2048,
                            dirty_pages: 2100,
                            wb_dirty_pages: 2050,
                            bdi: "7:0".into(),
                        })
                        .into_iter()
                        .chain(self.other_writers.iter().map(|w| DirtyPauseTotals {
                            pauses: w.pauses * (k + 1),
                            pause_ms: w.pause_ms * (k + 1),
                            ..w.clone()
                        }))
                        .collect(),
                    dirty_settings: self.settings,
                    ..KernelSample::default()
                }),
            );
        }
        snaps
    }
}

fn of_kind(snap: &Snapshot, kind: FindingKind) -> Vec<&Finding> {
    snap.findings
        .iter()
        .filter(|f| f.active && f.kind == kind)
        .collect()
}

/// blk-throttle at 800 IOPS: most calls pass at once (as fast as their requests), a few wait
/// for the next slice, tens of ms, and their requests are fast when released.
fn throttled() -> Second {
    let mut s = Second::default();
    s.calls(780, 60 * US, 55 * US);
    for _ in 0..20 {
        s.calls.push(60 * MS);
    }
    s
}

#[test]
fn calls_held_before_their_requests_name_the_throttle_and_its_limit() {
    let mut s = throttled();
    s.write_iops_limit(800);
    let snap = s.run(1).pop().unwrap();
    let fio = snap.procs.iter().find(|p| p.tgid == FIO).unwrap();
    let calls = &fio.interval.waits.calls;
    assert_eq!(calls.latency.count, 800);
    assert!(
        calls.latency.p99_ns.abs_diff(60 * MS) * 8 <= 60 * MS,
        "call p99 {} near 60 ms",
        calls.latency.p99_ns
    );
    assert!(fio.interval.latency.p99_ns < 100 * US, "requests stay fast");
    // 20 calls of ~60 ms beyond a ~55 us request p99.
    assert!(
        (1_050 * MS..1_300 * MS).contains(&calls.prequeue_ns),
        "{}",
        calls.prequeue_ns
    );
    assert!(calls.prequeue_share() > 0.9, "{}", calls.prequeue_share());
    let found = of_kind(&snap, FindingKind::IoThrottled);
    assert_eq!(found.len(), 1, "{:#?}", snap.findings);
    let f = found[0];
    assert_eq!(f.severity, Severity::Warning, "the median call is not held");
    assert_eq!((f.tgid, f.dev), (Some(FIO), Some(DISK)));
    assert!(
        f.summary.contains("blkio:/slow")
            && f.summary
                .contains("blkio.throttle.write_iops_device 7:0 800"),
        "{}",
        f.summary
    );
    assert_eq!(evidence(f, "limit_value"), &Evidence::Count(800));
    assert_eq!(
        evidence(f, "request_reference"),
        &Evidence::Text("own".into())
    );
    assert!(
        f.fix.contains("blkio.throttle.write_iops_device"),
        "{}",
        f.fix
    );
}

#[test]
fn when_every_call_is_held_it_is_critical() {
    let mut s = Second::default();
    s.calls(100, 10 * MS, 60 * US);
    s.write_iops_limit(100);
    let snap = s.run(1).pop().unwrap();
    let found = of_kind(&snap, FindingKind::IoThrottled);
    assert_eq!(found[0].severity, Severity::Critical);
}

#[test]
fn without_a_limit_found_the_wait_is_only_info() {
    let s = throttled();
    let snaps = s.run(3);
    // INFO findings are listed once they persist.
    let found = of_kind(&snaps[2], FindingKind::IoThrottled);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].severity, Severity::Info);
    assert!(
        found[0].summary.contains("no blkio/io.max limit"),
        "{}",
        found[0].summary
    );
}

#[test]
fn a_process_whose_requests_were_all_released_by_a_kworker_is_compared_with_its_disk() {
    let mut s = Second::default();
    // blk-throttle dispatched every request from a kworker: none is the caller's.
    for i in 0..100 {
        s.calls.push(if i % 4 == 0 { 40 * MS } else { 200 * US });
        s.request(55, "kworker/u8:1", i * 10 * MS, 150 * US);
    }
    s.write_iops_limit(100);
    let snap = s.run(1).pop().unwrap();
    let fio = snap
        .procs
        .iter()
        .find(|p| p.tgid == FIO)
        .expect("a row from its calls");
    assert_eq!(fio.comm, "fio");
    assert_eq!(fio.interval.ios(), 0);
    let found = of_kind(&snap, FindingKind::IoThrottled);
    assert_eq!(found.len(), 1, "{:#?}", snap.findings);
    assert_eq!(
        evidence(found[0], "request_reference"),
        &Evidence::Text("disk".into())
    );
}

#[test]
fn calls_as_slow_as_their_requests_are_healthy() {
    // Unthrottled libaio: calls take what their requests take, a slow tail included.
    let mut s = Second::default();
    s.calls(980, 80 * US, 75 * US);
    s.calls(20, 12 * MS, 11 * MS);
    s.write_iops_limit(100_000);
    let snap = s.run(1).pop().unwrap();
    let fio = snap.procs.iter().find(|p| p.tgid == FIO).unwrap();
    assert!(fio.interval.waits.calls.prequeue_share() < 0.25);
    assert!(of_kind(&snap, FindingKind::IoThrottled).is_empty());
}

#[test]
fn a_large_call_split_into_queued_requests_is_not_throttling() {
    // 1 MiB calls split into 8 requests queued behind each other: a call lasts as long as its
    // slowest request.
    let mut s = Second::default();
    for i in 0..50u64 {
        s.calls.push(16 * MS);
        for r in 1..=8 {
            s.request(FIO, "fio", i * 20 * MS, r * 2 * MS);
        }
    }
    s.write_iops_limit(1_000);
    let snap = s.run(1).pop().unwrap();
    assert!(of_kind(&snap, FindingKind::IoThrottled).is_empty());
}

#[test]
fn one_slow_call_is_not_a_pattern() {
    let mut s = Second::default();
    s.calls(999, 60 * US, 55 * US);
    s.calls.push(200 * MS);
    s.write_iops_limit(800);
    let snap = s.run(1).pop().unwrap();
    assert!(of_kind(&snap, FindingKind::IoThrottled).is_empty());
}

#[test]
fn a_writer_paused_most_of_the_time_names_the_dirty_limits_and_the_device() {
    let mut s = Second::default();
    for i in 0..100 {
        s.request(66, "kworker/u8:2", i * 10 * MS, 2 * MS);
    }
    s.pauses = Some((40, 800));
    s.settings = Some(DirtySettings {
        dirty_bytes: 8 << 20,
        dirty_ratio: 0,
        background_bytes: 4 << 20,
        background_ratio: 0,
    });
    let snap = s.run(1).pop().unwrap();
    let dd = snap
        .procs
        .iter()
        .find(|p| p.tgid == DD)
        .expect("a row from its pauses");
    assert_eq!(
        (
            dd.interval.waits.dirty.pauses,
            dd.interval.waits.dirty.pause_ns
        ),
        (40, 800 * MS)
    );
    let found = of_kind(&snap, FindingKind::DirtyThrottled);
    assert_eq!(found.len(), 1, "{:#?}", snap.findings);
    let f = found[0];
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.dev, Some(DISK));
    for text in [
        "vm.dirty_bytes = 8 MiB",
        "vm.dirty_background_bytes = 4 MiB",
        "loop0",
        "80%",
        "8 MiB",
    ] {
        assert!(f.summary.contains(text), "{text} in {}", f.summary);
    }
    assert_eq!(evidence(f, "pause_ms"), &Evidence::Count(800));
    assert_eq!(
        evidence(f, "device_write_bytes_per_s"),
        &Evidence::Count(100 * 4096)
    );
}

#[test]
fn paused_nearly_all_the_time_is_critical_and_ratios_are_named() {
    let s = Second {
        pauses: Some((50, 950)),
        settings: Some(DirtySettings {
            dirty_bytes: 0,
            dirty_ratio: 20,
            background_bytes: 0,
            background_ratio: 10,
        }),
        ..Second::default()
    };
    let snap = s.run(1).pop().unwrap();
    let found = of_kind(&snap, FindingKind::DirtyThrottled);
    assert_eq!(found[0].severity, Severity::Critical);
    assert!(
        found[0].summary.contains("vm.dirty_ratio = 20%")
            && found[0].summary.contains("vm.dirty_background_ratio = 10%"),
        "{}",
        found[0].summary
    );
}

#[test]
fn short_pauses_are_write_back_doing_its_job() {
    let s = Second {
        pauses: Some((10, 200)),
        ..Second::default()
    };
    let snaps = s.run(2);
    assert!(of_kind(&snaps[1], FindingKind::DirtyThrottled).is_empty());
    let dd = snaps[1].procs.iter().find(|p| p.tgid == DD).unwrap();
    assert_eq!(
        dd.total().waits.dirty.pause_ns,
        400 * MS,
        "summed since start"
    );
}

#[test]
fn a_writer_to_another_device_is_told_which_device_holds_the_dirty_memory() {
    // Dirty limits are global: a compiler writing to vda (nearly nothing dirty there) is
    // paused because loop0's write-back holds the dirty memory.
    let mut s = Second {
        pauses: Some((40, 800)),
        settings: Some(DirtySettings {
            dirty_bytes: 8 << 20,
            dirty_ratio: 0,
            background_bytes: 4 << 20,
            background_ratio: 0,
        }),
        other_writers: vec![DirtyPauseTotals {
            tgid: 999,
            comm: "rustc".into(),
            pauses: 30,
            pause_ms: 700,
            limit_pages: 2048,
            dirty_pages: 2100,
            wb_dirty_pages: 3,
            bdi: "254:0".into(),
        }],
        ..Second::default()
    };
    for i in 0..100 {
        s.request(66, "kworker/u8:2", i * 10 * MS, 2 * MS);
    }
    let snap = s.run(1).pop().unwrap();
    let found = of_kind(&snap, FindingKind::DirtyThrottled);
    let rustc = found
        .iter()
        .find(|f| f.tgid == Some(999))
        .expect("rustc's pauses dominate its time too");
    assert_eq!(rustc.dev, Some(DISK), "{}", rustc.summary);
    assert!(
        rustc.summary.contains("loop0") && rustc.summary.contains("its own device 254:0"),
        "{}",
        rustc.summary
    );
    assert_eq!(evidence(rustc, "own_bdi"), &Evidence::Text("254:0".into()));
    let dd = found.iter().find(|f| f.tgid == Some(DD)).unwrap();
    assert!(!dd.summary.contains("its own device"), "{}", dd.summary);
}
