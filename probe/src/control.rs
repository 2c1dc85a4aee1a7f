//! Every change user space makes to the probes after they are loaded, in one place: the
//! writes into their maps and the programs attached late. The probes read the switches and
//! alignments here at every event; the feed decides *when* to turn them (the mount table
//! changed, a scheduled disk got busy, a cgroup I/O control appeared, the rate of requests
//! crossed the aggregation threshold, a D episode went stale, a process exited, an io_uring
//! sync showed up, the run-time statistics are due) and calls [`Knobs`], [`forget`],
//! [`Probes::attach_for_io_uring_syncs`] or [`enable_run_time_stats`].
//! Nothing else writes a kernel map after loading: the maps [`Knobs`] owns are private to
//! this room, and the episode table's write is `pub(super)`.

use std::os::fd::OwnedFd;

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Pod,
    maps::{Array, MapData, MapError},
};
use iotop_bpf_common::{
    aggregate::AGGREGATE_ALIGN,
    dio::DIO_STREAM_ALIGN,
    maps::{DSTATE_EPISODES, SCHED_SPLIT_ON},
    sync::URING_SYNC_SEEN,
    throttle::{CALL_LATENCY_ON, CallSlot, DIO_CALLS_IN_FLIGHT},
};

use crate::{
    Probes,
    attach::{classic_program, raw_program},
    episodes::{self, EpisodeTableView},
    maps::PerCpuTable,
    plan::Attach,
};

/// The probes' one-entry switches and alignments, the direct I/O calls in flight and the D
/// episodes in progress: what user space writes into the kernel.
pub struct Knobs {
    /// The alignment below which direct I/O calls are streamed.
    dio_stream_align: Array<MapData, u64>,
    /// The scheduler split's switch (`SCHED_SPLIT_ON`).
    sched_split_on: Array<MapData, u32>,
    /// The switch of direct I/O call latency (`CALL_LATENCY_ON`).
    call_latency_on: Array<MapData, u32>,
    /// Aggregation mode's switch and alignment (`AGGREGATE_ALIGN`; 0: streaming).
    aggregate_align: Array<MapData, u64>,
    /// Direct I/O calls in progress (a set-associative array).
    dio_calls_in_flight: Array<MapData, CallSlot>,
    /// The D episodes in progress (`DSTATE_EPISODES`, mapped).
    dstate_episodes: EpisodeTableView,
}

impl Knobs {
    /// Direct I/O calls not aligned to `align` bytes are streamed (the largest filesystem or
    /// physical block size in use).
    pub fn set_dio_align(&mut self, align: u64) -> Result<(), MapError> {
        self.dio_stream_align.set(0, align, 0)
    }

    /// Times `block_rq_insert` (the scheduler split) or not.
    pub fn set_sched_split(&mut self, on: bool) -> Result<(), MapError> {
        self.sched_split_on.set(0, u32::from(on), 0)
    }

    /// Measures direct I/O call latency or not.
    pub fn set_call_latency(&mut self, on: bool) -> Result<(), MapError> {
        self.call_latency_on.set(0, u32::from(on), 0)
    }

    /// Sums plain requests aligned to `align` bytes instead of streaming them (0: streams
    /// every request).
    pub fn set_aggregate_align(&mut self, align: u64) -> Result<(), MapError> {
        self.aggregate_align.set(0, align, 0)
    }

    /// Frees every direct I/O call in flight: a call noted before measuring was switched off
    /// must not pair with a completion seen after it is switched on again (its kiocb reused
    /// by a call not noted).
    pub fn clear_calls_in_flight(&mut self) {
        let free = CallSlot {
            iocb: 0,
            start_ns: 0,
            tgid: 0,
            _pad: 0,
        };
        let in_flight = &mut self.dio_calls_in_flight;
        for index in 0..in_flight.len() {
            if in_flight.get(&index, 0).is_ok_and(|slot| slot.iocb != 0) {
                let _ = in_flight.set(index, free, 0);
            }
        }
    }

