//! Direct I/O calls from `iomap:iomap_dio_rw_begin` (ext4, XFS and every iomap user). Only
//! calls that are not aligned to the largest filesystem or physical block size in use (a map
//! user space keeps current) are streamed: the others cannot cause sub-block zeroing or a
//! device read-modify-write, and a database's aligned direct I/O stays free.

use aya_ebpf::{
    Global,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, tracepoint},
    maps::Array,
    programs::TracePointContext,
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_DIO, RecordHeader,
    dio::{DioOffsets, DioRecord},
    maps::COUNTER_RING_DROPPED,
};

use crate::{
    block::{EVENTS, bump, submit_flags},
    fields::Window,
};

#[unsafe(no_mangle)]
static DIO_OFFSETS: Global<DioOffsets> = Global::new(DioOffsets::ABSENT);

/// One power of two: the alignment below which calls are streamed.
#[map]
static DIO_STREAM_ALIGN: Array<u64> = Array::with_max_entries(1, 0);

#[tracepoint]
pub fn dio_begin(ctx: TracePointContext) -> u32 {
    let o = DIO_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    let (Ok(pos), Ok(count)) = (w.u64(o.pos), w.u64(o.count)) else {
        return 0;
    };
    // 0 (not set yet) streams every call not aligned to a 512-byte sector.
    let align = match DIO_STREAM_ALIGN.get(0) {
        Some(&align) if align != 0 => align,
        _ => 512,
    };
    if (pos | count) & (align - 1) == 0 {
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
    let dio_flags = w.u32(o.dio_flags).unwrap_or(0);
    let Some(mut slot) = EVENTS.reserve::<DioRecord>(0) else {
        bump(COUNTER_RING_DROPPED);
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    slot.write(DioRecord {
        header: RecordHeader {
            kind: RECORD_DIO,
            size: core::mem::size_of::<DioRecord>() as u16,
            _reserved: 0,
        },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        ino,
        isize: isize as i64,
        pos: pos as i64,
        count,
        dev,
        tgid: (pid_tgid >> 32) as u32,
        pid: pid_tgid as u32,
        ki_flags,
        dio_flags,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    });
    slot.submit(submit_flags());
    0
}
