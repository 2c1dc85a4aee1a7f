//! `sub_block_tail_write`: O_DIRECT writes that extend the file and end off a filesystem-block
//! boundary. iomap (XFS, ext4, ...) zeroes the rest of the last block (`iomap_dio_zero`), an
//! extra small write the next write then overwrites and waits for; on XFS such writes also
//! take the inode lock exclusively and drain all direct I/O in flight on the file.
//!
//! Predicted from `iomap_dio_rw_begin` (offset, size, file size, filesystem block size) and
//! confirmed by the same process's write requests that finish a block they started inside:
//! the zero write alone (exactly the pad's size), or merged into its data write by the block
//! layer (which hides the small request; it happens or not with timing). A 512-byte write
//! alone is never enough: XFS log and metadata writes (other tasks) and deliberate 512-byte
//! direct I/O into written space (no zeroing predicted) do not count.

use super::{Evidence, Finding, FindingKind, Severity};
use crate::model::{ProcRow, Snapshot};

/// Zeroing writes in one interval before it is a pattern.
pub const MIN_ZEROING_WRITES: u64 = 3;
/// Block-finishing write requests seen, as a share of the predicted zeroing writes.
pub const MIN_CONFIRMED_SHARE: f64 = 0.25;

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for display and thresholds"
)]
pub fn check(snap: &Snapshot, proc: &ProcRow) -> Option<Finding> {
    let dio = &proc.interval.dio;
    if dio.tail_writes < MIN_ZEROING_WRITES {
        return None;
    }
    let observed: u64 = dio
        .pads
        .iter()
        .filter_map(|&(pad, _)| {
            let pad = u32::try_from(pad).ok()?;
            proc.interval
                .write_sizes
                .iter()
                .find(|(size, _)| *size == pad)
                .map(|(_, n)| *n)
        })
        .sum();
    let confirmed = proc.interval.block_finishing_writes;
    if confirmed == 0 || (confirmed as f64) < dio.tail_writes as f64 * MIN_CONFIRMED_SHARE {
        return None;
    }
    let (pad, pad_writes) = dio.pads.iter().copied().max_by_key(|&(_, n)| n)?;
    let zeroed = dio.tail_bytes + dio.head_bytes;
    let share = zeroed as f64 / dio.data_bytes.max(1) as f64;
    let (pos, count, _) = dio.example.unwrap_or_default();
    let block = dio.fs_block_size;
    Some(Finding {
        kind: FindingKind::SubBlockTailWrite,
        severity: Severity::Warning,
        tgid: Some(proc.tgid),
        comm: proc.comm.clone(),
        dev: dio.disk,
        file: dio.ino.map(|ino| format!("inode {ino}")),
        summary: format!(
            "{} (pid {}): O_DIRECT writes extending the file end off a {block}-byte block \
             (e.g. {count} B at offset {pos}): the kernel zeroes the rest, {pad_writes} extra \
             {pad}-byte writes ({observed} seen alone, the rest merged)",
            proc.comm, proc.tgid
        ),
        evidence: vec![
            ("pad_bytes", Evidence::Count(pad)),
            ("zeroing_writes", Evidence::Count(dio.tail_writes)),
            ("small_requests_observed", Evidence::Count(observed)),
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
        ],
        why: "an O_DIRECT write that ends past EOF off a block boundary makes the kernel zero the \
              rest of that block (iomap_dio_zero); the next write overwrites it and waits, and XFS \
              serializes such writes on the inode"
            .to_string(),
        fix: "start direct writes at block-aligned offsets with block-multiple sizes \
              (statx STATX_DIOALIGN), or preallocate the file so writes do not extend EOF"
            .to_string(),
        active: true,
        first_seen_ns: snap.now_ns,
        last_seen_ns: snap.now_ns,
    })
}
