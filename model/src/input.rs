//! What the model is fed: decoded events and periodic kernel samples (plain data).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use iotop_bpf_common::{
    block::{
        FLAG_FUA, FLAG_IN_SYNC, FLAG_META, FLAG_PARTIAL, FLAG_PREFLUSH, FLAG_READAHEAD, FLAG_SYNC,
        OP_COUNT, OP_DISCARD, OP_FLUSH, OP_READ, OP_WRITE,
    },
    hist::SLOTS,
    sync::{
        SYNC_DSYNC_WRITE, SYNC_FDATASYNC, SYNC_FILE_RANGE, SYNC_FILE_RANGE_WRITE, SYNC_FSYNC,
        SYNC_MSYNC, SYNC_OSYNC_WRITE, SYNC_SYNC, SYNC_SYNCFS, SYNC_URING_DSYNC_WRITE,
        SYNC_URING_FDATASYNC, SYNC_URING_FSYNC, SYNC_URING_SYNC_FILE_RANGE,
    },
};

mod sample;
pub use sample::*;

/// A block device number, `major:minor`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Dev {
    pub major: u32,
    pub minor: u32,
}

impl Dev {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// From the kernel's internal `dev_t` (`MKDEV`: 12-bit major, 20-bit minor) as block
    /// tracepoints report it.
    pub const fn from_kernel(dev: u32) -> Self {
        Self {
            major: dev >> 20,
            minor: dev & ((1 << 20) - 1),
        }
    }

    /// To the kernel's internal `dev_t`.
    pub const fn to_kernel(self) -> u32 {
        (self.major << 20) | self.minor
    }

    /// From a user-space `dev_t` (`st_rdev`, glibc encoding).
    pub fn from_user(rdev: u64) -> Self {
        // glibc's gnu_dev_major/minor layout.
        let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0x0000_0fff);
        let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0x0000_00ff);
        Self {
            major: major as u32,
            minor: minor as u32,
        }
    }
}

impl fmt::Display for Dev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// A task name (`comm`), at most 15 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Comm([u8; 16]);

impl Comm {
    pub fn from_bytes(raw: [u8; 16]) -> Self {
        Self(raw)
    }

    pub fn new(name: &str) -> Self {
        let mut raw = [0u8; 16];
        let len = name.len().min(15);
        raw[..len].copy_from_slice(&name.as_bytes()[..len]);
        Self(raw)
    }

    /// The 16 bytes as the kernel gave them.
    pub fn raw(&self) -> &[u8; 16] {
        &self.0
    }

    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..end])
    }

    /// A NUL-terminated (or full) kernel string as text.
    pub fn text(raw: &[u8]) -> String {
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        String::from_utf8_lossy(&raw[..end]).into_owned()
    }
}

/// Recorded as text.
impl Serialize for Comm {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for Comm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::new(&String::deserialize(deserializer)?))
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// A request's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    Read,
    Write,
    Flush,
    Discard,
    Other,
}

impl Op {
    pub fn from_code(code: u8) -> Self {
        match code {
            OP_READ => Self::Read,
            OP_WRITE => Self::Write,
            OP_FLUSH => Self::Flush,
            OP_DISCARD => Self::Discard,
            _ => Self::Other,
        }
    }
}

/// One completed block request (or completed part of one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockIo {
    pub dev: Dev,
    pub sector: u64,
    pub bytes: u32,
    pub op: Op,
    /// `FLAG_*` bits from the wire record.
    pub flags: u8,
    pub tgid: u32,
    /// The thread that created the request.
    #[serde(alias = "pid")]
    pub tid: u32,
    pub comm: Comm,
    pub created_ns: u64,
    pub issued_ns: u64,
    pub completed_ns: u64,
    pub error: i32,
    /// Submitted by a kernel thread (jbd2, kworker, ...): a candidate for charging to the
    /// sync callers it wrote for. Set by the feed from /proc, not by the probes.
    pub kernel_thread: bool,
    /// The request's cgroup (the inode number of its cgroup directory); 0 when unknown.
    #[serde(default)]
    pub cgroup: u64,
    /// Write-back: the process whose dirty pages a flusher wrote.
    #[serde(default)]
    pub dirtier: Option<Dirtier>,
    /// A readahead read: the file whose pages it read (the kernel's, from the first page).
    #[serde(default)]
    pub file: Option<FileKey>,
}

