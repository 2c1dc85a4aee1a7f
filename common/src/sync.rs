//! Sync calls (fsync and friends) and logical write accounting.

use crate::abi::{COMM_LEN, RecordHeader};

/// `kind` of a sync call.
pub const SYNC_FSYNC: u8 = 0;
pub const SYNC_FDATASYNC: u8 = 1;
pub const SYNC_FILE_RANGE: u8 = 2;
pub const SYNC_SYNCFS: u8 = 3;
pub const SYNC_SYNC: u8 = 4;
/// `msync` with `MS_SYNC` (asynchronous msync writes nothing synchronously and is ignored).
pub const SYNC_MSYNC: u8 = 5;
/// A write the filesystem made durable before returning (`O_DSYNC`, `RWF_DSYNC`; `O_SYNC`
/// too where the filesystem's tracepoint does not say which): `generic_write_sync` ran the
/// filesystem's fsync inside the write.
pub const SYNC_DSYNC_WRITE: u8 = 6;
/// The same for a write on an `O_SYNC` (or `RWF_SYNC`) file: data and metadata.
pub const SYNC_OSYNC_WRITE: u8 = 7;
/// io_uring `IORING_OP_FSYNC` (`IORING_FSYNC_DATASYNC` where the filesystem says so), from
/// its punt to io-wq to its completion.
pub const SYNC_URING_FSYNC: u8 = 8;
pub const SYNC_URING_FDATASYNC: u8 = 9;
/// io_uring `IORING_OP_SYNC_FILE_RANGE`.
pub const SYNC_URING_SYNC_FILE_RANGE: u8 = 10;
/// An io_uring write the filesystem made durable before completing it (`O_DSYNC` or
/// `O_SYNC` file, `RWF_DSYNC`): run inline in `io_uring_enter` or punted to io-wq.
pub const SYNC_URING_DSYNC_WRITE: u8 = 11;
/// `sync_file_range` without `SYNC_FILE_RANGE_WAIT_BEFORE` or `_WAIT_AFTER` (git's batch
/// mode, dpkg): it starts write-back and returns; nothing is durable when it does. Its fd's
/// written bytes are left for the call that makes them durable.
pub const SYNC_FILE_RANGE_WRITE: u8 = 12;
pub const SYNC_KIND_COUNT: usize = 13;

/// `sync_file_range`'s flags that wait for the write-back (`<fcntl.h>`).
pub const SYNC_FILE_RANGE_WAIT_BEFORE: u64 = 1;
pub const SYNC_FILE_RANGE_WAIT_AFTER: u64 = 4;

/// The kind of a `sync_file_range` call with `flags`.
#[must_use]
pub const fn sync_file_range_kind(flags: u64) -> u8 {
    if flags & (SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WAIT_AFTER) == 0 {
        SYNC_FILE_RANGE_WRITE
    } else {
        SYNC_FILE_RANGE
    }
}

/// Not a kind of record: the entry of an io-wq worker thread running a punted io_uring
/// request that syncs, so that the block requests it creates meanwhile are the sync's own.
/// The request's completion (in whichever thread) ends it and emits the record.
pub const SYNC_IN_WORKER: u8 = 0xff;

/// [`SyncInFlight::token`] of a synced io_uring write run inline by `io_uring_enter`: the
/// next one of the same call, or the call's exit, ends it.
pub const TOKEN_URING_INLINE: u64 = 1;
/// Array of one `u32`, set to 1 by the probes the first time an io_uring sync (punted or
/// inline) is seen: user space then attaches the probes that end them (they run on every
/// io_uring completion or `io_uring_enter` of the host, so not before they are needed).
pub const URING_SYNC_SEEN: &str = "URING_SYNC_SEEN";

/// io_uring opcodes (`enum io_uring_op`, UAPI).
pub const IORING_OP_FSYNC: u8 = 3;
pub const IORING_OP_SYNC_FILE_RANGE: u8 = 8;

/// `MS_SYNC` from `<sys/mman.h>`.
pub const MS_SYNC: u64 = 4;

