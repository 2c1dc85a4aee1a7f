//! Where the model's inputs come from: the live ring buffer, annotated with what /proc and
//! sysfs know, plus the kernel-side totals, device names, geometry and host-wide figures
//! (load, run queue, CPU times, I/O pressure, dirty memory) sampled at the end of each
//! interval (and once at the start, as the baseline); or a recording of all that.

mod aggregation;
mod cgroups;
pub mod host;
mod io_controls;
mod kallsyms;
mod mounts;
mod procfs;
pub mod recording;
mod self_cost;
mod stacks;
mod sysfs;

use std::{io, os::fd::AsRawFd as _};

use anyhow::{Context as _, Result};
use aya::maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use iotop_bpf_common::maps::{
    COUNTER_AGGREGATE_FULL, COUNTER_AGGREGATED, COUNTER_COMPLETE_WITHOUT_START,
    COUNTER_IN_FLIGHT_EVICTED, COUNTER_ISSUE_WITHOUT_START, COUNTER_READ_FAILED,
    COUNTER_RING_DROPPED, COUNTER_RING_SUBMITTED, COUNTER_SAMPLED, DiskAggregate, LogicalWrites,
};
use iotop_bpf_common::throttle::{CallKey, CallSlot, CallTotals, DirtyTotals};
use tokio::io::unix::AsyncFd;

use self::kallsyms::Kallsyms;
pub use self::sysfs::{block_device_names, diskstats};
use crate::{
    clock::monotonic_ns,
    decode::decode,
    model::{
        CgroupInfo, Comm, DStateNow, Dev, DioCallTotals, DirtyPauseTotals, DirtySettings,
        DiskTotals, FileRef, Input, IoLimits, KernelCounters, KernelSample, NoStack, SampleKind,
    },
    probe::{ProbeMaps, ProbeReport, Probes, privilege::Environment},
};

/// The live feed: probes attached, ring buffer registered with tokio.
pub struct LiveFeed {
    events: AsyncFd<RingBuf<MapData>>,
    counters: PerCpuArray<MapData, u64>,
    disks: PerCpuHashMap<MapData, u32, DiskAggregate>,
    logical_writes: PerCpuHashMap<MapData, u32, LogicalWrites>,
    dstate_episodes: crate::probe::episodes::EpisodeTableView,
    stacks: stacks::StackBook,
    /// Cgroup ids seen on requests since the last sample, and their names.
    cgroups_seen: std::collections::HashSet<u64, foldhash::fast::RandomState>,
    cgroups: cgroups::CgroupNames,
    dstate_time: PerCpuHashMap<MapData, u32, u64>,
    /// Threads already in D when the probes attached (their episodes began unseen): tid ->
    /// (tgid, comm, stack from /proc), until they leave D.
    in_d_at_start: std::collections::HashMap<u32, (u32, String, Vec<String>)>,
    procs: procfs::ProcCache,
    block_sizes: mounts::BlockSizes,
    mounts: mounts::MountWatch,
    /// Processes that exited since the last sample: their per-process kernel map entries go
    /// once the sample has read their last values.
    exited: Vec<u32>,
    self_cost: self_cost::SelfCostMeter,
    dio_stream_align: aya::maps::Array<MapData, u64>,
    dio_calls: PerCpuHashMap<MapData, CallKey, CallTotals>,
    dirty_pauses: PerCpuHashMap<MapData, u32, DirtyTotals>,
    /// The wait before the request: who had calls or pauses, and their cgroups.
    throttle: ThrottleWatch,
    sched_split: SchedSplitSwitch,
    /// Aggregation mode: its switch and the kernel's per-(process, disk) sums.
    aggregation: aggregation::Aggregation,
    /// The largest filesystem or physical block size in use (see `refresh_geometry`).
    largest_block: u64,
    started_ns: u64,
    report: ProbeReport,
    // Last, so the maps above are closed before the programs are detached.
    probes: Probes,
}

