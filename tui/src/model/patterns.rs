//! Per-process request patterns the detectors read: byte-exact request sizes, sequentiality,
//! and direct I/O alignment with the zeroing it makes the kernel do.

use std::collections::BTreeMap;

use iotop_bpf_common::dio::predicted_zeroing;

use super::{BlockIo, Dev, DioCall, Op, snapshot::DioFigures};

/// Distinct request sizes kept per process and direction (the rest are summed in the last).
const MAX_SIZES: usize = 256;

/// Block size for "a write request that finishes a block it did not start": the on-disk
/// trace of sub-block zeroing, merged into its data request or not.
const TAIL_BLOCK: u64 = 4096;

#[derive(Clone, Debug, Default)]
pub(super) struct PatternStats {
    write_sizes: BTreeMap<u32, u64>,
    read_sizes: BTreeMap<u32, u64>,
    sequential: u64,
    /// Write requests that start inside a 4 KiB block and end on a block boundary.
    block_finishing_writes: u64,
    dio: DioStats,
}

#[derive(Clone, Debug, Default)]
struct DioStats {
    calls: u64,
    writes: u64,
    data_bytes: u64,
    tail_writes: u64,
    tail_bytes: u64,
    head_writes: u64,
    head_bytes: u64,
    pads: BTreeMap<u64, u64>,
    unaligned_physical: u64,
    physical_block_size: u32,
    fs_block_size: u32,
    disk: Option<Dev>,
    ino: Option<u64>,
    example: Option<(u64, u64, u64)>,
}

fn count_size(sizes: &mut BTreeMap<u32, u64>, bytes: u32) {
    if sizes.len() >= MAX_SIZES && !sizes.contains_key(&bytes) {
        // Keep byte-exact counts for the sizes seen first; fold newcomers into the largest.
        if let Some(mut last) = sizes.last_entry() {
            *last.get_mut() += 1;
        }
        return;
    }
    *sizes.entry(bytes).or_default() += 1;
}

impl PatternStats {
    pub(super) fn add_request(&mut self, io: &BlockIo, sequential: bool) {
        match io.op {
            Op::Write => {
                count_size(&mut self.write_sizes, io.bytes);
                let start = io.sector * 512;
                let end = start + u64::from(io.bytes);
                if !start.is_multiple_of(TAIL_BLOCK) && end.is_multiple_of(TAIL_BLOCK) {
                    self.block_finishing_writes += 1;
                }
            }
            Op::Read => count_size(&mut self.read_sizes, io.bytes),
            _ => {}
        }
        if sequential {
            self.sequential += 1;
        }
    }

    pub(super) fn add_dio(&mut self, call: &DioCall) {
        let d = &mut self.dio;
        d.calls += 1;
        d.disk = Some(call.disk);
        d.ino = Some(call.ino);
        d.physical_block_size = call.physical_block_size;
        d.fs_block_size = call.fs_block_size;
        let physical = u64::from(call.physical_block_size);
        if physical > 0 && !(call.pos | call.count).is_multiple_of(physical) {
            d.unaligned_physical += 1;
        }
        // The tracepoint only says "write" for asynchronous calls (IOCB_WRITE); synchronous
        // writes look like reads. Every call is a candidate: zeroing needs a call ending at or
        // past EOF, which reads rarely do, and the detector wants the zeroing's own small write
        // requests as confirmation, which reads never cause.
        d.writes += 1;
        d.data_bytes += call.count;
        let (head, tail) = predicted_zeroing(
            call.pos,
            call.count,
            call.isize,
            u64::from(call.fs_block_size),
        );
        if tail > 0 {
            d.tail_writes += 1;
            d.tail_bytes += tail;
            *d.pads.entry(tail).or_default() += 1;
            d.example.get_or_insert((call.pos, call.count, tail));
        }
        if head > 0 {
            d.head_writes += 1;
            d.head_bytes += head;
        }
    }

    pub(super) fn merge(&mut self, other: &Self) {
        for (&size, &n) in &other.write_sizes {
            *self.write_sizes.entry(size).or_default() += n;
        }
        for (&size, &n) in &other.read_sizes {
            *self.read_sizes.entry(size).or_default() += n;
        }
        self.sequential += other.sequential;
        self.block_finishing_writes += other.block_finishing_writes;
        let (d, o) = (&mut self.dio, &other.dio);
        d.calls += o.calls;
        d.writes += o.writes;
        d.data_bytes += o.data_bytes;
        d.tail_writes += o.tail_writes;
        d.tail_bytes += o.tail_bytes;
        d.head_writes += o.head_writes;
        d.head_bytes += o.head_bytes;
        for (&pad, &n) in &o.pads {
            *d.pads.entry(pad).or_default() += n;
        }
        d.unaligned_physical += o.unaligned_physical;
        if o.calls > 0 {
            d.physical_block_size = o.physical_block_size;
            d.fs_block_size = o.fs_block_size;
            d.disk = o.disk;
            d.ino = o.ino;
        }
        if d.example.is_none() {
            d.example = o.example;
        }
    }

    pub(super) fn write_sizes(&self) -> Vec<(u32, u64)> {
        self.write_sizes.iter().map(|(&s, &n)| (s, n)).collect()
    }

    pub(super) fn read_sizes(&self) -> Vec<(u32, u64)> {
        self.read_sizes.iter().map(|(&s, &n)| (s, n)).collect()
    }

    pub(super) fn sequential(&self) -> u64 {
        self.sequential
    }

    pub(super) fn block_finishing_writes(&self) -> u64 {
        self.block_finishing_writes
    }

    pub(super) fn dio_figures(&self) -> DioFigures {
        let d = &self.dio;
        DioFigures {
            calls: d.calls,
            writes: d.writes,
            data_bytes: d.data_bytes,
            tail_writes: d.tail_writes,
            tail_bytes: d.tail_bytes,
            head_writes: d.head_writes,
            head_bytes: d.head_bytes,
            pads: d.pads.iter().map(|(&p, &n)| (p, n)).collect(),
            unaligned_physical: d.unaligned_physical,
            physical_block_size: d.physical_block_size,
            fs_block_size: d.fs_block_size,
            disk: d.disk,
            ino: d.ino,
            example: d.example,
        }
    }
}