/// A file by its filesystem's device and inode number, as the kernel names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileKey {
    pub fs_dev: Dev,
    pub ino: u64,
}

/// A cgroup the probes saw on requests (`BlockIo::cgroup`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupInfo {
    /// The inode number of its directory (what the probes read).
    pub id: u64,
    /// Its path below the hierarchy's root, e.g. `/system.slice/postgresql.service`.
    pub path: String,
    /// What it is: a container (`docker:4f2c8a1b9d3e`), a pod (`pod:<uid>`), a systemd unit,
    /// else the path.
    pub name: String,
}

/// A process that dirtied the pages a write-back request writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dirtier {
    pub tgid: u32,
    pub comm: Comm,
}

impl BlockIo {
    pub fn queue_ns(&self) -> u64 {
        self.issued_ns.saturating_sub(self.created_ns)
    }
    pub fn device_ns(&self) -> u64 {
        self.completed_ns.saturating_sub(self.issued_ns)
    }
    pub fn latency_ns(&self) -> u64 {
        self.completed_ns.saturating_sub(self.created_ns)
    }
    pub fn is_sync(&self) -> bool {
        self.flags & FLAG_SYNC != 0
    }
    pub fn is_fua(&self) -> bool {
        self.flags & FLAG_FUA != 0
    }
    /// What the request did for its process: a write that carried no data is a cache flush
    /// (`blkdev_issue_flush` and every fsync's flush are empty `REQ_PREFLUSH` writes), not a
    /// write. Disk figures keep the kernel's own op, as /proc/diskstats does.
    pub fn process_op(&self) -> Op {
        match self.op {
            Op::Write if self.bytes == 0 => Op::Flush,
            op => op,
        }
    }
    pub fn is_meta(&self) -> bool {
        self.flags & FLAG_META != 0
    }
    pub fn is_preflush(&self) -> bool {
        self.flags & FLAG_PREFLUSH != 0
    }
    pub fn is_readahead(&self) -> bool {
        self.flags & FLAG_READAHEAD != 0
    }
    pub fn is_partial(&self) -> bool {
        self.flags & FLAG_PARTIAL != 0
    }
    /// Created by a thread inside a sync call: data the sync itself had to write.
    pub fn in_sync(&self) -> bool {
        self.flags & FLAG_IN_SYNC != 0
    }
}

/// Which sync call: a system call, a write the filesystem made durable before returning
/// (`O_DSYNC`, `O_SYNC`), or an io_uring request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SyncKind {
    Fsync,
    Fdatasync,
    SyncFileRange,
    Syncfs,
    Sync,
    Msync,
    /// A write on an `O_DSYNC` file (or with `RWF_DSYNC`; on XFS, any synced write whose file
    /// was not opened `O_SYNC`).
    DsyncWrite,
    /// A write on an `O_SYNC` file (or with `RWF_SYNC`).
    OsyncWrite,
    UringFsync,
    UringFdatasync,
    UringSyncFileRange,
    /// An io_uring write on an `O_DSYNC` or `O_SYNC` file (or with `RWF_DSYNC`).
    UringDsyncWrite,
    /// `sync_file_range` without a wait flag: it starts write-back and returns; nothing is
    /// durable when it does (git's batch mode, dpkg). Not a sync.
    SyncFileRangeWrite,
}