impl LiveFeed {
    /// Loads and attaches the probes. Must run inside a tokio runtime.
    pub fn start(env: &Environment) -> Result<Self> {
        let mut probes = Probes::start(env)?;
        let ProbeMaps {
            events,
            counters,
            disks,
            logical_writes,
            dstate_episodes,
            stacks,
            dstate_time,
            dio_stream_align,
            dio_calls,
            dio_calls_in_flight,
            dirty_pauses,
            call_latency_on,
            sched_split_on,
            aggregate_align,
            proc_disks,
        } = probes.take_maps()?;
        let aggregation = aggregation::Aggregation::new(
            aggregate_align,
            proc_disks,
            aggregation::Policy::from_env().map_err(|e| anyhow::anyhow!(e))?,
        );
        let kallsyms = Kallsyms::load_in_background();
        let mut report = probes.report.clone();
        if Kallsyms::hidden() {
            report.degraded.push(
                "kernel symbols are hidden: D-state stacks show no function names (reading kernel addresses in /proc/kallsyms needs CAP_SYSLOG when kernel.kptr_restrict >= 1 or kernel.perf_event_paranoid >= 2)"
                    .to_string(),
            );
        }
        report.degraded.extend(host::notes());
        let in_d_at_start = procfs::threads_in_d()
            .into_iter()
            .map(|(tid, tgid, comm)| (tid, (tgid, comm, stacks::proc_stack(tid))))
            .collect();
        // SAFETY: the ring buffer owns its fd and is owned by the AsyncFd for as long as it is
        // registered, so the fd stays open while registered.
        let events = unsafe { AsyncFd::register(events) }
            .map_err(io::Error::from)
            .context("register the ring buffer with tokio")?;
        let mut feed = Self {
            events,
            counters,
            disks,
            logical_writes,
            dstate_episodes,
            stacks: stacks::StackBook::new(stacks, kallsyms),
            cgroups_seen: std::collections::HashSet::default(),
            cgroups: cgroups::CgroupNames::new(),
            dstate_time,
            in_d_at_start,
            procs: procfs::ProcCache::default(),
            block_sizes: mounts::BlockSizes::default(),
            mounts: mounts::MountWatch::open(),
            exited: Vec::new(),
            self_cost: self_cost::SelfCostMeter::default(),
            dio_stream_align,
            dio_calls,
            dirty_pauses,
            throttle: ThrottleWatch {
                in_flight: Some(dio_calls_in_flight),
                switch: CallLatencySwitch::new(
                    call_latency_on,
                    CallLatencyMode::from_env(),
                    report.call_latency,
                ),
                ..ThrottleWatch::default()
            },
            sched_split: SchedSplitSwitch::new(sched_split_on),
            aggregation,
            largest_block: 4096,
            started_ns: monotonic_ns(),
            report,
            probes,
        };
        feed.refresh_geometry();
        Ok(feed)
    }

    /// Keeps the direct-I/O probe's streaming alignment at the largest filesystem or
    /// physical block size in use, re-read when the mount table changes.
    fn refresh_geometry(&mut self) {
        if !self.mounts.changed() {
            return;
        }
        let align = self.block_sizes.largest_block_in_use();
        self.largest_block = align;
        if let Err(e) = self.dio_stream_align.set(0, align, 0) {
            self.report
                .degraded
                .push(format!("cannot update the direct-I/O alignment map: {e}"));
        }
    }

    pub fn started_ns(&self) -> u64 {
        self.started_ns
    }

    pub fn report(&self) -> &ProbeReport {
        &self.report
    }

    /// Waits until the kernel signals that the ring buffer is filling up. The probes submit
    /// without waking the reader below a threshold, so ordinary draining happens on the
    /// caller's timer, not here. Cancel-safe.
    pub async fn filling(&mut self) -> io::Result<()> {
        let mut guard = self.events.readable_mut().await?;
        guard.clear_ready();
        Ok(())
    }

