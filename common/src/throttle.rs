//! The wait before the request: per-call latency of direct I/O (from
//! `iomap:iomap_dio_rw_begin` to `iomap:iomap_dio_complete`, paired in the kernel by the
//! `struct kiocb *`) and the pauses `balance_dirty_pages()` imposes on buffered writers.
//!
//! Both are aggregated in the kernel, per process, in bounded LRU per-CPU hashes that user
//! space reads every interval (cumulative; user space takes differences). Nothing is streamed
//! per call, but timing a call still costs a slot in a set-associative array at its start
//! and an LRU update at its end: it runs on demand ([`CALL_LATENCY_ON`]).
//!
//! blk-throttle (cgroup v1 `blkio.throttle.*`, v2 `io.max`), iocost and a full request queue
//! hold a bio *before* a request exists, so request latency (and iostat's await) never shows
//! that wait; the call's latency does.

/// Slots of the call-latency histogram: quarter-octaves of microseconds (see [`call_slot`]).
pub const CALL_SLOTS: usize = 96;

/// Slot of a call latency given in ns: exact microseconds below 4 us, then every power of two
/// of microseconds split into 4 equal sub-buckets (a slot is at most 25% wide, so a
/// percentile interpolated in it is within ~12% of the true value, where log2 slots give
/// 2x). The last slot (from ~29 s) also takes everything above.
///
/// Branch-light for the verifier: the bit count is [`crate::hist::bit_length`].
#[inline(always)]
#[must_use]
pub const fn call_slot(lat_ns: u64) -> u32 {
    let us = lat_ns / 1000;
    if us < 4 {
        return us as u32;
    }
    // Index of the highest set bit + 1: at least 3 here (us >= 4).
    let bits = crate::hist::bit_length(us);
    let sub = ((us >> (bits - 3)) & 3) as u32;
    let slot = 4 * (bits - 2) + sub;
    if slot >= CALL_SLOTS as u32 {
        CALL_SLOTS as u32 - 1
    } else {
        slot
    }
}

/// `[low, high)` in microseconds of a call-latency slot (the last one is open above).
#[must_use]
pub const fn call_slot_bounds_us(slot: usize) -> (u64, u64) {
    if slot < 4 {
        return (slot as u64, slot as u64 + 1);
    }
    let octave = slot / 4 + 1;
    let sub = (slot % 4) as u64;
    ((4 + sub) << (octave - 2), (5 + sub) << (octave - 2))
}

/// Per (process, filesystem): what its direct I/O calls took, cumulative since the probes were
/// loaded. The key of [`DIO_CALL_TOTALS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct CallKey {
    pub tgid: u32,
    /// The file's filesystem device (kernel `dev_t`).
    pub fs_dev: u32,
}

/// Cumulative figures of one [`CallKey`] on one CPU. Slots are `u32` to keep the per-CPU
/// value small (every CPU has one per entry); they wrap, and user space takes wrapping
/// differences, exact while a slot gains fewer than 2^32 calls per interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct CallTotals {
    pub calls: u64,
    /// Sum of the calls' latencies, ns.
    pub sum_ns: u64,
    /// Calls per [`call_slot`].
    pub slots: [u32; CALL_SLOTS],
}

impl CallTotals {
    pub const ZERO: Self = Self {
        calls: 0,
        sum_ns: 0,
        slots: [0; CALL_SLOTS],
    };
}

const _: () = assert!(core::mem::size_of::<CallTotals>() == 16 + 4 * CALL_SLOTS);

/// A direct I/O call in progress: one slot of [`DIO_CALLS_IN_FLIGHT`], a 4-way
/// set-associative array keyed by the call's `struct kiocb *` (`iocb`; 0: a free slot).
/// Completions run in interrupt or worker context, so who made the call is kept here; the
/// filesystem is read from the kiocb at completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct CallSlot {
    pub iocb: u64,
    pub start_ns: u64,
    pub tgid: u32,
    pub _pad: u32,
}

/// Array of [`CallSlot`]s. A call that never completes through `iomap_dio_complete` (an early
/// error, `-EAGAIN` of a `NOWAIT` attempt retried later) keeps its slot until its kiocb is
/// reused or its set fills up (then the set's first slot is taken over); user space clears
/// the table when measuring is switched off, and the completion ignores a call older than
/// [`CALL_STALE_NS`].
pub const DIO_CALLS_IN_FLIGHT: &str = "DIO_CALLS_IN_FLIGHT";
/// A call in flight for longer than this never completed where the probes can see it.
pub const CALL_STALE_NS: u64 = 60_000_000_000;
/// Slots of [`DIO_CALLS_IN_FLIGHT`]: direct I/O calls in flight at once, all processes.
pub const DIO_CALLS_IN_FLIGHT_SLOTS: u32 = 1 << 14;
/// Slots per set (a power of two).
pub const DIO_CALLS_IN_FLIGHT_WAYS: u32 = 4;

/// The first slot of the set `iocb` lives in (the others follow it).
#[inline(always)]
#[must_use]
pub const fn call_set(iocb: u64) -> u32 {
    let mixed = iocb.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((mixed >> 40) as u32 & (DIO_CALLS_IN_FLIGHT_SLOTS - 1)) & !(DIO_CALLS_IN_FLIGHT_WAYS - 1)
}