impl SyncKind {
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            SYNC_FSYNC => Self::Fsync,
            SYNC_FDATASYNC => Self::Fdatasync,
            SYNC_FILE_RANGE => Self::SyncFileRange,
            SYNC_SYNCFS => Self::Syncfs,
            SYNC_SYNC => Self::Sync,
            SYNC_MSYNC => Self::Msync,
            SYNC_DSYNC_WRITE => Self::DsyncWrite,
            SYNC_OSYNC_WRITE => Self::OsyncWrite,
            SYNC_URING_FSYNC => Self::UringFsync,
            SYNC_URING_FDATASYNC => Self::UringFdatasync,
            SYNC_URING_SYNC_FILE_RANGE => Self::UringSyncFileRange,
            SYNC_URING_DSYNC_WRITE => Self::UringDsyncWrite,
            SYNC_FILE_RANGE_WRITE => Self::SyncFileRangeWrite,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Fsync => "fsync",
            Self::Fdatasync => "fdatasync",
            Self::SyncFileRange => "sync_file_range",
            Self::Syncfs => "syncfs",
            Self::Sync => "sync",
            Self::Msync => "msync",
            Self::DsyncWrite => "O_DSYNC write",
            Self::OsyncWrite => "O_SYNC write",
            Self::UringFsync => "io_uring fsync",
            Self::UringFdatasync => "io_uring fdatasync",
            Self::UringSyncFileRange => "io_uring sync_file_range",
            Self::UringDsyncWrite => "io_uring O_DSYNC write",
            Self::SyncFileRangeWrite => "sync_file_range(WRITE)",
        }
    }

    /// Every kind, in code order.
    pub const ALL: [Self; iotop_bpf_common::sync::SYNC_KIND_COUNT] = [
        Self::Fsync,
        Self::Fdatasync,
        Self::SyncFileRange,
        Self::Syncfs,
        Self::Sync,
        Self::Msync,
        Self::DsyncWrite,
        Self::OsyncWrite,
        Self::UringFsync,
        Self::UringFdatasync,
        Self::UringSyncFileRange,
        Self::UringDsyncWrite,
        Self::SyncFileRangeWrite,
    ];

    /// Whether the call makes data durable before it returns: every kind but write-back
    /// initiation (`sync_file_range` without a wait flag).
    pub fn is_durable(self) -> bool {
        self != Self::SyncFileRangeWrite
    }

    /// Calls that make metadata durable, i.e. may wait for a journal commit
    /// (sync_file_range only writes data pages).
    pub fn commits_journal(self) -> bool {
        !self.is_sync_file_range()
    }

    /// `sync_file_range` in any of its forms: it writes data pages, commits nothing.
    pub fn is_sync_file_range(self) -> bool {
        matches!(
            self,
            Self::SyncFileRange | Self::UringSyncFileRange | Self::SyncFileRangeWrite
        )
    }

    /// A write that made itself durable (the payload is the write's own bytes, and those
    /// written to its fd since that fd's previous sync).
    pub fn is_write(self) -> bool {
        matches!(self, Self::DsyncWrite | Self::OsyncWrite)
    }

    /// Whether the probes measure what the call made durable (the bytes written to its fd
    /// since its previous sync). io_uring's writes are not system calls: not counted.
    pub fn payload_measured(self) -> bool {
        !matches!(
            self,
            Self::UringFsync
                | Self::UringFdatasync
                | Self::UringSyncFileRange
                | Self::UringDsyncWrite
        )
    }
}

/// One completed sync call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncCall {
    pub tgid: u32,
    #[serde(alias = "pid")]
    pub tid: u32,
    pub comm: Comm,
    pub kind: SyncKind,
    /// `None` for calls without a file (sync, msync).
    pub fd: Option<i32>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub ret: i64,
    /// Bytes the process asked to write to this fd since its previous sync, and in how many
    /// write calls.
    pub window_bytes: u64,
    pub window_writes: u64,
    /// `msync`: the start of the synced range (the feed names the mapping's file from it).
    #[serde(default)]
    pub addr: u64,
    /// The file behind the fd (resolved by the feed from /proc), or why it is unknown.
    pub file: FileRef,
    /// The whole disk the file lives on, when known.
    pub dev: Option<Dev>,
    /// Block size of the file's filesystem (read in the kernel during the call, else
    /// `statvfs`); 0 when unknown.
    #[serde(default)]
    pub fs_block_size: u32,
    /// The file's filesystem device, inode number and last path component, as the kernel
    /// saw them during the call, when known.
    #[serde(default)]
    pub fs_dev: Option<Dev>,
    #[serde(default)]
    pub ino: u64,
    #[serde(default)]
    pub name: String,
    /// The file synced is a directory (its entries made durable: a payload no write
    /// measures, never an empty sync).
    #[serde(default)]
    pub dir: bool,
}

impl SyncCall {
    pub fn latency_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// A finished D-state episode (only those above the probes' threshold are streamed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DStateEpisode {
    #[serde(alias = "pid")]
    pub tid: u32,
    pub tgid: u32,
    pub comm: Comm,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Id in the kernel's stack map (negative: none); the feed symbolizes it into `stack`.
    pub stack_id: i32,
    /// The stack the probes took at the wakeup; the feed symbolizes it into `stack` and
    /// drops it (it is not recorded).
    #[serde(skip)]
    pub wakeup_stack: WakeupStack,
    /// Symbolized kernel frames, innermost first.
    pub stack: Vec<String>,
    /// Why `stack` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_stack: Option<NoStack>,
}

