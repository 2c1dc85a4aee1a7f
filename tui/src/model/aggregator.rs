//! Folding events and kernel samples into per-process and per-disk state.

use std::collections::{BTreeMap, HashMap, VecDeque};

use iotop_bpf_common::block::{OP_COUNT, OP_DISCARD, OP_FLUSH, OP_OTHER, OP_READ, OP_WRITE};

use super::{
    BlockIo, Comm, DStateEpisode, Dev, DioCall, DiskStat, DiskTotals, KernelCounters, KernelSample,
    Op, SyncCall,
    blame::{Blame, Charge},
    dstate::DStateBook,
    findings::{self, FindingBook},
    hist::{LatencyHist, Log2Hist},
    patterns::PatternStats,
    snapshot::{
        DiskFigures, DiskRow, EventStats, Latency, ProcDeviceRow, ProcFigures, ProcRow, Snapshot,
        SyncCallRow,
    },
    sync::SyncStats,
};

/// Knobs of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// A process without I/O for this long is forgotten (its totals too).
    pub forget_after_ns: u64,
    /// At most this many processes are kept; the longest idle go first.
    pub max_procs: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            forget_after_ns: 10 * 60 * 1_000_000_000,
            max_procs: 4_096,
        }
    }
}

const fn op_index(op: Op) -> usize {
    match op {
        Op::Read => OP_READ as usize,
        Op::Write => OP_WRITE as usize,
        Op::Flush => OP_FLUSH as usize,
        Op::Discard => OP_DISCARD as usize,
        Op::Other => OP_OTHER as usize,
    }
}

/// Requests and bytes per op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct OpCounts {
    requests: [u64; OP_COUNT],
    bytes: [u64; OP_COUNT],
}

impl OpCounts {
    fn add(&mut self, io: &BlockIo) {
        let op = op_index(io.op);
        self.requests[op] += 1;
        self.bytes[op] += u64::from(io.bytes);
    }
    fn merge(&mut self, other: &Self) {
        for op in 0..OP_COUNT {
            self.requests[op] += other.requests[op];
            self.bytes[op] += other.bytes[op];
        }
    }
    fn others(&self) -> u64 {
        self.requests[OP_FLUSH as usize]
            + self.requests[OP_DISCARD as usize]
            + self.requests[OP_OTHER as usize]
    }
}

/// Latency distributions of a set of requests.
#[derive(Clone, Debug, Default)]
struct Latencies {
    total: LatencyHist,
    queue: LatencyHist,
    device: LatencyHist,
}

impl Latencies {
    fn add(&mut self, io: &BlockIo) {
        self.total.record(io.latency_ns());
        self.queue.record(io.queue_ns());
        self.device.record(io.device_ns());
    }
    fn merge(&mut self, other: &Self) {
        self.total.merge(&other.total);
        self.queue.merge(&other.queue);
        self.device.merge(&other.device);
    }
    fn clear(&mut self) {
        self.total.clear();
        self.queue.clear();
        self.device.clear();
    }
}

#[derive(Clone, Debug, Default)]
struct ProcPeriod {
    counts: OpCounts,
    latencies: Latencies,
    devices: BTreeMap<Dev, OpCounts>,
    sync: SyncStats,
    logical_bytes: u64,
    dstate_ns: u64,
    patterns: PatternStats,
}

