//! Aggregation mode end to end (issue 20): past a rate of requests the probes sum plain
//! requests per (process, disk) in the kernel instead of streaming each. The threshold is
//! lowered here (`IOTOP_BPF_AGGREGATE_ABOVE`) so that a loop device's fio switches it: the
//! per-process counts must still equal /proc/diskstats and what fio was told to do, agree
//! with streaming mode on the same job, and the findings that need requests one by one must
//! still be raised.

use std::process::Command;

use iotop_bpf_integration::{
    JsonRun, LoopFs, dio_tail, diskstats_reads_writes, findings_of, num, process_on_device,
    require_root, sh, workload,
};
use serde_json::Value;

/// Reads per fio thread (its 64 MiB, 4 KiB at a time, each block once), and threads.
const IOS: u64 = 16_384;
const THREADS: u64 = 2;

/// fio in one process (`--thread`): random 4 KiB direct reads of a written file.
fn fio_reads(file: &std::path::Path) -> u32 {
    let mut child = Command::new("fio")
        .args([
            "--name=agg",
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=psync",
            "--thread",
            "--randrepeat=1",
            "--size=64m",
            "--output=/dev/null",
        ])
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--numjobs={THREADS}"))
        .spawn()
        .expect("run fio");
    let pid = child.id();
    assert!(child.wait().unwrap().success(), "fio failed");
    pid
}

struct Run {
    intervals: Vec<Value>,
    fio: u32,
    /// Reads /proc/diskstats counted on the loop device over the run.
    disk_reads: u64,
}

fn run(fs: &LoopFs, file: &std::path::Path, above: &str) -> Run {
    let tool = JsonRun::start_with_env(&[], &[("IOTOP_BPF_AGGREGATE_ABOVE", above)]);
    let before = diskstats_reads_writes(&fs.name);
    let fio = fio_reads(file);
    std::thread::sleep(std::time::Duration::from_millis(700));
    let after = diskstats_reads_writes(&fs.name);
    Run {
        intervals: tool.stop(),
        fio,
        disk_reads: after.0 - before.0,
    }
}

/// Reads of disk `dev` in the tool's disk rows (the kernel's per-disk totals), summed.
fn disk_reads(intervals: &[Value], dev: &str) -> u64 {
    intervals
        .iter()
        .flat_map(|i| i["disks"].as_array().unwrap().iter())
        .filter(|d| d["dev"] == dev)
        .map(|d| num(d, "reads"))
        .sum()
}

/// The tool's count of fio's reads against /proc/diskstats and fio's own: equal, but for a
/// completion the probes do not see, which befalls 1-2 of these 32,768 reads in one run out
/// of four here, in both modes (docs/overhead.md). The kernel's per-disk totals miss it too,
/// so it happens before the probes' bookkeeping, which is what this test is about.
fn assert_within_diskstats(tool: u64, diskstats: u64, fio: u64) {
    // fio's reads and nothing else (two adjacent ones may merge into one request).
    assert!(
        diskstats <= fio && fio - diskstats <= 4,
        "/proc/diskstats counted {diskstats} reads for fio's {fio}"
    );
    assert!(
        tool <= diskstats && diskstats - tool <= diskstats / 10_000,
        "{tool} reads counted of {diskstats} (/proc/diskstats)"
    );
}