    /// Drains up to `max` records without blocking, handing each decoded and annotated input
    /// to `sink`. Returns how many were taken (less than `max` means the ring is empty) and
    /// how many could not be decoded.
    pub fn drain(&mut self, max: usize, sink: &mut impl FnMut(Input)) -> (usize, u64) {
        self.refresh_geometry();
        // The ends of io_uring syncs are attached when the first one shows up: the syncs
        // that complete before (within one drain) are not counted.
        if let Err(e) = self.probes.attach_for_io_uring_syncs() {
            self.report
                .degraded
                .push(format!("io_uring syncs are not ended: {e:#}"));
        }
        let ring = self.events.get_mut();
        let now_ns = monotonic_ns();
        let mut taken = 0;
        let mut bad = 0;
        while taken < max {
            let Some(item) = ring.next() else { break };
            // A wakeup carries nothing: the probes wanted this drain (see above).
            if item.get(..2) == Some(&iotop_bpf_common::RECORD_WAKEUP.to_ne_bytes()[..]) {
                continue;
            }
            let input = decode(&item);
            drop(item);
            taken += 1;
            match input {
                Ok(mut input) => {
                    if let Input::Exit(exit) = &input {
                        self.exited.push(exit.tgid);
                    }
                    if let Input::Block(io) = &input {
                        self.sched_split.saw_request(io.dev);
                        if io.cgroup != 0 && self.cgroups_seen.len() < MAX_CGROUPS_PER_INTERVAL {
                            self.cgroups_seen.insert(io.cgroup);
                        }
                    }
                    annotate(
                        &mut self.procs,
                        &mut self.block_sizes,
                        &mut self.stacks,
                        &mut input,
                        now_ns,
                    );
                    sink(input);
                }
                Err(_) => bad += 1,
            }
        }
        (taken, bad)
    }

    /// The kernel-side totals, device names, geometry and host figures, at `now`.
    pub fn sample(&mut self, kind: SampleKind) -> KernelSample {
        let now_ns = monotonic_ns();
        // First, so the host's instantaneous figures are those of `now_ns`, not of the end
        // of the map reads below (milliseconds later on a busy host).
        let host = host::sample();
        let counter = |index: u32| -> u64 {
            self.counters
                .get(&index, 0)
                .map(|per_cpu| per_cpu.iter().sum())
                .unwrap_or(0)
        };
        let counters = KernelCounters {
            ring_dropped: counter(COUNTER_RING_DROPPED),
            complete_without_start: counter(COUNTER_COMPLETE_WITHOUT_START),
            issue_without_start: counter(COUNTER_ISSUE_WITHOUT_START),
            read_failed: counter(COUNTER_READ_FAILED),
            in_flight_evicted: counter(COUNTER_IN_FLIGHT_EVICTED),
            ring_submitted: counter(COUNTER_RING_SUBMITTED),
            aggregated: counter(COUNTER_AGGREGATED),
            sampled: counter(COUNTER_SAMPLED),
            aggregate_full: counter(COUNTER_AGGREGATE_FULL),
        };
        let disks: Vec<DiskTotals> = self
            .disks
            .iter()
            .filter_map(Result::ok)
            .map(|(dev, per_cpu)| sum_disk(Dev::from_kernel(dev), per_cpu.iter()))
            .collect();
        let mut writers = Vec::new();
        let logical_writes = self
            .logical_writes
            .iter()
            .filter_map(Result::ok)
            .map(|(tgid, per_cpu)| {
                // The command is on the CPU that created the entry.
                if let Some(first) = per_cpu.iter().find(|w| w.comm[0] != 0) {
                    writers.push((tgid, Comm::from_bytes(first.comm)));
                }
                (tgid, per_cpu.iter().map(|w| w.bytes).sum())
            })
            .collect();
        let dstate_time = self
            .dstate_time
            .iter()
            .filter_map(Result::ok)
            .map(|(tgid, per_cpu)| (tgid, per_cpu.iter().sum()))
            .collect();
        let (dio_calls, dirty_pauses, dirty_settings, io_limits) = self.throttle.sample(
            &mut self.dio_calls,
            &self.dirty_pauses,
            &mut self.block_sizes,
            &self.exited,
            now_ns,
        );
        // The mode of the interval this sample closes, and what it summed; then the mode of
        // the next one, from this one's rate.
        let aggregating = self.aggregation.on();
        let proc_disks = self.aggregation.sums(&self.exited);
        let requests: u64 = disks.iter().map(|d| d.requests.iter().sum::<u64>()).sum();
        if let Err(e) = self
            .aggregation
            .decide(requests, now_ns, self.largest_block)
            && !self.report.degraded.contains(&e)
        {
            self.report.degraded.push(e);
        }
        for tgid in self.exited.drain(..) {
            let _ = self.logical_writes.remove(&tgid);
            let _ = self.dstate_time.remove(&tgid);
            let _ = self.dirty_pauses.remove(&tgid);
        }
        let dstate_now = self.dstate_now(now_ns);
        let names = block_device_names();
        let geometry = self.block_sizes.geometry(&names);
        let schedulers = sysfs::schedulers(&names);
        self.sched_split.close_interval(&schedulers);
        KernelSample {
            kind,
            now_ns,
            counters,
            disks,
            logical_writes,
            writers,
            dstate_now,
            dstate_time,
            diskstats: diskstats(),
            names,
            geometry,
            cgroups: self.take_cgroups(now_ns),
            // SAFETY: sysconf has no preconditions.
            page_size: u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0),
            self_cost: self.self_cost.sample(&self.probes),
            host,
            dio_calls,
            dirty_pauses,
            dirty_settings,
            io_limits,
            call_latency_on: self.throttle.measuring(),
            schedulers,
            aggregating,
            proc_disks,
        }
    }

    /// The ring buffer's fd, for diagnostics.
    pub fn ring_fd(&self) -> i32 {
        self.events.as_raw_fd()
    }
}

