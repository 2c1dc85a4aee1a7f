//! Block-I/O request records: one per completed request.

use crate::abi::{COMM_LEN, RecordHeader};

/// How many bytes of `rwbs` the probes read (the smallest `RWBS_LEN` any kernel used).
pub const RWBS_READ_LEN: usize = 8;

/// `op` values: the request's operation, from the first letters of `rwbs`.
pub const OP_READ: u8 = 0;
pub const OP_WRITE: u8 = 1;
pub const OP_FLUSH: u8 = 2;
pub const OP_DISCARD: u8 = 3;
/// Anything else (secure erase, write-zeroes, zone management, driver-private, ...).
pub const OP_OTHER: u8 = 4;
/// Number of distinct `op` values, for per-op arrays.
pub const OP_COUNT: usize = 5;

/// `flags` bits (user space decodes them from `rwbs`; the probes set only `FLAG_PARTIAL`).
pub const FLAG_SYNC: u8 = 1 << 0;
pub const FLAG_FUA: u8 = 1 << 1;
pub const FLAG_META: u8 = 1 << 2;
pub const FLAG_PREFLUSH: u8 = 1 << 3;
pub const FLAG_READAHEAD: u8 = 1 << 4;
/// The record covers only part of the request (the driver completed it in pieces).
pub const FLAG_PARTIAL: u8 = 1 << 5;
/// The request was created by a thread that was inside a sync call (fsync, ...): data the
/// sync had to write itself.
pub const FLAG_IN_SYNC: u8 = 1 << 6;
/// Set by the probes: the request went through an I/O scheduler (`block_rq_insert` before
/// it was issued); `InFlight::inserted_after` holds when.
pub const FLAG_INSERTED: u8 = 1 << 7;

/// `origin` values: where the submitting task (pid, tgid, comm) was captured.
///
/// `ORIGIN_START` is the reliable one: `block_io_start` fires in the task that turned its bio
/// into a request. `ORIGIN_INSERT` (`block_rq_insert`, kernels before 6.5) is the task that
/// queued the request to a scheduler. `ORIGIN_ISSUE` means no creation event was seen (for
/// example the flush machinery's own flush request, or a direct issue on an old kernel):
/// the task is the one that issued it, which may be a kworker.
pub const ORIGIN_START: u8 = 0;
pub const ORIGIN_INSERT: u8 = 1;
pub const ORIGIN_ISSUE: u8 = 2;

/// One completed block request.
///
/// `created_ns`, `issued_ns` and `completed_ns` are `CLOCK_MONOTONIC` (`bpf_ktime_get_ns`);
/// queue time is `issued - created` and device time `completed - issued`.
/// `dev` is the kernel's internal `dev_t` (`major << 20 | minor`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct BlockIoRecord {
    pub header: RecordHeader,
    pub created_ns: u64,
    pub issued_ns: u64,
    pub completed_ns: u64,
    pub sector: u64,
    pub dev: u32,
    pub bytes: u32,
    pub tgid: u32,
    pub pid: u32,
    pub error: i32,
    pub op: u8,
    pub flags: u8,
    pub origin: u8,
    pub _pad: u8,
    /// The raw `rwbs` string (first 8 bytes); user space decodes the flags from it.
    pub rwbs: [u8; RWBS_READ_LEN],
    pub comm: [u8; COMM_LEN],
    /// The request's cgroup (its bio's blkcg: the cgroup directory's inode number); 0 when
    /// unknown.
    pub cgroup_id: u64,
    /// Write-back: the process that dirtied the pages a flusher wrote (0: none, or not
    /// write-back), and its command.
    pub dirtier_tgid: u32,
    /// A readahead read of a file's pages (`REQ_RAHEAD`): the file's filesystem device
    /// (kernel `dev_t`) and inode number, from the first page's mapping; 0 for every other
    /// request (direct I/O reads anonymous or user pages and never reads ahead).
    pub file_dev: u32,
    pub dirtier_comm: [u8; COMM_LEN],
    pub file_ino: u64,
}

const _: () = assert!(core::mem::size_of::<BlockIoRecord>() == 128);

/// Key of the in-flight request table: requests are identified by device and start sector,
/// which is what every block tracepoint reports (the `struct request *` is not exposed).
/// `dev == 0` marks a free slot (no block device is 0:0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct InFlightKey {
    pub dev: u32,
    pub _pad: u32,
    pub sector: u64,
}

