//! The request and direct-I/O pattern statistics: sizes, zeroing, geometry.

use super::*;
use crate::Comm;

fn call(pos: u64, count: u64, isize: u64, block: u32, start: u64) -> DioCall {
    DioCall {
        tgid: 1,
        tid: 1,
        comm: Comm::new("w"),
        ts_ns: 0,
        fs_dev: Dev::new(7, 1),
        disk: Dev::new(7, 0),
        ino: 12,
        isize,
        pos,
        count,
        write: false,
        overwrite_only: false,
        fs_block_size: block,
        logical_block_size: 512,
        physical_block_size: 512,
        fs_start_sector: start,
        file: None,
        name: String::new(),
    }
}

fn write_at(byte: u64, bytes: u32) -> BlockIo {
    BlockIo {
        dev: Dev::new(7, 0),
        sector: byte / 512,
        bytes,
        op: Op::Write,
        flags: 0,
        tgid: 1,
        tid: 1,
        comm: Comm::new("w"),
        created_ns: 0,
        issued_ns: 0,
        completed_ns: 0,
        error: 0,
        kernel_thread: false,
        cgroup: 0,
        dirtier: None,
        file: None,
    }
}

#[test]
fn the_pad_is_judged_against_the_filesystem_block_and_its_start() {
    for (block, start_sector) in [(1024u32, 0u64), (2048, 0), (4096, 2048), (65536, 8)] {
        let mut geometry = DioGeometry::default();
        let mut stats = PatternStats::default();
        // A write ending 512 bytes into a block, at EOF: the rest of the block is zeroed.
        let block64 = u64::from(block);
        let pos = 3 * block64 + 512;
        stats.add_dio(&call(pos, block64, pos, block, start_sector), &mut geometry);
        let pad = block64 - 512;
        assert_eq!(
            stats.dio.pads.keys().copied().collect::<Vec<_>>(),
            vec![pad]
        );
        // The zero write: from the call's end to the block's end, on the disk.
        let fs_at = start_sector * 512;
        let zero = write_at(fs_at + 4 * block64 + 512, u32::try_from(pad).unwrap());
        stats.add_request(&zero, false, &geometry);
        // Merged into the data write: starts off a block, ends on one.
        let merged = write_at(fs_at + pos, u32::try_from(block64 + pad).unwrap());
        stats.add_request(&merged, false, &geometry);
        // Aligned and sub-block-but-not-finishing requests do not count.
        stats.add_request(&write_at(fs_at + 8 * block64, block), false, &geometry);
        stats.add_request(&write_at(fs_at + 8 * block64, 512), false, &geometry);
        let d = stats.dio_figures();
        assert_eq!(
            (d.pad_requests, d.block_finishing_requests),
            (1, 2),
            "block {block}, start {start_sector}"
        );
    }
}

#[test]
fn absurd_sectors_do_not_overflow() {
    let mut geometry = DioGeometry::default();
    let mut stats = PatternStats::default();
    stats.add_dio(&call(512, 1024, 0, 4096, 0), &mut geometry);
    let mut io = write_at(0, u32::MAX);
    io.sector = u64::MAX;
    stats.add_request(&io, false, &geometry);
    stats.add_dio(
        &call(u64::MAX - 10, u64::MAX, u64::MAX, 4096, 0),
        &mut geometry,
    );
    assert_eq!(stats.dio.block_finishing_requests, 0);
}

#[test]
fn size_maps_stay_bounded_through_merges() {
    let mut a = PatternStats::default();
    let mut b = PatternStats::default();
    // From 1: a write without data is a flush, not a size.
    for size in 1..=1000u32 {
        a.add_request(&write_at(0, size * 512), false, &DioGeometry::default());
        b.add_request(&write_at(0, size * 512 + 1), false, &DioGeometry::default());
    }
    a.merge(&b);
    assert_eq!(a.write_sizes.len(), MAX_SIZES);
    assert_eq!(
        a.write_sizes.values().sum::<u64>(),
        2000,
        "every request counted"
    );
}