impl LiveFeed {
    /// The cgroups requests were issued for since the last sample, named.
    fn take_cgroups(&mut self, now_ns: u64) -> Vec<CgroupInfo> {
        let seen = std::mem::take(&mut self.cgroups_seen);
        seen.into_iter()
            .filter_map(|id| {
                let path = self.cgroups.path(id, now_ns)?;
                Some(CgroupInfo {
                    id,
                    name: cgroups::readable_name(&path),
                    path,
                })
            })
            .collect()
    }

    /// Threads in D now: episodes in progress in the kernel map, and those already in D at
    /// start-up. An episode whose thread is no longer in D for over a second lost its wakeup
    /// (or its id was reused): it is removed rather than shown growing forever.
    fn dstate_now(&mut self, now_ns: u64) -> Vec<DStateNow> {
        let mut now = Vec::new();
        let mut stale = Vec::new();
        for (tid, episode) in self.dstate_episodes.in_progress() {
            let age = now_ns.saturating_sub(episode.start_ns);
            if age > STALE_AFTER_NS && procfs::thread_state(tid) != Some('D') {
                stale.push((tid, episode.start_ns));
                continue;
            }
            let (stack, no_stack) =
                self.stacks
                    .in_progress(tid, episode.start_ns, episode.stack_id);
            now.push(DStateNow {
                tid,
                tgid: episode.tgid,
                comm: Comm::from_bytes(episode.comm).to_string(),
                start_ns: Some(episode.start_ns),
                stack,
                no_stack,
            });
        }
        for (tid, start_ns) in stale {
            // Unless a new episode replaced it in between.
            self.dstate_episodes.end_stale(tid, start_ns);
        }
        self.stacks.retain(|tid, start_ns| {
            now.iter()
                .any(|d| d.tid == tid && d.start_ns == Some(start_ns))
        });
        self.in_d_at_start
            .retain(|tid, _| procfs::thread_state(*tid) == Some('D'));
        for (&tid, (tgid, comm, stack)) in &self.in_d_at_start {
            if !now.iter().any(|d| d.tid == tid) {
                now.push(DStateNow {
                    tid,
                    tgid: *tgid,
                    comm: comm.clone(),
                    start_ns: None,
                    stack: stack.clone(),
                    no_stack: stack.is_empty().then_some(NoStack::NotSampled),
                });
            }
        }
        now
    }
}

