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
//!
//! Unwritten extents (a file preallocated with `fallocate`, as fio lays its files out) are
//! zeroed the same way around every sub-block write inside the file, which no tracepoint
//! predicts: there the zeroing requests alone are the evidence, each exactly the size the
//! zeroing would have around a recent unaligned write, alone or merged with its data.

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::ProcRow;

/// Zeroing writes in one interval before it is a pattern.
pub const MIN_ZEROING_WRITES: u64 = 3;
/// Block-finishing write requests seen, as a share of the predicted zeroing writes.
pub const MIN_CONFIRMED_SHARE: f64 = 0.25;
/// Inside unwritten extents, where the zeroing requests alone are the evidence, fewer than
/// this in an interval are named only once seen [`THIN_MIN_STREAK`] intervals running:
/// MariaDB writing its redo log's first megabytes at start (4 writes of 16 MiB starting
/// mid-block: 18 KiB zeroed, 0.05% of the data, once) is not a pattern.
pub const MIN_STEADY_INSIDE: u64 = 10;
pub const THIN_MIN_STREAK: u32 = 3;

pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    past_eof(scene, proc).or_else(|| unwritten(scene, proc))
}

/// The finding both shapes raise, on the process's disk and direct-I/O file, and how the
/// summary names that file (" to FILE", or nothing when none is known).
fn started(scene: &Scene, proc: &ProcRow) -> (Finding, String) {
    let dio = &proc.interval.dio;
    let mut finding =
        Finding::new(scene, FindingKind::SubBlockTailWrite, Severity::Warning).of_process(proc);
    finding.dev = dio.disk;
    finding.files = dio.file.iter().cloned().collect();
    let file = finding
        .file()
        .map_or_else(String::new, |f| format!(" to {f}"));
    (finding, file)
}

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for display and thresholds"
)]
fn past_eof(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
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
    let (mut finding, file) = started(scene, proc);
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
         (statx STATX_DIOALIGN), or extend the file with written zeros first (fallocate's \
         unwritten extents are zeroed around each write the same way)"
    );
    Some(finding)
}

/// Sub-block direct writes inside the file, into unwritten (preallocated) extents.
#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for display and thresholds"
)]
fn unwritten(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let dio = &proc.interval.dio;
    let zeroing = dio.inside_zeroing_requests;
    if zeroing < MIN_ZEROING_WRITES
        || dio.fs_block_size == 0
        || (zeroing as f64) < dio.inside_calls as f64 * MIN_CONFIRMED_SHARE
    {
        return None;
    }
    let block = dio.fs_block_size;
    let (pos, count) = dio.inside_example.unwrap_or_default();
    let share = dio.inside_zeroed_bytes as f64 / dio.data_bytes.max(1) as f64;
    let (finding, file) = started(scene, proc);
    let mut finding = finding.persisting(if zeroing < MIN_STEADY_INSIDE {
        THIN_MIN_STREAK
    } else {
        1
    });
    finding.summary = format!(
        "{} (pid {}): O_DIRECT writes{file} off {block}-byte blocks into preallocated, \
         unwritten extents (e.g. {count} B at offset {pos}): the kernel zeroes the rest of \
         each block, {zeroing} zeroing writes, {} more than the data ({:.0}%)",
        proc.comm,
        proc.tgid,
        crate::quantity::bytes(dio.inside_zeroed_bytes),
        share * 100.0,
    );
    finding.evidence = vec![
        ("zeroing_writes", Evidence::Count(zeroing)),
        ("unaligned_writes_inside", Evidence::Count(dio.inside_calls)),
        ("zeroed_bytes", Evidence::Count(dio.inside_zeroed_bytes)),
        ("data_bytes", Evidence::Count(dio.data_bytes)),
        (
            "zeroed_share",
            Evidence::Ratio((share * 1000.0).round() / 1000.0),
        ),
        ("fs_block_size", Evidence::Count(u64::from(block))),
        ("example_offset", Evidence::Count(pos)),
        ("example_bytes", Evidence::Count(count)),
        ("extents", Evidence::Text("unwritten".to_string())),
    ];
    finding.why = "fallocate leaves unwritten extents; a direct write that covers part of an \
                   unwritten block makes the kernel write zeros over the rest of it first \
                   (iomap_dio_zero), an extra write per block, before the extent is converted"
        .to_string();
    finding.fix = format!(
        "write whole {block}-byte aligned blocks (statx STATX_DIOALIGN), or fill the file with \
         written zeros instead of fallocate (fio: --fallocate=none with a zero-filled layout)"
    );
    Some(finding)
}
