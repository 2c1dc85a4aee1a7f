//! Reading tracepoint fields at offsets known only at load time.
//!
//! The offsets come from tracefs through `.rodata` globals, so the verifier sees them as
//! constants. Each program copies one window of the record with a single
//! `bpf_probe_read_kernel` and picks its fields out of the copy: one helper call instead of
//! one per field (each costs tens of ns, on every I/O).

use aya_ebpf::{
    EbpfContext as _, Global, helpers::bpf_probe_read_kernel, programs::TracePointContext,
};
use iotop_bpf_common::tracepoint::{ABSENT, FieldOffsets, WINDOW_LEN, WINDOW_START};

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

/// A copy of the tracepoint record's bytes `[WINDOW_START, WINDOW_START + WINDOW_LEN)`,
/// 8-byte aligned so fields come out with single loads (the loader checks that numeric
/// fields are naturally aligned, as every kernel lays them out).
pub struct Window {
    words: [u64; WINDOW_LEN / 8],
}

impl Window {
    #[inline(always)]
    pub fn read(ctx: &TracePointContext) -> Result<Self, ()> {
        // SAFETY: bpf_probe_read_kernel validates the source; the tracepoint's per-CPU record
        // buffer is larger than any record, so the window never faults past the record's end.
        let words = unsafe {
            bpf_probe_read_kernel(
                (ctx.as_ptr() as *const u8).add(WINDOW_START) as *const [u64; WINDOW_LEN / 8]
            )
        }
        .map_err(|_| ())?;
        Ok(Self { words })
    }

    /// Index into the window of a field of `size` bytes at record offset `offset`, aligned
    /// down to `align`; `Err` when absent or outside the window.
    #[inline(always)]
    fn at(offset: u32, size: usize, align: usize) -> Result<usize, ()> {
        if offset == ABSENT {
            return Err(());
        }
        let at = (offset as usize).wrapping_sub(WINDOW_START) & !(align - 1);
        if at > WINDOW_LEN - size {
            Err(())
        } else {
            Ok(at)
        }
    }

    #[inline(always)]
    pub fn u32(&self, offset: u32) -> Result<u32, ()> {
        let at = Self::at(offset, 4, 4)?;
        // SAFETY: in bounds and 4-byte aligned within an 8-byte aligned buffer.
        Ok(unsafe { *(self.words.as_ptr() as *const u8).add(at).cast::<u32>() })
    }

    #[inline(always)]
    pub fn u64(&self, offset: u32) -> Result<u64, ()> {
        let at = Self::at(offset, 8, 8)?;
        // SAFETY: in bounds and 8-byte aligned.
        Ok(unsafe { *(self.words.as_ptr() as *const u8).add(at).cast::<u64>() })
    }

    /// Eight bytes at any alignment (the `rwbs` string).
    #[inline(always)]
    pub fn bytes8(&self, offset: u32) -> Result<[u8; 8], ()> {
        let at = Self::at(offset, 8, 1)?;
        let bytes = self.words.as_ptr() as *const u8;
        let mut out = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            // SAFETY: at + i < WINDOW_LEN.
            out[i] = unsafe { *bytes.add(at + i) };
            i += 1;
        }
        Ok(out)
    }
}
