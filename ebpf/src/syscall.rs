//! The system-call probes on the raw `sys_enter` and `sys_exit` tracepoints: one program
//! each, for every system call of the host, dispatched by number through a table user space
//! fills ([`SYSCALL_TABLE`]). Raw tracepoints need no `perf_event_open`, which Debian's and
//! Ubuntu's kernels refuse without CAP_SYS_ADMIN (`kernel.perf_event_paranoid` 3 and 4), so
//! the documented capabilities suffice; and no trace record is built for the calls that
//! matter.
//!
//! - `sys_enter`: a sync call (`fsync`, `fdatasync`, `sync_file_range`, `syncfs`, `sync`,
//!   `msync(MS_SYNC)`) begins; a write (`write`, `pwrite64`, `writev`, `pwritev`,
//!   `pwritev2`) adds to its process's and fd's written bytes. Other calls: one table load.
//! - `sys_exit`: a thread is in one system call at a time, so the first exit of a thread
//!   inside a sync call or a synced write is that call's. While no thread is in one, one
//!   array load (`SYNCS_ACTIVE`).

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use iotop_bpf_common::{
    raw::{REGS_WINDOW_LEN, SYSCALL_NONE, SYSCALL_TABLE_LEN, SYSCALL_WRITE, SYSCALL_WRITEV},
    sync::{
        MS_SYNC, SYNC_DSYNC_WRITE, SYNC_FILE_RANGE, SYNC_IN_WORKER, SYNC_MSYNC, SYNC_OSYNC_WRITE,
        SYNC_SYNC, SYNC_URING_DSYNC_WRITE, TOKEN_URING_INLINE, sync_file_range_kind,
    },
};

use crate::{
    file::read,
    raw::layout,
    sync::{account, begin_call, current_call, finish, writev_bytes},
};

/// What `sys_enter` does per system-call number (see `iotop_bpf_common::raw`); set by the
/// loader. A plain static: one byte is read, not a copy of the table.
#[unsafe(no_mangle)]
static SYSCALL_TABLE: [u8; SYSCALL_TABLE_LEN] = [SYSCALL_NONE; SYSCALL_TABLE_LEN];

/// The system call's first four arguments, from its saved user registers.
#[inline(always)]
fn args(regs: u64) -> Result<[u64; 4], ()> {
    let window: [u64; REGS_WINDOW_LEN / 8] = read(regs, layout!(regs_window))?;
    let args = layout!(regs_args);
    let at = |i: usize| window[(args[i] as usize / 8) & (REGS_WINDOW_LEN / 8 - 1)];
    Ok([at(0), at(1), at(2), at(3)])
}

/// `sys_enter(struct pt_regs *regs, long id)`.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn raw_sys_enter(ctx: RawTracePointContext) -> i32 {
    let id: u64 = ctx.arg(1);
    if id >= SYSCALL_TABLE_LEN as u64 {
        return 0;
    }
    let at = crate::verifier::index::<SYSCALL_TABLE_LEN>(id as usize);
    // SAFETY: `at` is masked into the table.
    let action = unsafe { core::ptr::read_volatile(SYSCALL_TABLE.as_ptr().add(at)) };
    if action == SYSCALL_NONE {
        return 0;
    }
    let Ok([a0, a1, a2, a3]) = args(ctx.arg(0)) else {
        return 0;
    };
    match action {
        SYSCALL_WRITE => account(a0, a2),
        SYSCALL_WRITEV => account(a0, writev_bytes(a1, a2)),
        // Only MS_SYNC waits for the write-back; MS_ASYNC just schedules it.
        // The range's start names the mapping's file (user space looks it up).
        SYNC_MSYNC if a2 & MS_SYNC != 0 => begin_call(SYNC_MSYNC, -1, a0),
        SYNC_MSYNC => {}
        SYNC_SYNC => begin_call(SYNC_SYNC, -1, 0),
        // Without a wait flag it only starts write-back (a kind of its own).
        SYNC_FILE_RANGE => begin_call(sync_file_range_kind(a3), a0 as i32, 0),
        kind => begin_call(kind, a0 as i32, 0),
    }
    0
}

/// `sys_exit(struct pt_regs *regs, long ret)`.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn raw_sys_exit(ctx: RawTracePointContext) -> i32 {
    let Some((pid_tgid, call)) = current_call() else {
        return 0;
    };
    let ret: i64 = ctx.arg(1);
    match call.kind {
        // An io-wq worker's part in an io_uring sync: its request's completion ends it.
        SYNC_IN_WORKER => {}
        // io_uring_enter's result is no write's.
        SYNC_URING_DSYNC_WRITE if call.token == TOKEN_URING_INLINE => finish(pid_tgid, &call, 0),
        // A punted io_uring write: its completion ends it.
        SYNC_URING_DSYNC_WRITE => {}
        SYNC_DSYNC_WRITE | SYNC_OSYNC_WRITE => finish(pid_tgid, &call, ret),
        // A sync system call.
        _ => finish(pid_tgid, &call, ret),
    }
    0
}