/// Distinct cgroups collected per interval at most (a host runs a few hundred).
const MAX_CGROUPS_PER_INTERVAL: usize = 4096;
/// When direct I/O call latency is measured (`IOTOP_BPF_CALL_LATENCY`): it costs ~300 ns of
/// BPF time per direct I/O call on an iomap filesystem (docs/overhead.md), so by
/// default (`auto`) only while some cgroup I/O control (blk-throttle, io.max, io.latency,
/// iocost) is configured on the host, looked for every [`CONTROL_SCAN_EVERY_NS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallLatencyMode {
    Auto,
    On,
    Off,
}

impl CallLatencyMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "" | "auto" => Some(Self::Auto),
            "on" | "1" => Some(Self::On),
            "off" | "0" => Some(Self::Off),
            _ => None,
        }
    }

    pub fn from_env() -> Self {
        std::env::var("IOTOP_BPF_CALL_LATENCY")
            .ok()
            .and_then(|v| Self::parse(&v))
            .unwrap_or(Self::Auto)
    }

    /// What `check` prints: the mode and, for `auto`, whether it would be on now.
    pub fn describe(self) -> String {
        let set = std::env::var("IOTOP_BPF_CALL_LATENCY").unwrap_or_default();
        let unknown = if Self::parse(&set).is_none() {
            format!(" (IOTOP_BPF_CALL_LATENCY={set:?} is not auto, on or off: auto)")
        } else {
            String::new()
        };
        match self {
            Self::On => "on (IOTOP_BPF_CALL_LATENCY=on)".to_string(),
            Self::Off => "off (IOTOP_BPF_CALL_LATENCY=off)".to_string(),
            Self::Auto if io_controls::any_io_control(&io_controls::host_mounts()) => {
                format!("auto: on now, a cgroup I/O control is configured{unknown}")
            }
            Self::Auto => format!("auto: off now, no cgroup I/O control is configured{unknown}"),
        }
    }
}

/// The switch of the scheduler split (G2I / I2D): timing `block_rq_insert` costs ~70 ns per
/// I/O, and without a scheduler the kernel inserts requests too, so it is on only from the
/// first completed request of a disk that has a scheduler until an interval without one.
struct SchedSplitSwitch {
    map: aya::maps::Array<MapData, u32>,
    on: bool,
    /// The disks that have a scheduler (sysfs, read again at each sample).
    scheduled: Vec<Dev>,
    /// One of them completed a request since the last sample.
    busy: bool,
}

impl SchedSplitSwitch {
    fn new(map: aya::maps::Array<MapData, u32>) -> Self {
        Self {
            map,
            on: false,
            scheduled: sysfs::schedulers(&block_device_names())
                .into_iter()
                .map(|(dev, _)| dev)
                .collect(),
            busy: false,
        }
    }

    /// A request of `dev` completed: the split goes on at once (within a drain of the
    /// burst's first request) if `dev` has a scheduler.
    fn saw_request(&mut self, dev: Dev) {
        if !self.busy && self.scheduled.contains(&dev) {
            self.busy = true;
            self.turn(true);
        }
    }

    /// At each sample: off again after an interval without a scheduled disk's request.
    fn close_interval(&mut self, schedulers: &[(Dev, String)]) {
        self.scheduled = schedulers.iter().map(|(dev, _)| *dev).collect();
        if !self.busy {
            self.turn(false);
        }
        self.busy = false;
    }

    fn turn(&mut self, on: bool) {
        if on != self.on && self.map.set(0, u32::from(on), 0).is_ok() {
            self.on = on;
        }
    }
}

/// How often `auto` looks for cgroup I/O controls.
const CONTROL_SCAN_EVERY_NS: u64 = 2_000_000_000;

