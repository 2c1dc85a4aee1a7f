//! The kernel matrix's smoke set (`cargo xtask kernels` runs it in every guest; CI runs it
//! on the host too): the tool starts, sees a dd with exact counts that agree with
//! /proc/diskstats, counts short-lived processes' fsyncs, names lab001, sees a task in D and
//! where it waits (and the wait site of 95% of all D episodes), and names the XFS tail write.
//! It counts what the tool's programs run for other system calls and for one direct read.
//! Once as root, once as nobody with the documented capabilities.
//!
//! Each check is a cell of the matrix's table: the results go to
//! `$IOTOP_BPF_SMOKE_OUT/<mode>.txt` (one `cell pass|FAIL detail` line each) when that is
//! set, and the test fails if any cell does. Counts, not timings: a guest under software
//! emulation runs 3 to 7 times slower.

use std::{
    fmt::Write as _,
    process::{Command, Stdio},
    thread,
    time::{Duration, SystemTime},
};

use iotop_bpf_integration::{
    DOCUMENTED_CAPS, JsonRun, LoopFs, as_nobody_with, binary, dio_tail, diskstats_reads_writes,
    entries_of, findings_of, num, process_on_device, require_root, sh, unprivileged_copy, workload,
};
use serde_json::Value;

// A directory of its own: a file beside this one would be a test crate of its own.
#[path = "smoke/other_calls.rs"]
mod other_calls;

use other_calls::{BpfStats, OTHER_CALLS, other_calls_cell, syscall_path};

#[path = "smoke/reads.rs"]
mod reads;

use reads::{direct_reads, reads_cell};

/// Direct writes and reads dd makes on a bare loop device.
const DD_WRITES: u64 = 300;
const DD_READS: u64 = 200;
/// Short-lived processes that each fsync one file and exit.
const SYNCERS: u64 = 20;

/// One cell of the table: `Ok(what was seen)` or `Err(what was wrong)`.
type Cell = Result<String, String>;

/// A bare loop device (no filesystem: nothing but dd writes to it).
struct BareLoop {
    device: String,
    backing: String,
}

impl BareLoop {
    const SIZE: u64 = 64 << 20;

    fn new() -> Self {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let backing = format!("/dev/shm/iotop-bpf-smoke-{}-{n}.img", std::process::id());
        let file = std::fs::File::create(&backing).unwrap();
        file.set_len(Self::SIZE).unwrap();
        drop(file);
        let device = sh("losetup", &["-f", "--show", "--direct-io=off", &backing])
            .trim()
            .to_string();
        let bare = Self { device, backing };
        bare.settle();
        bare
    }

    /// Waits until nothing reads the new device any more (udev's blkid reads it once it
    /// appears, on its own time): reads the tool saw before the test's first look at
    /// /proc/diskstats would count on one side only. Quiet for a second, or 15 s at most.
    fn settle(&self) {
        let mut last = diskstats_reads_writes(self.name());
        let mut quiet = 0;
        for _ in 0..50 {
            thread::sleep(Duration::from_millis(300));
            let now = diskstats_reads_writes(self.name());
            quiet = if now == last { quiet + 1 } else { 0 };
            if quiet >= 4 {
                return;
            }
            last = now;
        }
    }

    fn name(&self) -> &str {
        self.device.trim_start_matches("/dev/")
    }

    fn dev(&self) -> String {
        std::fs::read_to_string(format!("/sys/class/block/{}/dev", self.name()))
            .unwrap()
            .trim()
            .to_string()
    }
}

impl Drop for BareLoop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
        let _ = std::fs::remove_file(&self.backing);
    }
}

/// Runs `program args`, returning its pid once it has exited successfully.
fn run(program: &str, args: &[&str]) -> u32 {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let pid = child.id();
    let status = child.wait().unwrap();
    assert!(status.success(), "{program} {args:?}: {status}");
    pid
}