/// One completed sync call.
///
/// `window_bytes` is what the thread group asked to write to this fd (write, pwrite64,
/// writev, pwritev, pwritev2) since the previous sync of the same fd, or since the probes
/// were attached: the logical payload this sync made durable.
///
/// `ino`, `fs_dev` and `blkbits` identify the synced file and its filesystem's block size,
/// read in the kernel while the call runs (the process may be gone before user space could
/// look at its fds); all zero when unknown.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SyncCallRecord {
    pub header: RecordHeader,
    pub start_ns: u64,
    pub end_ns: u64,
    pub ret: i64,
    pub window_bytes: u64,
    /// Write calls in the window.
    pub window_writes: u64,
    pub ino: u64,
    /// `msync`: the start of the range (its first argument), whose mapping user space looks
    /// up in /proc/PID/maps to name the file; 0 for every other kind.
    pub addr: u64,
    pub tgid: u32,
    pub pid: u32,
    /// -1 for calls without a file (`sync`, `msync`).
    pub fd: i32,
    /// The file's superblock device (kernel `dev_t`).
    pub fs_dev: u32,
    pub kind: u8,
    /// log2 of the filesystem's block size.
    pub blkbits: u8,
    /// The synced file's type, `(i_mode & S_IFMT) >> 12` (0: unknown): a directory's fsync
    /// makes its entries durable, a payload no write counted.
    pub file_type: u8,
    pub _pad: [u8; 5],
    pub comm: [u8; COMM_LEN],
    /// The file's name (its last path component, NUL-padded): names the file of a process
    /// that exits before user space can look at its fds.
    pub name: [u8; FILE_NAME_LEN],
    /// The name of the directory it is in (empty for the root): `mail/m12` tells more than
    /// `m12` when four hundred files are each synced once and closed.
    pub parent: [u8; FILE_NAME_LEN],
}

/// Bytes of a synced file's name kept in a record.
pub const FILE_NAME_LEN: usize = 32;

const _: () = assert!(core::mem::size_of::<SyncCallRecord>() == 168);

/// Offsets, from BTF, of the kernel objects between a task and its file's superblock:
/// `task->files->fdt->fd[n]->f_inode->{i_ino, i_sb->{s_dev, s_blocksize_bits}}`. All zero:
/// not available (no BTF), the fields stay zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct FileOffsets {
    pub task_files: u32,
    pub files_fdt: u32,
    pub fdt_max_fds: u32,
    pub fdt_fd: u32,
    pub file_inode: u32,
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub sb_dev: u32,
    pub sb_blocksize_bits: u32,
    /// `file->f_path.dentry`, `dentry->d_name.name` and `dentry->d_parent`.
    pub file_dentry: u32,
    pub dentry_name: u32,
    pub dentry_parent: u32,
    /// `inode->i_mode` (a `u16`): what kind of file an fd is. Its offset is 0 (the first
    /// field), so absence is [`crate::tracepoint::ABSENT`], not 0.
    pub inode_mode: u32,
}

/// `S_IFMT` and the kinds of file whose writes count as logical writes: regular files and
/// block devices (a pipe's or a socket's bytes never reach a disk).
pub const S_IFMT: u16 = 0o170_000;
pub const S_IFREG: u16 = 0o100_000;
pub const S_IFBLK: u16 = 0o060_000;
pub const S_IFDIR: u16 = 0o040_000;
/// [`SyncCallRecord::file_type`] of a directory.
pub const FILE_TYPE_DIR: u8 = (S_IFDIR >> 12) as u8;

impl FileOffsets {
    pub const ZERO: Self = Self {
        task_files: 0,
        files_fdt: 0,
        fdt_max_fds: 0,
        fdt_fd: 0,
        file_inode: 0,
        inode_ino: 0,
        inode_sb: 0,
        sb_dev: 0,
        sb_blocksize_bits: 0,
        file_dentry: 0,
        dentry_name: 0,
        dentry_parent: 0,
        inode_mode: crate::tracepoint::ABSENT,
    };
}