/// The kernel's on/off switch of call latency, turned by [`CallLatencyMode`].
struct CallLatencySwitch {
    map: Option<aya::maps::Array<MapData, u32>>,
    mode: CallLatencyMode,
    /// Both probes are attached.
    available: bool,
    on: bool,
    /// When `auto` last looked (None: never).
    scanned_ns: Option<u64>,
    mounts: Option<io_controls::CgroupMounts>,
}

impl Default for CallLatencySwitch {
    fn default() -> Self {
        Self {
            map: None,
            mode: CallLatencyMode::Off,
            available: false,
            on: false,
            scanned_ns: None,
            mounts: None,
        }
    }
}

impl CallLatencySwitch {
    fn new(map: aya::maps::Array<MapData, u32>, mode: CallLatencyMode, available: bool) -> Self {
        let mut switch = Self {
            map: Some(map),
            mode,
            available,
            ..Self::default()
        };
        switch.update(monotonic_ns());
        switch
    }

    /// Turns the switch as the mode says; returns whether it went from on to off.
    fn update(&mut self, now_ns: u64) -> bool {
        if !self.available {
            return false;
        }
        let want = match self.mode {
            CallLatencyMode::On => true,
            CallLatencyMode::Off => false,
            CallLatencyMode::Auto => {
                if self
                    .scanned_ns
                    .is_some_and(|at| now_ns.saturating_sub(at) < CONTROL_SCAN_EVERY_NS)
                {
                    return false;
                }
                self.scanned_ns = Some(now_ns);
                let mounts = self.mounts.get_or_insert_with(io_controls::host_mounts);
                io_controls::any_io_control(mounts)
            }
        };
        if want == self.on {
            return false;
        }
        if let Some(map) = &mut self.map
            && map.set(0, u32::from(want), 0).is_ok()
        {
            self.on = want;
            return !want;
        }
        false
    }
}

/// Reads the kernel's per-process call-latency and dirty-pause aggregates, and annotates the
/// processes whose figures moved with their cgroup's I/O limits.
#[derive(Default)]
struct ThrottleWatch {
    /// Calls (per process and filesystem) and pauses (per process) at the previous sample:
    /// a process whose figures moved is annotated. Bounded by the kernel maps' sizes; entries
    /// of exited processes go with them.
    seen_calls: std::collections::HashMap<CallKey, u64>,
    seen_pauses: std::collections::HashMap<u32, u64>,
    cgroups: io_controls::CgroupBook,
    /// Calls in progress in the kernel, cleared when measuring is switched off.
    in_flight: Option<aya::maps::Array<MapData, CallSlot>>,
    switch: CallLatencySwitch,
}

type ThrottleSample = (
    Vec<DioCallTotals>,
    Vec<DirtyPauseTotals>,
    Option<DirtySettings>,
    Vec<IoLimits>,
);

