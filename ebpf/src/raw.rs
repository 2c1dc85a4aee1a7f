//! The block probes on raw tracepoints (every kernel with BTF). A classic
//! tracepoint first builds a trace record (rwbs string, comm, command) and
//! only then runs the program; measured here, merely having the classic probes attached cost
//! ~12% of fio's IOPS. The raw ones get the kernel objects themselves: requests are keyed by
//! their `struct request *` (stable across merges and partial completions) and fields are
//! read at offsets user space found in BTF. How each tracepoint passes its arguments on
//! this kernel comes from BTF too ([`RawLayout`]).

use aya_ebpf::{
    Global,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{map, raw_tracepoint},
    maps::Array,
    programs::RawTracePointContext,
};
use iotop_bpf_common::{
    block::ORIGIN_INSERT,
    block::{
        FLAG_FUA, FLAG_META, FLAG_PREFLUSH, FLAG_READAHEAD, FLAG_SYNC, InFlightKey, OP_DISCARD,
        OP_FLUSH, OP_OTHER, OP_READ, OP_WRITE, ORIGIN_START, RAW_KEY_DEV, RawOffsets,
    },
    maps::COUNTER_READ_FAILED,
    raw::RawLayout,
    rwbs::RWBS_READ_LEN,
    tracepoint::ABSENT,
};

use crate::{
    blame,
    block::{created_by_current_task, finish, inserted, issued, unpaired},
    emit::bump,
    inflight,
    inflight::Completion,
};

#[unsafe(no_mangle)]
static RAW_OFFSETS: Global<RawOffsets> = Global::new(RawOffsets::ZERO);

/// This kernel's raw argument layouts, set by the loader (a plain static, not a `Global`:
/// a probe reads the one field it needs, not a copy of the whole).
#[unsafe(no_mangle)]
pub static RAW_LAYOUT: RawLayout = RawLayout::ABSENT;

/// One field of [`RAW_LAYOUT`], read as the loader set it (a volatile read: the compiler
/// must not fold in the value compiled here).
macro_rules! layout {
    ($field:ident) => {
        // SAFETY: a read of a static's field.
        unsafe { core::ptr::read_volatile(&raw const $crate::raw::RAW_LAYOUT.$field) }
    };
}
pub(crate) use layout;

/// Argument `n` of a raw or BTF tracepoint, `n` a load-time constant. Such a context
/// may only be read at fixed offsets: each arm is one load at its own constant offset,
/// written in asm so that the compiler cannot fold the arms into `ctx + n * 8` (a
/// "modified ctx ptr" the verifier refuses). The verifier knows `n` and walks one arm.
#[inline(always)]
pub fn arg(ctx: &impl aya_ebpf::EbpfContext, n: u32) -> u64 {
    let base = ctx.as_ptr() as u64;
    macro_rules! at {
        ($k:literal) => {{
            let v: u64;
            // SAFETY: a load from the context at a fixed offset, which the verifier checks
            // against the tracepoint's argument count.
            unsafe {
                core::arch::asm!(
                    "{v} = *(u64 *)({c} + {off})",
                    v = out(reg) v,
                    c = in(reg) base,
                    off = const $k * 8,
                    options(readonly, nostack, pure)
                )
            };
            v
        }};
    }
    match n {
        0 => at!(0),
        1 => at!(1),
        2 => at!(2),
        3 => at!(3),
        4 => at!(4),
        5 => at!(5),
        6 => at!(6),
        7 => at!(7),
        8 => at!(8),
        9 => at!(9),
        10 => at!(10),
        11 => at!(11),
        _ => 0,
    }
}

/// The request of `block_io_start`, `block_rq_insert`, `_issue` and `_merge`.
#[inline(always)]
fn request(ctx: &RawTracePointContext) -> u64 {
    arg(ctx, layout!(rq_arg))
}

#[inline(always)]
fn read<T>(base: u64, offset: u32) -> Result<T, i32> {
    // SAFETY: bpf_probe_read_kernel validates the address.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T) }
}

#[inline(always)]
fn key(rq: u64) -> InFlightKey {
    InFlightKey {
        dev: RAW_KEY_DEV,
        _pad: 0,
        sector: rq,
    }
}

/// `block_io_start(struct request *rq)`: a request was created, in the submitting task.
#[raw_tracepoint(tracepoint = "block_io_start")]
pub fn raw_block_start(ctx: RawTracePointContext) -> i32 {
    let rq = request(&ctx);
    created_by_current_task(&key(rq), unsafe { bpf_ktime_get_ns() }, ORIGIN_START);
    0
}

/// `block_rq_insert` as the creation of a request, where the kernel has no `block_io_start`
/// (before 6.5): a request goes into a scheduler or onto a dispatch list in the task that
/// submitted it, and one issued directly is attributed when issued. A requeued request is
/// inserted again and starts over (as a slot left by a lost completion must).
#[raw_tracepoint(tracepoint = "block_rq_insert")]
pub fn raw_block_start_insert(ctx: RawTracePointContext) -> i32 {
    created_by_current_task(
        &key(request(&ctx)),
        unsafe { bpf_ktime_get_ns() },
        ORIGIN_INSERT,
    );
    0
}

/// `block_rq_issue(struct request *rq)`.
#[raw_tracepoint(tracepoint = "block_rq_issue")]
pub fn raw_block_issue(ctx: RawTracePointContext) -> i32 {
    let rq = request(&ctx);
    let bytes: u32 = read(rq, RAW_OFFSETS.load().rq_data_len).unwrap_or(0);
    issued(&key(rq), bytes);
    0
}

