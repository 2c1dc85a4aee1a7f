//! How this kernel's raw tracepoints pass their arguments, and where the kernel objects
//! they pass keep the fields the probes read: found by user space in BTF at start-up
//! (prototypes from the `btf_trace_*` typedefs, offsets from the structs), handed to the
//! probes as one global. Nothing here is decided from a kernel version.

use crate::tracepoint::ABSENT;

/// Argument indices and offsets for the raw probes. `ABSENT` marks what this kernel does not
/// pass or have; a probe planned on it is not attached.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct RawLayout {
    /// The `struct request *` argument of `block_io_start`, `block_rq_insert`,
    /// `block_rq_issue` and `block_rq_merge`: 0, or 1 where the queue comes first (before
    /// 5.11 upstream; Debian's 5.10 has the single-argument form).
    pub rq_arg: u32,
    /// `request.rq_disk` where requests point at their disk (before 5.17); `ABSENT`: the
    /// disk is `request->q->disk`.
    pub rq_disk: u32,
    /// `sched_process_exit`'s `group_dead` argument (6.18+); `ABSENT`: the group is dead
    /// when `task->signal->live` has dropped to 0.
    pub exit_group_dead_arg: u32,
    pub task_signal: u32,
    pub signal_live: u32,
    /// `balance_dirty_pages(wb, thresh, bg_thresh, dirty, bdi_thresh, bdi_dirty, ...,
    /// pause, start_time)`: the arguments the dirty-pause probe reads, and the disk's name
    /// (`wb->bdi->dev_name`).
    pub dirty_wb_arg: u32,
    pub dirty_thresh_arg: u32,
    pub dirty_dirty_arg: u32,
    pub dirty_wb_dirty_arg: u32,
    pub dirty_pause_arg: u32,
    /// A jiffy, in µs: the raw `pause` argument is in jiffies (the classic record converts
    /// it to ms itself), and HZ is 250 on Debian's kernels, 1000 on others. 0 when unknown:
    /// taken as 1 ms.
    pub jiffy_us: u32,
    /// Where the figures are in a `struct dirty_throttle_control *` argument instead (6.18+:
    /// `balance_dirty_pages(wb, dtc, ...)`): its index, and `thresh`, `dirty`, `wb_dirty` in it.
    pub dirty_dtc_arg: u32,
    pub dtc_thresh: u32,
    pub dtc_dirty: u32,
    pub dtc_wb_dirty: u32,
    pub wb_bdi: u32,
    pub bdi_dev_name: u32,
    /// `xfs_file_fsync(struct xfs_inode *)`: the VFS inode inside it (from the xfs module's
    /// BTF; `ABSENT` without it).
    pub xfs_inode_vnode: u32,
    /// `io_uring_queue_async_work`: the request argument (0, or 2 where the ring comes
    /// first) and the request's opcode.
    pub punt_req_arg: u32,
    pub req_opcode: u32,
    /// `struct pt_regs` of a system call (`sys_enter`'s first argument): the probes read 64
    /// bytes from `regs_window`; the arguments' offsets are relative to it.
    pub regs_window: u32,
    pub regs_args: [u32; 4],
}

impl RawLayout {
    pub const ABSENT: Self = Self {
        rq_arg: 0,
        rq_disk: ABSENT,
        exit_group_dead_arg: ABSENT,
        task_signal: ABSENT,
        signal_live: ABSENT,
        dirty_wb_arg: ABSENT,
        dirty_thresh_arg: ABSENT,
        dirty_dirty_arg: ABSENT,
        dirty_wb_dirty_arg: ABSENT,
        dirty_pause_arg: ABSENT,
        jiffy_us: 0,
        dirty_dtc_arg: ABSENT,
        dtc_thresh: ABSENT,
        dtc_dirty: ABSENT,
        dtc_wb_dirty: ABSENT,
        wb_bdi: ABSENT,
        bdi_dev_name: ABSENT,
        xfs_inode_vnode: ABSENT,
        punt_req_arg: ABSENT,
        req_opcode: ABSENT,
        regs_window: ABSENT,
        regs_args: [ABSENT; 4],
    };
}

pub const GLOBAL_RAW_LAYOUT: &str = "RAW_LAYOUT";

/// Bytes of `struct pt_regs` the system-call probes copy at once.
pub const REGS_WINDOW_LEN: usize = 64;

/// Entries of the system-call table (x86-64's and arm64's numbers stay below it).
pub const SYSCALL_TABLE_LEN: usize = 512;

/// What the raw `sys_enter` probe does for a system call (the table, indexed by system-call
/// number, is a global user space fills): a `SYNC_*` kind below [`SYSCALL_WRITE`] begins a
/// sync call of that kind; the rest count written bytes.
pub const SYSCALL_NONE: u8 = 0xff;
/// `write`, `pwrite64`: `fd`, `buf`, `count`.
pub const SYSCALL_WRITE: u8 = 0x80;
/// `writev`, `pwritev`, `pwritev2`: `fd`, `vec`, `vlen`.
pub const SYSCALL_WRITEV: u8 = 0x81;

pub const GLOBAL_SYSCALL_TABLE: &str = "SYSCALL_TABLE";

/// `u32`: a fault the probes are built to make the kernel refuse (tests only; 0: none).
pub const GLOBAL_FAULT_INJECT: &str = "FAULT_INJECT";
/// [`GLOBAL_FAULT_INJECT`]: both D-state switch probes read past their arguments.
pub const FAULT_REJECT_DSTATE: u32 = 1;
/// [`GLOBAL_FAULT_INJECT`]: the switch probe that takes D episodes' stacks (`tp_btf`) reads
/// past its arguments, so the plain one replaces it.
pub const FAULT_REJECT_WAIT_SITES: u32 = 2;
/// [`GLOBAL_FAULT_INJECT`]: the raw completion probe, which the tool cannot run without,
/// reads past its arguments (the live view's screen is up by then and must be given back).
pub const FAULT_REJECT_BLOCK: u32 = 3;
