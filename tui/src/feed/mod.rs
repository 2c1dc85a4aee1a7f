//! Where events come from: the live ring buffer, plus the kernel-side totals and the block
//! device names sampled at the end of each interval.

mod procfs;
mod sysfs;

use std::{io, os::fd::AsRawFd as _};

use anyhow::{Context as _, Result};
use aya::maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use iotop_bpf_common::maps::{
    COUNTER_COMPLETE_WITHOUT_START, COUNTER_IN_FLIGHT_EVICTED, COUNTER_ISSUE_WITHOUT_START,
    COUNTER_READ_FAILED, COUNTER_RING_DROPPED, DiskAggregate,
};
use tokio::io::unix::AsyncFd;

pub use self::sysfs::{block_device_names, diskstats};
use crate::{
    decode::{DecodeError, Record, decode},
    model::{Dev, DiskTotals, KernelCounters, KernelSample},
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
    procs: procfs::ProcCache,
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
        } = probes.take_maps()?;
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
            procs: procfs::ProcCache::default(),
            started_ns: monotonic_ns(),
            report: probes.report.clone(),
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
                annotate(&mut self.procs, record, now_ns);
            }
            sink(record);
            taken += 1;
        }
        taken
    }

    /// The kernel-side totals and device names, at `now`.
    pub fn sample(&self) -> KernelSample {
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
        KernelSample {
            now_ns,
            counters,
            disks,
            logical_writes,
            diskstats: diskstats(),
            names: block_device_names(),
        }
    }

    /// The ring buffer's fd, for diagnostics.
    pub fn ring_fd(&self) -> i32 {
        self.events.as_raw_fd()
    }
}

/// Adds what /proc knows: kernel threads, and the file behind a sync call's fd.
fn annotate(procs: &mut procfs::ProcCache, record: &mut Record, now_ns: u64) {
    match record {
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
