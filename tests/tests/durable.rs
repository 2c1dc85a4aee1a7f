//! Every way to make data durable counts as a sync, end to end: writes on `O_DSYNC` and
//! `O_SYNC` files (dd, Python) and io_uring fsyncs (fio), on loop-backed ext4 and XFS, with the
//! real probes.

use std::{
    collections::BTreeMap,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use iotop_bpf_integration::{
    JsonRun, LoopFs, binary, entries_of, findings_of, num, require_root, sh, sync_cost,
};
use serde_json::Value;

/// Runs `program args` to completion; its pid.
fn run(program: &str, args: &[&str]) -> u32 {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e}"));
    let pid = child.id();
    let status = child.wait().unwrap();
    assert!(status.success(), "{program} {args:?}: {status}");
    pid
}

/// Calls per kind over every interval of `pid`.
fn kinds_of(intervals: &[Value], pid: u32) -> BTreeMap<String, u64> {
    let mut kinds = BTreeMap::new();
    for p in entries_of(intervals, pid) {
        for (kind, n) in p["sync_kinds"].as_object().unwrap() {
            *kinds.entry(kind.clone()).or_default() += n.as_u64().unwrap();
        }
    }
    kinds
}

fn sum(intervals: &[Value], pid: u32, field: &str) -> u64 {
    entries_of(intervals, pid)
        .iter()
        .map(|p| num(p, field))
        .sum()
}

/// A Python writer of `count` `size`-byte records on a file opened with `flag`.
fn python_writer(path: &Path, flag: &str, count: u32, size: u32) -> u32 {
    run(
        "python3",
        &[
            "-c",
            &format!(
                "import os\nfd = os.open({path:?}, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.{flag}, 0o644)\nfor _ in range({count}):\n    os.write(fd, b'r' * {size})\nos.close(fd)\n",
                path = path.to_str().unwrap()
            ),
        ],
    )
}

/// dd and Python writing 128-byte records on O_DSYNC files: each write is one sync of kind
/// `O_DSYNC write` (O_SYNC: `O_SYNC write`), the synced payload is the records, and the
/// pattern is named `write_amplification`, like fsynced 128-byte writes are.
fn small_o_dsync_writes_on(fs_kind: &str) {
    const N: u64 = 300;
    let fs = LoopFs::new(fs_kind, 512);
    let run_ = JsonRun::start(&[]);
    let dd_out = fs.path("dd.out");
    let dd = run(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", dd_out.display()),
            "bs=128",
            &format!("count={N}"),
            "oflag=dsync",
            "status=none",
        ],
    );
    let py = python_writer(&fs.path("py.log"), "O_DSYNC", 300, 128);
    let osync = run(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", fs.path("osync.out").display()),
            "bs=128",
            "count=50",
            "oflag=sync",
            "status=none",
        ],
    );
    // pwritev2 with RWF_DSYNC on an ordinary fd: each call syncs, like an O_DSYNC write.
    let rwf = run(
        "python3",
        &[
            "-c",
            &format!(
                "import os\nfd = os.open({path:?}, os.O_WRONLY | os.O_CREAT, 0o644)\nfor i in range(100):\n    os.pwritev(fd, [b'r' * 128], i * 128, os.RWF_DSYNC)\nos.close(fd)\n",
                path = fs.path("rwf.log").to_str().unwrap()
            ),
        ],
    );
    // Ordinary buffered writes: no sync of any kind.
    let plain = run(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", fs.path("plain.out").display()),
            "bs=128",
            "count=3000",
            "status=none",
        ],
    );
    std::thread::sleep(Duration::from_millis(1_500));
    let intervals = run_.stop();

    for (who, pid, file) in [("dd", dd, "dd.out"), ("python3", py, "py.log")] {
        check_o_dsync_writer(&intervals, fs_kind, who, pid, file, N);
    }
    assert_eq!(
        kinds_of(&intervals, rwf),
        BTreeMap::from([("O_DSYNC write".to_string(), 100)]),
        "pwritev2(RWF_DSYNC) on {fs_kind}"
    );
    assert_eq!(sum(&intervals, rwf, "sync_window_bytes"), 100 * 128);
    assert_eq!(
        kinds_of(&intervals, osync),
        BTreeMap::from([("O_SYNC write".to_string(), 50)]),
        "dd oflag=sync on {fs_kind}"
    );
    assert!(
        kinds_of(&intervals, plain).is_empty(),
        "buffered writes on {fs_kind} are no syncs"
    );
    assert!(findings_of(&intervals, "write_amplification", plain).is_empty());

    // The loop device does not honour FUA: the JSON says so, as sysfs does, and no process
    // is said to have done FUA writes on it.
    check_fua(&intervals, &fs, [dd, py, rwf, osync, plain]);
}

