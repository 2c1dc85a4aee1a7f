//! The disk book: per-disk figures. Counts, bytes and log2 histograms are differences of the
//! kernel's exact cumulative totals; percentiles come from the per-request records; busy time
//! from /proc/diskstats. Every difference starts from the baseline taken when the probes
//! were attached, so the first interval is as right as any other.

use super::FastMap;
use iotop_bpf_common::block::{OP_DISCARD, OP_FLUSH, OP_OTHER, OP_READ, OP_WRITE};

use super::{
    BlockIo, Dev, DiskGeometry, DiskStat, DiskTotals, KernelSample, Latency, Log2Hist, Op,
    SizeHist,
    procs::Latencies,
    snapshot::{DiskFigures, DiskRow},
};

#[derive(Clone, Debug, Default)]
struct DiskState {
    interval: Latencies,
    total: Latencies,
    interval_sizes: RequestSizes,
    total_sizes: RequestSizes,
}

/// Sizes of a disk's read and write requests over a period.
#[derive(Clone, Copy, Debug, Default)]
struct RequestSizes {
    read: SizeHist,
    write: SizeHist,
}

impl RequestSizes {
    fn add(&mut self, io: &BlockIo) {
        match io.op {
            Op::Read => self.read.record(u64::from(io.bytes)),
            Op::Write => self.write.record(u64::from(io.bytes)),
            // Flushes carry no data; discards are ranges, not transfers.
            Op::Flush | Op::Discard | Op::Other => {}
        }
    }

    fn merge(&mut self, other: &Self) {
        self.read.merge(&other.read);
        self.write.merge(&other.write);
    }
}

#[derive(Debug, Default)]
pub(super) struct DiskBook {
    disks: FastMap<Dev, DiskState>,
    /// The kernel's totals at the previous sample (at the baseline for the first).
    prev_totals: FastMap<Dev, DiskTotals>,
    /// And at the baseline: totals since start are differences from these.
    start_totals: FastMap<Dev, DiskTotals>,
    prev_diskstats: FastMap<Dev, DiskStat>,
    diskstats_since_start: FastMap<Dev, DiskStatDelta>,
}

/// What /proc/diskstats counted over a period.
#[derive(Clone, Copy, Debug, Default)]
struct DiskStatDelta {
    busy_ms: u64,
    read_merges: u64,
    write_merges: u64,
}

impl DiskStatDelta {
    fn between(now: &DiskStat, before: &DiskStat) -> Self {
        Self {
            busy_ms: now.io_ticks_ms.saturating_sub(before.io_ticks_ms),
            read_merges: now.read_merges.saturating_sub(before.read_merges),
            write_merges: now.write_merges.saturating_sub(before.write_merges),
        }
    }

    fn add(&mut self, other: &Self) {
        self.busy_ms += other.busy_ms;
        self.read_merges += other.read_merges;
        self.write_merges += other.write_merges;
    }
}

impl DiskBook {
    pub(super) fn block(&mut self, io: &BlockIo) {
        let state = self.disks.entry(io.dev).or_default();
        state.interval.add(io);
        state.interval_sizes.add(io);
    }

    /// Requests the probes summed (aggregation mode): counts come from the kernel's disk
    /// totals as always; percentiles and sizes from these.
    pub(super) fn summed(&mut self, sums: &super::ProcDiskTotals) {
        let state = self.disks.entry(sums.dev).or_default();
        state.interval.add_summed(sums);
        for (bytes, n) in sums.read_request_sizes() {
            state.interval_sizes.read.record_n(bytes, n);
        }
        for (bytes, n) in sums.write_request_sizes() {
            state.interval_sizes.write.record_n(bytes, n);
        }
    }

    /// The counters as they were when the probes were attached.
    pub(super) fn baseline(&mut self, sample: &KernelSample) {
        self.prev_totals = sample.disks.iter().map(|t| (t.dev, t.clone())).collect();
        self.start_totals = self.prev_totals.clone();
        self.prev_diskstats = sample.diskstats.iter().map(|s| (s.dev, *s)).collect();
    }

