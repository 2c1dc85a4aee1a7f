//! What happened before: a bounded, compact record of past intervals for the live view's
//! sparklines and heat maps, and a bounded store of past snapshots for stepping back through
//! them while paused (the DVR).
//!
//! This is view state, owned by the live view (`app::App`); the model knows nothing
//! of it and keeps no history of its own. It only reads [`Snapshot`]s, like every other
//! consumer. Two stores with two bounds, because a whole snapshot is big (every process with
//! four histograms, twice) and a heat map needs only a few numbers per subject and interval:
//!
//! - [`Frame`]s: per interval, per disk and per busy process, the rates, percentiles and log2
//!   latency columns, varint-packed. At most [`FRAMES`] intervals (10 minutes at 1 s) and
//!   [`FRAME_BUDGET`] bytes.
//! - Snapshots for the DVR, slimmed to the processes active in their interval, at most
//!   [`DVR_BUDGET`] bytes (and [`FRAMES`] of them). Stepping back stops at the oldest kept.

use std::collections::VecDeque;

use iotop_bpf_common::hist::SLOTS;

use crate::model::{Dev, DiskRow, Log2Hist, ProcFigures, ProcRow, Snapshot};

/// Intervals of compact history kept: 10 minutes at the default 1 s interval.
pub const FRAMES: usize = 600;
/// Bytes the compact history may hold; past it, the oldest intervals go first.
pub const FRAME_BUDGET: usize = 3 << 20;
/// Bytes the DVR's snapshots may hold; past it, the oldest snapshots go first. 6.5 MiB: a
/// process row grew with its sync kinds, io_uring population and FUA counts, and the demo
/// host must still step back 2.5 minutes.
pub const DVR_BUDGET: usize = 13 << 19;
/// Disks kept per interval (the busiest); a host with more shows the rest live only.
pub const MAX_DISKS: usize = 8;
/// Processes kept per interval: the busiest by bytes, by time in sync calls and in D.
pub const MAX_PROCS: usize = 16;
/// Processes a kept snapshot holds (the busiest, and those named by a finding or a D-state
/// row): more than a screen's worth of rows, far fewer than a busy host runs.
pub const DVR_PROCS: usize = 64;

/// A log2 latency histogram of one interval, packed: only the slots between the lowest and
/// the highest non-empty one, each count as a LEB128 varint (most counts take one byte).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Column {
    lo: u8,
    len: u8,
    data: Box<[u8]>,
}

impl Column {
    pub fn of(hist: &Log2Hist) -> Self {
        let Some(first) = hist.slots.iter().position(|&n| n > 0) else {
            return Self::default();
        };
        let last = hist.slots.iter().rposition(|&n| n > 0).unwrap_or(first);
        let mut data = Vec::with_capacity(last + 1 - first);
        for &n in &hist.slots[first..=last] {
            crate::varint::put(&mut data, n);
        }
        #[expect(clippy::cast_possible_truncation, reason = "SLOTS is 32")]
        Self {
            lo: first as u8,
            len: (last + 1 - first) as u8,
            data: data.into_boxed_slice(),
        }
    }

    /// Counts per slot.
    pub fn hist(&self) -> Log2Hist {
        let mut out = Log2Hist::default();
        let mut at = 0;
        for slot in usize::from(self.lo)..usize::from(self.lo) + usize::from(self.len) {
            // Written by `of`: whole, and of at most 64 bits.
            let n = crate::varint::read(&self.data, &mut at).unwrap_or(0);
            if slot < SLOTS {
                out.slots[slot] = n;
            }
        }
        out
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn heap_bytes(&self) -> usize {
        self.data.len()
    }
}

/// A disk in one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskPoint {
    pub dev: Dev,
    pub name: Box<str>,
    pub requests: u64,
    pub bytes: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub total: Column,
    pub queue: Column,
    pub device: Column,
}

/// A process in one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcPoint {
    pub tgid: u32,
    pub comm: Box<str>,
    pub requests: u64,
    pub bytes: u64,
    pub p99_ns: u64,
    pub syncs: u64,
    pub sync_ns: u64,
    pub sync_p99_ns: u64,
    pub dstate_ns: u64,
    pub total: Column,
    pub queue: Column,
    pub device: Column,
    pub sync: Column,
}

