//! Process exits (`sched:sched_process_exit`): the model forgets a process soon after its
//! last thread is gone, so short-lived processes do not pile up.

use crate::abi::RecordHeader;

/// A process exited (its thread group is dead).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct ExitRecord {
    pub header: RecordHeader,
    pub ts_ns: u64,
    pub tgid: u32,
    pub _pad: u32,
}

const _: () = assert!(core::mem::size_of::<ExitRecord>() == 24);

/// Offsets of `sched_process_exit`'s fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct ExitOffsets {
    /// `group_dead` (a `bool`, 6.x): the last thread of the group exits. `ABSENT` on kernels
    /// without it, where the group leader's exit stands for the process's.
    pub group_dead: u32,
    pub _pad: u32,
}

impl ExitOffsets {
    pub const ABSENT: Self = Self {
        group_dead: crate::tracepoint::ABSENT,
        _pad: 0,
    };
}

pub const GLOBAL_EXIT_OFFSETS: &str = "EXIT_OFFSETS";
