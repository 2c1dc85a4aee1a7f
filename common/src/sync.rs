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
pub const SYNC_KIND_COUNT: usize = 11;

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
    pub tgid: u32,
    pub pid: u32,
    /// -1 for calls without a file (`sync`, `msync`).
    pub fd: i32,
    /// The file's superblock device (kernel `dev_t`).
    pub fs_dev: u32,
    pub kind: u8,
    /// log2 of the filesystem's block size.
    pub blkbits: u8,
    pub _pad: [u8; 6],
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

const _: () = assert!(core::mem::size_of::<SyncCallRecord>() == 160);

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
    pub _pad: u32,
}

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
        _pad: 0,
    };
}

pub const GLOBAL_FILE_OFFSETS: &str = "FILE_OFFSETS";

/// A sync call in progress, per thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SyncInFlight {
    pub start_ns: u64,
    pub fd: i32,
    pub kind: u8,
    pub _pad: [u8; 3],
}

/// Key of the per-fd logical write counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct FdKey {
    pub tgid: u32,
    pub fd: i32,
}

/// What a process wrote to one fd since the fd's last sync.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct FdWindow {
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
    /// `ret` of every sys_exit tracepoint.
    pub ret: u32,
}

impl SyscallOffsets {
    pub const ABSENT: Self = Self {
        fd: crate::tracepoint::ABSENT,
        count: crate::tracepoint::ABSENT,
        vec: crate::tracepoint::ABSENT,
        vlen: crate::tracepoint::ABSENT,
        flags: crate::tracepoint::ABSENT,
        ret: crate::tracepoint::ABSENT,
    };
}

/// iovecs summed per writev call (the verifier needs a bound; calls with more count the
/// first ones only).
pub const MAX_IOVECS: usize = 16;

pub const GLOBAL_SYSCALL_OFFSETS: &str = "SYSCALL_OFFSETS";