/// One interval, compact.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub seq: u64,
    pub now_ns: u64,
    pub elapsed_ns: u64,
    pub interval_ns: u64,
    pub disks: Vec<DiskPoint>,
    pub procs: Vec<ProcPoint>,
}

impl DiskPoint {
    pub fn of(row: &DiskRow) -> Self {
        let f = &row.interval;
        Self {
            dev: row.dev,
            name: row.name.as_str().into(),
            requests: f.requests(),
            bytes: f.read_bytes + f.write_bytes,
            p50_ns: f.latency.p50_ns,
            p99_ns: f.latency.p99_ns,
            p999_ns: f.latency.p999_ns,
            total: Column::of(&f.total_hist),
            queue: Column::of(&f.queue_hist),
            device: Column::of(&f.device_hist),
        }
    }

    fn heap_bytes(&self) -> usize {
        self.name.len()
            + self.total.heap_bytes()
            + self.queue.heap_bytes()
            + self.device.heap_bytes()
    }
}

impl ProcPoint {
    pub fn of(row: &ProcRow) -> Self {
        let f = &row.interval;
        Self {
            tgid: row.tgid,
            comm: row.comm.as_str().into(),
            requests: f.ios(),
            bytes: f.bytes(),
            p99_ns: f.latency.p99_ns,
            syncs: f.sync.syncs,
            sync_ns: f.sync.time_ns,
            sync_p99_ns: f.sync.latency.p99_ns,
            dstate_ns: f.dstate_ns,
            total: Column::of(&f.total_hist),
            queue: Column::of(&f.queue_hist),
            device: Column::of(&f.device_hist),
            sync: Column::of(&f.sync.hist),
        }
    }

    fn heap_bytes(&self) -> usize {
        self.comm.len()
            + self.total.heap_bytes()
            + self.queue.heap_bytes()
            + self.device.heap_bytes()
            + self.sync.heap_bytes()
    }
}

/// The processes worth remembering of an interval: the busiest by bytes, by time in sync
/// calls and by time in D, plus `pinned` (the selected process, so its heat map has no
/// holes while it is quiet), at most [`MAX_PROCS`].
fn chosen_procs(snap: &Snapshot, pinned: Option<u32>) -> Vec<&ProcRow> {
    let active: Vec<&ProcRow> = snap.procs.iter().filter(|p| p.interval.active()).collect();
    let mut chosen: Vec<&ProcRow> = Vec::new();
    let mut take = |key: fn(&ProcFigures) -> u64, n: usize| {
        let mut ranked: Vec<&ProcRow> = active
            .iter()
            .copied()
            .filter(|p| key(&p.interval) > 0)
            .collect();
        ranked.sort_by(|a, b| {
            key(&b.interval)
                .cmp(&key(&a.interval))
                .then(a.tgid.cmp(&b.tgid))
        });
        for p in ranked.into_iter().take(n) {
            if chosen.len() < MAX_PROCS && !chosen.iter().any(|c| c.tgid == p.tgid) {
                chosen.push(p);
            }
        }
    };
    take(|f| f.bytes().max(f.ios()), MAX_PROCS / 2);
    take(|f| f.sync.time_ns, MAX_PROCS / 4);
    take(|f| f.dstate_ns, MAX_PROCS / 8);
    take(
        |f| f.bytes() + f.ios() + f.sync.syncs + f.dstate_ns,
        MAX_PROCS,
    );
    if let Some(pid) = pinned
        && !chosen.iter().any(|c| c.tgid == pid)
        && let Some(p) = snap.procs.iter().find(|p| p.tgid == pid)
    {
        if chosen.len() >= MAX_PROCS {
            chosen.pop();
        }
        chosen.push(p);
    }
    chosen.sort_by_key(|p| p.tgid);
    chosen
}

