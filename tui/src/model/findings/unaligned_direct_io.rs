//! `unaligned_direct_io`: O_DIRECT offsets or sizes that are not multiples of the device's
//! physical block size (legal down to the logical block size): the device reads, modifies and
//! writes whole physical blocks (512e drives: 512-byte logical, 4096-byte physical).

use super::{Evidence, Finding, FindingKind, Severity};
use crate::model::{ProcRow, Snapshot};

/// Unaligned calls in one interval before it is a pattern.
pub const MIN_UNALIGNED_CALLS: u64 = 10;

pub fn check(snap: &Snapshot, proc: &ProcRow) -> Option<Finding> {
    let dio = &proc.interval.dio;
    if dio.unaligned_physical < MIN_UNALIGNED_CALLS || dio.physical_block_size == 0 {
        return None;
    }
    let physical = dio.physical_block_size;
    Some(Finding {
        kind: FindingKind::UnalignedDirectIo,
        severity: Severity::Warning,
        tgid: Some(proc.tgid),
        comm: proc.comm.clone(),
        dev: dio.disk,
        file: None,
        summary: format!(
            "{} (pid {}): {} O_DIRECT calls not aligned to the disk's {physical}-byte physical blocks",
            proc.comm, proc.tgid, dio.unaligned_physical
        ),
        evidence: vec![
            ("unaligned_calls", Evidence::Count(dio.unaligned_physical)),
            ("physical_block_size", Evidence::Count(u64::from(physical))),
            ("direct_calls_not_4k_aligned", Evidence::Count(dio.calls)),
        ],
        why: format!(
            "the device works in {physical}-byte units: a write of part of one is a read-modify-write \
             inside the device, and reads fetch whole units"
        ),
        fix: format!("align O_DIRECT offsets and sizes to {physical} bytes (statx STATX_DIOALIGN)"),
        active: true,
        first_seen_ns: snap.now_ns,
        last_seen_ns: snap.now_ns,
    })
}