impl ThrottleWatch {
    fn sample(
        &mut self,
        calls: &mut PerCpuHashMap<MapData, CallKey, CallTotals>,
        pauses: &PerCpuHashMap<MapData, u32, DirtyTotals>,
        block_sizes: &mut mounts::BlockSizes,
        exited: &[u32],
        now_ns: u64,
    ) -> ThrottleSample {
        if self.switch.update(now_ns) {
            // Switched off: a call noted before must not pair with a completion seen after
            // measuring is switched on again (its kiocb reused by a call not noted).
            self.clear_in_flight();
        }
        let mut moved = std::collections::BTreeSet::new();
        let mut gone = Vec::new();
        let mut dio_calls = Vec::new();
        for (key, per_cpu) in calls.iter().filter_map(Result::ok) {
            if exited.contains(&key.tgid) {
                gone.push(key);
            }
            let fs_dev = Dev::from_kernel(key.fs_dev);
            let mut totals = DioCallTotals {
                tgid: key.tgid,
                comm: String::new(),
                fs_dev,
                disk: block_sizes.disk(fs_dev).disk,
                calls: 0,
                sum_ns: 0,
                slots: vec![0; iotop_bpf_common::throttle::CALL_SLOTS],
            };
            for cpu in per_cpu.iter() {
                totals.calls += cpu.calls;
                totals.sum_ns += cpu.sum_ns;
                for (sum, n) in totals.slots.iter_mut().zip(cpu.slots) {
                    *sum = sum.wrapping_add(n);
                }
            }
            // Trailing empty slots are left out (a recording keeps every sample).
            let used = totals
                .slots
                .iter()
                .rposition(|&n| n != 0)
                .map_or(0, |i| i + 1);
            totals.slots.truncate(used);
            if self.seen_calls.insert(key, totals.calls) != Some(totals.calls) {
                moved.insert(key.tgid);
            }
            dio_calls.push(totals);
        }
        let mut dirty_pauses = Vec::new();
        for (tgid, per_cpu) in pauses.iter().filter_map(Result::ok) {
            let mut totals = DirtyPauseTotals {
                tgid,
                ..DirtyPauseTotals::default()
            };
            let mut last_ns = 0;
            for cpu in per_cpu.iter() {
                totals.pauses += cpu.pauses;
                totals.pause_ms += cpu.pause_ms;
                if cpu.pauses > 0 && cpu.last_ns >= last_ns {
                    last_ns = cpu.last_ns;
                    totals.comm = Comm::text(&cpu.comm);
                    totals.bdi = Comm::text(&cpu.bdi);
                    totals.limit_pages = cpu.limit_pages;
                    totals.dirty_pages = cpu.dirty_pages;
                    totals.wb_dirty_pages = cpu.wb_dirty_pages;
                }
            }
            if self.seen_pauses.insert(tgid, totals.pauses) != Some(totals.pauses) {
                moved.insert(tgid);
            }
            dirty_pauses.push(totals);
        }
        let mut io_limits = Vec::new();
        for &tgid in &moved {
            if let Some((comm, limits)) = self.cgroups.of(tgid, now_ns) {
                for totals in dio_calls.iter_mut().filter(|t| t.tgid == tgid) {
                    totals.comm.clone_from(&comm);
                }
                io_limits.push(limits);
            }
        }
        let dirty_settings = dirty_pauses
            .iter()
            .any(|p| moved.contains(&p.tgid))
            .then(read_dirty_settings);
        for key in gone {
            let _ = calls.remove(&key);
            self.seen_calls.remove(&key);
        }
        for tgid in exited {
            self.seen_pauses.remove(tgid);
            self.cgroups.forget(*tgid);
        }
        (dio_calls, dirty_pauses, dirty_settings, io_limits)
    }
}

impl ThrottleWatch {
    /// Whether direct I/O call latency is being measured now.
    fn measuring(&self) -> bool {
        self.switch.on
    }

    fn clear_in_flight(&mut self) {
        let Some(in_flight) = &mut self.in_flight else {
            return;
        };
        let free = CallSlot {
            iocb: 0,
            start_ns: 0,
            tgid: 0,
            _pad: 0,
        };
        for index in 0..in_flight.len() {
            if in_flight.get(&index, 0).is_ok_and(|slot| slot.iocb != 0) {
                let _ = in_flight.set(index, free, 0);
            }
        }
    }
}

fn read_dirty_settings() -> DirtySettings {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    DirtySettings {
        dirty_bytes: read("dirty_bytes"),
        dirty_ratio: read("dirty_ratio"),
        background_bytes: read("dirty_background_bytes"),
        background_ratio: read("dirty_background_ratio"),
    }
}

/// An episode older than this whose thread is not in D is stale.
const STALE_AFTER_NS: u64 = 1_000_000_000;

