//! Direct I/O calls from `iomap:iomap_dio_rw_begin` (ext4, XFS and every iomap user). Only
//! calls that are not aligned to the largest filesystem or physical block size in use (a map
//! user space keeps current) are streamed: the others cannot cause sub-block zeroing or a
//! device read-modify-write, and a database's aligned direct I/O stays free.
//!
//! On kernels with BTF the raw tracepoint reads the call from the `kiocb` and `iov_iter`
//! themselves (an aligned call costs two reads, no trace record), and names the file; the
//! classic tracepoint is the fallback. The raw tracepoint also notes when every call began,
//! for its latency (`throttle.rs`).

use aya_ebpf::{
    Global,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, raw_tracepoint, tracepoint},
    maps::{Array, LruHashMap},
    programs::{RawTracePointContext, TracePointContext},
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_DIO,
    dio::{
        DioOffsets, DioRecord, IOMAP_DIRECT, IOMAP_OVERWRITE_ONLY, IOMAP_WRITE, KI_DIRECT, KI_WRITE,
    },
    sync::FILE_NAME_LEN,
};

use crate::{
    emit::{self, submit},
    fields::Window,
    file::{self, read},
    kiocb::RAW_DIO_OFFSETS,
    throttle,
};

#[unsafe(no_mangle)]
static DIO_OFFSETS: Global<DioOffsets> = Global::new(DioOffsets::ABSENT);

/// One power of two: the alignment below which calls are streamed.
#[map]
static DIO_STREAM_ALIGN: Array<u64> = Array::with_max_entries(1, 0);

/// Whether a call at `pos` of `count` bytes is aligned to what every filesystem and device
/// in use works in (then it is not streamed).
#[inline(always)]
fn aligned(pos: u64, count: u64) -> bool {
    // 0 (not set yet) streams every call not aligned to a 512-byte sector.
    let align = match DIO_STREAM_ALIGN.get(0) {
        Some(&align) if align != 0 => align,
        _ => 512,
    };
    (pos | count) & (align - 1) == 0
}

/// The fields of one unaligned call.
struct Call {
    dev: u32,
    ino: u64,
    isize: i64,
    pos: u64,
    count: u64,
    ki_flags: u32,
    dio_flags: u32,
    name: [u8; FILE_NAME_LEN],
    parent: [u8; FILE_NAME_LEN],
}

