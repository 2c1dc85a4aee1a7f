//! Map names and kernel-side aggregates read by user space.

use crate::{block::OP_COUNT, hist::SLOTS};

/// Ring buffer of records ([`crate::RecordHeader`]-framed).
pub const EVENTS: &str = "EVENTS";
/// Per-CPU array of `u64` counters indexed by the `COUNTER_*` constants.
pub const COUNTERS: &str = "COUNTERS";
/// Per-CPU hash: kernel `dev_t` -> [`DiskAggregate`].
pub const DISK_AGGREGATES: &str = "DISK_AGGREGATES";
/// Array of [`crate::dstate::EpisodeSet`]: the D episodes in progress, by thread id (mmapable:
/// user space reads it in place).
pub const DSTATE_EPISODES: &str = "DSTATE_EPISODES";
/// Stack traces of tasks going into D state.
pub const STACKS: &str = "STACKS";
/// Per-CPU hash: tgid -> ns spent in D state (finished episodes), cumulative.
pub const DSTATE_TIME: &str = "DSTATE_TIME";
/// Per-CPU LRU hash: tgid -> [`LogicalWrites`], cumulative.
pub const LOGICAL_WRITES: &str = "LOGICAL_WRITES";

/// Bytes a process asked to write to files and block devices (write system calls), and its
/// command, stored by the CPU that created the entry (zero on the others): a writer that
/// never reaches a disk or syncs in its life (tar's children, rsync's sender, `head -c`) is
/// still a process with a row.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct LogicalWrites {
    pub bytes: u64,
    pub comm: [u8; crate::COMM_LEN],
}
/// Array of one `u32`: non-zero while the scheduler split is measured (`block_rq_insert`
/// is timed only then; user space turns it on while a disk with an I/O scheduler is busy).
pub const SCHED_SPLIT_ON: &str = "SCHED_SPLIT_ON";
/// Array of requests in flight ([`crate::block::InFlightSet`], 4-way set associative).
pub const IN_FLIGHT: &str = "IN_FLIGHT";

/// A ring-buffer reservation failed: a record was lost (the ring was full).
pub const COUNTER_RING_DROPPED: u32 = 0;
/// A completion arrived for a request that was never seen created or issued.
pub const COUNTER_COMPLETE_WITHOUT_START: u32 = 1;
/// A tracepoint field could not be read (`bpf_probe_read_kernel` failed).
pub const COUNTER_READ_FAILED: u32 = 2;
/// A request's in-flight set was full and an older entry was evicted (its completion will
/// then count as unpaired).
pub const COUNTER_IN_FLIGHT_EVICTED: u32 = 3;
/// Requests issued without a creation event (attributed to the issuing task).
pub const COUNTER_ISSUE_WITHOUT_START: u32 = 4;
/// An open sync was dropped because its set of the per-thread table was full: its record
/// is lost.
pub const COUNTER_SYNC_EVICTED: u32 = 5;
/// A D episode was replaced or dropped unfinished: its wakeup was never seen, or its set of
/// the episode table was full.
pub const COUNTER_DSTATE_STALE: u32 = 6;
/// Records put in the ring buffer: with the dropped ones, every record the probes produced.
pub const COUNTER_RING_SUBMITTED: u32 = 7;
/// Requests summed per (process, disk) in aggregation mode instead of streamed.
pub const COUNTER_AGGREGATED: u32 = 8;
/// Requests that could have been summed and were streamed as the counted sample.
pub const COUNTER_SAMPLED: u32 = 9;
/// Requests streamed because the per-(process, disk) map was full (none is lost: a request
/// that cannot be summed is streamed).
pub const COUNTER_AGGREGATE_FULL: u32 = 10;
/// A D episode ended without its wakeup's enqueue stamp where the kernel keeps them
/// (`sched_info.last_queued` read 0: on 5.10 the scheduler stamps it only with schedstats or
/// delay accounting on): it ended when its thread ran again instead.
pub const COUNTER_DSTATE_UNQUEUED: u32 = 11;
pub const COUNTER_COUNT: u32 = 12;

/// Per-disk totals kept in the kernel, so disk figures stay exact even when the ring buffer
/// overflows. Cumulative since the probes were loaded; user space takes differences.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DiskAggregate {
    /// Completed requests per `OP_*`.
    pub requests: [u64; OP_COUNT],
    /// Completed bytes per `OP_*`.
    pub bytes: [u64; OP_COUNT],
    /// Sum of latency (created -> completed) per `OP_*`, ns: iostat's r_await / w_await.
    pub latency_ns: [u64; OP_COUNT],
    pub errors: u64,
    /// Sum of queue time (created -> issued), ns.
    pub queue_ns: u64,
    /// Sum of device time (issued -> completed), ns.
    pub device_ns: u64,
    /// log2 histograms (see [`crate::hist::log2_slot`]): total, queue and device time.
    pub total_hist: [u64; SLOTS],
    pub queue_hist: [u64; SLOTS],
    pub device_hist: [u64; SLOTS],
    /// Requests that went through an I/O scheduler (completed), and their queue time split
    /// as btt does: created -> inserted (G2I: plugged) and inserted -> issued (I2D: in the
    /// scheduler), sums in ns: btt's averages.
    pub inserted: u64,
    pub g2i_ns: u64,
    pub i2d_ns: u64,
}

const _: () = assert!(core::mem::size_of::<DiskAggregate>() == (3 * OP_COUNT + 6 + 3 * SLOTS) * 8);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain `#[repr(C)]` data without padding (checked by bytemuck's Pod derive).
    unsafe impl aya::Pod for super::DiskAggregate {}
    unsafe impl aya::Pod for super::LogicalWrites {}
    unsafe impl aya::Pod for crate::aggregate::ProcDiskKey {}
    unsafe impl aya::Pod for crate::aggregate::ProcDiskAggregate {}
    unsafe impl aya::Pod for crate::block::InFlightKey {}
    unsafe impl aya::Pod for crate::block::InFlight {}
    unsafe impl aya::Pod for crate::block::InFlightSet {}
    unsafe impl aya::Pod for crate::sync::SyscallOffsets {}
    unsafe impl aya::Pod for crate::dstate::Episode {}
    unsafe impl aya::Pod for crate::dstate::EpisodeSet {}
    unsafe impl aya::Pod for crate::dio::DioOffsets {}
    unsafe impl aya::Pod for crate::block::RawOffsets {}
    unsafe impl aya::Pod for crate::dstate::SchedOffsets {}
    unsafe impl aya::Pod for crate::dstate::DStateOffsets {}
    unsafe impl aya::Pod for crate::tracepoint::FieldOffsets {}
    unsafe impl aya::Pod for crate::process::ExitOffsets {}
    unsafe impl aya::Pod for crate::sync::FileOffsets {}
    unsafe impl aya::Pod for crate::dio::RawDioOffsets {}
    unsafe impl aya::Pod for crate::blame::BlameOffsets {}
    unsafe impl aya::Pod for crate::blame::Dirtier {}
    unsafe impl aya::Pod for crate::throttle::CallKey {}
    unsafe impl aya::Pod for crate::throttle::CallTotals {}
    unsafe impl aya::Pod for crate::throttle::CallSlot {}
    unsafe impl aya::Pod for crate::throttle::DirtyTotals {}
    unsafe impl aya::Pod for crate::throttle::DirtyOffsets {}
    unsafe impl aya::Pod for crate::sync::DurableOffsets {}
    unsafe impl aya::Pod for crate::sync::DurableBtf {}
    unsafe impl aya::Pod for crate::raw::RawLayout {}
}