impl Frame {
    pub fn of(snap: &Snapshot, pinned: Option<u32>) -> Self {
        let mut disks: Vec<&DiskRow> = snap.disks.iter().collect();
        if disks.len() > MAX_DISKS {
            disks.sort_by(|a, b| {
                b.interval
                    .requests()
                    .cmp(&a.interval.requests())
                    .then(a.name.cmp(&b.name))
            });
            disks.truncate(MAX_DISKS);
            disks.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Self {
            seq: snap.seq,
            now_ns: snap.now_ns,
            elapsed_ns: snap.elapsed_ns,
            interval_ns: snap.interval_ns,
            disks: disks.into_iter().map(DiskPoint::of).collect(),
            procs: chosen_procs(snap, pinned)
                .into_iter()
                .map(ProcPoint::of)
                .collect(),
        }
    }

    pub fn disk(&self, dev: Dev) -> Option<&DiskPoint> {
        self.disks.iter().find(|d| d.dev == dev)
    }

    pub fn proc(&self, tgid: u32) -> Option<&ProcPoint> {
        self.procs.iter().find(|p| p.tgid == tgid)
    }

    /// Bytes it takes, heap included (capacities, not lengths: what is really held).
    pub fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.disks.capacity() * size_of::<DiskPoint>()
            + self.procs.capacity() * size_of::<ProcPoint>()
            + self.disks.iter().map(DiskPoint::heap_bytes).sum::<usize>()
            + self.procs.iter().map(ProcPoint::heap_bytes).sum::<usize>()
    }
}

/// The past intervals of the live view.
#[derive(Debug, Default)]
pub struct History {
    frames: VecDeque<Frame>,
    frame_bytes: usize,
    snapshots: VecDeque<Snapshot>,
    snapshot_bytes: usize,
}

impl History {
    /// Records a closed interval. `pinned`: a process to keep in the compact history even
    /// when quiet (the selected one).
    pub fn push(&mut self, snap: &Snapshot, pinned: Option<u32>) {
        // A replay restarted or a new run: history from another timeline would mislead.
        if self.frames.back().is_some_and(|f| f.seq >= snap.seq) {
            *self = Self::default();
        }
        let frame = Frame::of(snap, pinned);
        self.frame_bytes += frame.bytes();
        self.frames.push_back(frame);
        while self.frames.len() > FRAMES
            || (self.frame_bytes > FRAME_BUDGET && self.frames.len() > 1)
        {
            if let Some(old) = self.frames.pop_front() {
                self.frame_bytes -= old.bytes();
            }
        }
        let slim = slim(snap);
        self.snapshot_bytes += snapshot_bytes(&slim);
        self.snapshots.push_back(slim);
        while self.snapshots.len() > FRAMES
            || (self.snapshot_bytes > DVR_BUDGET && self.snapshots.len() > 1)
        {
            if let Some(old) = self.snapshots.pop_front() {
                self.snapshot_bytes -= snapshot_bytes(&old);
            }
        }
    }

    /// The compact intervals, oldest first.
    pub fn frames(&self) -> &VecDeque<Frame> {
        &self.frames
    }

    /// Up to `n` compact intervals ending with interval `seq` (or the newest before it).
    pub fn frames_until(&self, seq: u64, n: usize) -> impl Iterator<Item = &Frame> {
        let end = self.frames.partition_point(|f| f.seq <= seq);
        self.frames.range(end.saturating_sub(n)..end)
    }

    /// The kept snapshot of interval `seq`.
    pub fn snapshot(&self, seq: u64) -> Option<&Snapshot> {
        let at = self.snapshots.partition_point(|s| s.seq < seq);
        self.snapshots.get(at).filter(|s| s.seq == seq)
    }

    /// The kept snapshot `back` intervals before the newest (clamped to the oldest kept), and
    /// how far back that really is.
    pub fn snapshot_back(&self, back: usize) -> Option<(&Snapshot, usize)> {
        let len = self.snapshots.len();
        let back = back.min(len.checked_sub(1)?);
        Some((&self.snapshots[len - 1 - back], back))
    }

    /// Snapshots kept for stepping back.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.snapshots.len()
    }

    /// Bytes held: (compact intervals, DVR snapshots).
    #[cfg(test)]
    pub fn bytes(&self) -> (usize, usize) {
        (self.frame_bytes, self.snapshot_bytes)
    }
}