    /// The D episodes in progress (read in place; see `EpisodeTableView::in_progress`).
    pub fn episodes(&self) -> &EpisodeTableView {
        &self.dstate_episodes
    }

    /// Ends the episode of `tid` that started at `start_ns`, whose wakeup was missed, unless
    /// the probes replaced it since.
    pub fn end_stale_episode(&self, tid: u32, start_ns: u64) {
        self.dstate_episodes.end_stale(tid, start_ns);
    }
}

/// Removes `keys` from a per-process map: the entries of processes that exited, once a
/// sample has read their last values.
pub fn forget<K: Pod, V: Pod>(map: &mut PerCpuTable<K, V>, keys: impl IntoIterator<Item = K>) {
    for key in keys {
        map.remove(&key);
    }
}

/// Turns on the kernel's run-time statistics of every BPF program (`BPF_ENABLE_STATS`) until
/// the returned fd is closed. Without CAP_SYS_ADMIN the kernel refuses: `None`.
pub fn enable_run_time_stats() -> Option<OwnedFd> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).ok()
}

impl Probes {
    /// What user space writes into the kernel, taken out of the object (once).
    pub fn take_knobs(&mut self) -> Result<Knobs> {
        let mut take = |name: &str| {
            self.ebpf
                .take_map(name)
                .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
        };
        Ok(Knobs {
            dio_stream_align: Array::try_from(take(DIO_STREAM_ALIGN)?)
                .context("map DIO_STREAM_ALIGN")?,
            sched_split_on: Array::try_from(take(SCHED_SPLIT_ON)?).context("map SCHED_SPLIT_ON")?,
            call_latency_on: Array::try_from(take(CALL_LATENCY_ON)?)
                .context("map CALL_LATENCY_ON")?,
            aggregate_align: Array::try_from(take(AGGREGATE_ALIGN)?)
                .context("map AGGREGATE_ALIGN")?,
            dio_calls_in_flight: Array::try_from(take(DIO_CALLS_IN_FLIGHT)?)
                .context("map DIO_CALLS_IN_FLIGHT")?,
            dstate_episodes: match take(DSTATE_EPISODES)? {
                aya::maps::Map::Array(map) => episodes::EpisodeTableView::map(map)?,
                _ => bail!("map DSTATE_EPISODES is not an array"),
            },
        })
    }

    /// Attaches the deferred probes once the probes have seen an io_uring sync
    /// (`URING_SYNC_SEEN`); cheap to call often (one map read until then, nothing after).
    /// Returns whether it attached them now.
    pub fn attach_for_io_uring_syncs(&mut self) -> Result<bool> {
        if self.deferred.is_empty() {
            return Ok(false);
        }
        let seen = self
            .ebpf
            .map(URING_SYNC_SEEN)
            .and_then(|map| Array::<_, u32>::try_from(map).ok())
            .and_then(|array| array.get(&0, 0).ok())
            .unwrap_or(0);
        if seen == 0 {
            return Ok(false);
        }
        for step in std::mem::take(&mut self.deferred) {
            let link: Box<dyn Send> = match step.attach {
                Attach::Raw(name) => {
                    let program = raw_program(&mut self.ebpf, step.program)?;
                    let link = program.attach(name).with_context(|| {
                        format!("attach {} to raw tracepoint {name}", step.program)
                    })?;
                    Box::new(program.take_link(link)?)
                }
                Attach::Classic(category, name) => {
                    let program = classic_program(&mut self.ebpf, step.program)?;
                    let link = program.attach(category, name).with_context(|| {
                        format!("attach {} to tracepoint {category}:{name}", step.program)
                    })?;
                    Box::new(program.take_link(link)?)
                }
                Attach::Btf(_) | Attach::Iter(_) | Attach::Entry(_) | Attach::Exit(_) => {
                    bail!("{} ({}) is never deferred", step.program, step.attach)
                }
            };
            self.links.push(link);
        }
        Ok(true)
    }
}