/// Adds what the kernel maps, /proc and sysfs know: kernel threads, the file behind a sync
/// call's fd and its filesystem's block size, a direct I/O call's file and geometry, a D
/// episode's symbolized stack. Caches of an exited process are dropped.
fn annotate(
    procs: &mut procfs::ProcCache,
    block_sizes: &mut mounts::BlockSizes,
    stacks: &mut stacks::StackBook,
    input: &mut Input,
    now_ns: u64,
) {
    match input {
        Input::DState(episode) => {
            let wakeup = std::mem::take(&mut episode.wakeup_stack);
            (episode.stack, episode.no_stack) =
                stacks.finished(episode.tid, episode.start_ns, episode.stack_id, &wakeup);
        }
        Input::Dio(call) => {
            call.fs_block_size = block_sizes.fs_block_size(call.fs_dev, now_ns).unwrap_or(0);
            let disk = block_sizes.disk(call.fs_dev);
            call.disk = disk.disk;
            call.logical_block_size = disk.logical_block_size;
            call.physical_block_size = disk.physical_block_size;
            call.fs_start_sector = disk.start_sector;
            call.file = procs
                .file_of_inode(call.tgid, call.fs_dev, call.ino)
                .or_else(|| procs.path_of_inode(call.fs_dev, call.ino))
                .or_else(|| {
                    (!call.name.is_empty()).then(|| {
                        FileRef::Inode {
                            dev: call.fs_dev,
                            ino: call.ino,
                            name: call.name.clone(),
                        }
                        .to_string()
                    })
                });
            if let Some(path) = &call.file
                && path.starts_with('/')
            {
                procs.remember_inode_path(call.fs_dev, call.ino, path);
            }
        }
        Input::Block(io) => io.kernel_thread = procs.is_kernel_thread(io.tgid),
        Input::Sync(call) => {
            let fs_dev = if let Some(fd) = call.fd {
                let expect = call
                    .fs_dev
                    .filter(|_| call.ino != 0)
                    .map(|dev| (dev, call.ino));
                let (file, fs_dev) = procs.resolve_fd(call.tgid, fd, expect, now_ns);
                call.file = file;
                fs_dev
            } else {
                None
            };
            // The kernel named the file's filesystem and inode during the call; /proc only
            // if the process is still there (a short-lived one is often gone), and an
            // io_uring sync has no fd to look up.
            if let (FileRef::Unresolved(_), Some(dev)) = (&call.file, call.fs_dev)
                && call.ino != 0
            {
                call.file = procs.path_of_inode(dev, call.ino).map_or_else(
                    || FileRef::Inode {
                        dev,
                        ino: call.ino,
                        name: call.name.clone(),
                    },
                    FileRef::Path,
                );
            }
            if call.fd.is_some()
                && let FileRef::Path(path) = &call.file
                && let Some(dev) = call.fs_dev.or(fs_dev)
            {
                procs.remember_inode_path(dev, call.ino, path);
            }
            if let Some(fs_dev) = call.fs_dev.or(fs_dev) {
                call.fs_dev = Some(fs_dev);
                call.dev = Some(block_sizes.disk(fs_dev).disk);
                if call.fs_block_size == 0 {
                    call.fs_block_size = block_sizes.fs_block_size(fs_dev, now_ns).unwrap_or(0);
                }
            }
        }
        Input::Exit(exit) => procs.forget(exit.tgid),
        Input::BadRecords(_) | Input::Sample(_) => {}
    }
}

fn sum_disk<'a>(dev: Dev, per_cpu: impl Iterator<Item = &'a DiskAggregate>) -> DiskTotals {
    let mut out = DiskTotals {
        dev,
        ..DiskTotals::default()
    };
    let add = |into: &mut [u64], from: &[u64]| {
        for (a, b) in into.iter_mut().zip(from) {
            *a += b;
        }
    };
    for cpu in per_cpu {
        add(&mut out.requests, &cpu.requests);
        add(&mut out.bytes, &cpu.bytes);
        add(&mut out.latency_ns, &cpu.latency_ns);
        add(&mut out.total_hist, &cpu.total_hist);
        add(&mut out.queue_hist, &cpu.queue_hist);
        add(&mut out.device_hist, &cpu.device_hist);
        out.errors += cpu.errors;
        out.queue_ns += cpu.queue_ns;
        out.device_ns += cpu.device_ns;
        out.inserted += cpu.inserted;
        out.g2i_ns += cpu.g2i_ns;
        out.i2d_ns += cpu.i2d_ns;
    }
    out
}
