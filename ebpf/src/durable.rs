//! Data made durable outside the sync system calls.
//!
//! - **Synced writes** (`O_DSYNC`, `O_SYNC`, `RWF_DSYNC`): the write itself runs the
//!   filesystem's fsync (`generic_write_sync` -> `vfs_fsync_range`), and the filesystem's own
//!   tracepoint fires in the writer (`ext4:ext4_sync_file_enter`, `xfs:xfs_file_fsync`,
//!   `btrfs:btrfs_sync_file`). When the thread is not already inside a sync system call, that
//!   begins a sync of its own in the table of open syncs (so its block requests are flagged as the
//!   sync's own writes); `ext4_sync_file_exit` or the write system call's exit, whichever comes
//!   first, ends it and emits its record. The write is recognised, and its fd read, from the
//!   thread's user registers (`bpf_task_pt_regs`); without an exit tracepoint of its own a
//!   sync is only begun inside a write system call, so that something always ends it.
//! - **io_uring syncs**: `IORING_OP_FSYNC` and `IORING_OP_SYNC_FILE_RANGE` are always punted
//!   to io-wq (`io_uring_queue_async_work`), which notes them by request; the filesystem's
//!   tracepoint then fires in the io-wq worker, found running that request through its
//!   `io_worker.cur_work`, which marks the worker (its block requests are the sync's own);
//!   `io_uring_complete` of the request, in whichever thread, ends it.
//! - **Synced io_uring writes** (`SYNC_URING_DSYNC_WRITE`): punted ones are followed like
//!   io_uring syncs (their worker's filesystem tracepoint notes them); one io_uring runs
//!   inline (XFS takes buffered writes without blocking) fires the filesystem's tracepoint in
//!   `io_uring_enter` (recognised from the registers), and ends at the next one of the same
//!   call or at the call's exit (`sys_exit_io_uring_enter`): counted exactly, timed to within
//!   the rest of the call's submissions.
//!
//! Every exit path returns at once when nothing is in progress: the write exits when no
//! thread is in a sync (`SYNCS_ACTIVE`), the io_uring completions when no io_uring sync is
//! pending ([`URING_ACTIVE`]).

use aya_ebpf::{
    Global,
    bindings::{BPF_ANY, BPF_NOEXIST, BPF_RB_FORCE_WAKEUP},
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
        generated::{bpf_get_current_task_btf, bpf_task_pt_regs},
    },
    macros::{map, raw_tracepoint, tracepoint},
    maps::{Array, LruHashMap},
    programs::{RawTracePointContext, TracePointContext},
};
use iotop_bpf_common::{
    COMM_LEN, RECORD_WAKEUP, RecordHeader,
    sync::{
        DurableBtf, DurableOffsets, SYNC_DSYNC_WRITE, SYNC_IN_WORKER, SYNC_OSYNC_WRITE,
        SYNC_URING_DSYNC_WRITE, SYNC_URING_FDATASYNC, SYNC_URING_FSYNC, SyncInFlight,
        TOKEN_URING_INLINE, UringSync,
    },
    tracepoint::ABSENT,
};

use crate::{
    fields::Window,
    file,
    raw::layout,
    sync::{atomic_add, begin, current_call, finish, forget, syscall_ret},
};

mod uring;

#[unsafe(no_mangle)]
static DURABLE_OFFSETS: Global<DurableOffsets> = Global::new(DurableOffsets::ABSENT);

#[unsafe(no_mangle)]
static DURABLE_BTF: Global<DurableBtf> = Global::new(DurableBtf::ABSENT);

/// Punted io_uring syncs not yet completed: request -> the sync. LRU: a sync whose completion
/// was missed (it completed before its probe was attached) must not hold a slot for ever.
#[map]
static URING_SYNCS: LruHashMap<u64, UringSync> = LruHashMap::with_max_entries(4_096, 0);

/// See `iotop_bpf_common::sync::URING_SYNC_SEEN`.
#[map]
static URING_SYNC_SEEN: Array<u32> = Array::with_max_entries(1, 0);

#[inline(always)]
fn uring_sync_seen() {
    let Some(seen) = URING_SYNC_SEEN.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a valid, aligned map value; a racing store writes the same 1.
    unsafe {
        if *seen != 0 {
            return;
        }
        *seen = 1;
    }
    // Wake the reader at once: the syncs that complete before it attaches their ends are
    // lost, so every millisecond counts.
    if let Some(mut record) = crate::emit::EVENTS.reserve::<RecordHeader>(0) {
        record.write(crate::emit::header::<RecordHeader>(RECORD_WAKEUP));
        record.submit(u64::from(BPF_RB_FORCE_WAKEUP));
    }
}

