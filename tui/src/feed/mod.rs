//! Where events come from: the live ring buffer, plus the kernel-side totals and the block
//! device names sampled at the end of each interval.

mod kallsyms;
mod mounts;
mod procfs;
pub mod recording;
mod sysfs;

use std::{io, os::fd::AsRawFd as _};

use anyhow::{Context as _, Result};
use aya::maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap};
use iotop_bpf_common::dstate::Episode;
use iotop_bpf_common::maps::{
    COUNTER_COMPLETE_WITHOUT_START, COUNTER_IN_FLIGHT_EVICTED, COUNTER_ISSUE_WITHOUT_START,
    COUNTER_READ_FAILED, COUNTER_RING_DROPPED, DiskAggregate,
};
use tokio::io::unix::AsyncFd;

use self::kallsyms::Kallsyms;
pub use self::sysfs::{block_device_names, diskstats};
use crate::{
    decode::{DecodeError, Record, decode},
    model::{Comm, DStateNow, Dev, DiskTotals, KernelCounters, KernelSample},
    probe::{ProbeMaps, ProbeReport, Probes, privilege::Environment},
};

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    #[expect(clippy::cast_sign_loss, reason = "CLOCK_MONOTONIC is never negative")]
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    ns
}

/// The live feed: probes attached, ring buffer registered with tokio.
pub struct LiveFeed {
    events: AsyncFd<RingBuf<MapData>>,
    counters: PerCpuArray<MapData, u64>,
    disks: PerCpuHashMap<MapData, u32, DiskAggregate>,
    logical_writes: PerCpuHashMap<MapData, u32, u64>,
    dstate_episodes: HashMap<MapData, u32, Episode>,
    stacks: StackTraceMap<MapData>,
    dstate_time: PerCpuHashMap<MapData, u32, u64>,
    kallsyms: Kallsyms,
    /// Threads already in D when the probes attached (their episodes began unseen): tid ->
    /// (tgid, comm, stack from /proc), until they leave D.
    in_d_at_start: std::collections::HashMap<u32, (u32, String, Vec<String>)>,
    procs: procfs::ProcCache,
    block_sizes: mounts::BlockSizes,
    started_ns: u64,
    report: ProbeReport,
    // Last, so the maps above are closed before the programs are detached.
    _probes: Probes,
}

impl LiveFeed {
    /// Loads and attaches the probes. Must run inside a tokio runtime.
    pub fn start(env: &Environment) -> Result<Self> {
        let mut probes = Probes::load(env)?;
        let ProbeMaps {
            events,
            counters,
            disks,
            logical_writes,
            dstate_episodes,
            stacks,
            dstate_time,
        } = probes.take_maps()?;
        let kallsyms = Kallsyms::load();
        let mut report = probes.report.clone();
        if !kallsyms.usable() {
            report.degraded.push(
                "kernel symbols are hidden (kernel.kptr_restrict): D-state stacks show no function names"
                    .to_string(),
            );
        }
        let in_d_at_start = procfs::threads_in_d()
            .into_iter()
            .map(|(tid, tgid, comm)| {
                let stack = std::fs::read_to_string(format!("/proc/{tid}/stack"))
                    .map(|text| kallsyms::parse_proc_stack(&text))
                    .ok()
                    .filter(|frames| !frames.is_empty())
                    .or_else(|| {
                        let wchan = std::fs::read_to_string(format!("/proc/{tid}/wchan")).ok()?;
                        (!wchan.is_empty() && wchan != "0").then(|| vec![wchan])
                    })
                    .unwrap_or_default();
                (tid, (tgid, comm, stack))
            })
            .collect();
        // SAFETY: the ring buffer owns its fd and is owned by the AsyncFd for as long as it is
        // registered, so the fd stays open while registered.
        let events = unsafe { AsyncFd::register(events) }
            .map_err(io::Error::from)
            .context("register the ring buffer with tokio")?;
        Ok(Self {
            events,
            counters,
            disks,
            logical_writes,
            dstate_episodes,
            stacks,
            dstate_time,
            kallsyms,
            in_d_at_start,
            procs: procfs::ProcCache::default(),
            block_sizes: mounts::BlockSizes::default(),
            started_ns: monotonic_ns(),
            report,
            _probes: probes,
        })
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

    /// Drains up to `max` records without blocking, handing each to `sink`. Returns how many
    /// were taken (less than `max` means the ring is empty).
    pub fn drain(
        &mut self,
        max: usize,
        sink: &mut impl FnMut(Result<Record, DecodeError>),
    ) -> usize {
        let ring = self.events.get_mut();
        let now_ns = monotonic_ns();
        let mut taken = 0;
        while taken < max {
            let Some(item) = ring.next() else { break };
            let mut record = decode(&item);
            drop(item);
            if let Ok(record) = &mut record {
                annotate(
                    &mut self.procs,
                    &mut self.block_sizes,
                    &self.stacks,
                    &self.kallsyms,
                    record,
                    now_ns,
                );
            }
            sink(record);
            taken += 1;
        }
        taken
    }

    /// The kernel-side totals and device names, at `now`.
    pub fn sample(&mut self) -> KernelSample {
        let now_ns = monotonic_ns();
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
        };
        let disks = self
            .disks
            .iter()
            .filter_map(Result::ok)
            .map(|(dev, per_cpu)| sum_disk(Dev::from_kernel(dev), per_cpu.iter()))
            .collect();
        let logical_writes = self
            .logical_writes
            .iter()
            .filter_map(Result::ok)
            .map(|(tgid, per_cpu)| (tgid, per_cpu.iter().sum()))
            .collect();
        let dstate_time = self
            .dstate_time
            .iter()
            .filter_map(Result::ok)
            .map(|(tgid, per_cpu)| (tgid, per_cpu.iter().sum()))
            .collect();
        let dstate_now = self.dstate_now(now_ns);
        KernelSample {
            now_ns,
            counters,
            disks,
            logical_writes,
            dstate_now,
            dstate_time,
            diskstats: diskstats(),
            names: block_device_names(),
        }
    }