/// `bare`: the bare loop device's name (`loop3`) and number (`7:3`).
fn dd_cell(intervals: &[Value], bare: (&str, &str), dd: (u32, u32), stats: (u64, u64)) -> Cell {
    let (name, dev) = bare;
    let writes = process_on_device(intervals, dd.0, dev);
    let reads = process_on_device(intervals, dd.1, dev);
    let seen = (
        writes.writes,
        writes.write_bytes,
        reads.reads,
        reads.read_bytes,
    );
    let expected = (DD_WRITES, DD_WRITES * 4096, DD_READS, DD_READS * 4096);
    if seen != expected {
        return Err(format!(
            "dd as seen (writes, bytes, reads, bytes) {seen:?}, expected {expected:?}"
        ));
    }
    // Every request of the device, by every process, against the kernel's own count.
    let (mut disk_reads, mut disk_writes) = (0, 0);
    for interval in intervals {
        for d in interval["disks"].as_array().unwrap() {
            if d["dev"] == dev {
                disk_reads += num(d, "reads");
                disk_writes += num(d, "writes");
            }
        }
    }
    if (disk_reads, disk_writes) != stats {
        return Err(format!(
            "{name}: (reads, writes) {:?} by the tool, {stats:?} by /proc/diskstats",
            (disk_reads, disk_writes)
        ));
    }
    Ok(format!(
        "dd {DD_WRITES} writes + {DD_READS} reads exact; {name} = diskstats {stats:?}"
    ))
}

/// Every interval in the mode asked for; in aggregation mode, requests were summed.
fn mode_cell(intervals: &[Value], aggregating: bool) -> Cell {
    let want = if aggregating {
        "aggregating"
    } else {
        "streaming"
    };
    let wrong = intervals
        .iter()
        .filter(|i| i["events"]["mode"] != want)
        .count();
    let summed: u64 = intervals
        .iter()
        .map(|i| num(&i["events"], "aggregated"))
        .sum();
    if wrong > 0 {
        return Err(format!("{wrong} intervals not {want}"));
    }
    if aggregating && summed == 0 {
        return Err("aggregating, but no request summed".into());
    }
    Ok(format!("{want}, {summed} requests summed in the kernel"))
}

fn syncs_cell(intervals: &[Value], pids: &[u32]) -> Cell {
    let counted: u64 = pids
        .iter()
        .map(|&pid| {
            entries_of(intervals, pid)
                .iter()
                .map(|p| p["sync_kinds"]["fsync"].as_u64().unwrap_or(0))
                .sum::<u64>()
        })
        .sum();
    if counted == SYNCERS {
        Ok(format!("{counted} of {SYNCERS} short-lived fsyncs"))
    } else {
        Err(format!(
            "{counted} of {SYNCERS} short-lived `sync FILE` fsyncs counted"
        ))
    }
}