/// How many entries [`URING_SYNCS`] holds, all CPUs together: the completion probe, which
/// runs on every io_uring completion of the host, returns at once while it is 0.
#[map]
static URING_ACTIVE: Array<u64> = Array::with_max_entries(1, 0);

#[inline(always)]
fn uring_active_add(delta: u64) {
    if let Some(count) = URING_ACTIVE.get_ptr_mut(0) {
        // SAFETY: a valid, aligned map value.
        unsafe { atomic_add(count, delta) };
    }
}

#[inline(always)]
fn any_uring_sync() -> bool {
    URING_ACTIVE.get(0).is_some_and(|n| *n != 0)
}

/// `ext4:ext4_sync_file_enter`.
#[tracepoint]
pub fn durable_ext4_enter(ctx: TracePointContext) -> u32 {
    let o = DURABLE_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    synced(
        w.u32(o.ext4_dev).unwrap_or(0),
        w.u64(o.ext4_ino).unwrap_or(0),
        w.u32(o.ext4_datasync).ok().map(|d| d != 0),
        true,
    );
    0
}

/// `ext4:ext4_sync_file_exit`: ends a synced write (its record) or a worker's part in an
/// io_uring sync (the request's completion emits that record).
#[tracepoint]
pub fn durable_ext4_exit(ctx: TracePointContext) -> u32 {
    ext4_exited(|| {
        let o = DURABLE_OFFSETS.load();
        Window::read(&ctx)
            .and_then(|w| w.u32(o.ext4_ret))
            .map_or(0, |r| i64::from(r as i32))
    });
    0
}

/// ext4 finished making a file durable (`ret`: its result).
#[inline(always)]
fn ext4_exited(ret: impl FnOnce() -> i64) {
    let Some((pid_tgid, call)) = current_call() else {
        return;
    };
    match call.kind {
        SYNC_IN_WORKER => forget(pid_tgid),
        SYNC_DSYNC_WRITE | SYNC_OSYNC_WRITE | SYNC_URING_DSYNC_WRITE => {
            finish(pid_tgid, &call, ret());
        }
        // Inside a sync system call: its exit ends it.
        _ => {}
    }
}

/// The filesystem device and inode of the `struct file` at `file` (zeros if unreadable).
#[inline(always)]
fn file_id(file: u64) -> (u32, u64) {
    file::inode_of(file)
        .and_then(file::inode_id)
        .unwrap_or((0, 0))
}

/// Raw `ext4_sync_file_enter(struct file *file, int datasync)`.
#[raw_tracepoint(tracepoint = "ext4_sync_file_enter")]
pub fn raw_durable_ext4_enter(ctx: RawTracePointContext) -> i32 {
    let (dev, ino) = file_id(ctx.arg(0));
    let datasync: u64 = ctx.arg(1);
    synced(dev, ino, Some(datasync as u32 != 0), true);
    0
}

/// Raw `ext4_sync_file_exit(struct inode *inode, int ret)`.
#[raw_tracepoint(tracepoint = "ext4_sync_file_exit")]
pub fn raw_durable_ext4_exit(ctx: RawTracePointContext) -> i32 {
    ext4_exited(|| i64::from(ctx.arg::<u64>(1) as u32 as i32));
    0
}

/// Raw `xfs_file_fsync(struct xfs_inode *ip)`: the VFS inode is inside the XFS one, at an
/// offset from the xfs module's BTF.
#[raw_tracepoint(tracepoint = "xfs_file_fsync")]
pub fn raw_durable_xfs(ctx: RawTracePointContext) -> i32 {
    let ip: u64 = ctx.arg(0);
    let (dev, ino) = file::inode_id(ip + u64::from(layout!(xfs_inode_vnode))).unwrap_or((0, 0));
    synced(dev, ino, None, false);
    0
}

/// Raw `btrfs_sync_file(const struct file *file, int datasync)`.
#[raw_tracepoint(tracepoint = "btrfs_sync_file")]
pub fn raw_durable_btrfs(ctx: RawTracePointContext) -> i32 {
    let (dev, ino) = file_id(ctx.arg(0));
    let datasync: u64 = ctx.arg(1);
    synced(dev, ino, Some(datasync as u32 != 0), false);
    0
}

