//! Per-process request patterns the detectors read: byte-exact request sizes, sequentiality,
//! and direct I/O with the zeroing it makes the kernel do, judged against the geometry of
//! the file's filesystem (its block size and where it starts on the disk), never a constant.

use std::collections::BTreeMap;

use iotop_bpf_common::dio::predicted_zeroing;

use super::{BlockIo, Dev, DioCall, Op, snapshot::DioFigures};

/// Distinct request sizes kept per process and direction; newcomers past it are counted in
/// the largest size kept (so totals still add up).
const MAX_SIZES: usize = 256;
/// Distinct predicted pad sizes kept per period.
const MAX_PADS: usize = 16;

/// Where a process's direct I/O lands: the filesystem's geometry on its disk and the pads
/// its recent calls predicted. Kept across intervals (a call and its requests may straddle
/// a tick), bounded to a few filesystems.
#[derive(Clone, Debug, Default)]
pub(super) struct DioGeometry {
    entries: Vec<GeometryEntry>,
}

#[derive(Clone, Debug)]
struct GeometryEntry {
    disk: Dev,
    fs_start_sector: u64,
    fs_block: u64,
    /// Recently predicted tail pads, newest last.
    pads: Vec<u64>,
    /// Recent unaligned writes inside the file: zeroed around only if their blocks are
    /// unwritten extents (preallocated), which no tracepoint says, so only the zeroing
    /// requests themselves confirm it. Newest last.
    inside: Vec<Inside>,
    /// When each thread last began a direct write on this filesystem (newest last): a
    /// thread's request created after its next call began is that call's, not zeroing
    /// around the one before (InnoDB appends to its log block in pieces, each the size the
    /// zeroing after the previous piece would have).
    began: Vec<(u32, u64)>,
}

/// An unaligned direct write inside the file: the zeroing it would cause were its blocks
/// unwritten extents (`iomap_dio_bio_iter`'s `need_zeroout`): the start of the first block
/// before it (`head`), the rest of the last block after it (`tail`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Inside {
    head: u64,
    count: u64,
    tail: u64,
    /// The thread that made the call, and when it began.
    tid: u32,
    at_ns: u64,
}

impl Inside {
    /// How a write request of `bytes` confirms this write's zeroing, given whether it starts
    /// and ends on block boundaries: the zero write alone, or merged with the data (one
    /// plug: `__iomap_dio_rw` plugs its bios), as the zeroed bytes it carries.
    fn zeroed_in(&self, bytes: u64, starts_aligned: bool, ends_aligned: bool) -> Option<u64> {
        let (h, c, t) = (self.head, self.count, self.tail);
        let shapes = [
            (t, t > 0 && ends_aligned && !starts_aligned, t),
            (h, h > 0 && starts_aligned && !ends_aligned, h),
            (c + t, t > 0 && ends_aligned, t),
            (h + c, h > 0 && starts_aligned, h),
            (
                h + c + t,
                h > 0 && t > 0 && starts_aligned && ends_aligned,
                h + t,
            ),
        ];
        shapes
            .iter()
            .find(|&&(size, fits, _)| fits && size == bytes)
            .map(|&(_, _, zeroed)| zeroed)
    }
}

const MAX_GEOMETRIES: usize = 4;
const MAX_RECENT_PADS: usize = 8;
const MAX_RECENT_INSIDE: usize = 8;
const MAX_WRITERS: usize = 16;

impl DioGeometry {
    fn note(&mut self, call: &DioCall, tail: u64, inside: Option<Inside>) {
        let fs_block = u64::from(call.fs_block_size);
        if fs_block == 0 {
            return;
        }
        let at = self
            .entries
            .iter()
            .position(|e| e.disk == call.disk && e.fs_start_sector == call.fs_start_sector);
        let entry = match at {
            Some(i) => &mut self.entries[i],
            None => {
                if self.entries.len() == MAX_GEOMETRIES {
                    self.entries.remove(0);
                }
                self.entries.push(GeometryEntry {
                    disk: call.disk,
                    fs_start_sector: call.fs_start_sector,
                    fs_block,
                    pads: Vec::new(),
                    inside: Vec::new(),
                    began: Vec::new(),
                });
                let last = self.entries.len() - 1;
                &mut self.entries[last]
            }
        };
        entry.fs_block = fs_block;
        if tail > 0 && !entry.pads.contains(&tail) {
            if entry.pads.len() == MAX_RECENT_PADS {
                entry.pads.remove(0);
            }
            entry.pads.push(tail);
        }
        if let Some(inside) = inside {
            // The same shape from the same thread: one entry, of its latest call.
            entry.inside.retain(|c| {
                (c.head, c.count, c.tail, c.tid)
                    != (inside.head, inside.count, inside.tail, inside.tid)
            });
            if entry.inside.len() == MAX_RECENT_INSIDE {
                entry.inside.remove(0);
            }
            entry.inside.push(inside);
        }
        entry.began.retain(|&(tid, _)| tid != call.tid);
        if entry.began.len() == MAX_WRITERS {
            entry.began.remove(0);
        }
        entry.began.push((call.tid, call.ts_ns));
    }

