//! A process's life in the model: it leaves the kernel's map, exits, waits for its sync to
//! settle, goes idle; the model forgets it, and only then.

use super::*;

#[test]
fn a_process_that_left_the_kernel_map_starts_again_from_zero() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let events = [io(1, "a", LOOP0, Op::Read, 4096, 0, 0, US)];
    model.ingest(&events[0]);
    let mut s = sample(1_000 * MS, &events);
    s.logical_writes = vec![(1, 1000)];
    assert_eq!(model.tick(&s).procs[0].interval.logical_write_bytes, 1000);
    // The LRU map dropped it, then it wrote again: 10 bytes, not a negative or huge delta.
    s.now_ns = 2_000 * MS;
    s.logical_writes = vec![];
    model.tick(&s);
    model.ingest(&io(1, "a", LOOP0, Op::Read, 4096, 2_100 * MS, 0, US));
    s.now_ns = 3_000 * MS;
    s.logical_writes = vec![(1, 10)];
    assert_eq!(model.tick(&s).procs[0].interval.logical_write_bytes, 10);
}

#[test]
fn a_process_that_only_writes_to_the_page_cache_has_a_row_even_after_it_exits() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut baseline = sample(0, &[]);
    baseline.kind = SampleKind::Baseline;
    model.apply(&Input::Sample(Box::new(baseline)));
    // tar's child wrote 6 MiB and exited before the interval closed; it never reached a
    // disk itself (write-back will) and never synced.
    model.apply(&Input::Exit(crate::ProcessExit {
        tgid: 77,
        ts_ns: 500 * MS,
    }));
    let mut s = sample(1_000 * MS, &[]);
    s.logical_writes = vec![(77, 6 << 20), (78, 4096)];
    s.writers = vec![(77, Comm::new("tar"))];
    let snap = model.tick(&s);
    let tar = snap
        .procs
        .iter()
        .find(|p| p.tgid == 77)
        .expect("a row for the writer");
    assert_eq!(tar.interval.logical_write_bytes, 6 << 20);
    assert_eq!(tar.comm, "tar");
    assert!(
        tar.exited,
        "its exit, seen before it had a row, still counts"
    );
    assert!(
        snap.procs.iter().all(|p| p.tgid != 78),
        "no command known: no row rather than a nameless one"
    );
    s.now_ns = 2_000 * MS;
    s.logical_writes = vec![];
    s.writers = vec![];
    let next = model.tick(&s);
    assert!(
        next.procs.iter().all(|p| p.tgid != 77),
        "reported once, then forgotten"
    );
}

/// An fsync of `file` by a single-threaded process, one write of `window` bytes before it.
fn fsync_call(
    tgid: u32,
    comm: &str,
    start_ns: u64,
    end_ns: u64,
    window: u64,
    file: &str,
) -> SyncCall {
    SyncCall {
        tgid,
        tid: tgid,
        comm: Comm::new(comm),
        kind: SyncKind::Fsync,
        fd: Some(3),
        start_ns,
        end_ns,
        ret: 0,
        window_bytes: window,
        window_writes: 1,
        addr: 0,
        file: FileRef::Path(file.into()),
        dev: Some(LOOP0),
        fs_block_size: 4096,
        fs_dev: None,
        ino: 0,
        name: String::new(),
        dir: false,
    }
}

#[test]
fn exited_processes_are_reported_once_then_forgotten() {
    let mut model = Aggregator::new(Settings::default(), 0);
    model.ingest(&io(7, "short", LOOP0, Op::Write, 4096, 10 * MS, 0, US));
    model.apply(&Input::Exit(ProcessExit {
        tgid: 7,
        ts_ns: 20 * MS,
    }));
    let snap = model.tick(&sample(1_000 * MS, &[]));
    let row = snap
        .procs
        .iter()
        .find(|p| p.tgid == 7)
        .expect("its last interval");
    assert!(row.exited);
    assert_eq!(row.interval.writes, 1);
    assert_eq!(model.process_count(), 0, "forgotten once reported");
}

