//! The maps user space reads, taken from the loaded object once ([`Probes::take_maps`]) and
//! read into plain data: the ring buffer's records as bytes, the per-CPU tables as each key
//! with its values on every possible CPU, the counters summed, a stack's return addresses.
//! What the figures mean, and what the feed makes of them, is the feed's; what user space
//! writes into the kernel is `control.rs`'s (`Probes::take_knobs`).

use std::{
    ops::Deref,
    os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
};

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Pod,
    maps::{MapData, PerCpuArray, PerCpuHashMap, PerCpuValues, RingBuf, StackTraceMap},
};
use iotop_bpf_common::{
    aggregate::{PROC_DISK_AGGREGATES, ProcDiskAggregate, ProcDiskKey},
    maps::{
        COUNTERS, DISK_AGGREGATES, DSTATE_TIME, DiskAggregate, EVENTS, LOGICAL_WRITES,
        LogicalWrites, STACKS,
    },
    throttle::{CallKey, CallTotals, DIO_CALL_TOTALS, DIRTY_PAUSES, DirtyTotals},
};

use crate::Probes;

/// The maps user space reads.
pub struct ProbeMaps {
    pub events: Ring,
    pub counters: Counters,
    pub disks: PerCpuTable<u32, DiskAggregate>,
    /// tgid -> bytes asked to be written and the writer's command (an LRU per-CPU hash;
    /// aya reads it like a hash).
    pub logical_writes: PerCpuTable<u32, LogicalWrites>,
    pub stacks: Stacks,
    /// tgid -> ns in finished D episodes.
    pub dstate_time: PerCpuTable<u32, u64>,
    /// (tgid, filesystem) -> what its direct I/O calls took, cumulative.
    pub dio_calls: PerCpuTable<CallKey, CallTotals>,
    /// tgid -> its pauses in balance_dirty_pages, cumulative.
    pub dirty_pauses: PerCpuTable<u32, DirtyTotals>,
    /// (tgid, disk) -> the requests summed instead of streamed, cumulative.
    pub proc_disks: PerCpuTable<ProcDiskKey, ProcDiskAggregate>,
}

/// The ring buffer of records. Its fd is the one to wait on (it stays open, and the same,
/// for as long as the value lives), so that it can be registered with an event loop.
pub struct Ring(RingBuf<MapData>);

impl Ring {
    /// The next record, if one is ready; it is consumed when the returned bytes are dropped.
    pub fn next_record(&mut self) -> Option<impl Deref<Target = [u8]> + '_> {
        self.0.next()
    }
}

impl AsFd for Ring {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The probes' counters (`COUNTERS`, per CPU).
pub struct Counters(PerCpuArray<MapData, u64>);

impl Counters {
    /// Counter `index`, summed over every CPU (0 when it cannot be read).
    pub fn total(&self, index: u32) -> u64 {
        self.0
            .get(&index, 0)
            .map(|per_cpu| per_cpu.iter().sum())
            .unwrap_or(0)
    }
}

/// A per-CPU hash map of the probes: each key with its values on every possible CPU.
pub struct PerCpuTable<K: Pod, V: Pod>(PerCpuHashMap<MapData, K, V>);

impl<K: Pod, V: Pod> PerCpuTable<K, V> {
    /// Every entry that can be read now (one removed meanwhile is left out).
    pub fn entries(&self) -> impl Iterator<Item = (K, PerCpu<V>)> + '_ {
        self.0
            .iter()
            .filter_map(Result::ok)
            .map(|(key, values)| (key, PerCpu(values)))
    }

    /// Removes `key`; one already gone is no error (see [`crate::control::forget`]).
    pub(crate) fn remove(&mut self, key: &K) {
        let _ = self.0.remove(key);
    }
}

/// One entry's values, one per possible CPU.
pub struct PerCpu<V: Pod>(PerCpuValues<V>);

impl<V: Pod> Deref for PerCpu<V> {
    type Target = [V];

    fn deref(&self) -> &[V] {
        &self.0
    }
}

/// The stacks the probes took (`STACKS`), by id.
pub struct Stacks(StackTraceMap<MapData>);

impl Stacks {
    /// The return addresses of stack `id`, innermost first; `None` when it is gone
    /// (replaced by another stack with the same hash: `BPF_F_REUSE_STACKID`).
    pub fn ips(&self, id: u32) -> Option<Vec<u64>> {
        let trace = self.0.get(&id, 0).ok()?;
        Some(trace.frames().iter().map(|f| f.ip).collect())
    }
}

impl Probes {
    /// The maps user space reads, taken out of the object (once).
    pub fn take_maps(&mut self) -> Result<ProbeMaps> {
        let mut take = |name: &str| {
            self.ebpf
                .take_map(name)
                .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
        };
        Ok(ProbeMaps {
            events: Ring(RingBuf::try_from(take(EVENTS)?).context("map EVENTS")?),
            counters: Counters(PerCpuArray::try_from(take(COUNTERS)?).context("map COUNTERS")?),
            disks: PerCpuTable(
                PerCpuHashMap::try_from(take(DISK_AGGREGATES)?).context("map DISK_AGGREGATES")?,
            ),
            logical_writes: PerCpuTable(
                PerCpuHashMap::try_from(take(LOGICAL_WRITES)?).context("map LOGICAL_WRITES")?,
            ),
            stacks: Stacks(StackTraceMap::try_from(take(STACKS)?).context("map STACKS")?),
            dstate_time: PerCpuTable(
                PerCpuHashMap::try_from(take(DSTATE_TIME)?).context("map DSTATE_TIME")?,
            ),
            dio_calls: PerCpuTable(
                PerCpuHashMap::try_from(take(DIO_CALL_TOTALS)?).context("map DIO_CALL_TOTALS")?,
            ),
            dirty_pauses: PerCpuTable(
                PerCpuHashMap::try_from(take(DIRTY_PAUSES)?).context("map DIRTY_PAUSES")?,
            ),
            proc_disks: PerCpuTable(
                PerCpuHashMap::try_from(take(PROC_DISK_AGGREGATES)?)
                    .context("map PROC_DISK_AGGREGATES")?,
            ),
        })
    }
}