/// Value of the in-flight request map: who created the request and when.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct InFlight {
    /// 0: the slot is free (its request completed, or none was ever stored).
    pub created_ns: u64,
    /// 0 until `block_rq_issue` is seen.
    pub issued_ns: u64,
    pub tgid: u32,
    pub pid: u32,
    /// Bytes still to complete (set at issue; partial completions count it down).
    pub remaining_bytes: u32,
    pub origin: u8,
    /// `FLAG_IN_SYNC` when created inside a sync call.
    pub flags: u8,
    /// With `FLAG_INSERTED`: created -> inserted into the scheduler (btt's G2I), as
    /// [`crate::hist::compress_ns`] (a u64 would not fit the slot's cache line).
    pub inserted_after: u16,
    pub comm: [u8; COMM_LEN],
}

const _: () = assert!(core::mem::size_of::<InFlight>() == 48);

/// `InFlightKey::dev` of requests keyed by their `struct request *` (raw tracepoints): no
/// block device has this number.
pub const RAW_KEY_DEV: u32 = u32::MAX;

/// Offsets inside kernel objects, from BTF, for the raw tracepoint probes, and the bits of
/// `cmd_flags` they decode.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct RawOffsets {
    pub rq_sector: u32,
    pub rq_data_len: u32,
    pub rq_cmd_flags: u32,
    pub rq_q: u32,
    pub q_disk: u32,
    pub disk_major: u32,
    pub disk_first_minor: u32,
    /// `REQ_OP_MASK`.
    pub op_mask: u32,
    pub bit_sync: u32,
    pub bit_meta: u32,
    pub bit_fua: u32,
    pub bit_preflush: u32,
    pub bit_rahead: u32,
    /// `rq_flags` and its `RQF_USE_SCHED` bit (the request goes through the I/O scheduler);
    /// the bit is `u32::MAX` where BTF does not name it (then every insert counts).
    pub rq_flags: u32,
    pub bit_use_sched: u32,
}

impl RawOffsets {
    pub const ZERO: Self = Self {
        rq_sector: 0,
        rq_data_len: 0,
        rq_cmd_flags: 0,
        rq_q: 0,
        q_disk: 0,
        disk_major: 0,
        disk_first_minor: 0,
        op_mask: 0,
        bit_sync: 0,
        bit_meta: 0,
        bit_fua: 0,
        bit_preflush: 0,
        bit_rahead: 0,
        rq_flags: 0,
        bit_use_sched: u32::MAX,
    };
}

pub const GLOBAL_RAW_OFFSETS: &str = "RAW_OFFSETS";

/// Slots per set of the in-flight table.
pub const IN_FLIGHT_WAYS: usize = 4;

/// One request's value in a set, alone on its cache line: two requests of a set never
/// write to the same line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct InFlightLine {
    pub value: InFlight,
    pub _pad: [u8; 16],
}

/// One set of the in-flight table: its keys on one cache line, then a line per value.
///
/// A key stays in its slot after its request completes (the value's `created_ns` is zeroed
/// instead): with raw tracepoints the key is the `struct request *`, which the block layer
/// recycles, so the next request of that pointer finds its slot by reading the keys line
/// alone, and that line is written only when a slot changes hands. Measured here: keys
/// next to their values, written by every probe on both CPUs, made the creation probe miss
/// the cache on every way it compared (~70 ns per I/O).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct InFlightSet {
    pub keys: [InFlightKey; IN_FLIGHT_WAYS],
    pub lines: [InFlightLine; IN_FLIGHT_WAYS],
}

const _: () = assert!(core::mem::size_of::<InFlightLine>() == 64);
const _: () = assert!(core::mem::size_of::<InFlightSet>() == 64 * (1 + IN_FLIGHT_WAYS));

/// Sets in the in-flight table (a power of two). 640 KiB: small enough to stay in cache
/// (a 4 MiB table cost ~60 ns more per probe here, in cache misses), large enough that a
/// 4-way set is full only when thousands of requests are in flight at once.
pub const IN_FLIGHT_SETS: u32 = 1 << 11;

/// The set a key lives in.
#[inline(always)]
#[must_use]
pub const fn in_flight_set(key: &InFlightKey) -> u32 {
    let mixed = (key.sector ^ ((key.dev as u64) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 40) as u32 & (IN_FLIGHT_SETS - 1)
}