impl ProcPeriod {
    fn add(&mut self, io: &BlockIo) {
        self.counts.add(io);
        self.latencies.add(io);
        self.devices.entry(io.dev).or_default().add(io);
    }
    fn merge(&mut self, other: &Self) {
        self.counts.merge(&other.counts);
        self.latencies.merge(&other.latencies);
        for (dev, counts) in &other.devices {
            self.devices.entry(*dev).or_default().merge(counts);
        }
        self.sync.merge(&other.sync);
        self.logical_bytes += other.logical_bytes;
        self.dstate_ns += other.dstate_ns;
        self.patterns.merge(&other.patterns);
    }
    fn clear(&mut self) {
        self.counts = OpCounts::default();
        self.latencies.clear();
        self.devices.clear();
        self.sync = SyncStats::default();
        self.logical_bytes = 0;
        self.dstate_ns = 0;
        self.patterns = PatternStats::default();
    }
    fn figures(&self) -> ProcFigures {
        let c = &self.counts;
        ProcFigures {
            reads: c.requests[OP_READ as usize],
            writes: c.requests[OP_WRITE as usize],
            others: c.others(),
            read_bytes: c.bytes[OP_READ as usize],
            write_bytes: c.bytes[OP_WRITE as usize],
            latency: Latency::of(&self.latencies.total),
            queue: Latency::of(&self.latencies.queue),
            device: Latency::of(&self.latencies.device),
            queue_hist: self.latencies.queue.log2(),
            device_hist: self.latencies.device.log2(),
            total_hist: self.latencies.total.log2(),
            logical_write_bytes: self.logical_bytes,
            sync: self.sync.figures(),
            dstate_ns: self.dstate_ns,
            write_sizes: self.patterns.write_sizes(),
            read_sizes: self.patterns.read_sizes(),
            sequential: self.patterns.sequential(),
            block_finishing_writes: self.patterns.block_finishing_writes(),
            dio: self.patterns.dio_figures(),
        }
    }
}

#[derive(Clone, Debug)]
struct ProcState {
    comm: Comm,
    last_seen_ns: u64,
    interval: ProcPeriod,
    total: ProcPeriod,
    /// Newest last.
    recent_syncs: VecDeque<SyncCall>,
    /// Where its previous request to each disk ended (sector), for sequentiality.
    next_sector: HashMap<Dev, u64>,
}

impl ProcState {
    fn new(comm: Comm, seen_ns: u64) -> Self {
        Self {
            comm,
            last_seen_ns: seen_ns,
            interval: ProcPeriod::default(),
            total: ProcPeriod::default(),
            recent_syncs: VecDeque::new(),
            next_sector: HashMap::new(),
        }
    }

    fn seen(&mut self, comm: Comm, at_ns: u64) {
        self.comm = comm;
        self.last_seen_ns = self.last_seen_ns.max(at_ns);
    }
}

/// Sync calls kept per process for the drill-down.
const RECENT_SYNCS: usize = 32;

/// Per-disk state: percentiles from the records; counts come from the kernel totals.
#[derive(Clone, Debug, Default)]
struct DiskState {
    interval: Latencies,
    total: Latencies,
}

/// The aggregator. Feed it with [`Aggregator::ingest`]; close an interval with
/// [`Aggregator::tick`], which returns the [`Snapshot`] of that interval.
#[derive(Debug)]
pub struct Aggregator {
    settings: Settings,
    start_ns: u64,
    last_tick_ns: u64,
    seq: u64,
    procs: HashMap<u32, ProcState>,
    disks: HashMap<Dev, DiskState>,
    prev_totals: HashMap<Dev, DiskTotals>,
    prev_diskstats: HashMap<Dev, DiskStat>,
    busy_total_ms: HashMap<Dev, u64>,
    prev_counters: KernelCounters,
    received: u64,
    received_total: u64,
    bad: u64,
    bad_total: u64,
    blame: Blame,
    prev_logical: HashMap<u32, u64>,
    findings: FindingBook,
    dstate: DStateBook,
}

impl Aggregator {
    /// `start_ns` is when the probes were attached (`CLOCK_MONOTONIC`).
    pub fn new(settings: Settings, start_ns: u64) -> Self {
        Self {
            settings,
            start_ns,
            last_tick_ns: start_ns,
            seq: 0,
            procs: HashMap::new(),
            disks: HashMap::new(),
            prev_totals: HashMap::new(),
            prev_diskstats: HashMap::new(),
            busy_total_ms: HashMap::new(),
            prev_counters: KernelCounters::default(),
            received: 0,
            received_total: 0,
            bad: 0,
            bad_total: 0,
            blame: Blame::default(),
            prev_logical: HashMap::new(),
            findings: FindingBook::default(),
            dstate: DStateBook::default(),
        }
    }

