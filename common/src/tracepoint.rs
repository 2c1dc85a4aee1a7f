//! Tracepoint field offsets, read from tracefs `format` files at start-up and handed to the
//! probes as globals (field layouts differ between kernel versions).

/// Marks a field the tracepoint does not have on this kernel.
pub const ABSENT: u32 = u32::MAX;

/// Offsets (bytes from the start of the tracepoint record) of the block tracepoint fields the
/// probes read. One instance per attached tracepoint.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct FieldOffsets {
    pub dev: u32,
    pub sector: u32,
    pub nr_sector: u32,
    pub bytes: u32,
    pub error: u32,
    pub rwbs: u32,
}

impl FieldOffsets {
    /// Every field absent: the value the probes are compiled with.
    pub const ABSENT: Self = Self {
        dev: ABSENT,
        sector: ABSENT,
        nr_sector: ABSENT,
        bytes: ABSENT,
        error: ABSENT,
        rwbs: ABSENT,
    };
}

/// The probes copy record bytes `[WINDOW_START, WINDOW_START + WINDOW_LEN)` in one helper
/// call (the first 8 bytes are the common header no probe reads). The loader refuses a
/// layout whose fields fall outside it.
pub const WINDOW_START: usize = 8;
pub const WINDOW_LEN: usize = 64;

/// Global variable names in the eBPF object.
pub const GLOBAL_START_FIELDS: &str = "START_FIELDS";
pub const GLOBAL_ISSUE_FIELDS: &str = "ISSUE_FIELDS";
pub const GLOBAL_COMPLETE_FIELDS: &str = "COMPLETE_FIELDS";
pub const GLOBAL_FRONTMERGE_FIELDS: &str = "FRONTMERGE_FIELDS";
pub const GLOBAL_RQ_MERGE_FIELDS: &str = "RQ_MERGE_FIELDS";
/// `u8`: the `ORIGIN_*` code the start probe stamps (io_start vs rq_insert).
pub const GLOBAL_START_ORIGIN: &str = "START_ORIGIN";
/// `u64`: bytes of unread ring data above which a submit wakes the reader.
pub const GLOBAL_WAKEUP_BYTES: &str = "WAKEUP_BYTES";
