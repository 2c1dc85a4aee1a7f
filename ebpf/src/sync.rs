//! Sync calls and logical writes, from the syscall tracepoints.
//!
//! Entering fsync, fdatasync, sync_file_range, syncfs, sync or msync(MS_SYNC) records the
//! thread's call; the matching exit emits one [`SyncCallRecord`] with its latency and the
//! bytes the process wrote to that fd since its previous sync. Block requests created while
//! their thread is inside a sync call are flagged (`FLAG_IN_SYNC`) by the block probes.
//! Write syscalls are not streamed: they are summed in the kernel, per process and per fd.

use aya_ebpf::{
    Global,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
    },
    macros::{map, tracepoint},
    maps::{Array, LruHashMap, LruPerCpuHashMap},
    programs::TracePointContext,
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_SYNC_CALL,
    maps::LogicalWrites,
    sync::{
        FileWindow, IOVEC_CHUNK, MAX_IOVECS, MS_SYNC, SYNC_FDATASYNC, SYNC_FILE_RANGE,
        SYNC_FILE_RANGE_WAIT_AFTER, SYNC_FILE_RANGE_WRITE, SYNC_FSYNC, SYNC_MSYNC, SYNC_SYNC,
        SYNC_SYNCFS, SyncCallRecord, SyncInFlight, SyscallOffsets, WindowKey, sync_file_range_kind,
    },
};

use crate::{
    emit::{self, submit},
    fields::Window,
    file::{self, FileIdentity},
};

mod open;

#[unsafe(no_mangle)]
static SYSCALL_OFFSETS: Global<SyscallOffsets> = Global::new(SyscallOffsets::ABSENT);

/// How many threads are inside a sync call, all CPUs together: while it is 0, the block
/// probes and the system calls' exits skip the table of open syncs ([`open`]).
#[map]
static SYNCS_ACTIVE: Array<u64> = Array::with_max_entries(1, 0);

/// Adds `delta` (two's complement) to [`SYNCS_ACTIVE`], atomically across CPUs.
#[inline(always)]
pub fn syncs_active_add(delta: u64) {
    if let Some(count) = SYNCS_ACTIVE.get_ptr_mut(0) {
        // SAFETY: a valid, aligned map value.
        unsafe { atomic_add(count, delta) };
    }
}

/// `*target += delta`, atomically across CPUs (BPF's lock-prefixed add; core's atomics need
/// compare-and-swap, which the BPF target lacks).
///
/// # Safety
/// `target` is a valid, aligned map value.
#[inline(always)]
pub unsafe fn atomic_add(target: *mut u64, delta: u64) {
    // SAFETY: the caller's.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            target, delta,
        )
    };
}

/// Whether any thread may be inside a sync call (cheap: an inlined array load).
#[inline(always)]
pub fn any_sync_active() -> bool {
    SYNCS_ACTIVE.get(0).is_some_and(|n| *n != 0)
}

/// Bytes each process asked to write, cumulative (read by user space every interval).
#[map]
static LOGICAL_WRITES: LruPerCpuHashMap<u32, LogicalWrites> =
    LruPerCpuHashMap::with_max_entries(16_384, 0);

/// Bytes written to each file since its last sync.
#[map]
static FILE_WINDOWS: LruHashMap<WindowKey, FileWindow> = LruHashMap::with_max_entries(16_384, 0);

#[inline(always)]
fn enter(ctx: &TracePointContext, kind: u8, with_fd: bool) -> u32 {
    let fd = if with_fd {
        let offsets = SYSCALL_OFFSETS.load();
        match Window::read(ctx).and_then(|w| w.u64(offsets.fd)) {
            Ok(fd) => fd as i32,
            Err(()) => return 0,
        }
    } else {
        -1
    };
    begin_call(kind, fd, 0);
    0
}

/// The current thread enters a sync system call of `kind` on `fd` (-1: none); `token` is
/// msync's start address (0 for the others).
#[inline(always)]
pub fn begin_call(kind: u8, fd: i32, token: u64) {
    let call = SyncInFlight {
        start_ns: unsafe { bpf_ktime_get_ns() },
        token,
        ino: 0,
        fs_dev: 0,
        fd,
        kind,
        _pad: [0; 7],
    };
    begin(bpf_get_current_pid_tgid(), &call);
}