    /// The ring buffer's fd, for diagnostics.
    pub fn ring_fd(&self) -> i32 {
        self.events.as_raw_fd()
    }
}

impl LiveFeed {
    /// Threads in D now: episodes in progress in the kernel map, and those already in D at
    /// start-up. An episode whose thread is no longer in D for over a second lost its wakeup
    /// (or its id was reused): it is removed rather than shown growing forever.
    fn dstate_now(&mut self, now_ns: u64) -> Vec<DStateNow> {
        let mut now = Vec::new();
        let mut stale = Vec::new();
        for (tid, episode) in self.dstate_episodes.iter().filter_map(Result::ok) {
            let age = now_ns.saturating_sub(episode.start_ns);
            if age > STALE_AFTER_NS && procfs::thread_state(tid) != Some('D') {
                stale.push(tid);
                continue;
            }
            now.push(DStateNow {
                pid: tid,
                tgid: episode.tgid,
                comm: Comm::from_bytes(episode.comm).to_string(),
                start_ns: Some(episode.start_ns),
                stack: stack_frames(&self.stacks, &self.kallsyms, episode.stack_id),
            });
        }
        for tid in stale {
            let _ = self.dstate_episodes.remove(&tid);
        }
        self.in_d_at_start
            .retain(|tid, _| procfs::thread_state(*tid) == Some('D'));
        for (&tid, (tgid, comm, stack)) in &self.in_d_at_start {
            if !now.iter().any(|d| d.pid == tid) {
                now.push(DStateNow {
                    pid: tid,
                    tgid: *tgid,
                    comm: comm.clone(),
                    start_ns: None,
                    stack: stack.clone(),
                });
            }
        }
        now
    }
}

/// An episode older than this whose thread is not in D is stale.
const STALE_AFTER_NS: u64 = 1_000_000_000;

/// Symbolized frames of a kernel stack id (empty when it was not taken or is gone).
fn stack_frames(
    stacks: &StackTraceMap<MapData>,
    kallsyms: &Kallsyms,
    stack_id: i32,
) -> Vec<String> {
    let Ok(id) = u32::try_from(stack_id) else {
        return Vec::new();
    };
    stacks
        .get(&id, 0)
        .map(|trace| kallsyms.frames(trace.frames().iter().map(|f| f.ip)))
        .unwrap_or_default()
}

/// Adds what the kernel maps and /proc know: kernel threads, the file behind a sync call's
/// fd, a D episode's symbolized stack.
fn annotate(
    procs: &mut procfs::ProcCache,
    block_sizes: &mut mounts::BlockSizes,
    stacks: &StackTraceMap<MapData>,
    kallsyms: &Kallsyms,
    record: &mut Record,
    now_ns: u64,
) {
    match record {
        Record::DState(episode) => episode.stack = stack_frames(stacks, kallsyms, episode.stack_id),
        Record::Dio(call) => {
            call.fs_block_size = block_sizes.fs_block_size(call.fs_dev);
            (call.disk, call.logical_block_size, call.physical_block_size) =
                block_sizes.disk(call.fs_dev);
        }
        Record::Block(io) => io.kernel_thread = procs.is_kernel_thread(io.tgid),
        Record::Sync(call) => {
            if let Some(fd) = call.fd {
                (call.file, call.dev) = procs.resolve_fd(call.tgid, fd, now_ns);
            }
        }
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
    }
    out
}