    /// Closes the interval of `interval_ns` ending at `sample`; rows sorted by name.
    pub(super) fn close(
        &mut self,
        sample: &KernelSample,
        interval_ns: u64,
        elapsed_ns: u64,
        name_of: &impl Fn(Dev) -> String,
    ) -> Vec<DiskRow> {
        // Busy time and merges in this interval; a disk seen for the first time counts
        // from now.
        let diskstats: FastMap<Dev, DiskStatDelta> = sample
            .diskstats
            .iter()
            .map(|stat| {
                let before = self.prev_diskstats.get(&stat.dev).unwrap_or(stat);
                (stat.dev, DiskStatDelta::between(stat, before))
            })
            .collect();
        for (dev, delta) in &diskstats {
            self.diskstats_since_start
                .entry(*dev)
                .or_default()
                .add(delta);
        }
        let geometry: FastMap<Dev, DiskGeometry> =
            sample.geometry.iter().map(|g| (g.dev, *g)).collect();
        let mut rows: Vec<DiskRow> = sample
            .disks
            .iter()
            .map(|now| {
                let zero = DiskTotals {
                    dev: now.dev,
                    ..DiskTotals::default()
                };
                let before = self.prev_totals.get(&now.dev).unwrap_or(&zero);
                let start = self.start_totals.get(&now.dev).unwrap_or(&zero);
                let state = self.disks.entry(now.dev).or_default();
                state.total.merge(&state.interval);
                state.total_sizes.merge(&state.interval_sizes);
                let scheduler = sample
                    .schedulers
                    .iter()
                    .find(|(dev, _)| *dev == now.dev)
                    .map(|(_, name)| name.clone());
                let mut row = DiskRow {
                    dev: now.dev,
                    name: name_of(now.dev),
                    scheduler,
                    geometry: geometry.get(&now.dev).copied().unwrap_or_default(),
                    interval: figures(
                        &delta(now, before),
                        &state.interval,
                        &state.interval_sizes,
                        interval_ns,
                        diskstats.get(&now.dev).copied(),
                    ),
                    total: figures(
                        &delta(now, start),
                        &state.total,
                        &state.total_sizes,
                        elapsed_ns,
                        self.diskstats_since_start.get(&now.dev).copied(),
                    ),
                };
                if row.scheduler.is_none() {
                    // Without a scheduler the kernel still "inserts" requests (onto the
                    // dispatch list) while the split is on for another disk: no G2I / I2D.
                    for f in [&mut row.interval, &mut row.total] {
                        (f.inserted, f.g2i_sum_ns, f.i2d_sum_ns) = (0, 0, 0);
                    }
                }
                state.interval.clear();
                state.interval_sizes = RequestSizes::default();
                row
            })
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        self.prev_totals = sample.disks.iter().map(|t| (t.dev, t.clone())).collect();
        self.prev_diskstats = sample.diskstats.iter().map(|s| (s.dev, *s)).collect();
        rows
    }
}

/// `now - before`, field by field (kernel totals only grow; saturate if the map was reset).
fn delta(now: &DiskTotals, before: &DiskTotals) -> DiskTotals {
    let sub = |a: &[u64], b: &[u64], out: &mut [u64]| {
        for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
            *o = x.saturating_sub(*y);
        }
    };
    let mut out = DiskTotals {
        dev: now.dev,
        ..DiskTotals::default()
    };
    sub(&now.requests, &before.requests, &mut out.requests);
    sub(&now.bytes, &before.bytes, &mut out.bytes);
    sub(&now.latency_ns, &before.latency_ns, &mut out.latency_ns);
    sub(&now.total_hist, &before.total_hist, &mut out.total_hist);
    sub(&now.queue_hist, &before.queue_hist, &mut out.queue_hist);
    sub(&now.device_hist, &before.device_hist, &mut out.device_hist);
    out.inserted = now.inserted.saturating_sub(before.inserted);
    out.g2i_ns = now.g2i_ns.saturating_sub(before.g2i_ns);
    out.i2d_ns = now.i2d_ns.saturating_sub(before.i2d_ns);
    out.errors = now.errors.saturating_sub(before.errors);
    out.queue_ns = now.queue_ns.saturating_sub(before.queue_ns);
    out.device_ns = now.device_ns.saturating_sub(before.device_ns);
    out
}

#[expect(clippy::cast_precision_loss, reason = "display ratios")]
fn figures(
    d: &DiskTotals,
    latencies: &Latencies,
    sizes: &RequestSizes,
    period_ns: u64,
    diskstats: Option<DiskStatDelta>,
) -> DiskFigures {
    let reads = d.requests[OP_READ as usize];
    let writes = d.requests[OP_WRITE as usize];
    let period = period_ns.max(1) as f64;
    DiskFigures {
        reads,
        writes,
        flushes: d.requests[OP_FLUSH as usize],
        discards: d.requests[OP_DISCARD as usize],
        others: d.requests[OP_OTHER as usize],
        read_bytes: d.bytes[OP_READ as usize],
        write_bytes: d.bytes[OP_WRITE as usize],
        discard_bytes: d.bytes[OP_DISCARD as usize],
        errors: d.errors,
        read_await_ns: d.latency_ns[OP_READ as usize]
            .checked_div(reads)
            .unwrap_or(0),
        write_await_ns: d.latency_ns[OP_WRITE as usize]
            .checked_div(writes)
            .unwrap_or(0),
        flush_time_ns: d.latency_ns[OP_FLUSH as usize],
        queue_size: d.latency_ns.iter().sum::<u64>() as f64 / period,
        util_pct: diskstats.map_or(0.0, |d| {
            (d.busy_ms as f64 * 1e6 / period * 100.0).min(100.0)
        }),
        read_merges: diskstats.map_or(0, |d| d.read_merges),
        write_merges: diskstats.map_or(0, |d| d.write_merges),
        inserted: d.inserted,
        g2i_sum_ns: d.g2i_ns,
        i2d_sum_ns: d.i2d_ns,
        total_hist: Log2Hist {
            slots: d.total_hist,
        },
        queue_hist: Log2Hist {
            slots: d.queue_hist,
        },
        device_hist: Log2Hist {
            slots: d.device_hist,
        },
        latency_sum_ns: d.latency_ns.iter().sum(),
        queue_sum_ns: d.queue_ns,
        device_sum_ns: d.device_ns,
        read_size_hist: sizes.read,
        write_size_hist: sizes.write,
        latency: Latency::of(&latencies.total),
        queue: Latency::of(&latencies.queue),
        device: Latency::of(&latencies.device),
    }
}
