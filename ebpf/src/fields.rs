//! Reading tracepoint fields at offsets known only at load time.

use aya_ebpf::{Global, programs::TracePointContext};
use iotop_bpf_common::tracepoint::{ABSENT, FieldOffsets};

/// Offsets are set by the loader from the tracefs `format` files; the values compiled in here
/// mark every field absent, so a loader that forgot one gets read failures, not garbage.
#[unsafe(no_mangle)]
pub static START_FIELDS: Global<FieldOffsets> = Global::new(FieldOffsets::ABSENT);
#[unsafe(no_mangle)]
pub static ISSUE_FIELDS: Global<FieldOffsets> = Global::new(FieldOffsets::ABSENT);
#[unsafe(no_mangle)]
pub static COMPLETE_FIELDS: Global<FieldOffsets> = Global::new(FieldOffsets::ABSENT);
#[unsafe(no_mangle)]
pub static FRONTMERGE_FIELDS: Global<FieldOffsets> = Global::new(FieldOffsets::ABSENT);
#[unsafe(no_mangle)]
pub static RQ_MERGE_FIELDS: Global<FieldOffsets> = Global::new(FieldOffsets::ABSENT);

/// Reads a `T` at `offset` in the tracepoint record. `Err` when the field is absent or the
/// read faults; callers count that instead of emitting a wrong record.
#[inline(always)]
pub fn read<T>(ctx: &TracePointContext, offset: u32) -> Result<T, ()> {
    if offset == ABSENT {
        return Err(());
    }
    // SAFETY: bpf_probe_read_kernel validates the address; a bad offset only makes it fail.
    unsafe { ctx.read_at::<T>(offset as usize) }.map_err(|_| ())
}
