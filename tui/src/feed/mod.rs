//! Where the model's inputs come from: the live ring buffer, annotated with what /proc and
//! sysfs know, plus the kernel-side totals, device names, geometry and host-wide figures
//! (load, run queue, CPU times, I/O pressure, dirty memory) sampled at the end of each
//! interval (and once at the start, as the baseline). A recording of all that, and its
//! replay, is `crate::recording`'s.

mod aggregation;
mod annotate;
mod cgroups;
mod decode;
mod dtime;
pub mod host;
mod io_controls;
mod kallsyms;
mod mounts;
mod procfs;
mod readers;
mod self_cost;
mod stacks;
mod switches;
mod sysfs;
mod throttle;

use std::io;

use anyhow::{Context as _, Result};
use iotop_bpf_common::maps::{
    COUNTER_AGGREGATE_FULL, COUNTER_AGGREGATED, COUNTER_COMPLETE_WITHOUT_START,
    COUNTER_IN_FLIGHT_EVICTED, COUNTER_ISSUE_WITHOUT_START, COUNTER_READ_FAILED,
    COUNTER_RING_DROPPED, COUNTER_RING_SUBMITTED, COUNTER_SAMPLED, COUNTER_SYNC_EVICTED,
    DiskAggregate, LogicalWrites,
};
use iotop_bpf_common::throttle::{CallKey, CallTotals, DirtyTotals};
use iotop_bpf_probe::{
    Probes,
    control::{self, Knobs},
    maps::{Counters, PerCpuTable, ProbeMaps, Ring},
    privilege::Environment,
    report::ProbeReport,
};
use tokio::io::unix::AsyncFd;

use self::{
    annotate::annotate,
    decode::decode,
    kallsyms::Kallsyms,
    switches::{CallLatencySwitch, SchedSplitSwitch},
    throttle::{ThrottleSample, ThrottleWatch},
};
pub use self::{
    switches::CallLatencyMode,
    sysfs::{block_device_names, diskstats},
};
use crate::{
    clock::monotonic_ns,
    model::{
        CgroupInfo, Comm, DStateNow, Dev, DiskTotals, Input, KernelCounters, KernelSample, NoStack,
        SampleKind,
    },
};

