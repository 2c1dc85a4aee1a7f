use super::{fixtures::demo_history, *};
use crate::model::{Dev, fixtures::demo_snapshot};

fn full_hist(scale: u64) -> Log2Hist {
    let mut hist = Log2Hist::default();
    for (slot, n) in hist.slots.iter_mut().enumerate() {
        *n = scale * (slot as u64 + 1);
    }
    hist
}

/// A heavy interval: `disks` disks and `procs` busy processes, every latency slot used with
/// counts in the hundreds of thousands (varints of three bytes).
fn heavy_snapshot(seq: u64, disks: usize, procs: usize) -> Snapshot {
    let mut snap = demo_snapshot();
    snap.seq = seq;
    let disk = snap.disks[0].clone();
    snap.disks = (0..disks)
        .map(|i| {
            let mut d = disk.clone();
            d.dev = Dev::new(8, u32::try_from(i * 16).unwrap());
            d.name = format!("sd{i}");
            d.interval.total_hist = full_hist(10_000);
            d.interval.queue_hist = full_hist(10_000);
            d.interval.device_hist = full_hist(10_000);
            d
        })
        .collect();
    let proc = snap
        .procs
        .iter()
        .find(|p| p.comm == "lab001")
        .unwrap()
        .clone();
    snap.procs = (0..procs)
        .map(|i| {
            let mut p = proc.clone();
            p.tgid = 10_000 + u32::try_from(i).unwrap();
            p.comm = format!("worker-{i}");
            p.interval.total_hist = full_hist(10_000);
            p.interval.queue_hist = full_hist(10_000);
            p.interval.device_hist = full_hist(10_000);
            p.interval.sync.hist = full_hist(10_000);
            p.interval.read_bytes = 1 << 20;
            p
        })
        .collect();
    snap
}

#[test]
fn columns_round_trip_exactly() {
    let mut hist = Log2Hist::default();
    assert!(Column::of(&hist).is_empty());
    assert_eq!(Column::of(&hist).hist(), hist);
    hist.slots[3] = 1;
    hist.slots[4] = 127;
    hist.slots[5] = 128;
    hist.slots[9] = u64::from(u32::MAX) * 7;
    hist.slots[SLOTS - 1] = 1;
    let column = Column::of(&hist);
    assert_eq!(column.hist(), hist);
    assert_eq!(column.lo, 3);
    assert_eq!(usize::from(column.len), SLOTS - 3);
    assert_eq!(Column::of(&full_hist(10_000)).hist(), full_hist(10_000));
}

#[test]
fn history_is_bounded_in_intervals_and_bytes() {
    // The demo host: what a typical interval costs.
    let mut typical = History::default();
    for seq in 1..=1_000 {
        let mut snap = demo_snapshot();
        snap.seq = seq;
        typical.push(&snap, None);
    }
    let (frames, dvr) = typical.bytes();
    assert_eq!(typical.frames().len(), FRAMES);
    assert!(
        typical.kept() >= 150,
        "the DVR reaches back at least 2.5 minutes on a small host: {}",
        typical.kept()
    );
    eprintln!(
        "typical (the demo host: 2 disks, 7 processes): {} B per interval of compact history, {} B per kept snapshot; {} KiB + {} KiB for {FRAMES} intervals",
        frames / FRAMES,
        dvr / typical.kept(),
        frames >> 10,
        dvr >> 10
    );
    assert!(frames / FRAMES < 2_000, "{frames}");
    assert!(dvr <= DVR_BUDGET);

    // A heavy host: more disks and processes than kept, every slot busy.
    let mut heavy = History::default();
    for seq in 1..=1_000 {
        heavy.push(&heavy_snapshot(seq, 24, 200), Some(10_150));
    }
    let (frames, dvr) = heavy.bytes();
    let per_frame = frames / heavy.frames().len();
    eprintln!(
        "heavy (24 disks, 200 processes): {per_frame} B per interval of compact history ({} intervals kept), {} B per kept snapshot ({} kept)",
        heavy.frames().len(),
        dvr / heavy.kept(),
        heavy.kept()
    );
    assert!(frames <= FRAME_BUDGET, "{frames}");
    assert!(dvr <= DVR_BUDGET, "{dvr}");
    let newest = heavy.frames().back().unwrap();
    assert_eq!(newest.disks.len(), MAX_DISKS);
    assert_eq!(newest.procs.len(), MAX_PROCS);
    assert!(
        newest.proc(10_150).is_some(),
        "the pinned process is kept even when it is not among the busiest"
    );
    // The bound is the sum of both budgets, whatever the host.
    assert!(frames + dvr <= FRAME_BUDGET + DVR_BUDGET);
}

#[test]
fn the_dvr_steps_back_to_the_oldest_kept_snapshot() {
    let history = demo_history();
    let (newest, back) = history.snapshot_back(0).unwrap();
    assert_eq!((newest.seq, back), (90, 0));
    let (snap, back) = history.snapshot_back(10).unwrap();
    assert_eq!((snap.seq, back), (80, 10));
    let (oldest, back) = history.snapshot_back(10_000).unwrap();
    assert_eq!((oldest.seq, back), (1, 89));
    assert_eq!(history.snapshot(45).map(|s| s.seq), Some(45));
    assert!(history.snapshot(91).is_none());
    assert!(History::default().snapshot_back(0).is_none());
}

#[test]
fn kept_snapshots_hold_the_active_processes_only() {
    let mut snap = demo_snapshot();
    let mut idle = snap.procs[0].clone();
    idle.tgid = 1;
    idle.comm = "idle".into();
    idle.interval = crate::model::ProcFigures::default();
    snap.procs.insert(0, idle);
    let mut history = History::default();
    history.push(&snap, None);
    let kept = history.snapshot(snap.seq).unwrap();
    assert_eq!(kept.procs.len(), snap.procs.len() - 1);
    assert!(snapshot_bytes(kept) < snapshot_bytes(&snap));
    // A host with more busy processes than kept: the busiest stay.
    let heavy = heavy_snapshot(7, 1, DVR_PROCS + 30);
    let mut history = History::default();
    history.push(&heavy, None);
    let kept = history.snapshot(7).unwrap();
    assert_eq!(kept.procs.len(), DVR_PROCS);
    assert!(kept.procs.iter().all(|p| p.comm != "idle"));
}

#[test]
fn frames_until_ends_at_the_shown_interval() {
    let history = demo_history();
    let seqs: Vec<u64> = history.frames_until(45, 5).map(|f| f.seq).collect();
    assert_eq!(seqs, [41, 42, 43, 44, 45]);
    let seqs: Vec<u64> = history.frames_until(3, 5).map(|f| f.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    let loop0 = Dev::new(7, 0);
    let spike = history
        .frames_until(45, 1)
        .next()
        .unwrap()
        .disk(loop0)
        .unwrap();
    let calm = history
        .frames_until(30, 1)
        .next()
        .unwrap()
        .disk(loop0)
        .unwrap();
    assert!(spike.p99_ns >= 16 * calm.p99_ns / 2, "{spike:?} {calm:?}");
}

#[test]
fn a_new_timeline_starts_a_new_history() {
    let mut history = demo_history();
    let mut snap = demo_snapshot();
    snap.seq = 1;
    history.push(&snap, None);
    assert_eq!(history.frames().len(), 1);
    assert_eq!(history.kept(), 1);
}