    /// How a write request relates to the process's direct I/O: whether it finishes a
    /// block it started inside, whether it is exactly a predicted pad, and the bytes it
    /// zeroed around an unaligned write inside the file (unwritten extents).
    fn classify(&self, io: &BlockIo) -> Classified {
        let mut out = Classified::default();
        // Metadata is no zeroing: XFS writes its log in the task that forces it (an
        // fdatasync after InnoDB's log write), in 512-byte sectors that end on a block as
        // often as not; iomap's zero writes never carry REQ_META.
        if io.flags & iotop_bpf_common::block::FLAG_META != 0 {
            return out;
        }
        for e in self.entries.iter().filter(|e| e.disk == io.dev) {
            let Some(start) = io
                .sector
                .checked_sub(e.fs_start_sector)
                .and_then(|s| s.checked_mul(512))
            else {
                continue;
            };
            let Some(end) = start.checked_add(u64::from(io.bytes)) else {
                continue;
            };
            let (starts_aligned, ends_aligned) = (
                start.is_multiple_of(e.fs_block),
                end.is_multiple_of(e.fs_block),
            );
            if ends_aligned && !starts_aligned {
                out.finishing = true;
                out.pad = e.pads.contains(&u64::from(io.bytes));
            }
            // Not around a call whose thread began another before this request was made.
            // Every write request comes here: the shape is matched first, the thread's later
            // calls looked up only for a shape that fits.
            let superseded = |c: &Inside| {
                io.tid == c.tid
                    && e.began
                        .iter()
                        .any(|&(tid, at)| tid == c.tid && at > c.at_ns && at <= io.created_ns)
            };
            if let Some(zeroed) = e.inside.iter().rev().find_map(|c| {
                c.zeroed_in(u64::from(io.bytes), starts_aligned, ends_aligned)
                    .filter(|_| !superseded(c))
            }) {
                out.inside_zeroed = zeroed;
            }
            if out.finishing || out.inside_zeroed > 0 {
                return out;
            }
        }
        out
    }
}

/// What a write request says of the process's direct I/O ([`DioGeometry::classify`]).
#[derive(Clone, Copy, Debug, Default)]
struct Classified {
    finishing: bool,
    pad: bool,
    inside_zeroed: u64,
}

#[derive(Clone, Debug, Default)]
pub(super) struct PatternStats {
    write_sizes: BTreeMap<u32, u64>,
    read_sizes: BTreeMap<u32, u64>,
    sequential: u64,
    dio: DioStats,
}

#[derive(Clone, Debug, Default)]
struct DioStats {
    calls: u64,
    data_bytes: u64,
    tail_writes: u64,
    tail_bytes: u64,
    head_writes: u64,
    head_bytes: u64,
    pads: BTreeMap<u64, u64>,
    pad_requests: u64,
    block_finishing_requests: u64,
    unaligned_calls: u64,
    /// Unaligned writes inside the file (no zeroing unless their blocks are unwritten), the
    /// write requests that confirmed zeroing around them and the bytes zeroed.
    inside_calls: u64,
    inside_zeroing_requests: u64,
    inside_zeroed_bytes: u64,
    inside_example: Option<(u64, u64)>,
    physical_block_size: u32,
    fs_block_size: u32,
    disk: Option<Dev>,
    file: Option<String>,
    example: Option<(u64, u64, u64)>,
    /// The last overwrite-only try (file, offset, size), to tell its retry from a new call.
    tried: Option<(u64, u64, u64)>,
}

fn count_size<K: Ord + Copy>(sizes: &mut BTreeMap<K, u64>, key: K, n: u64, cap: usize) {
    if sizes.len() >= cap && !sizes.contains_key(&key) {
        if let Some(mut last) = sizes.last_entry() {
            *last.get_mut() += n;
        }
        return;
    }
    *sizes.entry(key).or_default() += n;
}

impl PatternStats {
    pub(super) fn add_request(&mut self, io: &BlockIo, sequential: bool, geometry: &DioGeometry) {
        match io.process_op() {
            Op::Write => {
                count_size(&mut self.write_sizes, io.bytes, 1, MAX_SIZES);
                let c = geometry.classify(io);
                self.dio.block_finishing_requests += u64::from(c.finishing);
                self.dio.pad_requests += u64::from(c.pad);
                if c.inside_zeroed > 0 {
                    self.dio.inside_zeroing_requests += 1;
                    self.dio.inside_zeroed_bytes += c.inside_zeroed;
                }
            }
            Op::Read => count_size(&mut self.read_sizes, io.bytes, 1, MAX_SIZES),
            _ => {}
        }
        if sequential {
            self.sequential += 1;
        }
    }

    /// Requests the probes summed: sizes by their power of two, and those that continued the
    /// previous one.
    pub(super) fn add_summed(&mut self, sums: &super::ProcDiskTotals) {
        for (bytes, n) in sums.read_request_sizes() {
            let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
            count_size(&mut self.read_sizes, bytes, n, MAX_SIZES);
        }
        for (bytes, n) in sums.write_request_sizes() {
            let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
            count_size(&mut self.write_sizes, bytes, n, MAX_SIZES);
        }
        self.sequential += sums.sequential;
    }