/// The median (us) of the process's requests over its whole life, from its last entry.
fn median(intervals: &[Value], pid: u32) -> u64 {
    let last = intervals
        .iter()
        .flat_map(|i| i["processes"].as_array().unwrap().iter())
        .rfind(|p| p["pid"].as_u64() == Some(u64::from(pid)))
        .expect("fio has a row");
    num(&last["totals"]["io_latency_us"], "p50")
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn aggregation_keeps_process_figures_exact_and_agrees_with_streaming() {
    if !require_root("aggregation_keeps_process_figures_exact_and_agrees_with_streaming") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let file = fs.path("data");
    sh(
        "dd",
        &[
            "if=/dev/urandom",
            &format!("of={}", file.display()),
            "bs=1M",
            "count=64",
            "conv=fsync",
        ],
    );

    // Aggregating from the first interval on.
    let summed = run(&fs, &file, "0");
    let mine = process_on_device(&summed.intervals, summed.fio, &fs.dev);
    // Every read the kernel's disk totals counted is fio's, streamed or summed: exact.
    assert_eq!(mine.reads, disk_reads(&summed.intervals, &fs.dev));
    assert_eq!(mine.read_bytes, mine.reads * 4096);
    assert_within_diskstats(mine.reads, summed.disk_reads, THREADS * IOS);
    let modes: Vec<&str> = summed
        .intervals
        .iter()
        .map(|i| i["events"]["mode"].as_str().unwrap())
        .collect();
    assert!(modes.iter().all(|m| *m == "aggregating"), "{modes:?}");
    let aggregated: u64 = summed
        .intervals
        .iter()
        .map(|i| num(&i["events"], "aggregated"))
        .sum();
    let sampled: u64 = summed
        .intervals
        .iter()
        .map(|i| num(&i["events"], "sampled"))
        .sum();
    // Nearly every read summed, one in 64 of them streamed as the sample.
    assert!(
        aggregated + sampled >= THREADS * IOS * 9 / 10,
        "{aggregated} summed + {sampled} sampled of {}",
        THREADS * IOS
    );
    let per_sample = aggregated as f64 / sampled.max(1) as f64;
    assert!(
        (55.0..72.0).contains(&per_sample),
        "{aggregated} / {sampled}"
    );
    let received: u64 = summed
        .intervals
        .iter()
        .map(|i| num(&i["events"], "received"))
        .sum();
    eprintln!(
        "aggregating: {received} records received, {aggregated} reads summed, {sampled} sampled, for {} reads",
        THREADS * IOS
    );
    assert!(
        received < THREADS * IOS / 4,
        "{received} records streamed for {} reads",
        THREADS * IOS
    );

    // The same job streamed: the same counts.
    let streamed = run(&fs, &file, "never");
    let theirs = process_on_device(&streamed.intervals, streamed.fio, &fs.dev);
    assert_eq!(theirs.reads, disk_reads(&streamed.intervals, &fs.dev));
    assert_within_diskstats(theirs.reads, streamed.disk_reads, THREADS * IOS);
    assert!(
        streamed
            .intervals
            .iter()
            .all(|i| i["events"]["mode"] == "streaming")
    );
    // Latencies, in the same run: the process's median, from the summed quarter-octave
    // slots, lies in the octave of the disk's exact median (the kernel's per-disk log2
    // histogram; fio is the disk's only reader), give or take a slot.
    let p50 = median(&summed.intervals, summed.fio);
    let (low, high) = disk_median_octave(&summed.intervals, &fs.dev);
    assert!(
        p50 * 5 >= low * 4 && p50 * 4 <= high * 5,
        "fio's p50 {p50} us outside the disk's median octave {low}-{high} us"
    );
}

/// The octave `[low, high)` us holding the median of the disk's reads and writes, from the
/// kernel's per-disk histogram summed over the intervals.
fn disk_median_octave(intervals: &[Value], dev: &str) -> (u64, u64) {
    let mut buckets: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for disk in intervals
        .iter()
        .flat_map(|i| i["disks"].as_array().unwrap().iter())
        .filter(|d| d["dev"] == dev)
    {
        for b in disk["histogram_us"].as_array().unwrap() {
            *buckets.entry(num(b, "le")).or_default() += num(b, "count");
        }
    }
    let total: u64 = buckets.values().sum();
    let mut seen = 0;
    for (&le, &n) in &buckets {
        seen += n;
        if seen * 2 >= total {
            return (le / 2, le);
        }
    }
    panic!("no requests on {dev}")
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn the_switch_comes_at_the_rate_and_the_findings_hold_while_aggregating() {
    if !require_root("the_switch_comes_at_the_rate_and_the_findings_hold_while_aggregating") {
        return;
    }
    let ext4 = LoopFs::new("ext4", 256);
    let xfs = LoopFs::new("xfs", 512);
    let file = ext4.path("data");
    sh(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", file.display()),
            "bs=1M",
            "count=64",
            "conv=fsync",
        ],
    );
    // A threshold fio passes and an idle host does not: streaming, then aggregating.
    let tool = JsonRun::start_with_env(&[], &[("IOTOP_BPF_AGGREGATE_ABOVE", "2000")]);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    fio_reads(&file);
    // lab001 and the XFS tail write while the mode is on: their requests are streamed (a
    // sync's own writes, the zeroing pads), so they are named as always.
    let lab001_dir = ext4.path("lab001");
    std::fs::create_dir_all(&lab001_dir).unwrap();
    let (lab001, _) = std::thread::scope(|s| {
        let reads = s.spawn(|| fio_reads(&file));
        let lab001 = workload(&[
            "lab001",
            "--dir",
            lab001_dir.to_str().unwrap(),
            "--count",
            "300",
        ]);
        reads.join().unwrap();
        lab001
    });
    let tail = std::thread::scope(|s| {
        let reads = s.spawn(|| fio_reads(&file));
        let tail = dio_tail(&xfs.path("dio"));
        reads.join().unwrap();
        tail
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let intervals = tool.stop();
    let modes: Vec<&str> = intervals
        .iter()
        .map(|i| i["events"]["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes.first(), Some(&"streaming"), "{modes:?}");
    assert!(modes.contains(&"aggregating"), "never switched: {modes:?}");
    let summed: u64 = intervals
        .iter()
        .map(|i| num(&i["events"], "aggregated"))
        .sum();
    assert!(summed > 0, "{modes:?}");
    assert!(
        !findings_of(&intervals, "write_amplification", lab001).is_empty(),
        "lab001 (pid {lab001}) not named while aggregating: {modes:?}"
    );
    assert!(
        !findings_of(&intervals, "sub_block_tail_write", tail).is_empty(),
        "dio-tail (pid {tail}) not named while aggregating: {modes:?}"
    );
}
