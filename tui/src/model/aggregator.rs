//! The model's front door: [`Aggregator::apply`] takes the inputs in order and returns a
//! [`Snapshot`] whenever a sample closes an interval. It only routes: per-process state lives
//! in the process book, per-disk state in the disk book, per-call cost in the sync ledger,
//! D state in its book, findings in theirs.

use std::collections::HashMap;

use super::{
    BlockIo, DStateEpisode, Dev, DioCall, Input, KernelCounters, KernelSample, SampleKind,
    SyncCall,
    disks::DiskBook,
    dstate::DStateBook,
    findings::{self, FindingBook, Scene},
    ledger::SyncLedger,
    procs::{ProcBook, Settings},
    snapshot::{EventStats, Snapshot},
};

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
    prev_counters: KernelCounters,
    /// The kernel's cumulative logical write bytes per process at the previous sample.
    prev_logical: HashMap<u32, u64>,
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
            prev_counters: KernelCounters::default(),
            prev_logical: HashMap::new(),
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
        self.prev_counters = sample.counters;
        self.prev_logical = sample.logical_writes.iter().copied().collect();
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
        self.take_dstate_time(sample);
        let interval_ns = sample.now_ns.saturating_sub(self.last_tick_ns);
        let elapsed_ns = sample.now_ns.saturating_sub(self.start_ns);
        self.last_tick_ns = sample.now_ns;
        let events = self.events(sample);

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
        let procs = self.procs.close(&name_of);
        let dstate = self.dstate.tasks(sample.now_ns, &sample.dstate_now);
        let fresh = findings::detect(&Scene {
            now_ns: sample.now_ns,
            interval_ns,
            elapsed_ns,
            procs: &procs,
            disks: &disks,
            dstate: &dstate,
            page_size: sample.page_size,
        });
        let findings = self.findings.update(sample.now_ns, fresh);
        let ledger = &self.ledger;
        for tgid in self
            .procs
            .evict(sample.now_ns, |tgid| ledger.has_open(tgid))
        {
            self.dstate.forget_process(tgid);
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
        }
    }

    fn events(&mut self, sample: &KernelSample) -> EventStats {
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
        events
    }

    /// Logical write bytes of this interval, from the kernel's cumulative per-process sums.
    /// A process missing from the kernel map (it exited and was removed, or the LRU map
    /// dropped it) starts again from zero.
    fn take_logical_writes(&mut self, sample: &KernelSample) {
        let mut now: HashMap<u32, u64> = HashMap::with_capacity(sample.logical_writes.len());
        for &(tgid, total) in &sample.logical_writes {
            let before = self.prev_logical.get(&tgid).copied().unwrap_or(0);
            self.procs.logical(tgid, total.saturating_sub(before));
            now.insert(tgid, total);
        }
        self.prev_logical = now;
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

    /// Test shorthands for [`Aggregator::apply`].
    #[cfg(test)]
    pub fn ingest(&mut self, io: &BlockIo) {
        self.apply(&Input::Block(*io));
    }

    #[cfg(test)]
    pub fn ingest_sync(&mut self, call: &SyncCall) {
        self.apply(&Input::Sync(call.clone()));
    }

    #[cfg(test)]
    pub fn ingest_dio(&mut self, call: &DioCall) {
        self.apply(&Input::Dio(call.clone()));
    }

    #[cfg(test)]
    pub fn ingest_dstate(&mut self, episode: &DStateEpisode) {
        self.apply(&Input::DState(episode.clone()));
    }

    /// Closes an interval with `sample` (whatever its kind says, an interval at least).
    #[cfg(test)]
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
    pub(super) fn dstate_remembered(&self) -> (usize, usize) {
        self.dstate.remembered()
    }
}