/// LRU per-CPU hash: [`CallKey`] -> [`CallTotals`].
pub const DIO_CALL_TOTALS: &str = "DIO_CALL_TOTALS";
/// Entries of [`DIO_CALL_TOTALS`]: (process, filesystem) pairs doing direct I/O at once.
pub const DIO_CALL_TOTALS_ENTRIES: u32 = 2_048;

/// Per process: the pauses `balance_dirty_pages()` imposed on its writers (the
/// `writeback:balance_dirty_pages` tracepoint, in the writer's context), cumulative, and the
/// write-back state at its last pause on this CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DirtyTotals {
    /// Pauses (tracepoint hits with a positive pause).
    pub pauses: u64,
    /// Sum of the pauses, ms (the tracepoint reports them in ms).
    pub pause_ms: u64,
    /// When the last pause on this CPU began (`bpf_ktime_get_ns`): user space takes the last
    /// values from the CPU with the newest.
    pub last_ns: u64,
    /// The dirty limit the writer was held to, and the dirty pages then (global, pages).
    pub limit_pages: u64,
    pub dirty_pages: u64,
    /// Dirty pages of the device being written back (its `bdi`).
    pub wb_dirty_pages: u64,
    pub comm: [u8; crate::COMM_LEN],
    /// The backing device (`bdi`) name: `major:minor` for a block device.
    pub bdi: [u8; DIRTY_BDI_LEN],
}

impl DirtyTotals {
    pub const ZERO: Self = Self {
        pauses: 0,
        pause_ms: 0,
        last_ns: 0,
        limit_pages: 0,
        dirty_pages: 0,
        wb_dirty_pages: 0,
        comm: [0; crate::COMM_LEN],
        bdi: [0; DIRTY_BDI_LEN],
    };
}

/// Bytes of the `bdi` name kept (the tracepoint's field is 32).
pub const DIRTY_BDI_LEN: usize = 32;

const _: () = assert!(core::mem::size_of::<DirtyTotals>() == 48 + 16 + DIRTY_BDI_LEN);

/// LRU per-CPU hash: tgid -> [`DirtyTotals`].
pub const DIRTY_PAUSES: &str = "DIRTY_PAUSES";
pub const DIRTY_PAUSES_ENTRIES: u32 = 4_096;

/// Offsets of `writeback:balance_dirty_pages`'s fields (from its tracefs format).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DirtyOffsets {
    pub bdi: u32,
    pub limit: u32,
    pub dirty: u32,
    pub wb_dirty: u32,
    pub pause: u32,
    pub _pad: u32,
}

impl DirtyOffsets {
    pub const ABSENT: Self = Self {
        bdi: crate::tracepoint::ABSENT,
        limit: crate::tracepoint::ABSENT,
        dirty: crate::tracepoint::ABSENT,
        wb_dirty: crate::tracepoint::ABSENT,
        pause: crate::tracepoint::ABSENT,
        _pad: 0,
    };
}

pub const GLOBAL_DIRTY_OFFSETS: &str = "DIRTY_OFFSETS";
/// Array, one `u32`: non-zero while direct I/O call latency is measured (user space turns it
/// on and off: see the feed's `CallLatencySwitch`).
pub const CALL_LATENCY_ON: &str = "CALL_LATENCY_ON";
/// `u8`: 1 when `iomap_dio_complete` is attached, so the begin probe notes calls.
pub const GLOBAL_DIO_CALL_LATENCY: &str = "DIO_CALL_LATENCY";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_quarter_octaves_of_microseconds() {
        assert_eq!(call_slot(0), 0);
        assert_eq!(call_slot(3_999), 3);
        assert_eq!(call_slot(4_000), 4);
        assert_eq!(call_slot(7_999), 7);
        assert_eq!(call_slot(8_000), 8);
        assert_eq!(call_slot(9_999), 8);
        assert_eq!(call_slot(10_000), 9);
        assert_eq!(call_slot(16_000), 12);
        // 100 ms = 100,000 us: in [2^16, 2^17) = [65,536, 131,072), sub-bucket
        // (100,000 >> 14) & 3 = 6 & 3 = 2: [98,304, 114,688).
        assert_eq!(call_slot(100_000_000), 4 * 15 + 2);
        assert_eq!(call_slot(u64::MAX), CALL_SLOTS as u32 - 1);
    }

    #[test]
    fn every_latency_lies_inside_its_slot() {
        let mut ns = 1u64;
        while ns < 1 << 45 {
            let slot = call_slot(ns) as usize;
            let (lo, hi) = call_slot_bounds_us(slot);
            let us = ns / 1000;
            assert!(us >= lo, "{ns} ns in slot {slot} [{lo}, {hi})");
            assert!(
                us < hi || slot == CALL_SLOTS - 1,
                "{ns} ns in slot {slot} [{lo}, {hi})"
            );
            // A slot is at most a quarter of its lower bound wide (beyond the exact ones).
            if lo >= 4 {
                assert!((hi - lo) * 4 <= lo, "slot {slot} [{lo}, {hi})");
            }
            ns = ns * 9 / 8 + 1;
        }
    }

    #[test]
    fn slots_are_contiguous() {
        for slot in 1..CALL_SLOTS {
            assert_eq!(
                call_slot_bounds_us(slot - 1).1,
                call_slot_bounds_us(slot).0,
                "slot {slot}"
            );
        }
    }
}
