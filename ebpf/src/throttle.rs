//! The wait before the request, aggregated in the kernel (nothing streamed per call):
//!
//! - **direct I/O call latency**: `iomap_dio_rw_begin` (see `dio.rs`) notes when a call began
//!   and who made it, keyed by its `struct kiocb *`; `iomap_dio_complete` (the end of the call,
//!   in the caller for synchronous I/O, in interrupt or worker context for libaio and
//!   io_uring) adds its latency to the caller's quarter-octave histogram. blk-throttle,
//!   iocost and tag waits hold the bio before a request exists: request latency never sees
//!   them, the call's latency does.
//! - **dirty throttling**: `writeback:balance_dirty_pages` fires in a buffered writer that
//!   write-back is about to pause; its pauses are summed per process.

use aya_ebpf::{
    Global,
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, raw_tracepoint, tracepoint},
    maps::{Array, LruPerCpuHashMap, PerCpuArray},
    programs::{RawTracePointContext, TracePointContext},
};
use iotop_bpf_common::{
    COMM_LEN,
    assoc::choose,
    throttle::{
        CALL_SLOTS, CALL_STALE_NS, CallKey, CallSlot, CallTotals, DIO_CALL_TOTALS_ENTRIES,
        DIO_CALLS_IN_FLIGHT_SLOTS, DIO_CALLS_IN_FLIGHT_WAYS, DIRTY_BDI_LEN, DIRTY_PAUSES_ENTRIES,
        DirtyOffsets, DirtyTotals, call_set, call_slot,
    },
    tracepoint::ABSENT,
};

use crate::{
    file,
    kiocb::iocb_file,
    raw::{arg, layout},
};

/// 1 when `iomap_dio_complete` is attached (set by the loader): otherwise the begin probe
/// notes nothing, since no completion would ever take it.
#[unsafe(no_mangle)]
static DIO_CALL_LATENCY: Global<u8> = Global::new(0);

/// The switch user space turns (one entry, non-zero: measuring). Call latency costs ~300 ns
/// per direct I/O call (an array slot at the start, an LRU update at the end), so it is
/// measured on demand (`IOTOP_BPF_CALL_LATENCY`); while off, each probe returns after this
/// one array lookup.
#[map]
static CALL_LATENCY_ON: Array<u32> = Array::with_max_entries(1, 0);

/// Whether direct I/O calls are being timed now.
#[inline(always)]
pub fn measuring() -> bool {
    DIO_CALL_LATENCY.load() != 0 && matches!(CALL_LATENCY_ON.get(0), Some(&on) if on != 0)
}

#[unsafe(no_mangle)]
static DIRTY_OFFSETS: Global<DirtyOffsets> = Global::new(DirtyOffsets::ABSENT);

/// Calls in flight: a 4-way set-associative array keyed by the `struct kiocb *`, like the
/// requests' (`inflight.rs`): a BPF hash map insert and delete took ~150 ns each here (bucket
/// lock, free list), an array slot is claimed in one pass without a helper call. A call whose
/// completion is never seen keeps its slot until its kiocb is reused or its set fills up.
#[map]
static DIO_CALLS_IN_FLIGHT: Array<CallSlot> = Array::with_max_entries(DIO_CALLS_IN_FLIGHT_SLOTS, 0);

#[map]
static DIO_CALL_TOTALS: LruPerCpuHashMap<CallKey, CallTotals> =
    LruPerCpuHashMap::with_max_entries(DIO_CALL_TOTALS_ENTRIES, 0);

/// One zeroed [`CallTotals`]: the initial value of a new key (too big for the stack).
#[map]
static ZERO_CALL_TOTALS: PerCpuArray<CallTotals> = PerCpuArray::with_max_entries(1, 0);

#[map]
static DIRTY_PAUSES: LruPerCpuHashMap<u32, DirtyTotals> =
    LruPerCpuHashMap::with_max_entries(DIRTY_PAUSES_ENTRIES, 0);

