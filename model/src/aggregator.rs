//! The model's front door: [`Aggregator::apply`] takes the inputs in order and returns a
//! [`Snapshot`] whenever a sample closes an interval. It only routes: per-process state lives
//! in the process book, per-disk state in the disk book, per-call cost in the sync ledger,
//! D state in its book, findings in theirs, the host's figures in the host book.

use std::collections::HashMap;

use super::{
    BlockIo, DStateEpisode, Dev, DioCall, DirtySettings, Input, KernelCounters, KernelSample,
    SampleKind, SelfCost, SyncCall,
    disks::DiskBook,
    dstate::DStateBook,
    findings::{self, FindingBook, Scene},
    host::HostBook,
    ledger::SyncLedger,
    procs::{ProcBook, Settings},
    snapshot::{EventStats, Snapshot},
    summed::SummedBook,
    throttle::ThrottleBook,
};

/// Cgroup names remembered; past it the table starts over (names come again with the
/// next requests).
const MAX_CGROUPS: usize = 4096;

/// Fewer completed requests than this in a measured interval give no BPF cost per I/O.
const MIN_IOS_FOR_BPF_COST: u64 = 1000;

/// The aggregator. Feed it with [`Aggregator::apply`].
#[derive(Debug)]
pub struct Aggregator {
    start_ns: u64,
    last_tick_ns: u64,
    seq: u64,
    procs: ProcBook,
    disks: DiskBook,
    ledger: SyncLedger,
    dstate: DStateBook,
    findings: FindingBook,
    host: HostBook,
    prev_counters: KernelCounters,
    /// Cgroup id -> its name, as the feed resolved them.
    cgroups: super::FastMap<u64, super::CgroupInfo>,
    prev_cost: SelfCost,
    /// Completed block requests (all disks) at the previous sample, for BPF time per I/O.
    prev_requests: u64,
    /// The last BPF time per I/O measured over a whole interval.
    bpf_ns_per_io: Option<u64>,
    /// The BPF time as a share of one CPU, in the last interval measured.
    bpf_cpu_pct: Option<f64>,
    /// The kernel's cumulative logical write bytes per process at the previous sample.
    prev_logical: HashMap<u32, u64>,
    /// Direct I/O call latency and dirty pauses at the previous sample.
    throttle: ThrottleBook,
    /// The requests the probes summed, at the previous sample.
    summed: SummedBook,
    /// `vm.dirty_*` as last read.
    dirty_settings: Option<DirtySettings>,
    /// Each process's latency when its disk was its own.
    baselines: super::baseline::Baselines,
    received: u64,
    received_total: u64,
    bad: u64,
    bad_total: u64,
}

impl Aggregator {
    /// `start_ns` is when the probes were attached (`CLOCK_MONOTONIC`).
    pub fn new(settings: Settings, start_ns: u64) -> Self {
        Self {
            start_ns,
            last_tick_ns: start_ns,
            seq: 0,
            procs: ProcBook::new(settings),
            disks: DiskBook::default(),
            ledger: SyncLedger::default(),
            dstate: DStateBook::default(),
            findings: FindingBook::default(),
            host: HostBook::default(),
            prev_counters: KernelCounters::default(),
            cgroups: super::FastMap::default(),
            prev_cost: SelfCost::default(),
            prev_requests: 0,
            bpf_ns_per_io: None,
            bpf_cpu_pct: None,
            prev_logical: HashMap::new(),
            throttle: ThrottleBook::default(),
            summed: SummedBook::default(),
            dirty_settings: None,
            baselines: super::baseline::Baselines::default(),
            received: 0,
            received_total: 0,
            bad: 0,
            bad_total: 0,
        }
    }

    /// Takes one input; returns the snapshot of the interval it closed, if it closed one.
    pub fn apply(&mut self, input: &Input) -> Option<Snapshot> {
        match input {
            Input::Block(io) => self.block(io),
            Input::Sync(call) => self.sync(call),
            Input::Dio(call) => self.dio(call),
            Input::DState(episode) => self.dstate_episode(episode),
            Input::Exit(exit) => {
                self.received += 1;
                self.procs.exited(exit.tgid, exit.ts_ns);
            }
            Input::BadRecords(n) => self.bad += n,
            Input::Sample(sample) => match sample.kind {
                SampleKind::Baseline => self.baseline(sample),
                SampleKind::Interval => return Some(self.close(sample, false)),
                SampleKind::Final => return Some(self.close(sample, true)),
            },
        }
        None
    }

    fn block(&mut self, io: &BlockIo) {
        self.received += 1;
        self.procs.block(io);
        self.disks.block(io);
        self.ledger.note_write(io);
    }

    fn sync(&mut self, call: &SyncCall) {
        self.received += 1;
        self.procs.sync(call);
        self.ledger.note_sync(call);
    }

    fn dio(&mut self, call: &DioCall) {
        self.received += 1;
        self.procs.dio(call);
    }

    fn dstate_episode(&mut self, episode: &DStateEpisode) {
        self.received += 1;
        self.dstate.note_finished(episode);
    }

