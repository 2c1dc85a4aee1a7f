//! io_uring's side: a sync punted to io-wq is noted by request, and its completion, in
//! whichever thread, ends it and emits its record.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use iotop_bpf_common::{
    sync::{
        CQE_RES, FileWindow, IORING_FSYNC_DATASYNC, IORING_OP_FSYNC, IORING_OP_SYNC_FILE_RANGE,
        RAW_COMPLETE_CQE, SYNC_IN_WORKER, SYNC_URING_FDATASYNC, SYNC_URING_FSYNC,
        SYNC_URING_SYNC_FILE_RANGE,
    },
    tracepoint::ABSENT,
};

use super::{DURABLE_BTF, DURABLE_OFFSETS, URING_SYNCS, any_uring_sync, note, uring_active_add};
use crate::{
    fields::Window,
    file::{self, FileIdentity},
    raw::{arg, layout},
    sync::{Call, emit, forget, open_call},
};

/// `io_uring:io_uring_queue_async_work`: a request goes to io-wq. Only the syncs are noted.
#[tracepoint]
pub fn uring_punt(ctx: TracePointContext) -> u32 {
    let o = DURABLE_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    let Ok(opcode) = w.bytes8(o.punt_opcode) else {
        return 0;
    };
    let Ok(req) = w.u64(o.punt_req) else { return 0 };
    punted(req, opcode[0]);
    0
}

/// Raw `io_uring_queue_async_work(struct io_kiocb *req, int rw)` (before 5.16: `(ctx, rw,
/// req, work, flags)`): the request at the index BTF gave, its opcode read from it.
#[raw_tracepoint(tracepoint = "io_uring_queue_async_work")]
pub fn raw_uring_punt(ctx: RawTracePointContext) -> i32 {
    let req = arg(&ctx, layout!(punt_req_arg));
    if let Ok(opcode) = file::read::<u8>(req, layout!(req_opcode)) {
        punted(req, opcode);
    }
    0
}

/// Request `req` with `opcode` goes to io-wq: noted if it is a sync.
#[inline(always)]
fn punted(req: u64, opcode: u8) {
    let mut kind = match opcode {
        IORING_OP_FSYNC => SYNC_URING_FSYNC,
        IORING_OP_SYNC_FILE_RANGE => SYNC_URING_SYNC_FILE_RANGE,
        _ => return,
    };
    let btf = DURABLE_BTF.load();
    if kind == SYNC_URING_FSYNC
        && btf.req_sync_flags != ABSENT
        && file::read::<u32>(req, btf.req_sync_flags)
            .is_ok_and(|flags| flags & IORING_FSYNC_DATASYNC != 0)
    {
        kind = SYNC_URING_FDATASYNC;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    note(req, pid_tgid, 0, 0, 0, kind, unsafe { bpf_ktime_get_ns() });
}

/// `io_uring:io_uring_complete` (classic; where BTF does not give the raw one's arguments):
/// runs on every io_uring completion of the host; one array load while no io_uring sync is
/// pending.
#[tracepoint]
pub fn uring_complete(ctx: TracePointContext) -> u32 {
    if !any_uring_sync() {
        return 0;
    }
    let o = DURABLE_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    let Ok(req) = w.u64(o.complete_req) else {
        return 0;
    };
    completed(req, || {
        w.u32(o.complete_res).map_or(0, |r| i64::from(r as i32))
    });
    0
}

/// Raw `io_uring_complete`: the same without the trace record the classic tracepoint builds
/// first (the record is built on every io_uring completion, before any program can return).
#[raw_tracepoint(tracepoint = "io_uring_complete")]
pub fn raw_uring_complete(ctx: RawTracePointContext) -> i32 {
    if !any_uring_sync() {
        return 0;
    }
    let req: u64 = ctx.arg(1);
    completed(req, || {
        let btf = DURABLE_BTF.load();
        if btf.raw_complete == RAW_COMPLETE_CQE {
            let cqe: u64 = ctx.arg(2);
            file::read::<u32>(cqe, CQE_RES).map_or(0, |r| i64::from(r as i32))
        } else {
            i64::from(ctx.arg::<u64>(3) as u32 as i32)
        }
    });
    0
}

/// Request `req` completed: if it is a pending io_uring sync, its record (`res`: its result).
#[inline(always)]
fn completed(req: u64, res: impl FnOnce() -> i64) {
    let Some(sync) = URING_SYNCS.get_ptr(&req) else {
        return;
    };
    // SAFETY: copied out before the entry is removed.
    let sync = unsafe { *sync };
    if URING_SYNCS.remove(&req).is_ok() {
        uring_active_add(u64::MAX);
    }
    let res = res();
    let tgid = sync.pid_tgid >> 32;
    let worker_key = (tgid << 32) | u64::from(sync.worker);
    if sync.worker != 0
        && let Some(mark) = open_call(sync.worker)
        // SAFETY: a valid map value.
        && unsafe { (*mark).kind == SYNC_IN_WORKER && (*mark).token == req }
    {
        forget(worker_key);
    }
    // The file the request synced: still held by the request while it completes.
    let btf = DURABLE_BTF.load();
    let file = (if btf.req_file != ABSENT {
        file::read::<u64>(req, btf.req_file)
    } else {
        Err(())
    })
    .and_then(|f| file::of_file(f, None))
    .unwrap_or(FileIdentity {
        ino: sync.ino,
        fs_dev: sync.fs_dev,
        ..FileIdentity::UNKNOWN
    });
    // Charged to the worker that ran it, whose block requests were its own writes.
    let pid_tgid = if sync.worker != 0 {
        worker_key
    } else {
        sync.pid_tgid
    };
    emit(
        pid_tgid,
        &Call {
            start_ns: sync.start_ns,
            ret: res,
            kind: sync.kind,
            fd: -1,
            addr: 0,
        },
        FileWindow::default(),
        &file,
        sync.comm,
    );
}