#[test]
fn an_exited_process_waiting_for_its_sync_to_settle_has_a_row_only_when_it_does() {
    // Its fsync ends 900 ms into the interval, so it settles (SETTLE_NS later) only at the
    // third close: the second has nothing of it to show.
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut w = io(7, "short", LOOP0, Op::Write, 4096, 880 * MS, 0, US);
    w.flags = iotop_bpf_common::block::FLAG_IN_SYNC;
    model.ingest(&w);
    model.ingest_sync(&fsync_call(
        7,
        "short",
        870 * MS,
        900 * MS,
        4096,
        "/tmp/short",
    ));
    model.apply(&Input::Exit(ProcessExit {
        tgid: 7,
        ts_ns: 910 * MS,
    }));
    let rows = |snap: &Snapshot| snap.procs.iter().filter(|p| p.tgid == 7).count();
    let first = model.tick(&sample(1_000 * MS, &[]));
    assert_eq!(rows(&first), 1, "the row that says it exited");
    assert!(first.procs.iter().any(|p| p.tgid == 7 && p.exited));
    // At 1.4 s the call is not settled yet (0.5 s < SETTLE_NS after it ended).
    let quiet = model.tick(&sample(1_400 * MS, &[]));
    assert_eq!(rows(&quiet), 0, "nothing of it happened in this interval");
    assert_eq!(model.process_count(), 1, "kept for its call");
    let settled = model.tick(&sample(2_400 * MS, &[]));
    let row = settled
        .procs
        .iter()
        .find(|p| p.tgid == 7)
        .expect("a row with its settled call");
    assert_eq!(row.interval.sync.large.calls, 1);
    assert_eq!(row.total().sync.large.calls, 1);
    assert_eq!(row.total().writes, 1, "its totals since start");
    assert_eq!(model.process_count(), 0);
}

#[test]
fn thirty_thousand_short_lived_processes_leave_nothing_behind() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut t = 0;
    for second in 0..30u64 {
        for i in 0..1_000u32 {
            let tgid = 10_000 + u32::try_from(second).unwrap() * 1_000 + i;
            t += 30 * US;
            let mut w = io(tgid, "job", LOOP0, Op::Write, 4096, t, 0, 20 * US);
            w.flags = iotop_bpf_common::block::FLAG_IN_SYNC;
            model.ingest(&w);
            model.ingest(&io(
                tgid,
                "job",
                LOOP0,
                Op::Read,
                4096,
                t + 5 * US,
                0,
                20 * US,
            ));
            model.ingest(&io(
                5,
                "jbd2/loop0-8",
                LOOP0,
                Op::Write,
                8192,
                t + 6 * US,
                0,
                20 * US,
            ));
            model.ingest_sync(&fsync_call(
                tgid,
                "job",
                t,
                t + 25 * US,
                100,
                &format!("/tmp/job-{tgid}"),
            ));
            model.apply(&Input::Exit(ProcessExit {
                tgid,
                ts_ns: t + 28 * US,
            }));
        }
        model.tick(&sample((second + 1) * 1_000 * MS, &[]));
    }
    model.tick(&KernelSample {
        kind: SampleKind::Final,
        ..sample(31_000 * MS, &[])
    });
    assert!(
        model.process_count() <= 2,
        "{} processes kept after they all exited",
        model.process_count()
    );
}

#[test]
fn idle_processes_are_forgotten() {
    let settings = Settings {
        forget_after_ns: 5_000 * MS,
        max_procs: 2,
    };
    let mut model = Aggregator::new(settings, 0);
    for (tgid, at) in [(1, 0), (2, 100 * MS), (3, 200 * MS)] {
        model.ingest(&io(tgid, "x", LOOP0, Op::Read, 512, at, 0, US));
    }
    let snap = model.tick(&sample(1_000 * MS, &[]));
    assert_eq!(
        snap.procs.len(),
        3,
        "the snapshot still shows this interval's processes"
    );
    assert_eq!(
        model.process_count(),
        2,
        "the oldest goes when over max_procs"
    );
    let snap = model.tick(&sample(2_000 * MS, &[]));
    let pids: Vec<u32> = snap.procs.iter().map(|p| p.tgid).collect();
    assert_eq!(pids, vec![2, 3], "the oldest goes when over max_procs");
    // pid 2 has now been idle for 5.05 s: shown in this snapshot, gone from the next.
    let snap = model.tick(&sample(5_150 * MS, &[]));
    assert_eq!(snap.procs.len(), 2);
    let snap = model.tick(&sample(5_180 * MS, &[]));
    let pids: Vec<u32> = snap.procs.iter().map(|p| p.tgid).collect();
    assert_eq!(pids, vec![3]);
}

#[test]
fn same_events_give_the_same_snapshot() {
    let events: Vec<_> = (0..200u64)
        .map(|i| {
            io(
                (i % 5) as u32,
                "w",
                LOOP0,
                Op::Write,
                4096,
                i * MS,
                i * US,
                2 * i * US,
            )
        })
        .collect();
    assert_eq!(run(&events, 1_000 * MS), run(&events, 1_000 * MS));
}