#[inline(always)]
fn emit(call: &Call) {
    let Some(mut slot) = emit::reserve::<DioRecord>() else {
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    slot.write(DioRecord {
        header: emit::header::<DioRecord>(RECORD_DIO),
        ts_ns: unsafe { bpf_ktime_get_ns() },
        ino: call.ino,
        isize: call.isize,
        pos: call.pos as i64,
        count: call.count,
        dev: call.dev,
        tgid: (pid_tgid >> 32) as u32,
        pid: pid_tgid as u32,
        ki_flags: call.ki_flags,
        dio_flags: call.dio_flags,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
        name: call.name,
        parent: call.parent,
    });
    submit(slot);
}

#[tracepoint]
pub fn dio_begin(ctx: TracePointContext) -> u32 {
    let o = DIO_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    let (Ok(pos), Ok(count)) = (w.u64(o.pos), w.u64(o.count)) else {
        return 0;
    };
    if aligned(pos, count) {
        return 0;
    }
    let (Ok(dev), Ok(ino), Ok(isize), Ok(ki_flags)) = (
        w.u32(o.dev),
        w.u64(o.ino),
        w.u64(o.isize),
        w.u32(o.ki_flags),
    ) else {
        return 0;
    };
    emit(&Call {
        dev,
        ino,
        isize: isize as i64,
        pos,
        count,
        ki_flags,
        dio_flags: w.u32(o.dio_flags).unwrap_or(0),
        name: [0; FILE_NAME_LEN],
        parent: [0; FILE_NAME_LEN],
    });
    0
}

/// `iomap_dio_rw_begin(struct kiocb *iocb, struct iov_iter *iter, unsigned int dio_flags,
/// size_t done_before)`.
#[raw_tracepoint(tracepoint = "iomap_dio_rw_begin")]
pub fn raw_dio_begin(ctx: RawTracePointContext) -> i32 {
    let iocb: u64 = ctx.arg(0);
    let iter: u64 = ctx.arg(1);
    let o = RAW_DIO_OFFSETS.load();
    // While call latency is measured (on demand), every call is noted, aligned or not.
    if throttle::measuring() {
        throttle::call_begin(iocb);
    }
    let (Ok(pos), Ok(count)) = (
        read::<u64>(iocb, o.iocb_pos),
        read::<u64>(iter, o.iter_count),
    ) else {
        return 0;
    };
    if aligned(pos, count) {
        return 0;
    }
    let Ok(file) = read::<u64>(iocb, o.iocb_filp) else {
        return 0;
    };
    let Ok(id) = file::of_file(file, Some(o.inode_size)) else {
        return 0;
    };
    let dio_flags: u64 = ctx.arg(2);
    emit(&Call {
        dev: id.fs_dev,
        ino: id.ino,
        isize: id.size,
        pos,
        count,
        ki_flags: read(iocb, o.iocb_flags).unwrap_or(0),
        dio_flags: dio_flags as u32,
        name: id.name,
        parent: id.parent,
    });
    0
}

/// The call a direct I/O's iomap operation starts, from its flags, inode, position and
/// length (kernels without `iomap_dio_rw_begin`). Streamed only when not aligned; the
/// overwrite-only try XFS makes first is not a call of its own (it fails rather than zero,
/// and XFS retries).
#[inline(always)]
fn iomap_call(flags: u32, inode: u64, pos: u64, count: u64) -> Option<Call> {
    if flags & IOMAP_DIRECT == 0 || flags & IOMAP_OVERWRITE_ONLY != 0 || aligned(pos, count) {
        return None;
    }
    let (dev, ino) = file::inode_id(inode).ok()?;
    let isize: i64 = read(inode, RAW_DIO_OFFSETS.load().inode_size).ok()?;
    Some(Call {
        dev,
        ino,
        isize,
        pos,
        count,
        ki_flags: KI_DIRECT
            | if flags & IOMAP_WRITE != 0 {
                KI_WRITE
            } else {
                0
            },
        dio_flags: 0,
        name: [0; FILE_NAME_LEN],
        parent: [0; FILE_NAME_LEN],
    })
}

/// Raw `iomap_iter(struct iomap_iter *iter, ops, caller)` (5.15 to 6.3): a direct I/O call
/// is its first iteration, before any mapping (`iomap.length` 0).
#[raw_tracepoint(tracepoint = "iomap_iter")]
pub fn raw_dio_iter(ctx: RawTracePointContext) -> i32 {
    let iter: u64 = ctx.arg(0);
    let o = RAW_DIO_OFFSETS.load();
    let Ok(flags) = read::<u32>(iter, o.iomap_iter_flags) else {
        return 0;
    };
    if flags & IOMAP_DIRECT == 0 {
        return 0;
    }
    if read::<u64>(iter, o.iomap_iter_length).is_ok_and(|length| length != 0) {
        return 0;
    }
    let (Ok(inode), Ok(pos), Ok(count)) = (
        read::<u64>(iter, o.iomap_iter_inode),
        read::<u64>(iter, o.iomap_iter_pos),
        read::<u64>(iter, o.iomap_iter_len),
    ) else {
        return 0;
    };
    if let Some(call) = iomap_call(flags, inode, pos, count) {
        emit(&call);
    }
    0
}

/// Where a thread's last unaligned `iomap_apply` ended: its later extents of one call end
/// there too, and start further on.
#[map]
static DIO_APPLY_LAST: LruHashMap<u32, [u64; 3]> = LruHashMap::with_max_entries(1_024, 0);

/// Raw `iomap_apply(inode, pos, length, flags, ops, actor, caller)` (before 5.15): called
/// once per extent of a direct I/O, each with the rest of the call; a call is its first
/// apply (the same thread, file and end with a later start is a continuation).
#[raw_tracepoint(tracepoint = "iomap_apply")]
pub fn raw_dio_apply(ctx: RawTracePointContext) -> i32 {
    let flags = ctx.arg::<u64>(3) as u32;
    if flags & IOMAP_DIRECT == 0 {
        return 0;
    }
    let (inode, pos, count): (u64, u64, u64) = (ctx.arg(0), ctx.arg(1), ctx.arg(2));
    let Some(call) = iomap_call(flags, inode, pos, count) else {
        return 0;
    };
    let tid = bpf_get_current_pid_tgid() as u32;
    let end = pos.wrapping_add(count);
    if let Some(last) = DIO_APPLY_LAST.get_ptr(&tid)
        // SAFETY: a valid map value, copied out.
        && let [ino, last_end, last_pos] = unsafe { *last }
        && ino == call.ino
        && last_end == end
        && pos > last_pos
    {
        return 0;
    }
    let _ = DIO_APPLY_LAST.insert(&tid, &[call.ino, end, pos], 0);
    emit(&call);
    0
}
