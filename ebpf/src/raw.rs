//! The block probes on raw tracepoints (every kernel with BTF). A classic
//! tracepoint first builds a trace record (rwbs string, comm, command) and
//! only then runs the program; measured here, merely having the classic probes attached cost
//! ~12% of fio's IOPS. The raw ones get the kernel objects themselves: requests are keyed by
//! their `struct request *` (stable across merges and partial completions) and fields are
//! read at offsets user space found in BTF. How each tracepoint passes its arguments on
//! this kernel comes from BTF too ([`RawLayout`]).

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{btf_tracepoint, map, raw_tracepoint},
    maps::{Array, PerCpuArray},
    programs::{BtfTracePointContext, RawTracePointContext},
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
    direct::{load_u32, load_u64},
    emit::bump,
    inflight,
    inflight::Completion,
};

/// The request's offsets, set by the loader (a plain static like [`RAW_LAYOUT`]: each probe
/// reads the fields it needs, and the verifier knows each value from the frozen `.rodata`,
/// which the direct loads of the `tp_btf` probes need: their offsets must be constants).
#[unsafe(no_mangle)]
pub static RAW_OFFSETS: RawOffsets = RawOffsets::ZERO;

/// One field of [`RAW_OFFSETS`], read as the loader set it.
macro_rules! offset {
    ($field:ident) => {
        // SAFETY: a read of a static's field.
        unsafe { core::ptr::read_volatile(&raw const RAW_OFFSETS.$field) }
    };
}

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
fn request(ctx: &impl EbpfContext) -> u64 {
    arg(ctx, layout!(rq_arg))
}

#[inline(always)]
fn read<T>(base: u64, offset: u32) -> Result<T, i32> {
    // SAFETY: bpf_probe_read_kernel validates the address.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T) }
}

/// A scratch word per CPU, through which a typed pointer becomes a plain number.
#[map]
static ADDRESS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The address of the object `typed` points to, as a plain number: the in-flight table
/// hashes it, and the verifier refuses arithmetic on a `tp_btf` program's typed pointers.
/// Stored to a map and read back (volatile both ways: the compiler must not forward the
/// value), it is a scalar to the verifier.
#[inline(always)]
pub fn address(typed: u64) -> u64 {
    match ADDRESS.get_ptr_mut(0) {
        // SAFETY: this CPU's slot, a u64.
        Some(slot) => unsafe {
            core::ptr::write_volatile(slot, typed);
            core::ptr::read_volatile(slot)
        },
        None => 0,
    }
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
    let bytes: u32 = read(rq, offset!(rq_data_len)).unwrap_or(0);
    issued(&key(rq), bytes);
    0
}

/// [`raw_block_issue`] on `tp_btf`: the request read by a direct load, no helper (what
/// `lockdown=confidentiality`, which refuses `bpf_probe_read_kernel`, leaves).
#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_issue_btf(ctx: BtfTracePointContext) -> i32 {
    let rq = request(&ctx);
    issued(&key(address(rq)), load_u32(rq, offset!(rq_data_len)));
    0
}

/// `block_rq_insert(struct request *rq)`: the request goes into an I/O scheduler (with
/// `none`, only when the driver is busy). Fires once per request, before its issue; a
/// requeued request is inserted again after it, and keeps its first split.
#[raw_tracepoint(tracepoint = "block_rq_insert")]
pub fn raw_block_insert(ctx: RawTracePointContext) -> i32 {
    let rq = request(&ctx);
    split_at_insert(
        || read::<u32>(rq, offset!(rq_flags)).unwrap_or(0),
        || key(rq),
    );
    0
}

/// [`raw_block_insert`] on `tp_btf`, by direct loads.
#[btf_tracepoint(function = "block_rq_insert")]
pub fn block_insert_btf(ctx: BtfTracePointContext) -> i32 {
    let rq = request(&ctx);
    split_at_insert(|| load_u32(rq, offset!(rq_flags)), || key(address(rq)));
    0
}