/// Enters the thread's call (see [`open::begin`]).
#[inline(always)]
pub fn begin(pid_tgid: u64, call: &SyncInFlight) {
    open::begin(pid_tgid, call);
}

/// Ends the thread's call.
#[inline(always)]
pub fn forget(pid_tgid: u64) {
    open::forget(pid_tgid as u32);
}

/// Whether thread `tid` is inside a sync call, a synced write or a worker's part of an
/// io_uring sync (its block requests are the sync's own).
#[inline(always)]
pub fn in_sync(tid: u32) -> bool {
    any_sync_active() && open::find(tid).is_some()
}

/// The open call of thread `tid` (another thread's, for an io_uring completion), in place.
#[inline(always)]
pub fn open_call(tid: u32) -> Option<*mut SyncInFlight> {
    open::find(tid)
}

#[tracepoint]
pub fn sync_enter_fsync(ctx: TracePointContext) -> u32 {
    enter(&ctx, SYNC_FSYNC, true)
}

#[tracepoint]
pub fn sync_enter_fdatasync(ctx: TracePointContext) -> u32 {
    enter(&ctx, SYNC_FDATASYNC, true)
}

#[tracepoint]
pub fn sync_enter_sync_file_range(ctx: TracePointContext) -> u32 {
    let offsets = SYSCALL_OFFSETS.load();
    let flags = Window::read(&ctx)
        .and_then(|w| w.u64(offsets.range_flags))
        .unwrap_or(SYNC_FILE_RANGE_WAIT_AFTER);
    enter(&ctx, sync_file_range_kind(flags), true)
}

#[tracepoint]
pub fn sync_enter_syncfs(ctx: TracePointContext) -> u32 {
    enter(&ctx, SYNC_SYNCFS, true)
}

#[tracepoint]
pub fn sync_enter_sync(ctx: TracePointContext) -> u32 {
    enter(&ctx, SYNC_SYNC, false)
}

/// Only `MS_SYNC` waits for the write-back; `MS_ASYNC` just schedules it. The range's start
/// names the mapping's file (user space looks it up).
#[tracepoint]
pub fn sync_enter_msync(ctx: TracePointContext) -> u32 {
    let offsets = SYSCALL_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    if let Ok(flags) = w.u64(offsets.flags)
        && flags & MS_SYNC != 0
    {
        begin_call(SYNC_MSYNC, -1, w.u64(offsets.start).unwrap_or(0));
    }
    0
}

/// Any of the sync calls returned.
#[tracepoint]
pub fn sync_exit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(call) = open::find(pid_tgid as u32) else {
        return 0; // msync(MS_ASYNC), or a call that began before the probes were attached
    };
    // SAFETY: copied out before the entry is removed.
    let call = unsafe { *call };
    finish(pid_tgid, &call, syscall_ret(&ctx));
    0
}

