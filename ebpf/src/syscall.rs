//! The system-call probes, two ways with the same work.
//!
//! - **Trampolines** (fentry/fexit) on the followed calls' own entry functions
//!   (`__x64_sys_fsync`, `__arm64_sys_fsync`...): one program per call and side, so the
//!   host's other system calls (a web server's million reads, `getppid`) run nothing. The
//!   kernel binds a tracing program to one function at load, hence one copy per function.
//! - **Raw `sys_enter` and `sys_exit`** where the kernel has no safe trampolines: one program
//!   each, for every system call of the host, dispatched by number through a table user
//!   space fills ([`SYSCALL_TABLE`]).
//!
//! Neither needs `perf_event_open`, which Debian's and Ubuntu's kernels refuse without
//! CAP_SYS_ADMIN (`kernel.perf_event_paranoid` 3 and 4), so the documented capabilities
//! suffice. What each side does:
//!
//! - entry: a sync call (`fsync`, `fdatasync`, `sync_file_range`, `syncfs`, `sync`,
//!   `msync(MS_SYNC)`) begins; a write (`write`, `pwrite64`, `writev`, `pwritev`,
//!   `pwritev2`) adds to its process's and fd's written bytes. Other calls: one table load.
//! - exit: a thread is in one system call at a time, so the first exit of a thread
//!   inside a sync call or a synced write is that call's. While no thread is in one, one
//!   array load (`SYNCS_ACTIVE`).

use aya_ebpf::{
    macros::{fentry, fexit, raw_tracepoint},
    programs::{FEntryContext, FExitContext, RawTracePointContext},
};
use iotop_bpf_common::{
    raw::{REGS_WINDOW_LEN, SYSCALL_NONE, SYSCALL_TABLE_LEN, SYSCALL_WRITE, SYSCALL_WRITEV},
    sync::{
        MS_SYNC, SYNC_DSYNC_WRITE, SYNC_FDATASYNC, SYNC_FILE_RANGE, SYNC_FSYNC, SYNC_IN_WORKER,
        SYNC_MSYNC, SYNC_OSYNC_WRITE, SYNC_SYNC, SYNC_SYNCFS, SYNC_URING_DSYNC_WRITE,
        TOKEN_URING_INLINE, sync_file_range_kind,
    },
};

use crate::{
    file::read,
    raw::{address, layout},
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
    if action != SYSCALL_NONE {
        entered(ctx.arg(0), action);
    }
    0
}

/// A followed call began, `action` being what it is (see `iotop_bpf_common::raw`); `regs`,
/// its saved user registers.
#[inline(always)]
fn entered(regs: u64, action: u8) {
    let Ok([a0, a1, a2, a3]) = args(regs) else {
        return;
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
}

/// `sys_exit(struct pt_regs *regs, long ret)`.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn raw_sys_exit(ctx: RawTracePointContext) -> i32 {
    exited(ctx.arg(1));
    0
}

/// A system call that may end a sync returned `ret`.
#[inline(always)]
fn exited(ret: i64) {
    let Some((pid_tgid, call)) = current_call() else {
        return;
    };
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
}

/// The trampolines: `$entry` on a followed call's entry function, doing what `sys_enter`
/// does for `$action`, and `$exit` on its return, doing what `sys_exit` does. The loader
/// names the function (`__x64_sys_fsync`...) from BTF; the section names none. The entry
/// function's one argument is the saved user registers, a typed pointer, made a number for
/// the reads; the return value follows the arguments in the context.
macro_rules! trampolines {
    ($($entry:ident, $exit:ident: $action:expr;)*) => {$(
        #[fentry]
        pub fn $entry(ctx: FEntryContext) -> i32 {
            entered(address(ctx.arg(0)), $action);
            0
        }

        #[fexit]
        pub fn $exit(ctx: FExitContext) -> i32 {
            exited(ctx.arg(1));
            0
        }
    )*};
}

trampolines! {
    fentry_fsync, fexit_fsync: SYNC_FSYNC;
    fentry_fdatasync, fexit_fdatasync: SYNC_FDATASYNC;
    fentry_sync_file_range, fexit_sync_file_range: SYNC_FILE_RANGE;
    fentry_syncfs, fexit_syncfs: SYNC_SYNCFS;
    fentry_sync, fexit_sync: SYNC_SYNC;
    fentry_msync, fexit_msync: SYNC_MSYNC;
    fentry_write, fexit_write: SYSCALL_WRITE;
    fentry_pwrite64, fexit_pwrite64: SYSCALL_WRITE;
    fentry_writev, fexit_writev: SYSCALL_WRITEV;
    fentry_pwritev, fexit_pwritev: SYSCALL_WRITEV;
    fentry_pwritev2, fexit_pwritev2: SYSCALL_WRITEV;
}

/// `io_uring_enter` begins no sync but ends the writes it ran inline with `O_DSYNC`.
#[fexit]
pub fn fexit_io_uring_enter(ctx: FExitContext) -> i32 {
    exited(ctx.arg(1));
    0
}
