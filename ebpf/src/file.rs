//! What the kernel knows of an open file: its inode number, its filesystem's device and
//! block size, and its name, read through kernel objects at offsets user space found in BTF
//! (`FileOffsets`). The sync and direct-I/O probes use it so that a file is named even when
//! its process exits before user space could look at its fds.

use aya_ebpf::{
    Global,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel,
        bpf_probe_read_kernel_str_bytes,
    },
};
use iotop_bpf_common::{
    sync::{FILE_NAME_LEN, FileOffsets, S_IFBLK, S_IFMT, S_IFREG, WindowKey},
    tracepoint::ABSENT,
};

#[unsafe(no_mangle)]
static FILE_OFFSETS: Global<FileOffsets> = Global::new(FileOffsets::ZERO);

/// Reads a `T` at `base + offset` in kernel memory (never from address 0).
#[inline(always)]
pub fn read<T>(base: u64, offset: u32) -> Result<T, ()> {
    if base == 0 {
        return Err(());
    }
    // SAFETY: bpf_probe_read_kernel validates the address.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T) }.map_err(|_| ())
}

pub struct FileIdentity {
    /// The `struct inode *` (0: unknown).
    pub inode: u64,
    pub ino: u64,
    /// `(i_mode & S_IFMT) >> 12` (0: unknown).
    pub file_type: u8,
    pub fs_dev: u32,
    pub blkbits: u8,
    /// `inode->i_size` when asked for (0 otherwise).
    pub size: i64,
    pub name: [u8; FILE_NAME_LEN],
    /// Its directory's name (empty at the root).
    pub parent: [u8; FILE_NAME_LEN],
}

impl FileIdentity {
    pub const UNKNOWN: Self = Self {
        inode: 0,
        ino: 0,
        file_type: 0,
        fs_dev: 0,
        blkbits: 0,
        size: 0,
        name: [0; FILE_NAME_LEN],
        parent: [0; FILE_NAME_LEN],
    };
}

/// The identity of the `struct file` at `file`; with `size_offset`, the inode's size too.
#[inline(always)]
pub fn of_file(file: u64, size_offset: Option<u32>) -> Result<FileIdentity, ()> {
    let o = FILE_OFFSETS.load();
    if o.file_inode == 0 {
        return Err(());
    }
    let inode: u64 = read(file, o.file_inode)?;
    let sb: u64 = read(inode, o.inode_sb)?;
    let mode: u16 = if o.inode_mode == ABSENT {
        0
    } else {
        read(inode, o.inode_mode).unwrap_or(0)
    };
    let mut id = FileIdentity {
        inode,
        ino: read(inode, o.inode_ino)?,
        file_type: ((mode & S_IFMT) >> 12) as u8,
        fs_dev: read(sb, o.sb_dev)?,
        blkbits: read(sb, o.sb_blocksize_bits)?,
        size: match size_offset {
            Some(offset) => read(inode, offset)?,
            None => 0,
        },
        name: [0; FILE_NAME_LEN],
        parent: [0; FILE_NAME_LEN],
    };
    let Ok(dentry) = read::<u64>(file, o.file_dentry) else {
        return Ok(id);
    };
    if let Ok(name) = read::<u64>(dentry, o.dentry_name) {
        // SAFETY: the helper validates the kernel address and bounds the copy.
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut id.name) };
    }
    // The root is its own parent.
    if o.dentry_parent != 0
        && let Ok(parent) = read::<u64>(dentry, o.dentry_parent)
        && parent != dentry
        && let Ok(name) = read::<u64>(parent, o.dentry_name)
    {
        // SAFETY: as above.
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut id.parent) };
    }
    Ok(id)
}

/// The filesystem device and inode number of the `struct inode` at `inode`.
#[inline(always)]
pub fn inode_id(inode: u64) -> Result<(u32, u64), ()> {
    let o = FILE_OFFSETS.load();
    if o.inode_sb == 0 {
        return Err(());
    }
    let sb: u64 = read(inode, o.inode_sb)?;
    Ok((read(sb, o.sb_dev)?, read(inode, o.inode_ino)?))
}

/// The `struct inode *` of the `struct file` at `file`.
#[inline(always)]
pub fn inode_of(file: u64) -> Result<u64, ()> {
    let o = FILE_OFFSETS.load();
    if o.file_inode == 0 {
        return Err(());
    }
    read(file, o.file_inode)
}

/// The device of the filesystem the `struct file` at `file` is on (three reads).
#[inline(always)]
pub fn fs_dev_of(file: u64) -> Result<u32, ()> {
    let o = FILE_OFFSETS.load();
    if o.file_inode == 0 {
        return Err(());
    }
    read(read(read(file, o.file_inode)?, o.inode_sb)?, o.sb_dev)
}

/// The current task's file `fd`.
#[inline(always)]
pub fn of_fd(fd: i32) -> Result<FileIdentity, ()> {
    of_file(file_of_fd(fd)?, None)
}

/// The window key of the current task's `fd`, if it is a regular file or a block device:
/// what a write must reach to count as a logical write (not a pipe, a socket or a
/// terminal). Without the offsets to tell, every fd counts, keyed by process and fd.
#[inline(always)]
pub fn disk_window_of_fd(fd: i32) -> Option<WindowKey> {
    let o = FILE_OFFSETS.load();
    if o.inode_mode == ABSENT {
        let tgid = bpf_get_current_pid_tgid() >> 32;
        return Some(WindowKey {
            inode: 0,
            ino: tgid << 32 | u64::from(fd as u32),
        });
    }
    let inode = file_of_fd(fd)
        .and_then(|f| read::<u64>(f, o.file_inode))
        .ok()?;
    let mode: u16 = read(inode, o.inode_mode).ok()?;
    if !matches!(mode & S_IFMT, S_IFREG | S_IFBLK) {
        return None;
    }
    Some(WindowKey {
        inode,
        ino: read(inode, o.inode_ino).ok()?,
    })
}

/// The current task's `struct file *` of `fd`.
#[inline(always)]
pub fn file_of_fd(fd: i32) -> Result<u64, ()> {
    let o = FILE_OFFSETS.load();
    if o.task_files == 0 || fd < 0 {
        return Err(());
    }
    // SAFETY: a helper without preconditions; the pointer is only dereferenced through
    // bpf_probe_read_kernel.
    let task = unsafe { bpf_get_current_task() };
    let fdt: u64 = read(read(task, o.task_files)?, o.files_fdt)?;
    let max_fds: u32 = read(fdt, o.fdt_max_fds)?;
    if fd as u32 >= max_fds {
        return Err(());
    }
    let array: u64 = read(fdt, o.fdt_fd)?;
    read(array, (fd as u32) * 8)
}