    pub(super) fn add_dio(&mut self, call: &DioCall, geometry: &mut DioGeometry) {
        let d = &mut self.dio;
        // XFS tries an unaligned write overwrite-only first, then again for real if that
        // would have zeroed: one system call, counted once; only the real try zeroes.
        let key = (call.ino, call.pos, call.count);
        let retry = !call.overwrite_only && d.tried == Some(key);
        d.tried = call.overwrite_only.then_some(key);
        if !retry {
            d.calls += 1;
            d.data_bytes = d.data_bytes.saturating_add(call.count);
        }
        d.disk = Some(call.disk);
        d.file = Some(
            call.file
                .clone()
                .unwrap_or_else(|| format!("inode {}", call.ino)),
        );
        d.physical_block_size = call.physical_block_size;
        d.fs_block_size = call.fs_block_size;
        let physical = u64::from(call.physical_block_size);
        if !retry && physical > 0 && !(call.pos | call.count).is_multiple_of(physical) {
            d.unaligned_calls += 1;
        }
        if call.overwrite_only {
            return;
        }
        // The tracepoint only says "write" for asynchronous calls (IOCB_WRITE); synchronous
        // writes look like reads. Every call is a candidate: zeroing needs a call ending at or
        // past EOF, which reads rarely do, and the detector wants the zeroing's own write
        // requests as confirmation, which reads never cause.
        let block = u64::from(call.fs_block_size);
        let (head, tail) = predicted_zeroing(call.pos, call.count, call.isize, block);
        if tail > 0 {
            d.tail_writes += 1;
            d.tail_bytes += tail;
            count_size(&mut d.pads, tail, 1, MAX_PADS);
            d.example.get_or_insert((call.pos, call.count, tail));
        }
        if head > 0 {
            d.head_writes += 1;
            d.head_bytes += head;
        }
        // Inside the file: zeroed around only where its blocks are unwritten extents.
        let end = call.pos.saturating_add(call.count);
        let inside = (block.is_power_of_two()
            && head == 0
            && tail == 0
            && end <= call.isize
            && !(call.pos | call.count).is_multiple_of(block))
        .then(|| Inside {
            head: call.pos % block,
            count: call.count,
            tail: (block - end % block) % block,
            tid: call.tid,
            at_ns: call.ts_ns,
        });
        if inside.is_some() {
            d.inside_calls += 1;
            d.inside_example.get_or_insert((call.pos, call.count));
        }
        geometry.note(call, tail, inside);
    }

    pub(super) fn merge(&mut self, other: &Self) {
        for (&size, &n) in &other.write_sizes {
            count_size(&mut self.write_sizes, size, n, MAX_SIZES);
        }
        for (&size, &n) in &other.read_sizes {
            count_size(&mut self.read_sizes, size, n, MAX_SIZES);
        }
        self.sequential += other.sequential;
        let (d, o) = (&mut self.dio, &other.dio);
        d.calls += o.calls;
        d.data_bytes = d.data_bytes.saturating_add(o.data_bytes);
        d.tail_writes += o.tail_writes;
        d.tail_bytes += o.tail_bytes;
        d.head_writes += o.head_writes;
        d.head_bytes += o.head_bytes;
        for (&pad, &n) in &o.pads {
            count_size(&mut d.pads, pad, n, MAX_PADS);
        }
        d.pad_requests += o.pad_requests;
        d.block_finishing_requests += o.block_finishing_requests;
        d.unaligned_calls += o.unaligned_calls;
        d.inside_calls += o.inside_calls;
        d.inside_zeroing_requests += o.inside_zeroing_requests;
        d.inside_zeroed_bytes += o.inside_zeroed_bytes;
        if d.inside_example.is_none() {
            d.inside_example = o.inside_example;
        }
        if o.calls > 0 {
            d.physical_block_size = o.physical_block_size;
            d.fs_block_size = o.fs_block_size;
            d.disk = o.disk;
            d.file.clone_from(&o.file);
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

    pub(super) fn dio_figures(&self) -> DioFigures {
        let d = &self.dio;
        DioFigures {
            calls: d.calls,
            data_bytes: d.data_bytes,
            tail_writes: d.tail_writes,
            tail_bytes: d.tail_bytes,
            head_writes: d.head_writes,
            head_bytes: d.head_bytes,
            pads: d.pads.iter().map(|(&p, &n)| (p, n)).collect(),
            pad_requests: d.pad_requests,
            block_finishing_requests: d.block_finishing_requests,
            unaligned_calls: d.unaligned_calls,
            inside_calls: d.inside_calls,
            inside_zeroing_requests: d.inside_zeroing_requests,
            inside_zeroed_bytes: d.inside_zeroed_bytes,
            inside_example: d.inside_example,
            physical_block_size: d.physical_block_size,
            fs_block_size: d.fs_block_size,
            disk: d.disk,
            file: d.file.clone(),
            example: d.example,
        }
    }
}

#[cfg(test)]
mod tests;