/// The current thread and a copy of its open sync call or synced write, if any; one array
/// load (`SYNCS_ACTIVE`) while no thread is in one.
#[inline(always)]
pub fn current_call() -> Option<(u64, SyncInFlight)> {
    if !any_sync_active() {
        return None;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let call = open::find(pid_tgid as u32)?;
    // SAFETY: copied out of a valid map value before anyone removes it.
    Some((pid_tgid, unsafe { *call }))
}

/// The system call's return value, from a `sys_exit_*` tracepoint.
#[inline(always)]
pub fn syscall_ret(ctx: &TracePointContext) -> i64 {
    let offsets = SYSCALL_OFFSETS.load();
    Window::read(ctx)
        .and_then(|w| w.u64(offsets.ret))
        .map_or(0, |r| r as i64)
}

/// The thread's call `call` ended with `ret`: out of the table of open syncs, and its record.
#[inline(always)]
pub fn finish(pid_tgid: u64, call: &SyncInFlight, ret: i64) {
    forget(pid_tgid);
    let tgid = (pid_tgid >> 32) as u32;
    // sync_file_range, waiting or not, leaves the written bytes for the call that makes
    // them durable: it writes data pages and commits no metadata, so dpkg's and git's
    // fsync after it still makes the file durable (it is no empty sync).
    let file = match file::of_fd(call.fd) {
        Ok(file) => file,
        // A synced write whose fd is unknown: the file as its filesystem's tracepoint named it.
        Err(()) => FileIdentity {
            ino: call.ino,
            fs_dev: call.fs_dev,
            ..FileIdentity::UNKNOWN
        },
    };
    let window = take_window(
        window_key(tgid, call.fd, &file),
        call.kind != SYNC_FILE_RANGE_WRITE && call.kind != SYNC_FILE_RANGE,
    );
    emit(
        pid_tgid,
        &Call {
            start_ns: call.start_ns,
            ret,
            kind: call.kind,
            fd: call.fd,
            addr: if call.kind == SYNC_MSYNC {
                call.token
            } else {
                0
            },
        },
        window,
        &file,
        bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    );
}

/// What a sync record says of the call itself.
pub struct Call {
    pub start_ns: u64,
    pub ret: i64,
    pub kind: u8,
    pub fd: i32,
    /// msync's start address (0 for the others).
    pub addr: u64,
}

/// The window of the synced `file` (`fd` of `tgid`), as `account` keyed its writes.
#[inline(always)]
fn window_key(tgid: u32, fd: i32, file: &FileIdentity) -> Option<WindowKey> {
    if file.inode != 0 {
        return Some(WindowKey {
            inode: file.inode,
            ino: file.ino,
        });
    }
    // Without BTF offsets (`file::disk_window_of_fd`'s fallback).
    (fd >= 0 && file.ino == 0).then(|| WindowKey {
        inode: 0,
        ino: u64::from(tgid) << 32 | u64::from(fd as u32),
    })
}

/// What was written to the file since its last sync; with `reset`, the window starts again.
#[inline(always)]
fn take_window(key: Option<WindowKey>, reset: bool) -> FileWindow {
    let mut window = FileWindow::default();
    if let Some(key) = key
        && let Some(stored) = FILE_WINDOWS.get_ptr_mut(&key)
    {
        // SAFETY: a valid map value. Not atomic (the BPF target has no atomic swap in
        // core): a write on another CPU between the read and the reset can be lost.
        unsafe {
            window = *stored;
            if reset {
                *stored = FileWindow::default();
            }
        }
    }
    window
}

/// One [`SyncCallRecord`] for a finished sync of thread `pid_tgid`.
#[inline(always)]
pub fn emit(
    pid_tgid: u64,
    call: &Call,
    window: FileWindow,
    file: &FileIdentity,
    comm: [u8; COMM_LEN],
) {
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(mut slot) = emit::reserve::<SyncCallRecord>() else {
        return;
    };
    slot.write(SyncCallRecord {
        header: emit::header::<SyncCallRecord>(RECORD_SYNC_CALL),
        start_ns: call.start_ns,
        end_ns: now,
        ret: call.ret,
        window_bytes: window.bytes,
        window_writes: window.writes,
        ino: file.ino,
        addr: call.addr,
        tgid: (pid_tgid >> 32) as u32,
        pid: pid_tgid as u32,
        fd: call.fd,
        fs_dev: file.fs_dev,
        kind: call.kind,
        blkbits: file.blkbits,
        file_type: file.file_type,
        _pad: [0; 5],
        comm,
        name: file.name,
        parent: file.parent,
    });
    submit(slot);
}

/// Adds `bytes` to the process's total and to its file's window, if the fd is a file or a
/// block device.
#[inline(always)]
pub fn account(fd: u64, bytes: u64) {
    if bytes == 0 {
        return;
    }
    let Some(key) = file::disk_window_of_fd(fd as i32) else {
        return;
    };
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    add_logical(tgid, bytes);
    let window = match FILE_WINDOWS.get_ptr_mut(&key) {
        Some(window) => window,
        None => {
            // Only if still absent (see `add_per_cpu`).
            let _ = FILE_WINDOWS.insert(&key, &FileWindow::default(), u64::from(BPF_NOEXIST));
            let Some(window) = FILE_WINDOWS.get_ptr_mut(&key) else {
                return;
            };
            window
        }
    };
    // SAFETY: a valid map value; atomic, as threads (and processes) may write one file on
    // several CPUs at once.
    unsafe {
        atomic_add(&raw mut (*window).bytes, bytes);
        atomic_add(&raw mut (*window).writes, 1);
    }
}

/// Adds to the process's logical writes on this CPU; the command is stored once, by the CPU
/// that creates the entry.
#[inline(always)]
fn add_logical(tgid: u32, bytes: u64) {
    if let Some(total) = LOGICAL_WRITES.get_ptr_mut(&tgid) {
        // SAFETY: this CPU's slot of a per-CPU value.
        unsafe { (*total).bytes += bytes };
        return;
    }
    let first = LogicalWrites {
        bytes,
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    };
    // Only if still absent: another CPU may have created it since the lookup, and replacing
    // it would lose what that CPU added.
    if LOGICAL_WRITES
        .insert(&tgid, &first, u64::from(BPF_NOEXIST))
        .is_err()
        && let Some(total) = LOGICAL_WRITES.get_ptr_mut(&tgid)
    {
        // SAFETY: as above.
        unsafe { (*total).bytes += bytes };
    }
}

/// write and pwrite64: `fd`, `count`.
#[tracepoint]
pub fn write_enter(ctx: TracePointContext) -> u32 {
    let offsets = SYSCALL_OFFSETS.load();
    if let Ok(w) = Window::read(&ctx)
        && let (Ok(fd), Ok(count)) = (w.u64(offsets.fd), w.u64(offsets.count))
    {
        account(fd, count);
    }
    0
}

/// writev, pwritev, pwritev2: `fd`, `vec`, `vlen`; the lengths are summed from user memory.
#[tracepoint]
pub fn writev_enter(ctx: TracePointContext) -> u32 {
    let offsets = SYSCALL_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    let (Ok(fd), Ok(vec), Ok(vlen)) = (w.u64(offsets.fd), w.u64(offsets.vec), w.u64(offsets.vlen))
    else {
        return 0;
    };
    account(fd, writev_bytes(vec, vlen));
    0
}

/// The bytes a writev-like call asks to write: its iovecs' lengths, from user memory, a
/// chunk of them per read.
#[inline(always)]
pub fn writev_bytes(vec: u64, vlen: u64) -> u64 {
    let mut total = 0u64;
    for chunk in 0..MAX_IOVECS / IOVEC_CHUNK {
        let first = (chunk * IOVEC_CHUNK) as u64;
        if first >= vlen {
            break;
        }
        // struct iovec { void *iov_base; size_t iov_len; }: two words each.
        let at = (vec + first * 16) as *const [u64; 2 * IOVEC_CHUNK];
        // SAFETY: bpf_probe_read_user validates the user address. A chunk reaching past the
        // array's end (but not its last page) reads bytes that are not iovecs: only the
        // first `vlen - first` are summed.
        let Ok(words) = (unsafe { bpf_probe_read_user(at) }) else {
            return total + writev_tail(vec, first, vlen);
        };
        for i in 0..IOVEC_CHUNK {
            if first + i as u64 >= vlen {
                break;
            }
            total += words[2 * i + 1];
        }
    }
    total
}

/// The iovecs from `first` on, one read each: where a whole chunk cannot be read (the array
/// ends at the end of its mapping).
#[inline(always)]
fn writev_tail(vec: u64, first: u64, vlen: u64) -> u64 {
    let mut total = 0u64;
    for i in 0..IOVEC_CHUNK as u64 {
        if first + i >= vlen {
            break;
        }
        let len_ptr = (vec + (first + i) * 16 + 8) as *const u64;
        // SAFETY: as above.
        match unsafe { bpf_probe_read_user(len_ptr) } {
            Ok(len) => total += len,
            Err(_) => break,
        }
    }
    total
}
