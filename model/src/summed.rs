//! Requests the probes summed per (process, disk) instead of streaming them (aggregation
//! mode, see `iotop_bpf_common::aggregate`): each sample carries the kernel's cumulative
//! sums, the model takes differences and adds them to the process's and the disk's figures,
//! as if it had seen those requests one by one, less what one record says that a sum
//! cannot: exact latencies (a slot's middle stands for them: quarter octaves for the total,
//! within ~12%, octaves for queue and device time) and exact sizes (a power of two: most
//! requests are one).

use serde::{Deserialize, Serialize};

use iotop_bpf_common::{
    aggregate::{SIZE_SLOTS, size_slot_low},
    hist::SLOTS,
    throttle::{CALL_SLOTS, call_slot_bounds_us},
};

use super::{Comm, Dev, FastMap};

/// One (process, disk)'s summed requests, cumulative since the probes were loaded (as the
/// kernel keeps them, summed over CPUs). Histograms are sparse: (slot, count), ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcDiskTotals {
    pub tgid: u32,
    pub dev: Dev,
    pub comm: Comm,
    /// Reads, writes.
    pub requests: [u64; 2],
    pub bytes: [u64; 2],
    pub queue_ns: u64,
    pub device_ns: u64,
    /// Requests that began where the process's previous one on the disk ended (per CPU).
    pub sequential: u64,
    /// Total time in quarter-octave slots (`iotop_bpf_common::throttle::call_slot`).
    pub total: Vec<(u16, u64)>,
    /// Queue and device time in log2 slots (`iotop_bpf_common::hist::log2_slot`).
    pub queue: Vec<(u16, u64)>,
    pub device: Vec<(u16, u64)>,
    /// Sizes of reads and of writes in `iotop_bpf_common::aggregate::size_slot` slots.
    pub read_sizes: Vec<(u16, u64)>,
    pub write_sizes: Vec<(u16, u64)>,
}

impl ProcDiskTotals {
    /// Requests summed, reads and writes.
    pub fn count(&self) -> u64 {
        self.requests[0] + self.requests[1]
    }

    /// `self - before`, field by field (sums only grow; saturating if the map was reset).
    fn since(&self, before: &Self) -> Self {
        let minus = |now: &[(u16, u64)], then: &[(u16, u64)]| -> Vec<(u16, u64)> {
            now.iter()
                .filter_map(|&(slot, n)| {
                    let old = then.iter().find(|(s, _)| *s == slot).map_or(0, |&(_, m)| m);
                    let d = n.saturating_sub(old);
                    (d > 0).then_some((slot, d))
                })
                .collect()
        };
        Self {
            tgid: self.tgid,
            dev: self.dev,
            comm: self.comm,
            requests: [
                self.requests[0].saturating_sub(before.requests[0]),
                self.requests[1].saturating_sub(before.requests[1]),
            ],
            bytes: [
                self.bytes[0].saturating_sub(before.bytes[0]),
                self.bytes[1].saturating_sub(before.bytes[1]),
            ],
            queue_ns: self.queue_ns.saturating_sub(before.queue_ns),
            device_ns: self.device_ns.saturating_sub(before.device_ns),
            sequential: self.sequential.saturating_sub(before.sequential),
            total: minus(&self.total, &before.total),
            queue: minus(&self.queue, &before.queue),
            device: minus(&self.device, &before.device),
            read_sizes: minus(&self.read_sizes, &before.read_sizes),
            write_sizes: minus(&self.write_sizes, &before.write_sizes),
        }
    }

    /// (latency ns, count) standing for the total times: each slot's middle.
    pub fn total_latencies(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.total
            .iter()
            .filter(|(slot, _)| usize::from(*slot) < CALL_SLOTS)
            .map(|&(slot, n)| {
                let (lo, hi) = call_slot_bounds_us(usize::from(slot));
                ((lo + hi) * 500, n)
            })
    }

    /// (ns, count) standing for the queue times, and for the device times.
    pub fn queue_latencies(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        log2_middles(&self.queue)
    }

    pub fn device_latencies(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        log2_middles(&self.device)
    }

    /// (bytes, count) standing for the sizes of reads, and of writes: each slot's power of two.
    pub fn read_request_sizes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        powers_of_two(&self.read_sizes)
    }

    pub fn write_request_sizes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        powers_of_two(&self.write_sizes)
    }
}