    /// The kernel's cumulative figures when the probes were attached.
    fn baseline(&mut self, sample: &KernelSample) {
        self.last_tick_ns = self.last_tick_ns.max(sample.now_ns);
        self.disks.baseline(sample);
        self.host.baseline(&sample.host);
        self.prev_counters = sample.counters;
        self.prev_cost = sample.self_cost;
        self.prev_requests = requests(sample);
        self.prev_logical = sample.logical_writes.iter().copied().collect();
        self.summed.baseline(&sample.proc_disks);
        self.throttle.baseline(sample);
        self.dstate.interval_time(
            sample.now_ns,
            sample.now_ns,
            &sample.dstate_time,
            &sample.dstate_now,
        );
    }

    /// Settles what is due (everything when `last`) and closes the interval ending at
    /// `sample.now_ns`.
    fn close(&mut self, sample: &KernelSample, last: bool) -> Snapshot {
        self.seq += 1;
        let (settled, charges) = self.ledger.settle(sample.now_ns, last);
        for charge in &charges {
            self.procs.charge(charge);
        }
        for sync in &settled {
            self.procs.settled(sync);
        }
        self.take_logical_writes(sample);
        // Requests summed in the kernel count as if each had been streamed.
        for delta in self.summed.deltas(&sample.proc_disks) {
            self.procs.summed(&delta, sample.now_ns);
            self.disks.summed(&delta);
        }
        self.take_dstate_time(sample);
        self.take_throttling(sample);
        self.procs.asked(&sample.proc_reads, &sample.file_names);
        self.procs.settle_unseen_exits();
        let interval_ns = sample.now_ns.saturating_sub(self.last_tick_ns);
        let elapsed_ns = sample.now_ns.saturating_sub(self.start_ns);
        self.last_tick_ns = sample.now_ns;
        let events = self.events(sample, interval_ns);

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
        let disks = self.disks.close(sample, interval_ns, elapsed_ns, &name_of);
        let disk_p99 = |dev: Dev| {
            disks
                .iter()
                .find(|d| d.dev == dev && d.interval.latency.count > 0)
                .map(|d| d.interval.latency.p99_ns)
        };
        for cgroup in &sample.cgroups {
            if self.cgroups.len() >= MAX_CGROUPS && !self.cgroups.contains_key(&cgroup.id) {
                self.cgroups.clear();
            }
            self.cgroups.insert(cgroup.id, cgroup.clone());
        }
        let cgroups = &self.cgroups;
        let honours_fua: Vec<Dev> = disks
            .iter()
            .filter(|d| d.geometry.fua)
            .map(|d| d.dev)
            .collect();
        let procs = self.procs.close(
            &name_of,
            &|id| cgroups.get(&id).cloned(),
            &disk_p99,
            &|dev: Dev| honours_fua.contains(&dev),
        );
        let dstate = self.dstate.tasks(sample.now_ns, &sample.dstate_now);
        let baselines = self.baselines.observe(&procs, sample.now_ns);
        let fresh = findings::detect(&Scene {
            now_ns: sample.now_ns,
            interval_ns,
            elapsed_ns,
            procs: &procs,
            disks: &disks,
            dstate: &dstate,
            page_size: sample.page_size,
            dirty_settings: self.dirty_settings,
            baselines: &baselines,
        });
        let findings = self.findings.update(sample.now_ns, fresh);
        let waiting = self.ledger.with_open_calls();
        for tgid in self
            .procs
            .evict(sample.now_ns, |tgid| waiting.contains(&tgid))
        {
            self.dstate.forget_process(tgid);
            self.baselines.forget(tgid);
        }
        Snapshot {
            seq: self.seq,
            now_ns: sample.now_ns,
            interval_ns,
            elapsed_ns,
            events,
            disks,
            procs,
            findings,
            dstate,
            dstate_recent: self.dstate.longest_recent(sample.now_ns),
            dstate_sites: self.dstate.take_sites(),
            host: self.host.close(&sample.host),
        }
    }