#[test]
fn zeroing_around_writes_into_unwritten_extents_is_confirmed_by_its_requests() {
    // fio's layout: a fallocated 64 MiB file, 6 KiB direct writes on 4 KiB blocks. A
    // write at 0 covers half of block 1: zeros [6 KiB, 8 KiB) if it is unwritten; the
    // next one at 6 KiB ends on a block.
    let mut geometry = DioGeometry::default();
    let mut stats = PatternStats::default();
    let isize = 64 << 20;
    for i in 0..4u64 {
        let pos = i * 12_288;
        stats.add_dio(&call(pos, 6144, isize, 4096, 0), &mut geometry);
        // Merged with its data: one 8 KiB request from the block boundary.
        stats.add_request(&write_at(pos, 8192), false, &geometry);
        stats.add_dio(&call(pos + 6144, 6144, isize, 4096, 0), &mut geometry);
        stats.add_request(&write_at(pos + 6144, 6144), false, &geometry);
    }
    let d = stats.dio_figures();
    assert_eq!(d.tail_writes, 0, "nothing past EOF");
    assert_eq!(d.inside_calls, 8);
    assert_eq!(
        (d.inside_zeroing_requests, d.inside_zeroed_bytes),
        (4, 4 * 2048)
    );
    // Alone: the 2 KiB zero write, ending on the block.
    stats.add_dio(&call(1 << 20, 6144, isize, 4096, 0), &mut geometry);
    stats.add_request(&write_at((1 << 20) + 6144, 2048), false, &geometry);
    assert_eq!(stats.dio_figures().inside_zeroing_requests, 5);
}

#[test]
fn a_threads_next_piece_is_not_zeroing_around_its_last() {
    // InnoDB's redo log on 1 KiB blocks, preallocated: 1536 B at 44 KiB (zeroed after
    // it, merged with its data: one 2 KiB request), then the next piece, 512 B from
    // where that ended: the size and shape the zeroing after the first would have.
    let mut geometry = DioGeometry::default();
    let mut stats = PatternStats::default();
    let isize = 96 << 20;
    stats.add_dio(&call(45_056, 1536, isize, 1024, 0), &mut geometry);
    let mut merged = write_at(45_056, 2048);
    merged.created_ns = 10;
    stats.add_request(&merged, false, &geometry);
    let mut next = call(46_592, 512, isize, 1024, 0);
    next.ts_ns = 100;
    stats.add_dio(&next, &mut geometry);
    let mut piece = write_at(46_592, 512);
    piece.created_ns = 110;
    stats.add_request(&piece, false, &geometry);
    let d = stats.dio_figures();
    assert_eq!(
        (d.inside_zeroing_requests, d.inside_zeroed_bytes),
        (1, 512),
        "the piece is the second call's data"
    );
    // The same request made before the second call began is the first one's zeroing;
    // so is one by another thread.
    piece.created_ns = 90;
    stats.add_request(&piece, false, &geometry);
    // XFS's log, written by the thread that forces it: metadata, never zeroing.
    let mut log = piece;
    log.flags = iotop_bpf_common::block::FLAG_META;
    stats.add_request(&log, false, &geometry);
    piece.created_ns = 110;
    piece.tid = 2;
    stats.add_request(&piece, false, &geometry);
    assert_eq!(stats.dio_figures().inside_zeroing_requests, 3);
}

#[test]
fn an_overwrite_only_try_and_its_retry_are_one_call() {
    let mut geometry = DioGeometry::default();
    let mut stats = PatternStats::default();
    let mut first = call(512, 1024, 1 << 20, 4096, 0);
    first.overwrite_only = true;
    stats.add_dio(&first, &mut geometry);
    stats.add_dio(&call(512, 1024, 1 << 20, 4096, 0), &mut geometry);
    // A new call of the same range after it is a call of its own.
    stats.add_dio(&call(512, 1024, 1 << 20, 4096, 0), &mut geometry);
    let d = stats.dio_figures();
    assert_eq!((d.calls, d.data_bytes, d.inside_calls), (2, 2048, 2));
}