/// A direct I/O call on `iocb` begins in the current task: its slot is the one already
/// holding `iocb` (a call that never completed here), else the set's first free one, else
/// the set's first (taken over).
#[inline(always)]
pub fn call_begin(iocb: u64) {
    const WAYS: usize = DIO_CALLS_IN_FLIGHT_WAYS as usize;
    let set = call_set(iocb);
    // SAFETY: a valid map value. Two calls of one set starting at the same instant on two
    // CPUs may race for a slot: the loser's completion then finds nothing (not counted).
    let stored = |way: usize| {
        DIO_CALLS_IN_FLIGHT
            .get_ptr_mut(set + way as u32)
            .map(|slot| unsafe { (*slot).iocb })
    };
    // A finished call frees its slot (`iocb` 0): "ended" and "unused" are one here.
    let way = choose::<WAYS>(
        |way| stored(way) == Some(iocb),
        |way| stored(way) == Some(0),
        |_| false,
    );
    let Some(slot) = DIO_CALLS_IN_FLIGHT.get_ptr_mut(set + way.index::<WAYS>() as u32) else {
        return;
    };
    // SAFETY: a valid map value; the key goes last, so a completion never pairs it with an
    // older value.
    unsafe {
        (*slot).start_ns = bpf_ktime_get_ns();
        (*slot).tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        (*slot).iocb = iocb;
    }
}

/// The slot of the call on `iocb`, if it began while measuring.
#[inline(always)]
fn call_find(iocb: u64) -> Option<*mut CallSlot> {
    let set = call_set(iocb);
    for way in 0..DIO_CALLS_IN_FLIGHT_WAYS {
        let slot = DIO_CALLS_IN_FLIGHT.get_ptr_mut(set + way)?;
        // SAFETY: a valid map value.
        if unsafe { (*slot).iocb } == iocb {
            return Some(slot);
        }
    }
    None
}

/// `iomap_dio_complete(struct kiocb *iocb, int error, ssize_t ret)`: the call is over. Its
/// filesystem is read from the kiocb now (the file stays referenced until the call ends).
#[raw_tracepoint(tracepoint = "iomap_dio_complete")]
pub fn raw_dio_complete(ctx: RawTracePointContext) -> i32 {
    // Switched off: a call noted before keeps its slot (user space clears the table).
    if !measuring() {
        return 0;
    }
    let iocb: u64 = ctx.arg(0);
    let Some(slot) = call_find(iocb) else {
        return 0;
    };
    // SAFETY: a valid map value, copied out.
    let (start_ns, tgid) = unsafe { ((*slot).start_ns, (*slot).tgid) };
    // SAFETY: a valid map value; `iocb == 0` marks it free.
    unsafe { (*slot).iocb = 0 };
    // SAFETY: a helper without preconditions.
    let latency_ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(start_ns);
    if latency_ns > CALL_STALE_NS {
        return 0;
    }
    let Ok(fs_dev) = iocb_file(iocb).and_then(file::fs_dev_of) else {
        return 0;
    };
    let key = CallKey { tgid, fs_dev };
    let totals = match DIO_CALL_TOTALS.get_ptr_mut(&key) {
        Some(totals) => totals,
        None => {
            let Some(zero) = ZERO_CALL_TOTALS.get_ptr(0) else {
                return 0;
            };
            // SAFETY: `zero` points at a map value of the right type; insert copies it. Only
            // if absent: another CPU may have created it since the lookup.
            let _ = DIO_CALL_TOTALS.insert(&key, unsafe { &*zero }, u64::from(BPF_NOEXIST));
            let Some(totals) = DIO_CALL_TOTALS.get_ptr_mut(&key) else {
                return 0;
            };
            totals
        }
    };
    let slot = call_slot(latency_ns) as usize;
    // SAFETY: this CPU's slot of a per-CPU value; a program does not nest on its own CPU.
    unsafe {
        (*totals).calls += 1;
        (*totals).sum_ns += latency_ns;
        if slot < CALL_SLOTS {
            (*totals).slots[slot] = (*totals).slots[slot].wrapping_add(1);
        }
    }
    0
}

/// A field of the tracepoint record at a loader-given offset.
#[inline(always)]
fn field<T>(ctx: &TracePointContext, offset: u32) -> Result<T, ()> {
    if offset == ABSENT {
        return Err(());
    }
    // SAFETY: read_at goes through bpf_probe_read, which validates the address.
    unsafe { ctx.read_at::<T>(offset as usize) }.map_err(|_| ())
}

