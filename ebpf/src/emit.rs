//! What the programs give user space: records in the `EVENTS` ring buffer and the per-CPU
//! `COUNTERS` of what happened to them. Every program that emits a record reserves it here
//! (a full ring is counted as a drop, never waited for), writes it with its [`header`], and
//! submits it here (the reader woken once per batch, not per record).

use aya_ebpf::{
    Global,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{PerCpuArray, RingBuf, ring_buf::RingBufEntry},
};
use iotop_bpf_common::{
    RecordHeader,
    maps::{COUNTER_COUNT, COUNTER_RING_DROPPED, COUNTER_RING_SUBMITTED},
};

/// 4 MiB: ~32k records of 120 (+8 header) bytes, ~100 ms of headroom at 330k requests per
/// second, with the reader woken at a quarter full and draining every 50 ms anyway. User
/// space maps it twice over (the data pages wrap around), so it is 8 MiB of the tool's RSS;
/// 16 MiB cost 32 MiB. The loader may resize it.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_COUNT, 0);

/// Unread ring bytes above which a submit wakes the reader. Below it records are submitted
/// without a wakeup and the reader drains on its own timer: one wakeup per batch, not per I/O.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: Global<u64> = Global::new(1 << 20);

/// A record of type `T` reserved in the ring, or `None` (counted as dropped) when it is full.
#[inline(always)]
pub fn reserve<T: 'static>() -> Option<RingBufEntry<T>> {
    let entry = EVENTS.reserve::<T>(0);
    if entry.is_none() {
        bump(COUNTER_RING_DROPPED);
    }
    entry
}

/// The header of a record of type `T` and kind `kind`.
#[inline(always)]
pub const fn header<T>(kind: u16) -> RecordHeader {
    RecordHeader {
        kind,
        size: core::mem::size_of::<T>() as u16,
        _reserved: 0,
    }
}

/// Submits a reserved record, counted, waking the reader only when a batch is pending (not
/// per record).
#[inline(always)]
pub fn submit<T>(record: RingBufEntry<T>) {
    let wake = if EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) >= WAKEUP_BYTES.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    record.submit(u64::from(wake));
    bump(COUNTER_RING_SUBMITTED);
}

#[inline(always)]
pub fn bump(counter: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter) {
        // SAFETY: per-CPU slot; tracing programs do not nest on one CPU.
        unsafe { *slot += 1 };
    }
}