fn powers_of_two(slots: &[(u16, u64)]) -> impl Iterator<Item = (u64, u64)> + '_ {
    slots
        .iter()
        .filter(|(slot, _)| usize::from(*slot) < SIZE_SLOTS)
        .map(|&(slot, n)| (size_slot_low(usize::from(slot)), n))
}

/// Slot `i` of a log2 histogram is `[2^(i-1), 2^i)` us, slot 0 below 1 us: its middle.
fn log2_middles(slots: &[(u16, u64)]) -> impl Iterator<Item = (u64, u64)> + '_ {
    slots
        .iter()
        .filter(|(slot, _)| usize::from(*slot) < SLOTS)
        .map(|&(slot, n)| {
            let ns = if slot == 0 { 500 } else { 750 << slot };
            (ns, n)
        })
}

/// The previous sample's sums, to take differences from.
#[derive(Debug, Default)]
pub(super) struct SummedBook {
    prev: FastMap<(u32, Dev), ProcDiskTotals>,
}

impl SummedBook {
    /// The sums at the baseline: only what comes after counts.
    pub(super) fn baseline(&mut self, totals: &[ProcDiskTotals]) {
        self.prev = totals
            .iter()
            .map(|t| ((t.tgid, t.dev), t.clone()))
            .collect();
    }

    /// What was summed since the previous sample, per (process, disk) with any request. A key
    /// absent now was removed (its process exited after its last sample): forgotten.
    pub(super) fn deltas(&mut self, totals: &[ProcDiskTotals]) -> Vec<ProcDiskTotals> {
        let zero = ProcDiskTotals::default();
        let deltas = totals
            .iter()
            .map(|now| now.since(self.prev.get(&(now.tgid, now.dev)).unwrap_or(&zero)))
            .filter(|d| d.count() > 0)
            .collect();
        self.baseline(totals);
        deltas
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Aggregator, BlockIo, KernelSample, Op, Settings, fixtures::disk_totals_of};
    use iotop_bpf_common::{aggregate::size_slot, hist::log2_slot, throttle::call_slot};

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

    fn totals(reads: u64, slots: &[(u16, u64)]) -> ProcDiskTotals {
        ProcDiskTotals {
            tgid: 42,
            dev: Dev::new(7, 0),
            comm: Comm::new("fio"),
            requests: [reads, 0],
            bytes: [reads * 4096, 0],
            total: slots.to_vec(),
            read_sizes: vec![(4, reads)],
            ..ProcDiskTotals::default()
        }
    }

    #[test]
    fn differences_from_the_previous_sample_and_keys_that_left_are_forgotten() {
        let mut book = SummedBook::default();
        book.baseline(&[totals(10, &[(40, 10)])]);
        let d = book.deltas(&[totals(25, &[(40, 12), (41, 13)])]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].requests, [15, 0]);
        assert_eq!(d[0].bytes, [15 * 4096, 0]);
        assert_eq!(d[0].total, vec![(40, 2), (41, 13)]);
        assert_eq!(d[0].read_sizes, vec![(4, 15)]);
        assert!(
            book.deltas(&[totals(25, &[(40, 12), (41, 13)])]).is_empty(),
            "nothing new"
        );
        // The key was removed (its process exited): a new one under the same pid starts at 0.
        assert!(book.deltas(&[]).is_empty());
        let d = book.deltas(&[totals(3, &[(40, 3)])]);
        assert_eq!(d[0].requests, [3, 0]);
    }

    #[test]
    fn slots_stand_for_their_middles() {
        let t = ProcDiskTotals {
            queue: vec![(0, 1), (5, 2)],
            total: vec![(16, 1)],
            write_sizes: vec![(4, 7), (12, 1)],
            ..ProcDiskTotals::default()
        };
        assert_eq!(
            t.queue_latencies().collect::<Vec<_>>(),
            vec![(500, 1), (24_000, 2)]
        );
        // Quarter-octave slot 16: 32-40 us.
        let (lo, hi) = call_slot_bounds_us(16);
        assert_eq!(t.total_latencies().next(), Some(((lo + hi) * 500, 1)));
        assert!((lo * 1000..hi * 1000).contains(&((lo + hi) * 500)));
        assert_eq!(
            t.write_request_sizes().collect::<Vec<_>>(),
            vec![(4096, 7), (1 << 20, 1)]
        );
    }
}