    fn events(&mut self, sample: &KernelSample, interval_ns: u64) -> EventStats {
        self.received_total += self.received;
        self.bad_total += self.bad;
        let (c, before) = (&sample.self_cost, &self.prev_cost);
        let requests = requests(sample);
        let ios = requests.saturating_sub(self.prev_requests);
        let bpf_runs = c
            .bpf_stats_on
            .then(|| c.bpf_runs.saturating_sub(before.bpf_runs));
        if c.bpf_stats_on {
            let bpf_ns = c.bpf_run_ns.saturating_sub(before.bpf_run_ns);
            #[expect(clippy::cast_precision_loss, reason = "a percentage")]
            let pct = bpf_ns as f64 * 100.0 / interval_ns.max(1) as f64;
            self.bpf_cpu_pct = Some(pct);
            // The scheduler and exit probes run whatever the I/O rate: per I/O, an idle
            // interval would show their cost divided by a handful of requests.
            if ios >= MIN_IOS_FOR_BPF_COST {
                self.bpf_ns_per_io = Some(bpf_ns / ios);
            }
        }
        #[expect(clippy::cast_precision_loss, reason = "a percentage")]
        let cpu_pct = (c.cpu_ns > 0).then(|| {
            c.cpu_ns.saturating_sub(before.cpu_ns) as f64 * 100.0 / interval_ns.max(1) as f64
        });
        let dropped = sample
            .counters
            .ring_dropped
            .saturating_sub(self.prev_counters.ring_dropped);
        let events = EventStats {
            received: self.received,
            dropped,
            bad: self.bad,
            received_total: self.received_total,
            dropped_total: sample.counters.ring_dropped,
            bad_total: self.bad_total,
            unpaired_total: sample.counters.complete_without_start,
            produced: sample
                .counters
                .ring_submitted
                .saturating_sub(self.prev_counters.ring_submitted)
                + dropped,
            bpf_ns_per_io: self.bpf_ns_per_io,
            bpf_cpu_pct: self.bpf_cpu_pct,
            bpf_runs,
            bpf_sampled: c.bpf_stats_sampled && !c.bpf_stats_on,
            cpu_pct,
            call_latency_on: sample.call_latency_on,
            aggregating: sample.aggregating,
            aggregated: sample
                .counters
                .aggregated
                .saturating_sub(self.prev_counters.aggregated),
            sampled: sample
                .counters
                .sampled
                .saturating_sub(self.prev_counters.sampled),
        };
        self.prev_counters = sample.counters;
        self.prev_cost = sample.self_cost;
        self.prev_requests = requests;
        self.received = 0;
        self.bad = 0;
        events
    }

    /// Logical write bytes of this interval, from the kernel's cumulative per-process sums.
    /// A process missing from the kernel map (it exited and was removed, or the LRU map
    /// dropped it) starts again from zero.
    fn take_logical_writes(&mut self, sample: &KernelSample) {
        let mut now: HashMap<u32, u64> = HashMap::with_capacity(sample.logical_writes.len());
        let comms: HashMap<u32, super::Comm> = sample.writers.iter().copied().collect();
        for &(tgid, total) in &sample.logical_writes {
            let before = self.prev_logical.get(&tgid).copied().unwrap_or(0);
            let bytes = total.saturating_sub(before);
            self.procs
                .logical(tgid, comms.get(&tgid).copied(), bytes, sample.now_ns);
            now.insert(tgid, total);
        }
        self.prev_logical = now;
    }

    /// Direct I/O calls and dirty pauses of this interval, and the cgroup limits the feed read.
    fn take_throttling(&mut self, sample: &KernelSample) {
        let (calls, pauses) = self.throttle.interval(sample);
        for delta in &calls {
            self.procs.calls(delta, sample.now_ns);
        }
        for delta in &pauses {
            self.procs.pauses(delta, sample.now_ns);
        }
        for limits in &sample.io_limits {
            self.procs.io_limits(limits);
        }
        if sample.dirty_settings.is_some() {
            self.dirty_settings = sample.dirty_settings;
        }
    }

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
                .map(|d| d.comm.as_str());
            self.procs.dstate(tgid, comm, ns, sample.now_ns);
        }
    }

    /// Test shorthands for [`Aggregator::apply`] (the binary's tests use them too).
    #[cfg(any(test, feature = "fixtures"))]
    pub fn ingest(&mut self, io: &BlockIo) {
        self.apply(&Input::Block(*io));
    }

    #[cfg(any(test, feature = "fixtures"))]
    pub fn ingest_sync(&mut self, call: &SyncCall) {
        self.apply(&Input::Sync(call.clone()));
    }

    #[cfg(any(test, feature = "fixtures"))]
    pub fn ingest_dstate(&mut self, episode: &DStateEpisode) {
        self.apply(&Input::DState(episode.clone()));
    }

    /// Closes an interval with `sample` (whatever its kind says, an interval at least).
    #[cfg(any(test, feature = "fixtures"))]
    pub fn tick(&mut self, sample: &KernelSample) -> Snapshot {
        let mut sample = sample.clone();
        if sample.kind == SampleKind::Baseline {
            sample.kind = SampleKind::Interval;
        }
        self.apply(&Input::Sample(Box::new(sample)))
            .unwrap_or_else(|| unreachable!("an interval sample closes an interval"))
    }

    /// Processes currently kept (for the memory bounds' tests).
    #[cfg(test)]
    pub fn process_count(&self) -> usize {
        self.procs.len()
    }

    #[cfg(test)]
    pub(super) fn cgroup_count(&self) -> usize {
        self.cgroups.len()
    }

    #[cfg(test)]
    pub(super) fn dstate_remembered(&self) -> (usize, usize) {
        self.dstate.remembered()
    }
}

/// Completed block requests on every disk, cumulative (the kernel's exact counts).
fn requests(sample: &KernelSample) -> u64 {
    sample
        .disks
        .iter()
        .flat_map(|d| d.requests.iter())
        .fold(0u64, |sum, &n| sum.saturating_add(n))
}