/// The live feed: probes attached, ring buffer registered with tokio.
pub struct LiveFeed {
    events: AsyncFd<Ring>,
    counters: Counters,
    disks: PerCpuTable<u32, DiskAggregate>,
    logical_writes: PerCpuTable<u32, LogicalWrites>,
    stacks: stacks::StackBook,
    /// Cgroup ids seen on requests since the last sample, and their names.
    cgroups_seen: std::collections::HashSet<u64, foldhash::fast::RandomState>,
    cgroups: cgroups::CgroupNames,
    dstate_time: PerCpuTable<u32, u64>,
    /// Each process's D time from that map and the episode table's slots.
    dtime: dtime::DTime,
    /// Threads already in D when the probes attached (their episodes began unseen): tid ->
    /// (tgid, comm, stack from /proc), until they leave D.
    in_d_at_start: std::collections::HashMap<u32, (u32, String, Vec<String>)>,
    procs: procfs::ProcCache,
    /// The processes that read, and the files read ahead, since the last sample.
    readers: readers::Readers,
    block_sizes: mounts::BlockSizes,
    mounts: mounts::MountWatch,
    /// Processes that exited since the last sample: their per-process kernel map entries go
    /// once the sample has read their last values.
    exited: Vec<u32>,
    self_cost: self_cost::SelfCostMeter,
    dio_calls: PerCpuTable<CallKey, CallTotals>,
    dirty_pauses: PerCpuTable<u32, DirtyTotals>,
    /// The wait before the request: who had calls or pauses, and their cgroups.
    throttle: ThrottleWatch,
    sched_split: SchedSplitSwitch,
    /// Aggregation mode: its switch and the kernel's per-(process, disk) sums.
    aggregation: aggregation::Aggregation,
    /// The largest filesystem or physical block size in use (see `refresh_geometry`).
    largest_block: u64,
    started_ns: u64,
    report: ProbeReport,
    /// Every write into the kernel's maps.
    knobs: Knobs,
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
            stacks,
            dstate_time,
            dio_calls,
            dirty_pauses,
            proc_disks,
        } = probes.take_maps()?;
        let mut knobs = probes.take_knobs()?;
        let aggregation = aggregation::Aggregation::new(
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
            stacks: stacks::StackBook::new(stacks, kallsyms),
            cgroups_seen: std::collections::HashSet::default(),
            cgroups: cgroups::CgroupNames::new(),
            dstate_time,
            dtime: dtime::DTime::default(),
            in_d_at_start,
            procs: procfs::ProcCache::default(),
            readers: readers::Readers::default(),
            block_sizes: mounts::BlockSizes::default(),
            mounts: mounts::MountWatch::open(),
            exited: Vec::new(),
            self_cost: self_cost::SelfCostMeter::default(),
            dio_calls,
            dirty_pauses,
            throttle: ThrottleWatch::new(CallLatencySwitch::new(
                CallLatencyMode::from_env(),
                report.call_latency,
                &mut knobs,
            )),
            sched_split: SchedSplitSwitch::new(),
            aggregation,
            largest_block: 4096,
            started_ns: monotonic_ns(),
            report,
            knobs,
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
        if let Err(e) = self.knobs.set_dio_align(align) {
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
            let Some(item) = ring.next_record() else {
                break;
            };
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
                        self.sched_split.saw_request(io.dev, &mut self.knobs);
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
                    if let Input::Block(io) = &input {
                        self.readers.saw(io, now_ns);
                    }
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
        let counter = |index: u32| self.counters.total(index);
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
            sync_evicted: counter(COUNTER_SYNC_EVICTED),
        };
        let disks: Vec<DiskTotals> = self
            .disks
            .entries()
            .map(|(dev, per_cpu)| sum_disk(Dev::from_kernel(dev), per_cpu.iter()))
            .collect();
        let mut writers = Vec::new();
        let logical_writes = self
            .logical_writes
            .entries()
            .map(|(tgid, per_cpu)| {
                // The command is on the CPU that created the entry.
                if let Some(first) = per_cpu.iter().find(|w| w.comm[0] != 0) {
                    writers.push((tgid, Comm::from_bytes(first.comm)));
                }
                (tgid, per_cpu.iter().map(|w| w.bytes).sum())
            })
            .collect();
        let handed: Vec<(u32, u64)> = self
            .dstate_time
            .entries()
            .map(|(tgid, per_cpu)| (tgid, per_cpu.iter().sum()))
            .collect();
        let dstate_time = self
            .dtime
            .sample(handed.into_iter(), self.knobs.episodes().totals());
        let ThrottleSample {
            dio_calls,
            dirty_pauses,
            dirty_settings,
            io_limits,
        } = self.throttle.sample(
            &mut self.dio_calls,
            &self.dirty_pauses,
            &mut self.block_sizes,
            &mut self.knobs,
            &self.exited,
            now_ns,
        );
        // The mode of the interval this sample closes, and what it summed; then the mode of
        // the next one, from this one's rate.
        let aggregating = self.aggregation.on();
        let proc_disks = self.aggregation.sums(&self.exited);
        let (proc_reads, file_names) = self.readers.sample(&proc_disks, &mut self.procs);
        let requests: u64 = disks.iter().map(|d| d.requests.iter().sum::<u64>()).sum();
        if let Err(e) =
            self.aggregation
                .decide(requests, now_ns, self.largest_block, &mut self.knobs)
            && !self.report.degraded.contains(&e)
        {
            self.report.degraded.push(e);
        }
        // This sample read the exited processes' last values: their entries go.
        let exited = std::mem::take(&mut self.exited);
        control::forget(&mut self.logical_writes, exited.iter().copied());
        control::forget(&mut self.dstate_time, exited.iter().copied());
        self.dtime.forget(exited.iter().copied());
        control::forget(&mut self.dirty_pauses, exited.iter().copied());
        self.read_stuck_stacks();
        let dstate_now = self.dstate_now(now_ns);
        let names = block_device_names();
        let geometry = self.block_sizes.geometry(&names);
        let schedulers = sysfs::schedulers(&names);
        self.sched_split
            .close_interval(&schedulers, &mut self.knobs);
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
            proc_reads,
            file_names,
        }
    }
}

impl LiveFeed {
    /// The stacks of the threads still in D, from the task iterator once per interval; a
    /// failure degrades the wait sites of stuck threads, said once.
    fn read_stuck_stacks(&mut self) {
        if let Some(threads) = self.probes.threads_in_d() {
            match threads {
                Ok(threads) => self.stacks.set_stuck(threads.into_iter().map(|t| {
                    let frames = usize::try_from(t.stack_bytes).unwrap_or(0) / 8;
                    (t.tid, t.ips[..frames.min(t.ips.len())].to_vec())
                })),
                Err(e) => {
                    let note = format!("{}: {e:#}", iotop_bpf_probe::plan::Part::StuckSites.loss());
                    if !self.report.degraded.contains(&note) {
                        self.report.degraded.push(note);
                    }
                }
            }
        }
    }

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
        for (tid, episode) in self.knobs.episodes().in_progress() {
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
                tgid: episode.tgid(),
                comm: Comm::from_bytes(episode.comm).to_string(),
                start_ns: Some(episode.start_ns),
                stack,
                no_stack,
            });
        }
        for (tid, start_ns) in stale {
            // Unless a new episode replaced it in between.
            self.knobs.end_stale_episode(tid, start_ns);
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
/// An episode older than this whose thread is not in D is stale.
const STALE_AFTER_NS: u64 = 1_000_000_000;

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