/// The raw stack of a finished D episode, as the probes took it at its wakeup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WakeupStack {
    /// None taken (the wakeup program with BTF is not attached; or already symbolized).
    #[default]
    None,
    /// Return addresses, innermost first.
    Taken(Vec<u64>),
    /// The kernel's errno.
    Failed(i32),
}

/// Why a D episode has no wait site: each is shown where the site would be, so that an
/// unknown site is never a bare "?".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoStack {
    /// The probes sample stacks at the switch into D (one per CPU per millisecond), and
    /// nothing else took one: the wakeup program with BTF is not attached, or, for a thread
    /// still in D, /proc/TID/stack is not readable (it needs CAP_SYS_ADMIN).
    NotSampled,
    /// The kernel's symbols read as zero (`kptr_restrict`; CAP_SYSLOG shows them).
    SymbolsHidden,
    /// The kernel could not take the stack, or its entry was reused before it was read.
    Lost,
}

impl NoStack {
    /// A few words for where the wait site would be.
    pub fn words(self) -> &'static str {
        match self {
            Self::NotSampled => "not sampled",
            Self::SymbolsHidden => "symbols hidden",
            Self::Lost => "stack lost",
        }
    }
}

impl DStateEpisode {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// A direct I/O call that is not 4 KiB-aligned (from `iomap_dio_rw_begin`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DioCall {
    pub tgid: u32,
    #[serde(alias = "pid")]
    pub tid: u32,
    pub comm: Comm,
    pub ts_ns: u64,
    /// The filesystem's device (a partition, perhaps) and the whole disk below it.
    pub fs_dev: Dev,
    pub disk: Dev,
    pub ino: u64,
    pub isize: u64,
    pub pos: u64,
    pub count: u64,
    /// The call is known to be a write (`IOCB_WRITE`, set for asynchronous calls only;
    /// synchronous writes show `false` too).
    pub write: bool,
    /// XFS's first, overwrite-only try at an unaligned write (`IOMAP_DIO_OVERWRITE_ONLY`): it
    /// zeroes nothing, and where it would have to, it fails and the write is retried as a
    /// second call of the same range, which is the same system call.
    #[serde(default)]
    pub overwrite_only: bool,
    /// Set by the feed from statvfs and sysfs; 0 when unknown.
    pub fs_block_size: u32,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    /// Where the filesystem's device starts on `disk`, in 512-byte sectors (0 for a whole
    /// disk): requests report disk sectors, filesystem blocks are aligned to this start.
    #[serde(default)]
    pub fs_start_sector: u64,
    /// The file's path, when the feed could find it among the process's open files, else
    /// its name as the kernel saw it (see `name`).
    #[serde(default)]
    pub file: Option<String>,
    /// The file's last path component, read in the kernel during the call (raw probe).
    #[serde(default)]
    pub name: String,
}

/// A thread in D state now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DStateNow {
    #[serde(alias = "pid")]
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    /// When its episode began; `None` for threads already in D when iotop-bpf started.
    pub start_ns: Option<u64>,
    pub stack: Vec<String>,
    /// Why `stack` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_stack: Option<NoStack>,
}

/// What a sync call's fd referred to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileRef {
    /// The call has no file (sync, msync).
    NoFile,
    Path(String),
    /// The path could not be found (the process exited first), but the kernel named the
    /// file during the call: its last path component and inode.
    Inode {
        dev: Dev,
        ino: u64,
        name: String,
    },
    /// The fd could not be resolved, and why (e.g. the process exited first).
    Unresolved(String),
}

impl FileRef {
    /// A name for the file when it has one: its path, or its inode.
    pub fn name(&self) -> Option<String> {
        match self {
            Self::Path(path) => Some(path.clone()),
            Self::Inode { .. } => Some(self.to_string()),
            Self::NoFile | Self::Unresolved(_) => None,
        }
    }
}

impl fmt::Display for FileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoFile => f.write_str("-"),
            Self::Path(path) => f.write_str(path),
            Self::Inode { dev, ino, name } if name.is_empty() => write!(f, "inode {ino} on {dev}"),
            // The root directory's dentry is named "/".
            Self::Inode { dev, ino, name } if name == "/" => {
                write!(f, "the root directory (inode {ino} on {dev})")
            }
            Self::Inode { dev, ino, name } => write!(f, ".../{name} (inode {ino} on {dev})"),
            Self::Unresolved(why) => write!(f, "? ({why})"),
        }
    }
}
