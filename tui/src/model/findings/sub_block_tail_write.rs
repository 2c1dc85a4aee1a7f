//! `sub_block_tail_write`: O_DIRECT writes that extend the file and end off a filesystem-block
//! boundary. iomap (XFS, ext4, ...) zeroes the rest of the last block (`iomap_dio_zero`), an
//! extra small write the next write then overwrites and waits for; on XFS such writes also
//! take the inode lock exclusively and drain all direct I/O in flight on the file.
//!
//! Predicted from `iomap_dio_rw_begin` (offset, size, file size, and the block size of the
//! file's filesystem) and confirmed by the same process's write requests that finish a
//! filesystem block they started inside (blocks counted from where the filesystem starts on
//! the disk): the zero write alone, exactly the predicted pad, or merged into its data write
//! by the block layer (which hides the small request; it happens or not with timing). A small
//! write alone is never enough: XFS log and metadata writes (other tasks) and deliberate
//! small direct I/O into written space (no zeroing predicted) do not count.

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::model::ProcRow;

/// Zeroing writes in one interval before it is a pattern.
pub const MIN_ZEROING_WRITES: u64 = 3;
/// Block-finishing write requests seen, as a share of the predicted zeroing writes.
pub const MIN_CONFIRMED_SHARE: f64 = 0.25;

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for display and thresholds"
)]
pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let dio = &proc.interval.dio;
    if dio.tail_writes < MIN_ZEROING_WRITES || dio.fs_block_size == 0 {
        return None;
    }
    let confirmed = dio.block_finishing_requests;
    if confirmed == 0 || (confirmed as f64) < dio.tail_writes as f64 * MIN_CONFIRMED_SHARE {
        return None;
    }
    let (pad, pad_writes) = dio.pads.iter().copied().max_by_key(|&(_, n)| n)?;
    let zeroed = dio.tail_bytes + dio.head_bytes;
    let share = zeroed as f64 / dio.data_bytes.max(1) as f64;
    let (pos, count, _) = dio.example.unwrap_or_default();
    let block = dio.fs_block_size;
    let mut finding =
        Finding::new(scene, FindingKind::SubBlockTailWrite, Severity::Warning).of_process(proc);
    finding.dev = dio.disk;
    finding.files = dio.file.iter().cloned().collect();
    let file = finding
        .file()
        .map_or_else(String::new, |f| format!(" to {f}"));
    finding.summary = format!(
        "{} (pid {}): O_DIRECT writes{file} extending the file end off a {block}-byte block \
         (e.g. {count} B at offset {pos}): the kernel zeroes the rest, {pad_writes} extra \
         {pad}-byte writes ({} seen alone, {} merged)",
        proc.comm,
        proc.tgid,
        dio.pad_requests,
        confirmed.saturating_sub(dio.pad_requests),
    );
    finding.evidence = vec![
        ("pad_bytes", Evidence::Count(pad)),
        ("zeroing_writes", Evidence::Count(dio.tail_writes)),
        ("pad_requests", Evidence::Count(dio.pad_requests)),
        ("block_finishing_requests", Evidence::Count(confirmed)),
        ("zeroed_bytes", Evidence::Count(zeroed)),
        ("data_bytes", Evidence::Count(dio.data_bytes)),
        (
            "zeroed_share",
            Evidence::Ratio((share * 1000.0).round() / 1000.0),
        ),
        ("fs_block_size", Evidence::Count(u64::from(block))),
        ("example_offset", Evidence::Count(pos)),
        ("example_bytes", Evidence::Count(count)),
    ];
    finding.why = "an O_DIRECT write that ends past EOF off a block boundary makes the kernel zero \
                   the rest of that block (iomap_dio_zero); the next write overwrites it and waits, \
                   and XFS serializes such writes on the inode"
        .to_string();
    finding.fix = format!(
        "start direct writes at {block}-byte aligned offsets with sizes in whole blocks \
         (statx STATX_DIOALIGN), or preallocate the file so writes do not extend EOF"
    );
    Some(finding)
}