    pub fn ingest(&mut self, io: &BlockIo) {
        self.received += 1;
        let proc = self
            .procs
            .entry(io.tgid)
            .or_insert_with(|| ProcState::new(io.comm, io.completed_ns));
        proc.seen(io.comm, io.completed_ns);
        proc.interval.add(io);
        let end = io.sector + u64::from(io.bytes / 512);
        let sequential = proc.next_sector.insert(io.dev, end) == Some(io.sector);
        proc.interval.patterns.add_request(io, sequential);
        if io.in_sync() && io.op == Op::Write {
            proc.interval.sync.add_in_sync_write(u64::from(io.bytes));
        }
        self.disks.entry(io.dev).or_default().interval.add(io);
        self.blame.note_write(io);
    }

    pub fn ingest_sync(&mut self, call: &SyncCall) {
        self.received += 1;
        let proc = self
            .procs
            .entry(call.tgid)
            .or_insert_with(|| ProcState::new(call.comm, call.end_ns));
        proc.seen(call.comm, call.end_ns);
        proc.interval.sync.add_call(call);
        if proc.recent_syncs.len() == RECENT_SYNCS {
            proc.recent_syncs.pop_front();
        }
        proc.recent_syncs.push_back(call.clone());
        self.blame.note_sync(call);
    }

    /// A direct I/O call that is not 4 KiB-aligned.
    pub fn ingest_dio(&mut self, call: &DioCall) {
        self.received += 1;
        let proc = self
            .procs
            .entry(call.tgid)
            .or_insert_with(|| ProcState::new(call.comm, call.ts_ns));
        proc.seen(call.comm, call.ts_ns);
        proc.interval.patterns.add_dio(call);
    }

    /// A finished D-state episode (over the probes' streaming threshold).
    pub fn ingest_dstate(&mut self, episode: &DStateEpisode) {
        self.received += 1;
        self.dstate.note_finished(episode);
    }

    /// Charges every kernel-thread write still waiting for its grace period, so that a last
    /// report before exiting includes them.
    pub fn settle_all(&mut self, now_ns: u64) {
        let charges = self.blame.settle(now_ns, true);
        self.apply_charges(&charges);
    }

    fn apply_charges(&mut self, charges: &[Charge]) {
        for charge in charges {
            if let Some(to) = self.procs.get_mut(&charge.to_tgid) {
                to.interval.sync.add_charge_received(charge);
            }
            if let Some(from) = self.procs.get_mut(&charge.from_tgid) {
                from.interval.sync.add_charge_given(charge);
            }
        }
    }

    /// Time in D of this interval. A process that spent at least a millisecond in D gets a
    /// row even without I/O (a task stuck in vfork does no I/O).
    fn take_dstate_time(&mut self, sample: &KernelSample) {
        let time = self.dstate.interval_time(
            sample.now_ns,
            self.last_tick_ns,
            &sample.dstate_time,
            &sample.dstate_now,
        );
        for (tgid, ns) in time {
            let comm = sample
                .dstate_now
                .iter()
                .find(|d| d.tgid == tgid)
                .map(|d| Comm::new(&d.comm));
            let proc = match (self.procs.get_mut(&tgid), comm) {
                (Some(proc), _) => proc,
                (None, Some(comm)) if ns >= 1_000_000 => self
                    .procs
                    .entry(tgid)
                    .or_insert_with(|| ProcState::new(comm, sample.now_ns)),
                _ => continue,
            };
            proc.interval.dstate_ns += ns;
            if ns > 0 {
                proc.last_seen_ns = proc.last_seen_ns.max(sample.now_ns);
            }
        }
    }