pub const GLOBAL_FILE_OFFSETS: &str = "FILE_OFFSETS";

/// A sync call in progress, per thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SyncInFlight {
    pub start_ns: u64,
    /// For [`SYNC_IN_WORKER`]: the io_uring request (`struct io_kiocb *`) the worker runs;
    /// for [`SYNC_MSYNC`]: the start of the range.
    pub token: u64,
    /// The file as a filesystem tracepoint named it (inode, the kernel `dev_t` of its
    /// filesystem; 0 when unknown): a synced write whose fd is unknown.
    pub ino: u64,
    pub fs_dev: u32,
    /// -1 when unknown or without a file.
    pub fd: i32,
    pub kind: u8,
    pub _pad: [u8; 7],
}

/// Ways per set of the table of open syncs.
pub const SYNC_WAYS: usize = 4;
/// Sets in the table of open syncs (a power of two): 16,384 threads, as many as the hash
/// it replaced held. With 1,000 threads in a sync at once, about one storm in forty finds
/// a set of five and drops one (counted: `COUNTER_SYNC_EVICTED`).
pub const SYNC_SETS: u32 = 1 << 12;

/// One thread's open sync, alone on its cache line: written by the thread's own probes.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SyncLine {
    /// `call.start_ns == 0`: no sync open.
    pub call: SyncInFlight,
    pub _pad: [u8; 64 - core::mem::size_of::<SyncInFlight>()],
}

/// One set of the table of open syncs (the `SYNC_CALLS` array): its thread ids on one cache
/// line, then a line per call. It replaced a hash keyed by thread, whose insert at every
/// sync's entry and delete at its exit took a bucket lock and moved an element between
/// per-CPU free lists; a thread keeps its slot after its call ends, so its next call is
/// found from the ids line alone.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SyncSet {
    /// Thread ids; 0: never used.
    pub tids: [u32; SYNC_WAYS],
    pub _pad: [u8; 64 - 4 * SYNC_WAYS],
    pub lines: [SyncLine; SYNC_WAYS],
}

const _: () = assert!(core::mem::size_of::<SyncLine>() == 64);
const _: () = assert!(core::mem::size_of::<SyncSet>() == 64 * (1 + SYNC_WAYS));

/// The set of thread `tid` (Fibonacci hashing, as the episode table's).
#[inline(always)]
#[must_use]
pub const fn sync_set(tid: u32) -> u32 {
    tid.wrapping_mul(0x9e37_79b9) >> (32 - SYNC_SETS.trailing_zeros())
}

/// A punted io_uring request that syncs, from its punt to io-wq to its completion; keyed by
/// the request (`struct io_kiocb *`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct UringSync {
    pub start_ns: u64,
    /// The submitting thread (its tgid is the process's).
    pub pid_tgid: u64,
    /// The file as the filesystem's tracepoint named it in the worker (0 until then).
    pub ino: u64,
    /// The io-wq worker thread that ran it, once a filesystem tracepoint saw it (0 before).
    pub worker: u32,
    pub fs_dev: u32,
    pub kind: u8,
    pub _pad: [u8; 7],
    /// The submitter's command name.
    pub comm: [u8; COMM_LEN],
}

/// `IORING_FSYNC_DATASYNC` in an `IORING_OP_FSYNC`'s `fsync_flags` (UAPI).
pub const IORING_FSYNC_DATASYNC: u32 = 1;