/// The insert's part of btt's split, whichever way the request is read: `rq_flags` reads
/// its flags, `key` its in-flight key, each only when needed.
#[inline(always)]
fn split_at_insert(rq_flags: impl FnOnce() -> u32, key: impl FnOnce() -> InFlightKey) {
    // Without a scheduler the kernel inserts most requests too (from the plug onto the
    // dispatch list): ~70 ns per I/O for a split nobody shows, so only while user space
    // says a disk with a scheduler is busy.
    if !matches!(SCHED_SPLIT_ON.get(0), Some(&on) if on != 0) {
        return;
    }
    // And only for requests that really go into a scheduler (`RQF_USE_SCHED`): one read
    // spares the in-flight lookup on the other disks.
    let bit = offset!(bit_use_sched);
    if bit < 32 && rq_flags() & (1 << bit) == 0 {
        return;
    }
    inserted(&key());
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
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(slot) = inflight::find(&key(rq)) else {
        unpaired(ctx.arg::<u64>(2) as u32);
        return 0;
    };
    // q, cmd_flags and __sector sit in the request's first 64 bytes (the loader checks):
    // one read for the three.
    let Ok(head) = read::<[u64; 8]>(rq, 0) else {
        bump(COUNTER_READ_FAILED);
        return 0;
    };
    let field = |offset: u32| head[(offset as usize / 8) & 7];
    let cmd_flags = offset!(rq_cmd_flags);
    // The disk: rq->q->disk, or rq->rq_disk before 5.17 (none: passthrough, dev 0).
    let rq_disk = layout!(rq_disk);
    let disk: u64 = if rq_disk == ABSENT {
        read(field(offset!(rq_q)), offset!(q_disk)).unwrap_or(0)
    } else {
        read(rq, rq_disk).unwrap_or(0)
    };
    let dev = if disk == 0 {
        0
    } else {
        let major: u32 = read(disk, offset!(disk_major)).unwrap_or(0);
        let minor: u32 = read(disk, offset!(disk_first_minor)).unwrap_or(0);
        dev_of(major, minor)
    };
    let request = Request {
        cmd_flags: (field(cmd_flags) >> ((cmd_flags % 8) * 8)) as u32,
        sector: field(offset!(rq_sector)),
        dev,
        status: ctx.arg(1),
        nr_bytes: ctx.arg(2),
    };
    completed(slot, rq, &request, || blame::bio_in(rq, &head), now);
    0
}

/// [`raw_block_complete`] on `tp_btf`: the request and its disk read by direct loads, one
/// instruction each and no helper, so it runs under `lockdown=confidentiality` too (where
/// the loader turns blame, which follows untyped pointers, off).
#[btf_tracepoint(function = "block_rq_complete")]
pub fn block_complete_btf(ctx: BtfTracePointContext) -> i32 {
    crate::verifier::inject(&ctx, iotop_bpf_common::raw::FAULT_REJECT_BLOCK);
    let rq: u64 = ctx.arg(0);
    let at = address(rq);
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(slot) = inflight::find(&key(at)) else {
        unpaired(ctx.arg::<u64>(2) as u32);
        return 0;
    };
    let rq_disk = layout!(rq_disk);
    let disk = if rq_disk == ABSENT {
        load_u64(load_u64(rq, offset!(rq_q)), offset!(q_disk))
    } else {
        load_u64(rq, rq_disk)
    };
    let dev = if disk == 0 {
        0
    } else {
        dev_of(
            load_u32(disk, offset!(disk_major)),
            load_u32(disk, offset!(disk_first_minor)),
        )
    };
    let request = Request {
        cmd_flags: load_u32(rq, offset!(rq_cmd_flags)),
        sector: load_u64(rq, offset!(rq_sector)),
        dev,
        status: ctx.arg(1),
        nr_bytes: ctx.arg(2),
    };
    completed(slot, at, &request, || load_u64(rq, blame::rq_bio()), now);
    0
}

#[inline(always)]
fn dev_of(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xf_ffff)
}

/// What a completion probe read of its request.
struct Request {
    cmd_flags: u32,
    sector: u64,
    dev: u32,
    /// A `blk_status_t`, not an errno: nonzero means the request failed.
    status: u64,
    nr_bytes: u64,
}

/// The rest of a completion, whichever way the request was read: `at` is its address,
/// `bio` reads `rq->bio` for blame, only when blame is on.
#[inline(always)]
fn completed(slot: inflight::Slot, at: u64, r: &Request, bio: impl Fn() -> u64, now: u64) {
    let cmd_flags = r.cmd_flags;
    let op = match cmd_flags & offset!(op_mask) {
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
    let readahead = bit(offset!(bit_rahead), FLAG_READAHEAD);
    // Blame follows untyped pointers (`bpf_probe_read_kernel`): off under lockdown, where a
    // field read on its own tells the verifier so and it never walks the helper calls.
    let blamed = blame::on();
    if op == OP_READ && readahead != 0 && blamed {
        blame::note_readahead(&bio);
    }
    let completion = Completion {
        dev: r.dev,
        sector: r.sector,
        done_bytes: r.nr_bytes as u32,
        error: (r.status & 0xff) as i32,
        op,
        flags: bit(offset!(bit_sync), FLAG_SYNC)
            | bit(offset!(bit_meta), FLAG_META)
            | bit(offset!(bit_fua), FLAG_FUA)
            | bit(offset!(bit_preflush), FLAG_PREFLUSH)
            | readahead,
        rwbs: [0; RWBS_READ_LEN],
        blame: if blamed {
            blame::of(&bio, by_flusher)
        } else {
            blame::Blame::NONE
        },
    };
    finish(slot, &completion, &key(at), now);
}
