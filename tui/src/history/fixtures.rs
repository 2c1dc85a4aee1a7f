//! A deterministic past for render and key tests: 90 one-second intervals of the demo host,
//! whose loop0 device time jumps 16x between intervals 40 and 55 (with tasks blocked on I/O,
//! iowait and I/O pressure up on the host) and whose traffic swells and ebbs, so sparklines
//! and heat maps have a shape to show.

use super::History;
use crate::model::{Latency, Log2Hist, Snapshot, fixtures::demo_snapshot};

pub const INTERVALS: u64 = 90;
const SEC: u64 = 1_000_000_000;

/// `hist` moved up by `by` log2 slots (16x slower for 4).
fn shifted(hist: &Log2Hist, by: usize) -> Log2Hist {
    let mut out = Log2Hist::default();
    for (slot, &n) in hist.slots.iter().enumerate() {
        out.slots[(slot + by).min(out.slots.len() - 1)] += n;
    }
    out
}

fn scaled(hist: &Log2Hist, num: u64, den: u64) -> Log2Hist {
    let mut out = *hist;
    for n in &mut out.slots {
        *n = *n * num / den;
    }
    out
}

fn slower(lat: Latency, factor: u64) -> Latency {
    Latency {
        mean_ns: lat.mean_ns * factor,
        p50_ns: lat.p50_ns * factor,
        p99_ns: lat.p99_ns * factor,
        p999_ns: lat.p999_ns * factor,
        max_ns: lat.max_ns * factor,
        ..lat
    }
}

/// Interval `seq` (1-based) of the fixture.
pub fn snapshot_at(seq: u64) -> Snapshot {
    let mut snap = demo_snapshot();
    snap.seq = seq;
    snap.interval_ns = SEC;
    snap.elapsed_ns = seq * SEC;
    snap.now_ns = seq * SEC;
    // Traffic swells to 2x around the middle and ebbs: a triangle over the 90 intervals.
    let swell = 10 + 10 * 45u64.saturating_sub(seq.abs_diff(45)) / 45;
    let spike = (40..55).contains(&seq);
    for disk in &mut snap.disks {
        let f = &mut disk.interval;
        for n in [
            &mut f.reads,
            &mut f.writes,
            &mut f.read_bytes,
            &mut f.write_bytes,
        ] {
            *n = *n * swell / 10;
        }
        f.total_hist = scaled(&f.total_hist, swell, 10);
        f.queue_hist = scaled(&f.queue_hist, swell, 10);
        f.device_hist = scaled(&f.device_hist, swell, 10);
        if spike && disk.name == "loop0" {
            f.device_hist = shifted(&f.device_hist, 4);
            f.total_hist = shifted(&f.total_hist, 4);
            f.device = slower(f.device, 16);
            f.latency = slower(f.latency, 16);
        }
    }
    if spike {
        // The host feels it: tasks blocked on I/O, iowait and I/O pressure up.
        snap.host.procs_blocked = Some(4);
        snap.host.iowait_pct = Some(38.0);
        snap.host.psi_io_some_avg10 = Some(41.5);
        snap.host.psi_io_full_avg10 = Some(22.0);
    }
    for proc in &mut snap.procs {
        let f = &mut proc.interval;
        if spike && proc.comm == "lab001" {
            f.sync.hist = shifted(&f.sync.hist, 3);
            f.sync.latency = slower(f.sync.latency, 8);
            f.device_hist = shifted(&f.device_hist, 4);
        }
    }
    snap
}

/// The fixture's history, every interval pushed.
pub fn demo_history() -> History {
    let mut history = History::default();
    for seq in 1..=INTERVALS {
        history.push(&snapshot_at(seq), None);
    }
    history
}