/// `xfs:xfs_file_fsync` (no exit tracepoint).
#[tracepoint]
pub fn durable_xfs(ctx: TracePointContext) -> u32 {
    let o = DURABLE_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    synced(
        w.u32(o.xfs_dev).unwrap_or(0),
        w.u64(o.xfs_ino).unwrap_or(0),
        None,
        false,
    );
    0
}

/// `btrfs:btrfs_sync_file` (no exit tracepoint; its device is a UUID, not a `dev_t`).
#[tracepoint]
pub fn durable_btrfs(ctx: TracePointContext) -> u32 {
    let o = DURABLE_OFFSETS.load();
    let Ok(w) = Window::read(&ctx) else { return 0 };
    synced(
        0,
        w.u64(o.btrfs_ino).unwrap_or(0),
        w.u32(o.btrfs_datasync).ok().map(|d| d != 0),
        false,
    );
    0
}

/// `sys_exit_write`, `_pwrite64`, `_writev`, `_pwritev`, `_pwritev2` (and
/// `sys_exit_io_uring_enter`, for writes io_uring ran inline): ends a synced write
/// that no filesystem exit tracepoint ended. Runs on every write system call of the host:
/// one array load while no thread is in a sync.
#[tracepoint]
pub fn durable_write_exit(ctx: TracePointContext) -> u32 {
    let Some((pid_tgid, call)) = current_call() else {
        return 0;
    };
    if call.kind == SYNC_DSYNC_WRITE || call.kind == SYNC_OSYNC_WRITE {
        finish(pid_tgid, &call, syscall_ret(&ctx));
    } else if call.kind == SYNC_URING_DSYNC_WRITE && call.token == TOKEN_URING_INLINE {
        // io_uring_enter's result is no write's.
        finish(pid_tgid, &call, 0);
    }
    0
}

/// A filesystem began to make a file durable (`dev`: its filesystem, `ino`: the inode;
/// `datasync` where the tracepoint says; `has_exit`: an exit tracepoint will end it).
#[inline(always)]
fn synced(dev: u32, ino: u64, datasync: Option<bool>, has_exit: bool) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if let Some((_, call)) = current_call() {
        if call.kind == SYNC_URING_DSYNC_WRITE && call.token == TOKEN_URING_INLINE {
            // The previous synced write of this io_uring_enter ends where this one begins.
            finish(pid_tgid, &call, 0);
        } else if call.kind != SYNC_IN_WORKER {
            return; // inside fsync, fdatasync, msync... (or a write already counted)
        }
    }
    let btf = DURABLE_BTF.load();
    let now = unsafe { bpf_ktime_get_ns() };
    if btf.finds_workers()
        && let Some(req) = worker_request(&btf)
    {
        in_worker(pid_tgid, req, dev, ino, datasync, has_exit, now);
        return;
    }
    // A write system call that synced? Its fd is its first argument.
    let fd = if btf.reads_registers() {
        match writer(&btf) {
            Writer::Syscall(fd) => fd,
            // A write io_uring runs inline: its exit (or the next one) ends it.
            Writer::UringEnter => {
                uring_sync_seen();
                begin(
                    pid_tgid,
                    &SyncInFlight {
                        start_ns: now,
                        token: TOKEN_URING_INLINE,
                        ino,
                        fs_dev: dev,
                        fd: -1,
                        kind: SYNC_URING_DSYNC_WRITE,
                        _pad: [0; 7],
                    },
                );
                return;
            }
            // Some other context (a kernel thread, aio, splice): not a write this probe
            // follows to its end.
            Writer::Other => return,
        }
    } else if has_exit {
        -1
    } else {
        return;
    };
    let kind = match datasync {
        Some(true) => SYNC_DSYNC_WRITE,
        Some(false) => SYNC_OSYNC_WRITE,
        None if opened_o_sync(&btf, fd) => SYNC_OSYNC_WRITE,
        None => SYNC_DSYNC_WRITE,
    };
    begin(
        pid_tgid,
        &SyncInFlight {
            start_ns: now,
            token: 0,
            ino,
            fs_dev: dev,
            fd,
            kind,
            _pad: [0; 7],
        },
    );
}

/// The current thread's file `fd` was opened with `O_SYNC` (not only `O_DSYNC`).
#[inline(always)]
fn opened_o_sync(btf: &DurableBtf, fd: i32) -> bool {
    if btf.file_flags == ABSENT || btf.o_sync_bit == 0 {
        return false;
    }
    file::file_of_fd(fd)
        .and_then(|f| file::read::<u32>(f, btf.file_flags))
        .is_ok_and(|flags| flags & btf.o_sync_bit != 0)
}