/// A writer of `n` 128-byte O_DSYNC records to `file`: each write counted once, as an
/// O_DSYNC write, with its payload, its blocks and its latency, and named
/// write_amplification.
fn check_o_dsync_writer(
    intervals: &[Value],
    fs_kind: &str,
    who: &str,
    pid: u32,
    file: &str,
    n: u64,
) {
    assert_eq!(
        kinds_of(intervals, pid),
        BTreeMap::from([("O_DSYNC write".to_string(), n)]),
        "{who} on {fs_kind}: every write counted once, as an O_DSYNC write"
    );
    assert_eq!(sum(intervals, pid, "syncs"), n, "{who} on {fs_kind}: syncs");
    assert_eq!(
        sum(intervals, pid, "sync_window_bytes"),
        n * 128,
        "{who} on {fs_kind}: the synced payload is the records"
    );
    assert!(
        sum(intervals, pid, "sync_write_bytes") >= n * 512,
        "{who} on {fs_kind}: the blocks each write synced are its own writes"
    );
    assert!(
        entries_of(intervals, pid)
            .iter()
            .any(|p| num(&p["sync_latency_us"], "max") > 0),
        "{who} on {fs_kind}: the latency histogram is fed"
    );
    let found = findings_of(intervals, "write_amplification", pid);
    assert!(
        !found.is_empty(),
        "{who} on {fs_kind}: no write_amplification: {intervals:?}"
    );
    let f = found.last().unwrap();
    let summary = f["summary"].as_str().unwrap();
    eprintln!(
        "{fs_kind} {who}: kinds {:?}, payload {} B, own writes {} B; {summary}",
        kinds_of(intervals, pid),
        sum(intervals, pid, "sync_window_bytes"),
        sum(intervals, pid, "sync_write_bytes"),
    );
    assert!(
        summary.contains("128 B O_DSYNC writes"),
        "{who} on {fs_kind}: {summary}"
    );
    assert!(summary.contains(file), "names the file: {summary}");
    assert_eq!(f["evidence"]["sync_kind"], "O_DSYNC write", "{f}");
    assert!(
        f["evidence"]["amplification"].as_f64().unwrap() >= 4.0,
        "{f}"
    );
    assert!(f["hint"].as_str().unwrap().contains("O_DSYNC"), "{f}");
}

/// The disk's FUA flag in the JSON is sysfs's; on a disk that does not honour FUA, no
/// process of `pids` is said to have done FUA writes.
fn check_fua(intervals: &[Value], fs: &LoopFs, pids: [u32; 5]) {
    let sysfs = std::fs::read_to_string(format!("/sys/block/{}/queue/fua", fs.name)).unwrap();
    for i in intervals {
        for d in i["disks"].as_array().unwrap() {
            if d["name"] == fs.name.as_str() {
                assert_eq!(d["fua"].as_bool(), Some(sysfs.trim() == "1"), "{d}");
            }
        }
    }
    if sysfs.trim() == "0" {
        for pid in pids {
            assert_eq!(sum(intervals, pid, "fua_writes"), 0);
        }
    }
}