fn dstate_cell(intervals: &[Value], pid: u32, seconds: u64) -> Cell {
    let (longest, site) = intervals
        .iter()
        .flat_map(|i| {
            i["dstate"]
                .as_array()
                .unwrap()
                .iter()
                .chain(i["dstate_recent"].as_array().unwrap())
        })
        .filter(|d| d["pid"].as_u64() == Some(u64::from(pid)))
        .map(|d| {
            let ms = d["blocked_ms"]
                .as_u64()
                .or_else(|| d["duration_ms"].as_u64())
                .unwrap_or(0);
            let frames: Vec<&str> = d["stack"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            (ms, frames.join(" "))
        })
        .max()
        .unwrap_or_default();
    // At least most of the wait (the last interval may end before it does).
    if longest * 2 < seconds * 1000 {
        return Err(format!(
            "vfork parent seen in D {longest} ms, it waited {seconds} s"
        ));
    }
    // The wait is in the clone call itself where the compiler folded wait_for_vfork_done
    // into kernel_clone (Debian's arm64 kernels).
    if !site.contains("vfork") && !site.starts_with("kernel_clone") {
        return Err(format!("vfork parent's wait site: {site:?}"));
    }
    // Every finished episode of 1 ms or more, by anyone, has its wait site.
    let sum = |field: &str| -> u64 {
        intervals
            .iter()
            .map(|i| num(&i["dstate_sites"], field))
            .sum()
    };
    let (episodes, resolved) = (sum("episodes"), sum("resolved"));
    if resolved * 100 < episodes * 95 {
        return Err(format!(
            "wait sites of {resolved} of {episodes} episodes (not sampled {}, symbols hidden {}, lost {})",
            sum("not_sampled"),
            sum("symbols_hidden"),
            sum("stack_lost")
        ));
    }
    Ok(format!(
        "vfork parent in D {longest} ms of {seconds} s, in vfork; sites of {resolved} of {episodes} episodes"
    ))
}

fn finding_cell(intervals: &[Value], kind: &str, pid: u32, what: &str) -> Cell {
    match findings_of(intervals, kind, pid).first() {
        Some(f) => Ok(format!(
            "{what}: {kind} ({})",
            f["file"].as_str().unwrap_or("no file")
        )),
        None => Err(format!("{what} (pid {pid}) raised no {kind}")),
    }
}

/// Runs every workload under one run of the tool started by `command`, and judges each cell.
/// `aggregating`: the tool sums plain requests in the kernel from the start (aggregation
/// mode, `IOTOP_BPF_AGGREGATE_ABOVE=0`) instead of streaming each: every cell must hold in
/// both modes, on every kernel.
fn smoke(
    mode: &str,
    command: impl Fn() -> Command,
    aggregating: bool,
) -> Vec<(&'static str, Cell)> {
    let path = syscall_path();
    let mut command = command();
    if aggregating {
        command.env("IOTOP_BPF_AGGREGATE_ABOVE", "0");
    }
    let bare = BareLoop::new();
    // The read loop's own device: the attribution cell holds `bare` to dd's exact counts.
    let reads_dev = BareLoop::new();
    let ext4 = LoopFs::new("ext4", 256);
    let xfs = LoopFs::new("xfs", 512);
    let synced = ext4.path("synced");
    std::fs::write(&synced, b"x").unwrap();

    // Statistics on for the whole run: each interval's runs count, from the programs' load.
    let stats = BpfStats::on();
    let mut tool = JsonRun::start_command(command);
    let before = diskstats_reads_writes(bare.name());
    // The other-calls loop first, then quiet until the interval it ends in has closed.
    for _ in 0..OTHER_CALLS {
        std::hint::black_box(std::os::unix::process::parent_id());
    }
    let loop_end = SystemTime::now();
    let quiet = tool.wait_past(loop_end, Duration::from_secs(20));
    let of = format!("of={}", bare.device);
    let iff = format!("if={}", bare.device);
    let count_w = format!("count={DD_WRITES}");
    let count_r = format!("count={DD_READS}");
    let dd_write = run(
        "dd",
        &["if=/dev/zero", &of, "bs=4k", &count_w, "oflag=direct"],
    );
    let dd_read = run(
        "dd",
        &[&iff, "of=/dev/null", "bs=4k", &count_r, "iflag=direct"],
    );
    // Settled: the requests completed before the tool is stopped.
    thread::sleep(Duration::from_millis(500));
    let after = diskstats_reads_writes(bare.name());
    let syncers: Vec<u32> = (0..SYNCERS)
        .map(|_| run("sync", &[synced.to_str().unwrap()]))
        .collect();
    // lab001 as built in, for a count of writes rather than a time (a 2 MiB one among them).
    let lab001_dir = ext4.path("lab001");
    std::fs::create_dir_all(&lab001_dir).unwrap();
    let (lab001, _) = workload(&[
        "lab001",
        "--dir",
        lab001_dir.to_str().unwrap(),
        "--count",
        "300",
    ]);
    const D_SECONDS: u64 = 3;
    let (dstate, _) = workload(&["dstate", "--seconds", &D_SECONDS.to_string()]);
    let tail = dio_tail(&xfs.path("dio"));
    // Last, direct reads one at a time, for the runs per read: tens of thousands of
    // requests, after every workload whose counts are held exact.
    let reads_start = SystemTime::now();
    let direct = direct_reads(&reads_dev.device, BareLoop::SIZE);
    let reads_end = SystemTime::now();
    thread::sleep(Duration::from_millis(1500));
    let timed = tool.stop_timed();
    drop(stats);
    let other_calls = if quiet {
        other_calls_cell(&path, &timed, loop_end)
    } else {
        Err("no interval arrived in 20 s after the getppid loop".into())
    };
    let reads = reads_cell(&path, &timed, (reads_start, reads_end), &reads_dev.dev());
    let intervals: Vec<Value> = timed.into_iter().map(|(_, i)| i).collect();

    let disk = (after.0 - before.0, after.1 - before.1);
    let dropped: u64 = intervals.iter().map(|i| num(&i["events"], "dropped")).sum();
    let cells = vec![
        (
            "starts",
            if dropped == 0 {
                Ok(format!(
                    "{} intervals as {mode}, 0 dropped",
                    intervals.len()
                ))
            } else {
                Err(format!("{dropped} records dropped"))
            },
        ),
        ("mode", mode_cell(&intervals, aggregating)),
        (
            "attribution",
            dd_cell(
                &intervals,
                (bare.name(), &bare.dev()),
                (dd_write, dd_read),
                disk,
            ),
        ),
        ("syncs", syncs_cell(&intervals, &syncers)),
        (
            "lab001",
            finding_cell(&intervals, "write_amplification", lab001, "lab001"),
        ),
        ("dstate", dstate_cell(&intervals, dstate, D_SECONDS)),
        (
            "xfs tail",
            finding_cell(&intervals, "sub_block_tail_write", tail, "dio-tail on XFS"),
        ),
        ("other calls", other_calls),
        (
            "reads",
            reads.map(|seen| format!("{seen}; {direct} in all")),
        ),
    ];
    cells
}

/// Writes the cells where the matrix collects them, prints them, and fails on any failure.
fn report(mode: &str, cells: &[(&str, Cell)]) {
    let mut text = String::new();
    for (cell, result) in cells {
        let _ = match result {
            Ok(seen) => writeln!(text, "{cell}\tpass\t{seen}"),
            Err(why) => writeln!(text, "{cell}\tFAIL\t{why}"),
        };
    }
    eprintln!("smoke as {mode}:\n{text}");
    if let Some(dir) = std::env::var_os("IOTOP_BPF_SMOKE_OUT") {
        let path = std::path::Path::new(&dir).join(format!("{mode}.txt"));
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let failed: Vec<_> = cells.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.is_empty(), "as {mode}: {failed:?}");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test` or `cargo xtask kernels`"]
fn smoke_as_root() {
    if !require_root("smoke_as_root") {
        return;
    }
    let cells = smoke("root", || Command::new(binary()), false);
    report("root", &cells);
}

#[test]
#[ignore = "needs root (to hand out capabilities): run with `cargo xtask test` or `cargo xtask kernels`"]
fn smoke_with_the_documented_capabilities() {
    if !require_root("smoke_with_the_documented_capabilities") {
        return;
    }
    let (dir, exe) = unprivileged_copy("smoke");
    // With the capabilities alone, in aggregation mode: each mode is checked on each kernel.
    let cells = smoke(
        "capabilities",
        || as_nobody_with(DOCUMENTED_CAPS, &exe),
        true,
    );
    std::fs::remove_dir_all(&dir).unwrap();
    report("capabilities", &cells);
}

/// What a guest without this test's tools (the kernel matrix's arm64 guests: busybox) ran and
/// recorded: the tool's intervals (`MODE.json`) and `MODE.pids`, one `key values` line each:
/// `bare NAME MAJ:MIN`, `before R W` and `after R W` (/proc/diskstats), `dd_write PID`,
/// `dd_read PID`, `syncer PID` (one per process), `lab001 PID`, `dstate PID`, `dsync PID`.
fn judge(dir: &std::path::Path, mode: &str) -> Option<Vec<(&'static str, Cell)>> {
    let intervals: Vec<Value> = std::fs::read_to_string(dir.join(format!("{mode}.json")))
        .ok()?
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let pids = std::fs::read_to_string(dir.join(format!("{mode}.pids"))).unwrap_or_default();
    let values = |key: &str| -> Vec<&str> {
        pids.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .flat_map(str::split_whitespace)
            .collect()
    };
    let pid = |key: &str| -> u32 {
        values(key)
            .first()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    };
    let counts = |key: &str| -> (u64, u64) {
        let v: Vec<u64> = values(key).iter().filter_map(|n| n.parse().ok()).collect();
        (
            v.first().copied().unwrap_or(0),
            v.get(1).copied().unwrap_or(0),
        )
    };
    let bare = values("bare");
    let (name, dev) = (
        bare.first().copied().unwrap_or("?"),
        bare.get(1).copied().unwrap_or("?"),
    );
    let (before, after) = (counts("before"), counts("after"));
    let syncers: Vec<u32> = values("syncer")
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    let dropped: u64 = intervals.iter().map(|i| num(&i["events"], "dropped")).sum();
    let starts = if intervals.is_empty() {
        Err("the tool printed no interval".to_string())
    } else if dropped > 0 {
        Err(format!("{dropped} records dropped"))
    } else {
        Ok(format!(
            "{} intervals as {mode}, 0 dropped",
            intervals.len()
        ))
    };
    Some(vec![
        ("starts", starts),
        ("mode", mode_cell(&intervals, mode == "capabilities")),
        (
            "attribution",
            dd_cell(
                &intervals,
                (name, dev),
                (pid("dd_write"), pid("dd_read")),
                (
                    after.0.saturating_sub(before.0),
                    after.1.saturating_sub(before.1),
                ),
            ),
        ),
        ("syncs", syncs_cell(&intervals, &syncers)),
        (
            "lab001",
            finding_cell(&intervals, "write_amplification", pid("lab001"), "lab001"),
        ),
        ("dstate", dstate_cell(&intervals, pid("dstate"), 3)),
        ("synced writes", dsync_cell(&intervals, pid("dsync"))),
    ])
}

/// `dsync` made 100 writes of 128 bytes to an O_DSYNC file on ext4: each one a sync, told
/// from the thread's registers to be an O_DSYNC write.
fn dsync_cell(intervals: &[Value], pid: u32) -> Cell {
    let counted: u64 = entries_of(intervals, pid)
        .iter()
        .map(|p| p["sync_kinds"]["O_DSYNC write"].as_u64().unwrap_or(0))
        .sum();
    let others: Vec<String> = entries_of(intervals, pid)
        .iter()
        .filter_map(|p| p["sync_kinds"].as_object())
        .flat_map(|kinds| kinds.keys().filter(|k| *k != "O_DSYNC write").cloned())
        .collect();
    // The payload is the writes' own length, read from their registers at entry.
    let payload: u64 = entries_of(intervals, pid)
        .iter()
        .map(|p| num(p, "sync_window_bytes"))
        .sum();
    if counted == 100 && others.is_empty() && payload == 100 * 128 {
        Ok("100 of 100 O_DSYNC writes, each told from its registers, 12800 B payload".to_string())
    } else {
        Err(format!(
            "{counted} of 100 O_DSYNC writes counted as such (other kinds: {others:?}), payload {payload} B of 12800"
        ))
    }
}

/// Judges, with the cells above, what a guest without this test's tools ran
/// (`IOTOP_BPF_SMOKE_JUDGE`: the directory of its files; see [`judge`]); writes each mode's
/// cells there as the smoke set does. Run on the host by `cargo xtask kernels`.
#[test]
#[ignore = "judges a kernel-matrix guest's recorded run: `cargo xtask kernels` runs it"]
fn judge_a_guests_run() {
    let Some(dir) = std::env::var_os("IOTOP_BPF_SMOKE_JUDGE") else {
        panic!("IOTOP_BPF_SMOKE_JUDGE names no directory");
    };
    let dir = std::path::PathBuf::from(dir);
    let mut judged = 0;
    for mode in ["root", "capabilities"] {
        if let Some(cells) = judge(&dir, mode) {
            judged += 1;
            let mut text = String::new();
            for (cell, result) in &cells {
                let _ = match result {
                    Ok(seen) => writeln!(text, "{cell}\tpass\t{seen}"),
                    Err(why) => writeln!(text, "{cell}\tFAIL\t{why}"),
                };
            }
            std::fs::write(dir.join(format!("{mode}.txt")), &text).unwrap();
            eprintln!("{mode}:\n{text}");
        }
    }
    assert!(judged > 0, "{}: no run to judge", dir.display());
}
