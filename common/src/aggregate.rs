//! Aggregation mode: past a measured rate of requests, the probes sum the plain requests per
//! (process, disk) in a per-CPU map instead of streaming a record for each, and stream only
//! what the panes and detectors need one by one (see [`aggregable`]) plus one request in
//! [`SAMPLE_EVERY`] of the rest. Disk totals are kept in the kernel in both modes; process
//! totals stay exact too: every completed request is either streamed or summed here.

use crate::{
    COMM_LEN,
    block::{
        FLAG_FUA, FLAG_IN_SYNC, FLAG_PARTIAL, FLAG_PREFLUSH, FLAG_READAHEAD, OP_READ, OP_WRITE,
    },
    hist::{SLOTS, bit_length},
};

/// Array of one `u64`: 0 while every request is streamed; otherwise the probes aggregate,
/// and the value is the alignment a request must have to be summed rather than streamed
/// (the largest filesystem block size in use, at least 4 KiB: a smaller or unaligned write
/// may be the zeroing the tail-write detector looks for).
pub const AGGREGATE_ALIGN: &str = "AGGREGATE_ALIGN";
/// Per-CPU hash: [`ProcDiskKey`] -> [`ProcDiskAggregate`], cumulative. Not an LRU: when it
/// is full a request is streamed instead, so nothing is lost; user space removes the keys of
/// processes that exited after their last sample.
pub const PROC_DISK_AGGREGATES: &str = "PROC_DISK_AGGREGATES";
/// Bytes the map may take in all, over every possible CPU: its entries are this divided by
/// the CPUs and the value's size (a per-CPU value is one copy per CPU), within
/// [`MIN_ENTRIES`, `MAX_ENTRIES`]. The kernel allocates and zeroes it all when the map is
/// created, before the first frame: 8,192 entries on 2 CPUs (14 MiB) put ~170 ms there. A
/// host past 250k requests a second has far fewer processes doing them; beyond, requests are
/// streamed, not lost.
pub const MAP_BUDGET_BYTES: u64 = 4 << 20;
pub const MIN_ENTRIES: u32 = 256;
pub const MAX_ENTRIES: u32 = 1_024;
/// One request in this many of those that could be summed is streamed instead: a counted
/// sample, so request sizes and sequentiality keep an exact view.
pub const SAMPLE_EVERY: u64 = 64;
/// Request size slots: slot 0 below 512 B, slot `i` in `[2^(i+8), 2^(i+9))` bytes, the last
/// from 16 MiB on.
pub const SIZE_SLOTS: usize = 17;
/// The kernel's arrays are as long as the masks on their indices (powers of two), so an
/// index needs no bounds check, and the probe no branch, to be used: the total time's
/// quarter-octave slots ([`crate::throttle::CALL_SLOTS`] used), and the sizes' ([`SIZE_SLOTS`] used).
pub const TOTAL_SLOTS: usize = 128;
pub const SIZE_SLOTS_MASKED: usize = 32;

/// Whether a completed request may be summed instead of streamed: a whole, successful read,
/// or a write while no sync call is in progress on the host, aligned to `align`, that no
/// detector needs to see on its own. Streamed always: a sync call's own writes and any write
/// while one is in progress (the journal charged to it), cache flushes, FUA and preflush
/// writes, partial completions, errors, write-back blamed on the process that dirtied it,
/// discards and the rest, small or unaligned requests (the zeroing of a tail write), and
/// readahead reads, which carry their file for the read-amplification figures and are few
/// per byte (a readahead window is 128 KiB by default).
#[inline(always)]
#[must_use]
pub const fn aggregable(
    op: u8,
    flags: u8,
    bytes: u32,
    error: i32,
    has_dirtier: bool,
    syncs_active: bool,
    align: u64,
) -> bool {
    let plain = op == OP_READ || (op == OP_WRITE && !syncs_active);
    let special =
        flags & (FLAG_PARTIAL | FLAG_IN_SYNC | FLAG_FUA | FLAG_PREFLUSH | FLAG_READAHEAD) != 0;
    plain
        && !special
        && error == 0
        && !has_dirtier
        && bytes != 0
        && align != 0
        && (bytes as u64).is_multiple_of(align)
}

/// The size slot of a request of `bytes` (see [`SIZE_SLOTS`]). Branch-free.
#[inline(always)]
#[must_use]
pub const fn size_slot(bytes: u32) -> usize {
    let bits = bit_length((bytes >> 9) as u64) as usize;
    let last = SIZE_SLOTS - 1;
    if bits < last { bits } else { last }
}

/// Smallest request size of a slot, bytes (0 for slot 0).
#[must_use]
pub const fn size_slot_low(slot: usize) -> u64 {
    if slot == 0 { 0 } else { 1 << (slot + 8) }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct ProcDiskKey {
    pub tgid: u32,
    /// Kernel `dev_t` of the whole disk.
    pub dev: u32,
}

/// What one process's summed requests to one disk came to on one CPU, cumulative.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct ProcDiskAggregate {
    /// Reads and writes ([`OP_READ`], [`OP_WRITE`]) and their bytes.
    pub requests: [u64; 2],
    pub bytes: [u64; 2],
    /// Sums of queue time (created -> issued) and device time (issued -> completed), ns.
    pub queue_ns: u64,
    pub device_ns: u64,
    /// Requests that began where this CPU's previous one of the process on the disk ended.
    pub sequential: u64,
    /// Where the previous one ended (sector), on this CPU.
    pub next_sector: u64,
    /// Total time (created -> completed) in quarter-octave slots ([`crate::throttle::call_slot`]):
    /// percentiles within ~12%. The first [`crate::throttle::CALL_SLOTS`] are used.
    pub total_hist: [u32; TOTAL_SLOTS],
    /// Queue and device time in log2 slots ([`crate::hist::log2_slot`]).
    pub queue_hist: [u32; SLOTS],
    pub device_hist: [u32; SLOTS],
    /// Request sizes ([`size_slot`]) of reads and of writes; the first [`SIZE_SLOTS`] are used.
    pub size_hist: [[u32; SIZE_SLOTS_MASKED]; 2],
    /// The command, written by the CPU that created the entry (zero on the others).
    pub comm: [u8; COMM_LEN],
}

