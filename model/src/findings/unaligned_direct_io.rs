//! `unaligned_direct_io`: O_DIRECT offsets or sizes that are not multiples of the device's
//! physical block size (legal down to the logical block size): the device reads, modifies and
//! writes whole physical blocks (512e drives: 512-byte logical, 4096-byte physical).

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::ProcRow;

/// Unaligned calls in one interval before it is a pattern.
pub const MIN_UNALIGNED_CALLS: u64 = 10;

pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let dio = &proc.interval.dio;
    if dio.unaligned_calls < MIN_UNALIGNED_CALLS || dio.physical_block_size == 0 {
        return None;
    }
    let physical = dio.physical_block_size;
    let mut finding =
        Finding::new(scene, FindingKind::UnalignedDirectIo, Severity::Warning).of_process(proc);
    finding.dev = dio.disk;
    finding.files = dio.file.iter().cloned().collect();
    let file = finding
        .file()
        .map_or_else(String::new, |f| format!(" on {f}"));
    finding.summary = format!(
        "{} (pid {}): {} O_DIRECT calls{file} not aligned to the disk's {physical}-byte physical blocks",
        proc.comm, proc.tgid, dio.unaligned_calls
    );
    finding.evidence = vec![
        ("unaligned_calls", Evidence::Count(dio.unaligned_calls)),
        ("physical_block_size", Evidence::Count(u64::from(physical))),
        ("streamed_calls", Evidence::Count(dio.calls)),
    ];
    finding.why = format!(
        "the device works in {physical}-byte units: a write of part of one is a read-modify-write \
         inside the device, and reads fetch whole units"
    );
    finding.fix =
        format!("align O_DIRECT offsets and sizes to {physical} bytes (statx STATX_DIOALIGN)");
    Some(finding)
}
