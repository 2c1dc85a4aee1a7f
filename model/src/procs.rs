//! The process book: per-process state, fed per request and per call, read once per interval,
//! and evicted soon after the process exits.

use super::FastMap;
use std::collections::{BTreeMap, VecDeque};

use iotop_bpf_common::block::{OP_COUNT, OP_DISCARD, OP_FLUSH, OP_OTHER, OP_READ, OP_WRITE};

use super::{
    BlockIo, Comm, Dev, DioCall, IoLimits, Op, ProcDiskTotals, ProcReadTotals, SyncCall,
    hist::Histogram,
    ledger::{Charge, SettledSync},
    patterns::{DioGeometry, PatternStats},
    snapshot::DirtyFigures,
    sync::{Commits, Parties, SyncPeriod},
    throttle::{CallDelta, CallHist, DirtyState, MIN_OWN_REQUESTS, PauseDelta},
};

mod reads;
mod rows;

pub(crate) use reads::FileNames;

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

pub(super) const fn op_index(op: Op) -> usize {
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
pub(super) struct OpCounts {
    requests: [u64; OP_COUNT],
    bytes: [u64; OP_COUNT],
    /// Writes with the FUA flag.
    fua_writes: u64,
    /// Time on the device, summed.
    device_ns: u64,
}

impl OpCounts {
    /// Summed reads and writes (aggregation mode).
    fn add_summed(&mut self, sums: &ProcDiskTotals) {
        for (op, i) in [(OP_READ, 0), (OP_WRITE, 1)] {
            let op = usize::from(op);
            self.requests[op] += sums.requests[i];
            self.bytes[op] = self.bytes[op].saturating_add(sums.bytes[i]);
        }
        self.device_ns = self.device_ns.saturating_add(sums.device_ns);
    }

    fn add(&mut self, io: &BlockIo) {
        let op = op_index(io.process_op());
        self.requests[op] += 1;
        self.bytes[op] = self.bytes[op].saturating_add(u64::from(io.bytes));
        if io.op == Op::Write && io.is_fua() {
            self.fua_writes += 1;
        }
        self.device_ns = self.device_ns.saturating_add(io.device_ns());
    }
    fn merge(&mut self, other: &Self) {
        for op in 0..OP_COUNT {
            self.requests[op] += other.requests[op];
            self.bytes[op] = self.bytes[op].saturating_add(other.bytes[op]);
        }
        self.fua_writes += other.fua_writes;
        self.device_ns = self.device_ns.saturating_add(other.device_ns);
    }
    fn others(&self) -> u64 {
        self.requests[OP_FLUSH as usize]
            + self.requests[OP_DISCARD as usize]
            + self.requests[OP_OTHER as usize]
    }
    fn flushes(&self) -> u64 {
        self.requests[OP_FLUSH as usize]
    }
}

/// Latency distributions of a set of requests.
#[derive(Clone, Debug, Default)]
pub(super) struct Latencies {
    pub(super) total: Histogram,
    pub(super) queue: Histogram,
    pub(super) device: Histogram,
}

impl Latencies {
    pub(super) fn add(&mut self, io: &BlockIo) {
        self.total.record(io.latency_ns());
        self.queue.record(io.queue_ns());
        self.device.record(io.device_ns());
    }

    /// Requests the probes summed: each slot's middle stands for its latencies.
    pub(super) fn add_summed(&mut self, sums: &ProcDiskTotals) {
        for (ns, n) in sums.total_latencies() {
            self.total.record_n(ns, n);
        }
        for (ns, n) in sums.queue_latencies() {
            self.queue.record_n(ns, n);
        }
        for (ns, n) in sums.device_latencies() {
            self.device.record_n(ns, n);
        }
    }
    pub(super) fn merge(&mut self, other: &Self) {
        self.total.merge(&other.total);
        self.queue.merge(&other.queue);
        self.device.merge(&other.device);
    }
    pub(super) fn clear(&mut self) {
        self.total.clear();
        self.queue.clear();
        self.device.clear();
    }
}

/// A process's I/O over one period: the interval, or since start.
#[derive(Clone, Debug, Default)]
struct ProcPeriod {
    counts: OpCounts,
    latencies: Latencies,
    devices: BTreeMap<Dev, OpCounts>,
    sync: SyncPeriod,
    logical_bytes: u64,
    dstate_ns: u64,
    patterns: PatternStats,
    writeback: WritebackPeriod,
    /// Direct I/O calls per disk (empty for a process without any).
    calls: Vec<CallPeriod>,
    dirty: DirtyFigures,
    reads: reads::ReadPeriod,
}

/// Write-back between dirtiers and flushers over a period: a flusher's request to write a
/// file's dirty pages is charged to the process that dirtied them (the probes know it).
#[derive(Clone, Debug, Default)]
struct WritebackPeriod {
    /// As a dirtier: the flushers that wrote its pages, and the bytes.
    written_by: Parties,
    /// As a flusher: whose pages it wrote, and the bytes.
    wrote_for: Parties,
}

impl WritebackPeriod {
    fn merge(&mut self, other: &Self) {
        self.written_by.merge(&other.written_by);
        self.wrote_for.merge(&other.wrote_for);
    }
}

/// A process's direct I/O calls on one disk over a period.
#[derive(Clone, Debug, Default)]
struct CallPeriod {
    disk: Dev,
    hist: CallHist,
    /// Set when an interval closes (see [`ProcState::judge_calls`]); summed since start.
    prequeue_ns: u64,
    request_p99_ns: u64,
    own_requests: bool,
}

impl ProcPeriod {
    fn add(&mut self, io: &BlockIo) {
        self.counts.add(io);
        self.latencies.add(io);
        self.devices.entry(io.dev).or_default().add(io);
    }

    fn add_summed(&mut self, sums: &ProcDiskTotals) {
        self.counts.add_summed(sums);
        self.latencies.add_summed(sums);
        self.devices.entry(sums.dev).or_default().add_summed(sums);
        self.patterns.add_summed(sums);
        self.reads.add_summed(sums);
    }

    fn merge(&mut self, other: &Self) {
        self.counts.merge(&other.counts);
        self.latencies.merge(&other.latencies);
        for (dev, counts) in &other.devices {
            self.devices.entry(*dev).or_default().merge(counts);
        }
        self.sync.merge(&other.sync);
        self.logical_bytes = self.logical_bytes.saturating_add(other.logical_bytes);
        self.dstate_ns = self.dstate_ns.saturating_add(other.dstate_ns);
        self.patterns.merge(&other.patterns);
        self.writeback.merge(&other.writeback);
        self.reads.merge(&other.reads);
        for call in &other.calls {
            match self.calls.iter_mut().find(|c| c.disk == call.disk) {
                Some(mine) => {
                    mine.hist.merge(&call.hist);
                    mine.prequeue_ns = mine.prequeue_ns.saturating_add(call.prequeue_ns);
                    mine.request_p99_ns = call.request_p99_ns;
                    mine.own_requests = call.own_requests;
                }
                None => self.calls.push(call.clone()),
            }
        }
        self.dirty.pauses += other.dirty.pauses;
        self.dirty.pause_ns = self.dirty.pause_ns.saturating_add(other.dirty.pause_ns);
    }
}

/// Sync calls kept per process for the drill-down.
const RECENT_SYNCS: usize = 32;
/// Disks whose last request end is remembered per process, for sequentiality.
const MAX_NEXT_SECTORS: usize = 8;

#[derive(Clone, Debug)]
struct RecentSync {
    call: SyncCall,
    cost: Option<(u64, u64)>,
}

#[derive(Clone, Debug)]
struct ProcState {
    comm: Comm,
    kernel_thread: bool,
    last_seen_ns: u64,
    exited_ns: Option<u64>,
    interval: ProcPeriod,
    total: ProcPeriod,
    /// An interval of it was closed: its totals are no longer just the interval's.
    closed_before: bool,
    /// Its row said it exited: it is kept only for its calls still to settle, and has a row
    /// again only in an interval where some did.
    exit_reported: bool,
    /// Newest last.
    recent_syncs: VecDeque<RecentSync>,
    /// Where its previous request to each disk ended (sector), for sequentiality.
    next_sector: Vec<(Dev, u64)>,
    dio_geometry: DioGeometry,
    /// The cgroup of its latest request that had one (0: none seen).
    cgroup: u64,
    /// Its cgroup's I/O limits, as last looked up.
    io_limits: Option<IoLimits>,
    dirty_state: Option<DirtyState>,
    /// Its threads' latest commits, to judge a commit record with its data.
    commits: Commits,
    /// Its /proc read totals at the previous sample.
    asked_before: Option<reads::AskedBefore>,
}

impl ProcState {
    fn new(comm: Comm, seen_ns: u64) -> Self {
        Self {
            comm,
            kernel_thread: false,
            last_seen_ns: seen_ns,
            exited_ns: None,
            interval: ProcPeriod::default(),
            total: ProcPeriod::default(),
            closed_before: false,
            exit_reported: false,
            recent_syncs: VecDeque::new(),
            next_sector: Vec::new(),
            dio_geometry: DioGeometry::default(),
            cgroup: 0,
            io_limits: None,
            dirty_state: None,
            commits: Commits::default(),
            asked_before: None,
        }
    }

    /// Compares this interval's calls on each disk with the request latency of the process
    /// (its own requests' p99 when it created at least [`MIN_OWN_REQUESTS`], else its disk's,
    /// from `disk_p99`) and keeps the call time beyond it: the pre-queue time.
    fn judge_calls(&mut self, disk_p99: &impl Fn(Dev) -> Option<u64>) {
        let own = &self.interval.latencies.total;
        let own_p99 = (own.count() >= MIN_OWN_REQUESTS).then(|| own.quantile(0.99));
        for call in &mut self.interval.calls {
            let (reference, own_requests) = match own_p99 {
                Some(p99) => (p99, true),
                None => (disk_p99(call.disk).unwrap_or(0), false),
            };
            call.request_p99_ns = reference;
            call.own_requests = own_requests;
            call.prequeue_ns = call.hist.excess_over(reference);
        }
    }

    fn seen(&mut self, comm: Comm, at_ns: u64) {
        self.comm = comm;
        self.last_seen_ns = self.last_seen_ns.max(at_ns);
    }

    /// Whether `io` began where this process's previous request to its disk ended.
    fn sequential(&mut self, io: &BlockIo) -> bool {
        let end = io.sector.saturating_add(u64::from(io.bytes / 512));
        match self.next_sector.iter_mut().find(|(dev, _)| *dev == io.dev) {
            Some((_, next)) => std::mem::replace(next, end) == io.sector,
            None => {
                if self.next_sector.len() == MAX_NEXT_SECTORS {
                    self.next_sector.remove(0);
                }
                self.next_sector.push((io.dev, end));
                false
            }
        }
    }
}

#[derive(Debug)]
pub(super) struct ProcBook {
    settings: Settings,
    /// Boxed: a state is ~2 KB, and a table of them inline would keep the capacity a burst
    /// of short-lived processes once needed (8 MB for 4096) long after they are gone.
    procs: FastMap<u32, Box<ProcState>>,
    /// Exits, this interval, of processes without a row then: a writer or a task in D known
    /// only from the kernel's sums gets its row at the interval's end, after its exit.
    unseen_exits: Vec<(u32, u64)>,
    /// Paths of the files readahead reads read.
    file_names: FileNames,
}

/// Exits of processes without a row remembered per interval at most.
const MAX_UNSEEN_EXITS: usize = 65_536;

impl ProcBook {
    pub(super) fn new(settings: Settings) -> Self {
        Self {
            settings,
            procs: FastMap::default(),
            unseen_exits: Vec::new(),
            file_names: FileNames::default(),
        }
    }

    /// Marks exited the rows created at the interval's end whose exit came before, and
    /// forgets the rest.
    pub(super) fn settle_unseen_exits(&mut self) {
        for (tgid, at_ns) in self.unseen_exits.drain(..) {
            if let Some(proc) = self.procs.get_mut(&tgid) {
                proc.exited_ns = Some(at_ns);
            }
        }
    }

    fn entry(&mut self, tgid: u32, comm: Comm, at_ns: u64) -> &mut ProcState {
        let proc = self
            .procs
            .entry(tgid)
            .or_insert_with(|| Box::new(ProcState::new(comm, at_ns)));
        proc.seen(comm, at_ns);
        proc
    }

    pub(super) fn block(&mut self, io: &BlockIo) {
        let proc = self.entry(io.tgid, io.comm, io.completed_ns);
        proc.kernel_thread |= io.kernel_thread;
        // A flusher's write-back carries its dirtier's cgroup (v2 cgroup write-back): not the
        // flusher's own.
        if io.cgroup != 0 && io.dirtier.is_none() {
            proc.cgroup = io.cgroup;
        }
        proc.interval.add(io);
        let sequential = proc.sequential(io);
        proc.interval
            .patterns
            .add_request(io, sequential, &proc.dio_geometry);
        proc.interval.reads.add(io, sequential);
        if let Some(dirtier) = io.dirtier
            && dirtier.tgid != io.tgid
        {
            let bytes = u64::from(io.bytes);
            proc.interval
                .writeback
                .wrote_for
                .add(dirtier.tgid, dirtier.comm, bytes);
            // The dirtier may have exited long before its pages were written: it then gets a
            // row again, forgotten like any idle one.
            self.entry(dirtier.tgid, dirtier.comm, io.completed_ns)
                .interval
                .writeback
                .written_by
                .add(io.tgid, io.comm, bytes);
        }
    }

    /// What processes that read asked for (/proc), and the names of the files read ahead.
    pub(super) fn asked(&mut self, totals: &[ProcReadTotals], names: &[(crate::FileKey, String)]) {
        self.file_names.learn(names);
        for now in totals {
            if let Some(proc) = self.procs.get_mut(&now.tgid) {
                reads::take_asked(&mut proc.asked_before, now, &mut proc.interval.reads);
            }
        }
    }

    /// Requests the probes summed for the process on one disk since the previous sample.
    pub(super) fn summed(&mut self, sums: &ProcDiskTotals, now_ns: u64) {
        let proc = self.entry(sums.tgid, sums.comm, now_ns);
        proc.interval.add_summed(sums);
    }

    pub(super) fn sync(&mut self, call: &SyncCall) {
        let proc = self.entry(call.tgid, call.comm, call.end_ns);
        proc.interval.sync.add_call(call);
        if proc.recent_syncs.len() == RECENT_SYNCS {
            proc.recent_syncs.pop_front();
        }
        proc.recent_syncs.push_back(RecentSync {
            call: call.clone(),
            cost: None,
        });
    }

    /// A process that has no row yet gets one named `comm` (a process whose requests were all
    /// created by others, e.g. released by blk-throttle from a kworker, or a buffered writer).
    fn entry_named(&mut self, tgid: u32, comm: &str, at_ns: u64) -> &mut ProcState {
        let proc = self.procs.entry(tgid).or_insert_with(|| {
            Box::new(ProcState::new(
                Comm::new(if comm.is_empty() { "?" } else { comm }),
                at_ns,
            ))
        });
        proc.last_seen_ns = proc.last_seen_ns.max(at_ns);
        proc
    }

    /// Its direct I/O calls on a disk in this interval.
    pub(super) fn calls(&mut self, delta: &CallDelta, now_ns: u64) {
        let proc = self.entry_named(delta.tgid, &delta.comm, now_ns);
        match proc
            .interval
            .calls
            .iter_mut()
            .find(|c| c.disk == delta.disk)
        {
            Some(call) => call.hist.merge(&delta.hist),
            None => proc.interval.calls.push(CallPeriod {
                disk: delta.disk,
                hist: delta.hist.clone(),
                ..CallPeriod::default()
            }),
        }
    }

    /// Its dirty-throttling pauses in this interval.
    pub(super) fn pauses(&mut self, delta: &PauseDelta, now_ns: u64) {
        let proc = self.entry_named(delta.tgid, &delta.comm, now_ns);
        proc.interval.dirty.pauses += delta.pauses;
        proc.interval.dirty.pause_ns = proc.interval.dirty.pause_ns.saturating_add(delta.pause_ns);
        proc.dirty_state = Some(delta.last.clone());
    }

    /// Its cgroup's I/O limits, as the feed read them.
    pub(super) fn io_limits(&mut self, limits: &IoLimits) {
        if let Some(proc) = self.procs.get_mut(&limits.tgid) {
            proc.io_limits = Some(limits.clone());
        }
    }

    pub(super) fn dio(&mut self, call: &DioCall) {
        let proc = self.entry(call.tgid, call.comm, call.ts_ns);
        proc.interval.patterns.add_dio(call, &mut proc.dio_geometry);
    }

    /// A sync call's whole cost is known.
    pub(super) fn settled(&mut self, sync: &SettledSync) {
        let Some(proc) = self.procs.get_mut(&sync.call.tgid) else {
            return;
        };
        proc.interval.sync.add_settled(sync, &mut proc.commits);
        if let Some(recent) = proc
            .recent_syncs
            .iter_mut()
            .rev()
            .find(|r| r.call.tid == sync.call.tid && r.call.end_ns == sync.call.end_ns)
        {
            recent.cost = Some((sync.own_bytes, sync.charged_bytes));
        }
    }

    pub(super) fn charge(&mut self, charge: &Charge) {
        if let Some(to) = self.procs.get_mut(&charge.to_tgid) {
            to.interval.sync.add_charge_received(charge);
        }
        if let Some(from) = self.procs.get_mut(&charge.from_tgid) {
            from.interval.sync.add_charge_given(charge);
        }
    }

    pub(super) fn exited(&mut self, tgid: u32, at_ns: u64) {
        match self.procs.get_mut(&tgid) {
            Some(proc) => proc.exited_ns = Some(at_ns),
            None if self.unseen_exits.len() < MAX_UNSEEN_EXITS => {
                self.unseen_exits.push((tgid, at_ns));
            }
            None => {}
        }
    }

    /// Bytes the process asked to write in this interval. A writer not seen yet gets a row
    /// when its command is known (a process that only writes, to the page cache, is I/O too).
    pub(super) fn logical(&mut self, tgid: u32, comm: Option<Comm>, bytes: u64, now_ns: u64) {
        if bytes == 0 {
            return;
        }
        let proc = match (self.procs.get_mut(&tgid), comm) {
            (Some(proc), _) => proc,
            (None, Some(comm)) => self.entry(tgid, comm, now_ns),
            (None, None) => return,
        };
        proc.interval.logical_bytes = proc.interval.logical_bytes.saturating_add(bytes);
    }

    /// Time in D in this interval. A process that spent at least a millisecond in D gets a
    /// row even without I/O (a task stuck in vfork does no I/O).
    pub(super) fn dstate(&mut self, tgid: u32, comm: Option<&str>, ns: u64, now_ns: u64) {
        let proc = match (self.procs.get_mut(&tgid), comm) {
            (Some(proc), _) => proc,
            (None, Some(comm)) if ns >= 1_000_000 => self
                .procs
                .entry(tgid)
                .or_insert_with(|| Box::new(ProcState::new(Comm::new(comm), now_ns))),
            _ => return,
        };
        proc.interval.dstate_ns = proc.interval.dstate_ns.saturating_add(ns);
        if ns > 0 {
            proc.last_seen_ns = proc.last_seen_ns.max(now_ns);
        }
    }

    /// Forgets processes that exited (once nothing of theirs is waiting to be settled), that
    /// have been idle too long, and the longest idle beyond the cap. Returns the forgotten.
    pub(super) fn evict(&mut self, now_ns: u64, pending: impl Fn(u32) -> bool) -> Vec<u32> {
        let forget_after = self.settings.forget_after_ns;
        let mut gone: Vec<u32> = self
            .procs
            .iter()
            .filter(|&(&tgid, p)| {
                p.exited_ns.is_some_and(|at| at <= now_ns) && !pending(tgid)
                    || now_ns.saturating_sub(p.last_seen_ns) >= forget_after
            })
            .map(|(&tgid, _)| tgid)
            .collect();
        for tgid in &gone {
            self.procs.remove(tgid);
        }
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
                gone.push(tgid);
            }
        }
        shrink(&mut self.procs);
        gone
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.procs.len()
    }
}

/// Gives back a map's spare capacity once it holds under a quarter of it: after a burst of
/// short-lived processes, the table they needed is not kept for the rest of the run.
pub(super) fn shrink<K: Eq + std::hash::Hash, V>(map: &mut FastMap<K, V>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}
