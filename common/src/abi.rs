//! Record framing on the ring buffer.

/// Kind of a ring-buffer record, stored in [`RecordHeader::kind`].
pub const RECORD_BLOCK_IO: u16 = 1;
pub const RECORD_SYNC_CALL: u16 = 2;
pub const RECORD_DSTATE: u16 = 3;
pub const RECORD_DIO: u16 = 4;
pub const RECORD_EXIT: u16 = 5;
/// A header alone, submitted with a forced wakeup: the probes need user space now (the first
/// io_uring sync: the probes that end it are to be attached). Not counted as produced.
pub const RECORD_WAKEUP: u16 = 6;

/// The first 8 bytes of every ring-buffer record.
///
/// `size` is the full record size in bytes, so a reader can reject a record whose length does
/// not match its kind instead of misreading it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct RecordHeader {
    pub kind: u16,
    pub size: u16,
    pub _reserved: u32,
}

/// Length of a task's comm (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;
