//! Direct I/O calls (`iomap:iomap_dio_rw_begin`): enough to predict the kernel's sub-block
//! zeroing and to spot unaligned direct I/O.

use crate::abi::{COMM_LEN, RecordHeader};

/// `IOCB_DIRECT` and `IOCB_WRITE` in the tracepoint's `ki_flags`.
pub const KI_DIRECT: u32 = 1 << 17;
pub const KI_WRITE: u32 = 1 << 18;
/// Map holding one `u64`: calls whose offset and size are both multiples of it are not
/// streamed. User space keeps it at the largest filesystem block or physical block size in
/// use (aligned calls cannot cause sub-block zeroing or a device read-modify-write), and
/// updates it when filesystems are mounted.
pub const DIO_STREAM_ALIGN: &str = "DIO_STREAM_ALIGN";

/// One direct I/O call that is not aligned to [`DIO_STREAM_ALIGN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DioRecord {
    pub header: RecordHeader,
    pub ts_ns: u64,
    pub ino: u64,
    /// File size when the call began.
    pub isize: i64,
    pub pos: i64,
    pub count: u64,
    /// The filesystem's device (`dev_t`, kernel encoding).
    pub dev: u32,
    pub tgid: u32,
    pub pid: u32,
    pub ki_flags: u32,
    pub dio_flags: u32,
    pub _pad: u32,
    pub comm: [u8; COMM_LEN],
    /// The file's name (last path component), when the probe could read it (raw
    /// tracepoint); zeros otherwise.
    pub name: [u8; crate::sync::FILE_NAME_LEN],
    /// The name of its directory (see `SyncCallRecord::parent`).
    pub parent: [u8; crate::sync::FILE_NAME_LEN],
}

const _: () = assert!(core::mem::size_of::<DioRecord>() == 152);

/// Offsets, from BTF, for the raw `iomap_dio_rw_begin(struct kiocb *, struct iov_iter *,
/// unsigned int dio_flags, size_t done_before)` probe: `iocb->{ki_filp, ki_pos, ki_flags}`,
/// `iter->count` and `inode->i_size` (the file's inode and superblock are found with
/// [`crate::sync::FileOffsets`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct RawDioOffsets {
    pub iocb_filp: u32,
    pub iocb_pos: u32,
    pub iocb_flags: u32,
    pub iter_count: u32,
    pub inode_size: u32,
    /// For kernels without `iomap_dio_rw_begin` (before 6.4), where the calls are read from
    /// the first `iomap_iter` of a direct I/O (5.15-6.3): `iomap_iter.{inode, pos, len,
    /// flags}` and where its `iomap.length` is (0 before the first mapping).
    pub iomap_iter_inode: u32,
    pub iomap_iter_pos: u32,
    pub iomap_iter_len: u32,
    pub iomap_iter_flags: u32,
    pub iomap_iter_length: u32,
    pub _pad: u32,
}

impl RawDioOffsets {
    pub const ZERO: Self = Self {
        iocb_filp: 0,
        iocb_pos: 0,
        iocb_flags: 0,
        iter_count: 0,
        inode_size: 0,
        iomap_iter_inode: 0,
        iomap_iter_pos: 0,
        iomap_iter_len: 0,
        iomap_iter_flags: 0,
        iomap_iter_length: 0,
        _pad: 0,
    };
}

pub const GLOBAL_RAW_DIO_OFFSETS: &str = "RAW_DIO_OFFSETS";

/// `IOMAP_DIO_OVERWRITE_ONLY` in `iomap_dio_rw`'s `dio_flags` (5.15+): XFS's first try at an
/// unaligned direct write, which fails with -EAGAIN rather than zero, and is then retried.
pub const IOMAP_DIO_OVERWRITE_ONLY: u32 = 1 << 1;

/// `IOMAP_WRITE`, `IOMAP_DIRECT` and `IOMAP_OVERWRITE_ONLY` in an iomap operation's flags
/// (`include/linux/iomap.h`, stable since 4.x; the overwrite-only bit from 5.15: XFS's first
/// try at an unaligned direct write, which fails rather than zero, and is retried).
pub const IOMAP_WRITE: u32 = 1 << 0;
pub const IOMAP_DIRECT: u32 = 1 << 4;
pub const IOMAP_OVERWRITE_ONLY: u32 = 1 << 6;