/// `writeback:balance_dirty_pages`, in the writer: a positive `pause` (ms) is the time it is
/// about to sleep so that write-back can catch up (a zero or negative one: no sleep).
#[tracepoint]
pub fn dirty_pause(ctx: TracePointContext) -> u32 {
    let o = DIRTY_OFFSETS.load();
    let Ok(pause) = field::<i64>(&ctx, o.pause) else {
        return 0;
    };
    paused(
        pause,
        field(&ctx, o.limit).unwrap_or(0),
        field(&ctx, o.dirty).unwrap_or(0),
        field(&ctx, o.wb_dirty).unwrap_or(0),
        || field::<[u8; DIRTY_BDI_LEN]>(&ctx, o.bdi).unwrap_or([0; DIRTY_BDI_LEN]),
    );
    0
}

/// The same from the raw tracepoint's arguments: `balance_dirty_pages(wb, thresh,
/// bg_thresh, dirty, bdi_thresh, bdi_dirty, ..., period, pause, start_time)`, at the indices
/// BTF gave (no trace record built: the classic record of 6.12 lacks `wb_dirty`).
#[raw_tracepoint(tracepoint = "balance_dirty_pages")]
pub fn raw_dirty_pause(ctx: RawTracePointContext) -> i32 {
    let jiffies = arg(&ctx, layout!(dirty_pause_arg)) as i64;
    if jiffies <= 0 {
        return 0;
    }
    // In jiffies here (the classic record converts it to ms itself). Unsigned: BPF has no
    // signed division before its v4 instruction set.
    let jiffy_us = match layout!(jiffy_us) {
        0 => 1_000,
        us => u64::from(us),
    };
    let pause = (jiffies as u64 * jiffy_us / 1_000) as i64;
    let dtc_arg = layout!(dirty_dtc_arg);
    let (limit, dirty, wb_dirty) = if dtc_arg != ABSENT {
        let dtc = arg(&ctx, dtc_arg);
        (
            file::read::<u64>(dtc, layout!(dtc_thresh)).unwrap_or(0),
            file::read::<u64>(dtc, layout!(dtc_dirty)).unwrap_or(0),
            file::read::<u64>(dtc, layout!(dtc_wb_dirty)).unwrap_or(0),
        )
    } else {
        (
            arg(&ctx, layout!(dirty_thresh_arg)),
            arg(&ctx, layout!(dirty_dirty_arg)),
            arg(&ctx, layout!(dirty_wb_dirty_arg)),
        )
    };
    paused(pause, limit, dirty, wb_dirty, || {
        let wb = arg(&ctx, layout!(dirty_wb_arg));
        file::read::<u64>(wb, layout!(wb_bdi))
            .and_then(|bdi| file::read::<[u8; DIRTY_BDI_LEN]>(bdi, layout!(bdi_dev_name)))
            .unwrap_or([0; DIRTY_BDI_LEN])
    });
    0
}

/// The current process is paused `pause` ms by dirty throttling (nothing when not positive).
#[inline(always)]
fn paused(
    pause: i64,
    limit: u64,
    dirty: u64,
    wb_dirty: u64,
    bdi: impl FnOnce() -> [u8; DIRTY_BDI_LEN],
) {
    if pause <= 0 {
        return;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let totals = match DIRTY_PAUSES.get_ptr_mut(&tgid) {
        Some(totals) => totals,
        None => {
            let _ = DIRTY_PAUSES.insert(&tgid, &DirtyTotals::ZERO, u64::from(BPF_NOEXIST));
            let Some(totals) = DIRTY_PAUSES.get_ptr_mut(&tgid) else {
                return;
            };
            totals
        }
    };
    // SAFETY: this CPU's slot of a per-CPU value.
    unsafe {
        (*totals).pauses += 1;
        (*totals).pause_ms += pause as u64;
        (*totals).last_ns = bpf_ktime_get_ns();
        (*totals).limit_pages = limit;
        (*totals).dirty_pages = dirty;
        (*totals).wb_dirty_pages = wb_dirty;
        (*totals).comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
        (*totals).bdi = bdi();
    }
}