/// io_uring syncs that may complete before the probes that end them are attached (on the
/// first one seen, with an immediate wakeup of the reader): 2% of fio's 511.
const LOST_BEFORE_ATTACH: u64 = 10;

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn small_o_dsync_writes_are_syncs_named_write_amplification_on_ext4() {
    if !require_root("small_o_dsync_writes_are_syncs_named_write_amplification_on_ext4") {
        return;
    }
    small_o_dsync_writes_on("ext4");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn small_o_dsync_writes_are_syncs_named_write_amplification_on_xfs() {
    if !require_root("small_o_dsync_writes_are_syncs_named_write_amplification_on_xfs") {
        return;
    }
    small_o_dsync_writes_on("xfs");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn whole_block_o_dsync_writes_are_counted_and_not_amplified() {
    if !require_root("whole_block_o_dsync_writes_are_counted_and_not_amplified") {
        return;
    }
    let fs = LoopFs::new("xfs", 512);
    let run_ = JsonRun::start(&[]);
    let pid = python_writer(&fs.path("blocks"), "O_DSYNC", 200, 65_536);
    std::thread::sleep(Duration::from_millis(1_500));
    let intervals = run_.stop();
    assert_eq!(
        kinds_of(&intervals, pid),
        BTreeMap::from([("O_DSYNC write".to_string(), 200)])
    );
    assert_eq!(sum(&intervals, pid, "sync_window_bytes"), 200 * 65_536);
    assert!(findings_of(&intervals, "write_amplification", pid).is_empty());
    assert!(findings_of(&intervals, "sync_storm", pid).is_empty());
}

/// fio's own count of its syncs and their latency percentiles (µs): (count, p50, p99).
fn fio_syncs(json: &str) -> (u64, f64, f64) {
    let v: Value = serde_json::from_str(&json[json.find('{').unwrap()..]).unwrap();
    let sync = &v["jobs"][0]["sync"];
    let lat = &sync["lat_ns"]["percentile"];
    // `lat_ns.N`: fio leaves `total_ios` at 0 for fdatasyncs.
    (
        sync["lat_ns"]["N"].as_u64().unwrap(),
        lat["50.000000"].as_f64().unwrap() / 1000.0,
        lat["99.000000"].as_f64().unwrap() / 1000.0,
    )
}

/// `fio --ioengine=io_uring --fsync=1` (or `--fdatasync=1`): every io_uring fsync counted,
/// as fio counts them, of the right kind, with the io-wq worker's writes as the syncs' own.
fn io_uring_fsyncs_on(fs_kind: &str, option: &str, kind: &str) {
    const SIZE: u64 = 2 << 20;
    const BS: u64 = 4096;
    let fs = LoopFs::new(fs_kind, 512);
    let run_ = JsonRun::start(&[]);
    let mut child = Command::new("fio")
        .args([
            "--name=uring",
            // Jobs as threads of fio itself (not forked processes): its pid is theirs.
            "--thread",
            &format!("--directory={}", fs.mountpoint.display()),
            "--ioengine=io_uring",
            "--rw=write",
            &format!("--bs={BS}"),
            &format!("--size={SIZE}"),
            option,
            "--output-format=json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run fio (cargo xtask setup installs it)");
    let pid = child.id();
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(child.wait().unwrap().success(), "fio: {out}");
    std::thread::sleep(Duration::from_millis(1_500));
    let intervals = run_.stop();
    let (fio_count, fio_p50, fio_p99) = fio_syncs(&out);
    // fio syncs after each write but the last (its final fsync is part of closing).
    assert!(
        (SIZE / BS - 1..=SIZE / BS).contains(&fio_count),
        "fio did {fio_count} syncs"
    );
    // The probes that end io_uring syncs are attached when the first one is seen (they
    // would otherwise run on every io_uring completion of the host): the few that complete
    // before (within about a millisecond) are lost. None is counted twice.
    let kinds = kinds_of(&intervals, pid);
    assert_eq!(
        kinds.keys().collect::<Vec<_>>(),
        [kind],
        "{option} on {fs_kind}"
    );
    let counted = kinds[kind];
    assert!(
        counted <= fio_count && counted + LOST_BEFORE_ATTACH >= fio_count,
        "{option} on {fs_kind}: {counted} io_uring syncs counted, fio did {fio_count}"
    );
    eprintln!(
        "{option} on {fs_kind}: fio {fio_count} syncs (p50 {fio_p50} us, p99 {fio_p99} us), iotop-bpf {:?}",
        kinds_of(&intervals, pid)
    );
    // The 4 KiB page each sync wrote back was written by the io-wq worker inside it.
    let own = sum(&intervals, pid, "sync_write_bytes");
    assert!(
        own >= fio_count * BS * 9 / 10,
        "{option} on {fs_kind}: own writes {own} for {fio_count} syncs"
    );
    let unmeasured: u64 = entries_of(&intervals, pid)
        .iter()
        .map(|p| sync_cost(p, Some("unmeasured"), "calls"))
        .sum();
    assert_eq!(unmeasured, counted, "io_uring payloads are not measured");
    // We time each sync from its punt to io-wq to its completion, inside what fio measures
    // from submission to reaping.
    let ours = num(
        &entries_of(&intervals, pid).last().unwrap()["totals"]["sync_latency_us"],
        "p50",
    );
    #[expect(clippy::cast_precision_loss, reason = "microseconds")]
    let ours = ours as f64;
    eprintln!("{option} on {fs_kind}: our p50 {ours} us, own writes {own} B");
    assert!(
        ours <= fio_p50 * 1.1 + 50.0 && ours >= fio_p50 * 0.2,
        "{option} on {fs_kind}: p50 {ours} us vs fio's {fio_p50} us (p99 {fio_p99})"
    );
    assert!(findings_of(&intervals, "write_amplification", pid).is_empty());
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn io_uring_fsyncs_are_counted_on_ext4() {
    if !require_root("io_uring_fsyncs_are_counted_on_ext4") {
        return;
    }
    io_uring_fsyncs_on("ext4", "--fsync=1", "io_uring fsync");
    io_uring_fsyncs_on("ext4", "--fdatasync=1", "io_uring fdatasync");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn io_uring_fsyncs_are_counted_on_xfs() {
    if !require_root("io_uring_fsyncs_are_counted_on_xfs") {
        return;
    }
    io_uring_fsyncs_on("xfs", "--fsync=1", "io_uring fsync");
    io_uring_fsyncs_on("xfs", "--fdatasync=1", "io_uring fdatasync");
}

/// `fio --ioengine=io_uring --sync=dsync`: writes on an O_DSYNC file through io_uring, run
/// inline by io_uring_enter (XFS takes them without blocking) or punted to io-wq (ext4).
fn io_uring_dsync_writes_on(fs_kind: &str) {
    const WRITES: u64 = 256;
    let fs = LoopFs::new(fs_kind, 512);
    let run_ = JsonRun::start(&[]);
    let mut child = Command::new("fio")
        .args([
            "--name=uring-dsync",
            "--thread",
            &format!("--directory={}", fs.mountpoint.display()),
            "--ioengine=io_uring",
            "--rw=write",
            "--bs=4k",
            &format!("--size={}", WRITES * 4096),
            "--sync=dsync",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("run fio");
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(1_500));
    let intervals = run_.stop();
    let kinds = kinds_of(&intervals, pid);
    eprintln!("io_uring O_DSYNC writes on {fs_kind}: {WRITES} writes, iotop-bpf {kinds:?}");
    assert_eq!(
        kinds.keys().collect::<Vec<_>>(),
        ["io_uring O_DSYNC write"],
        "{fs_kind}"
    );
    let counted = kinds["io_uring O_DSYNC write"];
    assert!(
        counted <= WRITES && counted + LOST_BEFORE_ATTACH >= WRITES,
        "{counted} io_uring O_DSYNC writes counted on {fs_kind}, of {WRITES}"
    );
    assert!(
        sum(&intervals, pid, "sync_write_bytes") >= WRITES * 4096 * 9 / 10,
        "the pages each wrote are its own"
    );
    assert!(findings_of(&intervals, "write_amplification", pid).is_empty());
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn io_uring_dsync_writes_are_counted_on_ext4_and_xfs() {
    if !require_root("io_uring_dsync_writes_are_counted_on_ext4_and_xfs") {
        return;
    }
    io_uring_dsync_writes_on("ext4");
    io_uring_dsync_writes_on("xfs");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn check_lists_how_each_sync_source_is_traced() {
    if !require_root("check_lists_how_each_sync_source_is_traced") {
        return;
    }
    let out = sh(binary().to_str().unwrap(), &["check"]);
    for expected in [
        "sync source: fsync, fdatasync, sync_file_range, syncfs, sync, msync(MS_SYNC): raw sys_enter/sys_exit:",
        "sync source: O_SYNC/O_DSYNC/RWF_DSYNC writes on ext4: raw ext4_sync_file_enter/exit in the writer (fd from its registers)",
        "sync source: O_SYNC/O_DSYNC/RWF_DSYNC writes on XFS: raw xfs_file_fsync in the writer, ended by the write's exit (raw sys_exit)",
        "sync source: io_uring IORING_OP_FSYNC (fdatasync too), IORING_OP_SYNC_FILE_RANGE: raw io_uring_queue_async_work to io_uring_complete; the io-wq worker's writes are the sync's own",
        "sync source: io_uring writes on O_SYNC/O_DSYNC files or with RWF_DSYNC: punted ones from the filesystem's tracepoint in the io-wq worker to io_uring_complete; inline ones from the filesystem's tracepoint in io_uring_enter",
        "attached: raw_tp:sys_enter",
        "attached: raw_tp:sys_exit",
        "attached: raw_tp:io_uring_complete",
    ] {
        assert!(out.contains(expected), "{expected:?} missing from:\n{out}");
    }
    assert!(!out.contains("not covered: io_uring"), "{out}");
    // Every probe on a raw tracepoint, a BTF-typed one or the task iterator: nothing needs
    // perf_event_open.
    assert!(
        !out.lines().any(|l| l.starts_with("attached: ")
            && !l.starts_with("attached: raw_tp:")
            && !l.starts_with("attached: tp_btf:")
            && !l.starts_with("attached: iter:")),
        "{out}"
    );
}