/// Offsets of `iomap_dio_rw_begin`'s fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DioOffsets {
    pub dev: u32,
    pub ino: u32,
    pub isize: u32,
    pub pos: u32,
    pub count: u32,
    pub ki_flags: u32,
    pub dio_flags: u32,
    pub _pad: u32,
}

impl DioOffsets {
    pub const ABSENT: Self = Self {
        dev: crate::tracepoint::ABSENT,
        ino: crate::tracepoint::ABSENT,
        isize: crate::tracepoint::ABSENT,
        pos: crate::tracepoint::ABSENT,
        count: crate::tracepoint::ABSENT,
        ki_flags: crate::tracepoint::ABSENT,
        dio_flags: crate::tracepoint::ABSENT,
        _pad: 0,
    };
}

pub const GLOBAL_DIO_OFFSETS: &str = "DIO_OFFSETS";

/// The zeroing `iomap_dio_bio_iter()` adds around a direct write of `count` bytes at `pos`
/// into a file of `isize` bytes on a filesystem with `block`-byte blocks, as
/// `(head, tail)` bytes:
/// - tail: when the write ends off a block boundary and at or beyond EOF, the rest of the
///   last block is zeroed (`block - end % block`), so mmap readers never see stale data;
/// - head: when the write starts off a block boundary in a block that lies wholly beyond
///   EOF (a newly allocated block), the start of that block is zeroed (`pos % block`).
///
/// Writes into unwritten (fallocated) extents are zeroed too, which the tracepoint cannot
/// tell; those are confirmed (or not) by the small requests that follow.
#[must_use]
pub const fn predicted_zeroing(pos: u64, count: u64, isize: u64, block: u64) -> (u64, u64) {
    if block == 0 || !block.is_power_of_two() || count == 0 {
        return (0, 0);
    }
    let mask = block - 1;
    // Absurd values (a corrupt replay) give no zeroing rather than an overflow.
    let (Some(end), Some(eof_block_end)) = (pos.checked_add(count), isize.checked_add(mask)) else {
        return (0, 0);
    };
    let eof_block_end = eof_block_end & !mask;
    let tail = if end & mask != 0 && end >= isize {
        block - (end & mask)
    } else {
        0
    };
    let head = if pos & mask != 0 && (pos & !mask) >= eof_block_end {
        pos & mask
    } else {
        0
    };
    (head, tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_512_byte_tail_of_2_mib_writes_at_3584() {
        // 2 MiB at 3584 ends at 2100736 = 512 blocks + 3584: 512 bytes of zeroes.
        assert_eq!(predicted_zeroing(3584, 2 << 20, 0, 4096), (3584, 512));
        // The next write starts where the last one ended, inside the zeroed block: no head.
        assert_eq!(
            predicted_zeroing(2_100_736, 2 << 20, 2_100_736, 4096),
            (0, 512)
        );
    }

    #[test]
    fn the_pad_is_computed_not_a_constant() {
        assert_eq!(predicted_zeroing(1024, 1 << 20, 0, 4096).1, 3072);
        assert_eq!(
            predicted_zeroing(0, 512, 0, 4096),
            (0, 3584),
            "a 512-byte append"
        );
        assert_eq!(predicted_zeroing(0, 3584, 0, 4096), (0, 512));
        assert_eq!(
            predicted_zeroing(100, 200, 0, 1024),
            (100, 724),
            "1 KiB blocks"
        );
    }

    #[test]
    fn aligned_or_non_extending_writes_zero_nothing() {
        assert_eq!(
            predicted_zeroing(0, 2 << 20, 0, 4096),
            (0, 0),
            "aligned, extending"
        );
        assert_eq!(
            predicted_zeroing(3584, 2 << 20, 64 << 20, 4096),
            (0, 0),
            "inside a written file"
        );
        assert_eq!(predicted_zeroing(4096, 4096, 0, 4096), (0, 0));
        assert_eq!(
            predicted_zeroing(10, 10, 0, 0),
            (0, 0),
            "unknown block size"
        );
        assert_eq!(predicted_zeroing(10, 0, 0, 4096), (0, 0));
        assert_eq!(
            predicted_zeroing(u64::MAX, 512, 0, 4096),
            (0, 0),
            "overflow"
        );
        assert_eq!(
            predicted_zeroing(0, 512, u64::MAX, 4096),
            (0, 0),
            "overflow"
        );
    }
}