    /// Logical write bytes of this interval, from the kernel's cumulative per-process sums.
    fn take_logical_writes(&mut self, sample: &KernelSample) {
        for &(tgid, total) in &sample.logical_writes {
            let before = self.prev_logical.insert(tgid, total).unwrap_or(0);
            if let Some(proc) = self.procs.get_mut(&tgid) {
                proc.interval.logical_bytes += total.saturating_sub(before);
            }
        }
    }

    /// A record that could not be decoded.
    pub fn note_bad_record(&mut self) {
        self.bad += 1;
    }

    /// Closes the interval ending at `sample.now_ns` and returns its snapshot.
    pub fn tick(&mut self, sample: &KernelSample) -> Snapshot {
        self.seq += 1;
        let charges = self.blame.settle(sample.now_ns, false);
        self.apply_charges(&charges);
        self.take_logical_writes(sample);
        self.take_dstate_time(sample);
        let interval_ns = sample.now_ns.saturating_sub(self.last_tick_ns);
        self.last_tick_ns = sample.now_ns;
        self.received_total += self.received;
        self.bad_total += self.bad;

        let events = EventStats {
            received: self.received,
            dropped: sample
                .counters
                .ring_dropped
                .saturating_sub(self.prev_counters.ring_dropped),
            bad: self.bad,
            received_total: self.received_total,
            dropped_total: sample.counters.ring_dropped,
            bad_total: self.bad_total,
            unpaired_total: sample.counters.complete_without_start,
        };
        self.prev_counters = sample.counters;
        self.received = 0;
        self.bad = 0;

        let names: HashMap<Dev, &str> = sample
            .names
            .iter()
            .map(|(dev, name)| (*dev, name.as_str()))
            .collect();
        let name_of = |dev: Dev| {
            names
                .get(&dev)
                .map_or_else(|| dev.to_string(), |n| (*n).to_string())
        };

        let disks = self.disk_rows(sample, interval_ns, &name_of);
        let procs = self.proc_rows(&name_of);
        self.forget_idle(sample.now_ns);

        let mut snap = Snapshot {
            seq: self.seq,
            now_ns: sample.now_ns,
            interval_ns,
            elapsed_ns: sample.now_ns.saturating_sub(self.start_ns),
            events,
            disks,
            procs,
            findings: Vec::new(),
            dstate: self.dstate.tasks(sample.now_ns, &sample.dstate_now),
            dstate_recent: self.dstate.longest_recent(sample.now_ns),
        };
        snap.findings = self.findings.update(sample.now_ns, findings::detect(&snap));
        snap
    }

    fn disk_rows(
        &mut self,
        sample: &KernelSample,
        interval_ns: u64,
        name_of: &impl Fn(Dev) -> String,
    ) -> Vec<DiskRow> {
        let elapsed_ns = sample.now_ns.saturating_sub(self.start_ns);
        // Busy time in this interval; a disk seen for the first time counts from now.
        let busy_ms: HashMap<Dev, u64> = sample
            .diskstats
            .iter()
            .map(|stat| {
                let before = self
                    .prev_diskstats
                    .get(&stat.dev)
                    .map_or(stat.io_ticks_ms, |s| s.io_ticks_ms);
                (stat.dev, stat.io_ticks_ms.saturating_sub(before))
            })
            .collect();
        for (dev, busy) in &busy_ms {
            *self.busy_total_ms.entry(*dev).or_default() += busy;
        }
        let mut rows: Vec<DiskRow> = sample
            .disks
            .iter()
            .map(|now| {
                let zero = DiskTotals {
                    dev: now.dev,
                    ..DiskTotals::default()
                };
                let before = self.prev_totals.get(&now.dev).unwrap_or(&zero);
                let state = self.disks.entry(now.dev).or_default();
                state.total.merge(&state.interval);
                let interval_busy = busy_ms.get(&now.dev).copied();
                let total_busy = self.busy_total_ms.get(&now.dev).copied();
                let row = DiskRow {
                    dev: now.dev,
                    name: name_of(now.dev),
                    interval: disk_figures(
                        &delta(now, before),
                        &state.interval,
                        interval_ns,
                        interval_busy,
                    ),
                    total: disk_figures(&delta(now, &zero), &state.total, elapsed_ns, total_busy),
                };
                state.interval.clear();
                row
            })
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        self.prev_totals = sample.disks.iter().map(|t| (t.dev, t.clone())).collect();
        self.prev_diskstats = sample.diskstats.iter().map(|s| (s.dev, *s)).collect();
        rows
    }