/// A snapshot as the DVR keeps it: only the processes active in its interval (or named by a
/// finding or a D-state row), which are the rows the views show by default, and of those the
/// [`DVR_PROCS`] busiest. The totals view of a past interval therefore lists only those.
fn slim(snap: &Snapshot) -> Snapshot {
    let named = |tgid: u32| {
        snap.findings.iter().any(|f| f.tgid == Some(tgid))
            || snap.dstate.iter().any(|d| d.tgid == tgid)
    };
    let mut kept: Vec<&ProcRow> = snap
        .procs
        .iter()
        .filter(|p| p.interval.active() || named(p.tgid))
        .collect();
    if kept.len() > DVR_PROCS {
        let weight = |p: &ProcRow| {
            let f = &p.interval;
            (
                named(p.tgid),
                f.bytes() + f.sync.time_ns + f.dstate_ns + f.ios(),
            )
        };
        kept.sort_by(|a, b| weight(b).cmp(&weight(a)).then(a.tgid.cmp(&b.tgid)));
        kept.truncate(DVR_PROCS);
        kept.sort_by_key(|p| p.tgid);
    }
    Snapshot {
        procs: kept.into_iter().cloned().collect(),
        ..Snapshot {
            seq: snap.seq,
            now_ns: snap.now_ns,
            interval_ns: snap.interval_ns,
            elapsed_ns: snap.elapsed_ns,
            events: snap.events,
            disks: snap.disks.clone(),
            procs: Vec::new(),
            findings: snap.findings.clone(),
            dstate: snap.dstate.clone(),
            dstate_recent: snap.dstate_recent.clone(),
            dstate_sites: snap.dstate_sites,
            host: snap.host,
        }
    }
}

fn string_bytes(s: &str) -> usize {
    size_of::<String>() + s.len()
}

fn figures_heap(f: &ProcFigures) -> usize {
    let s = &f.sync;
    (f.write_sizes.len() + f.read_sizes.len()) * size_of::<(u32, u64)>()
        + s.files
            .iter()
            .map(|(p, _)| string_bytes(p) + 8)
            .sum::<usize>()
        + s.charged_from
            .iter()
            .chain(&s.on_behalf_of)
            .map(|p| size_of::<crate::model::Party>() + p.comm.len())
            .sum::<usize>()
        + s.kinds.len() * size_of::<(&str, u64)>()
        + f.dio.pads.len() * 16
        + f.dio.file.as_deref().map_or(0, str::len)
        + f.waits.heap_bytes()
}

/// Bytes a snapshot holds, heap included (an estimate that errs high: it counts every
/// string at its header size plus its length).
pub fn snapshot_bytes(snap: &Snapshot) -> usize {
    let procs: usize = snap
        .procs
        .iter()
        .map(|p| {
            size_of::<ProcRow>()
                + p.comm.len()
                + figures_heap(&p.interval)
                + p.since_start
                    .as_deref()
                    .map_or(0, |t| size_of::<ProcFigures>() + figures_heap(t))
                + p.devices
                    .iter()
                    .map(|d| size_of_val(d) + d.name.len())
                    .sum::<usize>()
                + p.recent_syncs
                    .iter()
                    .map(|c| size_of_val(c) + c.file.len())
                    .sum::<usize>()
                + p.io_limits.as_ref().map_or(0, |l| {
                    size_of_val(&**l)
                        + l.cgroup.len()
                        + l.limits
                            .iter()
                            .map(|x| size_of_val(x) + x.file.len())
                            .sum::<usize>()
                })
                + p.dirty_state
                    .as_ref()
                    .map_or(0, |d| size_of_val(&**d) + d.bdi.len())
        })
        .sum();
    let disks: usize = snap
        .disks
        .iter()
        .map(|d| size_of::<DiskRow>() + d.name.len())
        .sum();
    let findings: usize = snap
        .findings
        .iter()
        .map(|f| {
            size_of_val(f)
                + f.comm.len()
                + f.summary.len()
                + f.why.len()
                + f.fix.len()
                + f.files.iter().map(|s| string_bytes(s)).sum::<usize>()
                + f.evidence.len() * 48
        })
        .sum();
    let stacks = |stack: &[String]| stack.iter().map(|s| string_bytes(s)).sum::<usize>();
    let dstate: usize = snap
        .dstate
        .iter()
        .map(|d| size_of_val(d) + d.comm.len() + stacks(&d.stack))
        .chain(
            snap.dstate_recent
                .iter()
                .map(|e| size_of_val(e) + e.comm.len() + stacks(&e.stack)),
        )
        .sum();
    size_of::<Snapshot>() + procs + disks + findings + dstate
}

#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod tests;
