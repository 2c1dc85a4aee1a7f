//! Aggregation mode: the same requests streamed and summed in the kernel give the same
//! figures (the model's `summed.rs`).

use iotop_bpf_common::{
    aggregate::{SIZE_SLOTS, size_slot},
    hist::{SLOTS, log2_slot},
    throttle::{CALL_SLOTS, call_slot},
};

use crate::{
    Aggregator, BlockIo, Comm, Dev, KernelSample, Op, ProcDiskTotals, Settings,
    fixtures::disk_totals_of,
};

const US: u64 = 1_000;
const LOOP0: Dev = Dev::new(7, 0);

/// 6,400 reads of fio: 4 KiB, sequential in runs, 20-120 us; and 100 writes of 64 KiB.
fn fio_requests() -> Vec<BlockIo> {
    (0..6_500u64)
        .map(|i| {
            let write = i >= 6_400;
            let (queue, device) = (2 * US + i % 7 * US, 18 * US + i % 101 * US);
            let at = i * 200 * US;
            BlockIo {
                dev: LOOP0,
                sector: if i % 4 == 0 {
                    i * 1000
                } else {
                    (i - 1) * 1000 + 8
                },
                bytes: if write { 65_536 } else { 4096 },
                op: if write { Op::Write } else { Op::Read },
                flags: 0,
                tgid: 42,
                tid: 42,
                comm: Comm::new("fio"),
                created_ns: at,
                issued_ns: at + queue,
                completed_ns: at + queue + device,
                error: 0,
                kernel_thread: false,
                cgroup: 0,
                dirtier: None,
                file: None,
            }
        })
        .collect()
}

/// What the probes would have summed of `requests`.
fn summed_in_kernel(requests: &[BlockIo]) -> ProcDiskTotals {
    let mut total = vec![0u64; CALL_SLOTS];
    let (mut queue, mut device) = ([0u64; SLOTS], [0u64; SLOTS]);
    let mut sizes = [[0u64; SIZE_SLOTS]; 2];
    let mut t = ProcDiskTotals {
        tgid: 42,
        dev: LOOP0,
        comm: Comm::new("fio"),
        ..ProcDiskTotals::default()
    };
    for io in requests {
        let op = usize::from(io.op == Op::Write);
        t.requests[op] += 1;
        t.bytes[op] += u64::from(io.bytes);
        total[call_slot(io.latency_ns()) as usize] += 1;
        queue[log2_slot(io.queue_ns()) as usize] += 1;
        device[log2_slot(io.device_ns()) as usize] += 1;
        sizes[op][size_slot(io.bytes)] += 1;
    }
    let sparse = |v: &[u64]| -> Vec<(u16, u64)> {
        v.iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (i as u16, *n))
            .collect()
    };
    (t.total, t.queue, t.device) = (sparse(&total), sparse(&queue), sparse(&device));
    (t.read_sizes, t.write_sizes) = (sparse(&sizes[0]), sparse(&sizes[1]));
    t
}

#[test]
fn summed_requests_count_as_the_streamed_ones_would() {
    let requests = fio_requests();
    let end = 1_400_000 * US;
    let sample = |proc_disks| KernelSample {
        now_ns: end,
        disks: disk_totals_of(&requests),
        names: vec![(LOOP0, "loop0".into())],
        proc_disks,
        aggregating: true,
        ..KernelSample::default()
    };
    let mut streaming = Aggregator::new(Settings::default(), 0);
    for io in &requests {
        streaming.ingest(io);
    }
    let streamed = streaming.tick(&sample(Vec::new()));
    // One in 64 streamed as the sample, the rest summed.
    let sampled: Vec<BlockIo> = requests.iter().skip(63).step_by(64).copied().collect();
    let rest: Vec<BlockIo> = requests
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 64 != 63)
        .map(|(_, io)| *io)
        .collect();
    let mut aggregating = Aggregator::new(Settings::default(), 0);
    aggregating.tick(&KernelSample {
        kind: crate::SampleKind::Baseline,
        ..KernelSample::default()
    });
    for io in &sampled {
        aggregating.ingest(io);
    }
    let summed = aggregating.tick(&sample(vec![summed_in_kernel(&rest)]));
    let a = &streamed
        .procs
        .iter()
        .find(|p| p.tgid == 42)
        .unwrap()
        .interval;
    let b = &summed.procs.iter().find(|p| p.tgid == 42).unwrap().interval;
    // Exact: counts and bytes.
    assert_eq!((a.reads, a.writes), (6_400, 100));
    assert_eq!(
        (a.reads, a.writes, a.read_bytes, a.write_bytes),
        (b.reads, b.writes, b.read_bytes, b.write_bytes)
    );
    assert_eq!(a.latency.count, b.latency.count);
    // Percentiles within the kernel slots' width: a quarter octave for the total.
    for (x, y) in [
        (a.latency.p50_ns, b.latency.p50_ns),
        (a.latency.p99_ns, b.latency.p99_ns),
    ] {
        let ratio = y as f64 / x as f64;
        assert!((0.8..1.25).contains(&ratio), "{x} vs {y}");
    }
    // Queue and device within an octave.
    for (x, y) in [
        (a.device.p50_ns, b.device.p50_ns),
        (a.queue.p50_ns, b.queue.p50_ns),
    ] {
        let ratio = y as f64 / x as f64;
        assert!((0.5..2.0).contains(&ratio), "{x} vs {y}");
    }
    // Sizes: powers of two stay exact.
    assert_eq!(a.read_sizes, b.read_sizes);
    assert_eq!(a.write_sizes, b.write_sizes);
    assert!(summed.events.aggregating);
}