/// Offsets of the fields of the tracepoints that see data made durable outside the sync
/// system calls (from tracefs `format` files; [`crate::tracepoint::ABSENT`] when the
/// tracepoint or field is missing): the filesystems' own fsync tracepoints, which also fire
/// for `O_SYNC`/`O_DSYNC` writes, and io_uring's punt and completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DurableOffsets {
    /// `ext4:ext4_sync_file_enter`: `dev`, `ino`, `datasync`.
    pub ext4_dev: u32,
    pub ext4_ino: u32,
    pub ext4_datasync: u32,
    /// `ext4:ext4_sync_file_exit`: `ret`.
    pub ext4_ret: u32,
    /// `xfs:xfs_file_fsync`: `dev`, `ino`.
    pub xfs_dev: u32,
    pub xfs_ino: u32,
    /// `btrfs:btrfs_sync_file`: `ino`, `datasync` (its device is a UUID, not a `dev_t`).
    pub btrfs_ino: u32,
    pub btrfs_datasync: u32,
    /// `io_uring:io_uring_queue_async_work`: `req`, `opcode`.
    pub punt_req: u32,
    pub punt_opcode: u32,
    /// `io_uring:io_uring_complete`: `req`, `res`.
    pub complete_req: u32,
    pub complete_res: u32,
}

impl DurableOffsets {
    pub const ABSENT: Self = Self {
        ext4_dev: crate::tracepoint::ABSENT,
        ext4_ino: crate::tracepoint::ABSENT,
        ext4_datasync: crate::tracepoint::ABSENT,
        ext4_ret: crate::tracepoint::ABSENT,
        xfs_dev: crate::tracepoint::ABSENT,
        xfs_ino: crate::tracepoint::ABSENT,
        btrfs_ino: crate::tracepoint::ABSENT,
        btrfs_datasync: crate::tracepoint::ABSENT,
        punt_req: crate::tracepoint::ABSENT,
        punt_opcode: crate::tracepoint::ABSENT,
        complete_req: crate::tracepoint::ABSENT,
        complete_res: crate::tracepoint::ABSENT,
    };
}

pub const GLOBAL_DURABLE_OFFSETS: &str = "DURABLE_OFFSETS";

/// What the probes of synced writes and io_uring syncs read in kernel objects, at offsets
/// found in BTF ([`crate::tracepoint::ABSENT`]: unknown; a feature whose offsets are unknown
/// is switched off by its `use_*` flag).
///
/// - A filesystem sync tracepoint fires inside the write that synced, so the write's fd and
///   system call number are in the thread's user registers (`bpf_task_pt_regs`).
/// - An io-wq worker is recognised by its `task->worker_private`, a `struct io_worker` whose
///   `task` is the thread itself; its `cur_work` is the `work` member of the request it runs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DurableBtf {
    /// 1 when the thread's user registers are read (`bpf_task_pt_regs`, 5.15+).
    pub use_regs: u32,
    /// `pt_regs`: the first system call argument and the system call number (x86-64 `di`
    /// and `orig_ax`, arm64 `orig_x0` and `syscallno`; the number is read as 4 bytes).
    pub regs_arg0: u32,
    pub regs_nr: u32,
    /// 1 when io-wq workers are recognised: `task_struct.worker_private`, `io_worker.task`,
    /// `io_worker.cur_work`, `io_kiocb.work`.
    pub use_workers: u32,
    pub task_worker_private: u32,
    pub worker_task: u32,
    pub worker_cur_work: u32,
    pub req_work: u32,
    /// `io_kiocb.file` (0 on 6.x: the first member of a union).
    pub req_file: u32,
    /// Where an `IORING_OP_FSYNC`'s flags are: `io_kiocb.cmd` + `io_sync.flags`.
    pub req_sync_flags: u32,
    /// `file.f_flags`, and the `O_SYNC` bit that `O_DSYNC` lacks (`__O_SYNC`, per arch).
    pub file_flags: u32,
    pub o_sync_bit: u32,
    /// The write system calls' numbers on this architecture: write, pwrite64, writev,
    /// pwritev, pwritev2 (`u32::MAX`: none).
    pub write_nrs: [u32; 5],
    /// The number of `io_uring_enter` on this architecture (`u32::MAX`: synced writes that
    /// io_uring runs inline are not followed; user space sets it only when the call's exit
    /// tracepoint is attached, which ends them).
    pub uring_enter_nr: u32,
    /// How the raw `io_uring_complete` passes the result: [`RAW_COMPLETE_CQE`],
    /// [`RAW_COMPLETE_RES`], or 0 (the classic tracepoint is used).
    pub raw_complete: u32,
}

