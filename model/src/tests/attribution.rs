//! Who is charged: write-back to the process that dirtied the pages, a process to its
//! cgroup, FUA writes to their process, a group to its members.

use super::*;

#[test]
fn write_back_is_charged_to_the_process_that_dirtied_the_pages() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut events = Vec::new();
    for i in 0..48 {
        let mut flush = io(
            900,
            "kworker/u8:3",
            LOOP0,
            Op::Write,
            1 << 20,
            i * MS,
            US,
            MS,
        );
        flush.kernel_thread = true;
        flush.dirtier = Some(Dirtier {
            tgid: 4242,
            comm: Comm::new("dd"),
        });
        events.push(flush);
    }
    // A flusher request whose pages nobody the probes saw dirtied stays the flusher's.
    let mut unknown = io(900, "kworker/u8:3", LOOP0, Op::Write, 4096, 60 * MS, US, MS);
    unknown.kernel_thread = true;
    events.push(unknown);
    // A sync call in progress meanwhile is not charged the write-back as journal.
    model.ingest_sync(&SyncCall {
        tgid: 77,
        tid: 77,
        comm: Comm::new("sync"),
        kind: SyncKind::Syncfs,
        fd: None,
        file: FileRef::NoFile,
        start_ns: 0,
        end_ns: 70 * MS,
        ret: 0,
        window_bytes: 0,
        window_writes: 0,
        addr: 0,
        fs_block_size: 0,
        dev: None,
        fs_dev: None,
        ino: 0,
        name: String::new(),
        dir: false,
    });
    for e in &events {
        model.ingest(e);
    }
    let snap = model.tick(&sample(1_000 * MS, &events));
    let row = |tgid: u32| snap.procs.iter().find(|p| p.tgid == tgid).unwrap();
    let (dd, flusher) = (row(4242), row(900));
    assert_eq!(dd.comm, "dd");
    assert_eq!(dd.interval.writeback_bytes, 48 << 20);
    assert_eq!(dd.interval.written_back_by[0].comm, "kworker/u8:3");
    assert_eq!(dd.interval.write_bytes, 0, "its own requests: none");
    assert_eq!(flusher.interval.write_bytes, (48 << 20) + 4096);
    assert_eq!(flusher.interval.wrote_back_bytes, 48 << 20);
    assert_eq!(flusher.interval.wrote_back_for[0].tgid, 4242);
    assert_eq!(
        dd.interval.write_bytes_caused() + flusher.interval.write_bytes_caused(),
        (48 << 20) + 4096,
        "each byte counted once, on the process that caused it"
    );
    assert_eq!(flusher.interval.write_bytes_caused(), 4096);
    let sync = row(77);
    assert_eq!(
        sync.interval.sync.charged_write_bytes, 4096,
        "only the unknown request"
    );
}

#[test]
fn cgroup_names_are_bounded_and_the_active_ones_come_back() {
    let mut model = Aggregator::new(Settings::default(), 0);
    let mut last = None;
    // A node where containers come and go: 100 new cgroups every interval.
    for tick in 0..100u64 {
        let cgroups = (0..100)
            .map(|i| {
                let id = tick * 100 + i;
                CgroupInfo {
                    id,
                    path: format!("/docker/{id}"),
                    name: format!("c{id}"),
                }
            })
            .collect();
        let events = [BlockIo {
            cgroup: tick * 100,
            ..io(1, "dd", LOOP0, Op::Read, 4096, tick * 1000 * MS, 0, US)
        }];
        for e in &events {
            model.ingest(e);
        }
        last = Some(model.tick(&KernelSample {
            cgroups,
            ..sample((tick + 1) * 1000 * MS, &events)
        }));
        assert!(model.cgroup_count() <= 4096, "{}", model.cgroup_count());
    }
    let dd = &last.unwrap().procs[0];
    assert_eq!(dd.cgroup.as_ref().map(|c| c.name.as_str()), Some("c9900"));
}

#[test]
fn fua_writes_are_counted_per_process_where_the_disk_honours_them() {
    let mut events = vec![];
    for (i, dev) in [NVME, NVME, NVME, LOOP0].into_iter().enumerate() {
        let mut e = io(42, "db", dev, Op::Write, 4096, i as u64 * MS, US, 20 * US);
        e.flags = iotop_bpf_common::block::FLAG_FUA;
        events.push(e);
    }
    events.push(io(42, "db", NVME, Op::Write, 4096, 9 * MS, US, 20 * US));
    let mut model = Aggregator::new(Settings::default(), 0);
    for e in &events {
        model.ingest(e);
    }
    let geometry = |dev, fua| DiskGeometry {
        dev,
        logical_block_size: 512,
        physical_block_size: 4096,
        minimum_io_size: 4096,
        fua,
    };
    let snap = model.tick(&KernelSample {
        geometry: vec![geometry(NVME, true), geometry(LOOP0, false)],
        ..sample(1_000 * MS, &events)
    });
    let proc = snap.procs.iter().find(|p| p.tgid == 42).unwrap();
    assert_eq!(
        proc.interval.fua_writes, 3,
        "the loop device does not honour FUA"
    );
    assert_eq!(proc.total().fua_writes, 3);
    let on = |dev| proc.devices.iter().find(|d| d.dev == dev).unwrap();
    assert_eq!((on(NVME).fua_writes, on(NVME).fua_supported), (3, true));
    assert_eq!((on(LOOP0).fua_writes, on(LOOP0).fua_supported), (1, false));
    let nvme = snap.disks.iter().find(|d| d.dev == NVME).unwrap();
    assert!(nvme.geometry.fua);
}

#[test]
fn a_group_of_processes_sums_its_members() {
    let snap = fixtures::demo_snapshot();
    let members: Vec<&ProcFigures> = snap.procs.iter().map(|p| &p.interval).collect();
    let sum = ProcFigures::sum(members.iter().copied());
    let total = |f: fn(&ProcFigures) -> u64| members.iter().map(|m| f(m)).sum::<u64>();
    assert_eq!(sum.reads, total(|f| f.reads));
    assert_eq!(sum.writes, total(|f| f.writes));
    assert_eq!(
        sum.write_bytes_caused(),
        total(ProcFigures::write_bytes_caused)
    );
    assert_eq!(sum.sync.syncs, total(|f| f.sync.syncs));
    assert_eq!(sum.dstate_ns, total(|f| f.dstate_ns));
    assert_eq!(sum.total_hist.total(), total(|f| f.total_hist.total()));
    assert_eq!(sum.device_hist.total(), total(|f| f.device_hist.total()));
    assert_eq!(sum.latency.count, sum.total_hist.total());
    let max = members.iter().map(|m| m.latency.max_ns).max().unwrap();
    assert_eq!(sum.latency.max_ns, max);
    assert!(sum.latency.p99_ns <= max && sum.latency.p50_ns > 0);
    assert!(sum.active());
    assert!(!ProcFigures::default().active());
}