/// What the current thread is in when its data is made durable.
enum Writer {
    /// A write system call, on this fd.
    Syscall(i32),
    /// `io_uring_enter`, running a write inline.
    UringEnter,
    Other,
}

/// The system call the current thread is in, from its user registers.
#[inline(always)]
fn writer(btf: &DurableBtf) -> Writer {
    // SAFETY: helpers without preconditions; the registers are read through
    // bpf_probe_read_kernel only.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as u64;
    // Four bytes: arm64's syscallno is an s32 (followed by padding); x86-64's orig_ax is a
    // long whose low half, first on a little-endian machine, is the number.
    let Ok(nr) = file::read::<u32>(regs, btf.regs_nr) else {
        return Writer::Other;
    };
    if btf.uring_enter_nr != u32::MAX && nr == btf.uring_enter_nr {
        return Writer::UringEnter;
    }
    let mut i = 0;
    let mut found = false;
    while i < btf.write_nrs.len() {
        if btf.write_nrs[i] == nr {
            found = true;
        }
        i += 1;
    }
    if !found {
        return Writer::Other;
    }
    match file::read::<u64>(regs, btf.regs_arg0) {
        Ok(fd) => Writer::Syscall(fd as i32),
        Err(()) => Writer::Other,
    }
}

/// The io_uring request the current thread runs, if it is an io-wq worker.
#[inline(always)]
fn worker_request(btf: &DurableBtf) -> Option<u64> {
    // SAFETY: a helper without preconditions; read through bpf_probe_read_kernel only.
    let task = unsafe { bpf_get_current_task() };
    let worker: u64 = file::read(task, btf.task_worker_private).ok()?;
    // Kernel threads keep their own structure there; only an io-wq worker's points back.
    let owner: u64 = file::read(worker, btf.worker_task).ok()?;
    if owner != task {
        return None;
    }
    let work: u64 = file::read(worker, btf.worker_cur_work).ok()?;
    (work != 0).then(|| work - u64::from(btf.req_work))
}

/// The io-wq worker `pid_tgid` runs request `req`, and the filesystem syncs its file.
#[inline(always)]
fn in_worker(
    pid_tgid: u64,
    req: u64,
    dev: u32,
    ino: u64,
    datasync: Option<bool>,
    has_exit: bool,
    now: u64,
) {
    if any_uring_sync()
        && let Some(sync) = URING_SYNCS.get_ptr_mut(&req)
    {
        // A punted fsync: the worker's block requests are its own from now on.
        // SAFETY: a valid map value, touched by this request's probes only.
        unsafe {
            (*sync).worker = pid_tgid as u32;
            (*sync).ino = ino;
            (*sync).fs_dev = dev;
            if datasync == Some(true) && (*sync).kind == SYNC_URING_FSYNC {
                (*sync).kind = SYNC_URING_FDATASYNC;
            }
        }
        mark_worker(pid_tgid, req, now);
        return;
    }
    // Another punted request made its data durable: an O_DSYNC write through io_uring.
    let kind = SYNC_URING_DSYNC_WRITE;
    if has_exit {
        begin(
            pid_tgid,
            &SyncInFlight {
                start_ns: now,
                token: req,
                ino,
                fs_dev: dev,
                fd: -1,
                kind,
                _pad: [0; 7],
            },
        );
    } else {
        note(req, pid_tgid, pid_tgid as u32, ino, dev, kind, now);
        mark_worker(pid_tgid, req, now);
    }
}

/// Marks the worker as running the sync `req` (replacing a request it ran before).
#[inline(always)]
fn mark_worker(pid_tgid: u64, req: u64, now: u64) {
    begin(
        pid_tgid,
        &SyncInFlight {
            start_ns: now,
            token: req,
            ino: 0,
            fs_dev: 0,
            fd: -1,
            kind: SYNC_IN_WORKER,
            _pad: [0; 7],
        },
    );
}

/// Notes a pending io_uring sync (counted once per request).
#[inline(always)]
fn note(req: u64, pid_tgid: u64, worker: u32, ino: u64, dev: u32, kind: u8, now: u64) {
    uring_sync_seen();
    let sync = UringSync {
        start_ns: now,
        pid_tgid,
        ino,
        worker,
        fs_dev: dev,
        kind,
        _pad: [0; 7],
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    };
    if URING_SYNCS
        .insert(&req, &sync, u64::from(BPF_NOEXIST))
        .is_ok()
    {
        uring_active_add(1);
    } else {
        let _ = URING_SYNCS.insert(&req, &sync, u64::from(BPF_ANY));
    }
}