/// Raw `io_uring_complete(ctx, req, struct io_uring_cqe *cqe)` (6.3+): `res` in the CQE.
pub const RAW_COMPLETE_CQE: u32 = 1;
/// Raw `io_uring_complete(ctx, req, user_data, int res, cflags, extra1, extra2)`.
pub const RAW_COMPLETE_RES: u32 = 2;
/// `io_uring_cqe.res` (UAPI: after the 64-bit `user_data`).
pub const CQE_RES: u32 = 8;

impl DurableBtf {
    pub const ABSENT: Self = Self {
        use_regs: 0,
        regs_arg0: crate::tracepoint::ABSENT,
        regs_nr: crate::tracepoint::ABSENT,
        use_workers: 0,
        task_worker_private: crate::tracepoint::ABSENT,
        worker_task: crate::tracepoint::ABSENT,
        worker_cur_work: crate::tracepoint::ABSENT,
        req_work: crate::tracepoint::ABSENT,
        req_file: crate::tracepoint::ABSENT,
        req_sync_flags: crate::tracepoint::ABSENT,
        file_flags: crate::tracepoint::ABSENT,
        o_sync_bit: 0,
        write_nrs: [u32::MAX; 5],
        uring_enter_nr: u32::MAX,
        raw_complete: 0,
    };

    /// Whether the write system call that synced can be recognised (and its fd read).
    pub fn reads_registers(&self) -> bool {
        self.use_regs != 0
    }

    /// Whether io-wq workers can be recognised and their request found.
    pub fn finds_workers(&self) -> bool {
        self.use_workers != 0
    }
}

pub const GLOBAL_DURABLE_BTF: &str = "DURABLE_BTF";

/// Key of the per-file logical write counters: the file's inode, by address and number (an
/// inode freed and its memory reused for another file starts a new window). What a sync
/// makes durable is the file's, whichever fd wrote it: dpkg writes a file through one fd and
/// fsyncs it through another. `inode` 0: no BTF to find the inode, `ino` is then the
/// process and fd (`tgid << 32 | fd`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct WindowKey {
    pub inode: u64,
    pub ino: u64,
}

/// What was written to one file since its last sync.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct FileWindow {
    pub bytes: u64,
    pub writes: u64,
}

/// Offsets of the syscall tracepoint arguments the probes read (each argument occupies an
/// 8-byte slot; `ABSENT` when the syscall has no such argument).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SyscallOffsets {
    pub fd: u32,
    /// `count` of write / pwrite64.
    pub count: u32,
    /// `vec` and `vlen` of writev / pwritev / pwritev2.
    pub vec: u32,
    pub vlen: u32,
    /// `flags` of msync.
    pub flags: u32,
    /// `flags` of sync_file_range.
    pub range_flags: u32,
    /// `ret` of every sys_exit tracepoint.
    pub ret: u32,
    /// `start` of msync.
    pub start: u32,
}

impl SyscallOffsets {
    pub const ABSENT: Self = Self {
        fd: crate::tracepoint::ABSENT,
        count: crate::tracepoint::ABSENT,
        vec: crate::tracepoint::ABSENT,
        vlen: crate::tracepoint::ABSENT,
        flags: crate::tracepoint::ABSENT,
        range_flags: crate::tracepoint::ABSENT,
        ret: crate::tracepoint::ABSENT,
        start: crate::tracepoint::ABSENT,
    };
}

/// iovecs summed per writev call, read [`IOVEC_CHUNK`] at a time (the verifier needs a
/// bound; calls with more count the first ones only). PostgreSQL writes its WAL with up to
/// 32 (`PG_IOV_MAX`).
pub const MAX_IOVECS: usize = 64;
pub const IOVEC_CHUNK: usize = 8;

pub const GLOBAL_SYSCALL_OFFSETS: &str = "SYSCALL_OFFSETS";