const _: () = assert!(
    core::mem::size_of::<ProcDiskAggregate>()
        == 8 * 8 + 4 * (TOTAL_SLOTS + 2 * SLOTS + 2 * SIZE_SLOTS_MASKED) + COMM_LEN
);

impl ProcDiskAggregate {
    pub const ZERO: Self = Self {
        requests: [0; 2],
        bytes: [0; 2],
        queue_ns: 0,
        device_ns: 0,
        sequential: 0,
        next_sector: 0,
        total_hist: [0; TOTAL_SLOTS],
        queue_hist: [0; SLOTS],
        device_hist: [0; SLOTS],
        size_hist: [[0; SIZE_SLOTS_MASKED]; 2],
        comm: [0; COMM_LEN],
    };
}

/// Entries of [`PROC_DISK_AGGREGATES`] for `cpus` possible CPUs (see [`MAP_BUDGET_BYTES`]).
#[must_use]
pub const fn entries_for(cpus: u32) -> u32 {
    let per_entry =
        core::mem::size_of::<ProcDiskAggregate>() as u64 * if cpus == 0 { 1 } else { cpus as u64 };
    let n = MAP_BUDGET_BYTES / per_entry;
    if n < MIN_ENTRIES as u64 {
        MIN_ENTRIES
    } else if n > MAX_ENTRIES as u64 {
        MAX_ENTRIES
    } else {
        n as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{FLAG_META, FLAG_SYNC, OP_DISCARD, OP_FLUSH};

    #[test]
    fn only_plain_whole_aligned_requests_are_summed() {
        let plain = |op, flags, bytes| aggregable(op, flags, bytes, 0, false, false, 4096);
        assert!(plain(OP_READ, 0, 4096));
        assert!(plain(OP_WRITE, FLAG_SYNC | FLAG_META, 1 << 20));
        // What a detector or a sync's cost needs one by one.
        for flags in [FLAG_IN_SYNC, FLAG_FUA, FLAG_PREFLUSH, FLAG_PARTIAL] {
            assert!(!plain(OP_WRITE, flags, 4096), "flags {flags:#x}");
        }
        assert!(
            !plain(OP_READ, FLAG_READAHEAD, 128 << 10),
            "readahead names its file"
        );
        for op in [OP_FLUSH, OP_DISCARD] {
            assert!(!plain(op, 0, 4096));
        }
        assert!(!plain(OP_WRITE, 0, 512), "a zeroing pad");
        assert!(!plain(OP_READ, 0, 0));
        assert!(
            !aggregable(OP_READ, 0, 4096, -5, false, false, 4096),
            "an error"
        );
        assert!(
            !aggregable(OP_WRITE, 0, 4096, 0, true, false, 4096),
            "write-back blamed"
        );
        // While a sync is in progress its journal may be any write: reads still summed.
        assert!(!aggregable(OP_WRITE, 0, 4096, 0, false, true, 4096));
        assert!(aggregable(OP_READ, 0, 4096, 0, false, true, 4096));
        // A 64 KiB-block filesystem's 61,440-byte pad is not a whole block of it.
        assert!(!aggregable(OP_WRITE, 0, 61_440, 0, false, false, 65_536));
        assert!(
            !aggregable(OP_READ, 0, 4096, 0, false, false, 0),
            "streaming mode"
        );
    }

    #[test]
    fn sizes_fall_in_their_power_of_two() {
        assert_eq!(size_slot(0), 0);
        assert_eq!(size_slot(511), 0);
        assert_eq!(size_slot(512), 1);
        assert_eq!(size_slot(4095), 3);
        assert_eq!(size_slot(4096), 4);
        assert_eq!(size_slot(1 << 20), 12);
        assert_eq!(size_slot(u32::MAX), SIZE_SLOTS - 1);
        for bytes in [512u32, 4096, 8192, 65_536, 1 << 20] {
            let slot = size_slot(bytes);
            assert!(size_slot_low(slot) <= u64::from(bytes));
            assert!(u64::from(bytes) < size_slot_low(slot + 1));
        }
    }

    #[test]
    fn the_map_fits_its_budget_on_any_machine() {
        let size = core::mem::size_of::<ProcDiskAggregate>() as u64;
        assert_eq!(entries_for(2), MAX_ENTRIES);
        for cpus in [1u32, 2, 8, 64, 256, 1024] {
            let n = entries_for(cpus);
            assert!((MIN_ENTRIES..=MAX_ENTRIES).contains(&n));
            assert!(n == MIN_ENTRIES || u64::from(n) * size * u64::from(cpus) <= MAP_BUDGET_BYTES);
        }
    }
}