    fn proc_rows(&mut self, name_of: &impl Fn(Dev) -> String) -> Vec<ProcRow> {
        let mut rows: Vec<ProcRow> = self
            .procs
            .iter_mut()
            .map(|(&tgid, state)| {
                state.total.merge(&state.interval);
                let devices = state
                    .interval
                    .devices
                    .iter()
                    .map(|(&dev, c)| ProcDeviceRow {
                        dev,
                        name: name_of(dev),
                        reads: c.requests[OP_READ as usize],
                        writes: c.requests[OP_WRITE as usize],
                        others: c.others(),
                        read_bytes: c.bytes[OP_READ as usize],
                        write_bytes: c.bytes[OP_WRITE as usize],
                    })
                    .collect();
                let row = ProcRow {
                    tgid,
                    comm: state.comm.to_string(),
                    interval: state.interval.figures(),
                    total: state.total.figures(),
                    devices,
                    recent_syncs: state
                        .recent_syncs
                        .iter()
                        .rev()
                        .map(|call| SyncCallRow {
                            kind: call.kind.name(),
                            fd: call.fd,
                            file: call.file.to_string(),
                            latency_ns: call.latency_ns(),
                            ret: call.ret,
                            end_ns: call.end_ns,
                            window_bytes: call.window_bytes,
                        })
                        .collect(),
                };
                state.interval.clear();
                row
            })
            .collect();
        rows.sort_by_key(|row| row.tgid);
        rows
    }

    fn forget_idle(&mut self, now_ns: u64) {
        let forget_after = self.settings.forget_after_ns;
        self.procs
            .retain(|_, p| now_ns.saturating_sub(p.last_seen_ns) < forget_after);
        if self.procs.len() > self.settings.max_procs {
            let mut by_age: Vec<(u64, u32)> = self
                .procs
                .iter()
                .map(|(&tgid, p)| (p.last_seen_ns, tgid))
                .collect();
            by_age.sort_unstable();
            let excess = self.procs.len() - self.settings.max_procs;
            for (_, tgid) in by_age.into_iter().take(excess) {
                self.procs.remove(&tgid);
            }
        }
        let procs = &self.procs;
        self.prev_logical.retain(|tgid, _| procs.contains_key(tgid));
        self.dstate.forget(|tgid| procs.contains_key(&tgid));
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
    out.errors = now.errors.saturating_sub(before.errors);
    out.queue_ns = now.queue_ns.saturating_sub(before.queue_ns);
    out.device_ns = now.device_ns.saturating_sub(before.device_ns);
    out
}

#[expect(clippy::cast_precision_loss, reason = "display ratios")]
fn disk_figures(
    d: &DiskTotals,
    latencies: &Latencies,
    period_ns: u64,
    busy_ms: Option<u64>,
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
        queue_size: d.latency_ns.iter().sum::<u64>() as f64 / period,
        util_pct: busy_ms.map_or(0.0, |ms| (ms as f64 * 1e6 / period * 100.0).min(100.0)),
        total_hist: Log2Hist {
            slots: d.total_hist,
        },
        queue_hist: Log2Hist {
            slots: d.queue_hist,
        },
        device_hist: Log2Hist {
            slots: d.device_hist,
        },
        latency: Latency::of(&latencies.total),
        queue: Latency::of(&latencies.queue),
        device: Latency::of(&latencies.device),
    }
}