/// `block_rq_insert(struct request *rq)`: the request goes into an I/O scheduler (with
/// `none`, only when the driver is busy). Fires once per request, before its issue; a
/// requeued request is inserted again after it, and keeps its first split.
#[raw_tracepoint(tracepoint = "block_rq_insert")]
pub fn raw_block_insert(ctx: RawTracePointContext) -> i32 {
    // Without a scheduler the kernel inserts most requests too (from the plug onto the
    // dispatch list): ~70 ns per I/O for a split nobody shows, so only while user space
    // says a disk with a scheduler is busy.
    if !matches!(SCHED_SPLIT_ON.get(0), Some(&on) if on != 0) {
        return 0;
    }
    let rq = request(&ctx);
    // And only for requests that really go into a scheduler (`RQF_USE_SCHED`): one read
    // spares the in-flight lookup on the other disks.
    let o = RAW_OFFSETS.load();
    if o.bit_use_sched < 32 {
        let flags: u32 = read(rq, o.rq_flags).unwrap_or(0);
        if flags & (1 << o.bit_use_sched) == 0 {
            return 0;
        }
    }
    inserted(&key(rq));
    0
}

/// The switch of [`raw_block_insert`] (one entry; non-zero: on), turned by user space.
#[map]
static SCHED_SPLIT_ON: Array<u32> = Array::with_max_entries(1, 0);

/// `block_rq_merge(struct request *rq)`: `rq` was merged into another request and freed.
#[raw_tracepoint(tracepoint = "block_rq_merge")]
pub fn raw_block_rq_merge(ctx: RawTracePointContext) -> i32 {
    let rq = request(&ctx);
    if let Some(slot) = inflight::find(&key(rq)) {
        inflight::remove(slot);
    }
    0
}

/// `block_rq_complete(struct request *rq, blk_status_t error, unsigned int nr_bytes)`.
#[raw_tracepoint(tracepoint = "block_rq_complete")]
pub fn raw_block_complete(ctx: RawTracePointContext) -> i32 {
    crate::verifier::inject(&ctx, iotop_bpf_common::raw::FAULT_REJECT_BLOCK);
    let rq: u64 = ctx.arg(0);
    let status: u64 = ctx.arg(1);
    let nr_bytes: u64 = ctx.arg(2);
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(slot) = inflight::find(&key(rq)) else {
        unpaired(nr_bytes as u32);
        return 0;
    };
    let o = RAW_OFFSETS.load();
    // q, cmd_flags and __sector sit in the request's first 64 bytes (the loader checks):
    // one read for the three.
    let Ok(head) = read::<[u64; 8]>(rq, 0) else {
        bump(COUNTER_READ_FAILED);
        return 0;
    };
    let field = |offset: u32| head[(offset as usize / 8) & 7];
    let cmd_flags = (field(o.rq_cmd_flags) >> ((o.rq_cmd_flags % 8) * 8)) as u32;
    let sector = field(o.rq_sector);
    // The disk: rq->q->disk->{major, first_minor}, or rq->rq_disk before 5.17 (no disk:
    // passthrough, dev 0).
    let rq_disk = layout!(rq_disk);
    let disk: u64 = if rq_disk == ABSENT {
        read(field(o.rq_q), o.q_disk).unwrap_or(0)
    } else {
        read(rq, rq_disk).unwrap_or(0)
    };
    let dev = if disk == 0 {
        0
    } else {
        let major: u32 = read(disk, o.disk_major).unwrap_or(0);
        let minor: u32 = read(disk, o.disk_first_minor).unwrap_or(0);
        (major << 20) | (minor & 0xf_ffff)
    };
    let op = match cmd_flags & o.op_mask {
        0 => OP_READ,
        1 => OP_WRITE,
        2 => OP_FLUSH,
        3 => OP_DISCARD,
        _ => OP_OTHER,
    };
    let bit = |n: u32, flag: u8| {
        if n < 32 && cmd_flags & (1 << n) != 0 {
            flag
        } else {
            0
        }
    };
    // Write-back is written by flushers, kworkers: look up whose pages those are. A
    // readahead read: look up whose file it reads.
    let by_flusher = op == OP_WRITE && {
        // SAFETY: the slot is this request's (see `inflight`); a copy of 8 bytes.
        let comm = unsafe { (*slot.value).comm };
        comm[..8] == *b"kworker/"
    };
    if op == OP_READ && bit(o.bit_rahead, FLAG_READAHEAD) != 0 {
        blame::note_readahead(rq, &head);
    }
    let completion = Completion {
        dev,
        sector,
        done_bytes: nr_bytes as u32,
        // A blk_status_t, not an errno: nonzero means the request failed.
        error: (status & 0xff) as i32,
        op,
        flags: bit(o.bit_sync, FLAG_SYNC)
            | bit(o.bit_meta, FLAG_META)
            | bit(o.bit_fua, FLAG_FUA)
            | bit(o.bit_preflush, FLAG_PREFLUSH)
            | bit(o.bit_rahead, FLAG_READAHEAD),
        rwbs: [0; RWBS_READ_LEN],
        blame: blame::of(rq, &head, by_flusher),
    };
    finish(slot, &completion, &key(rq), now);
    0
}
