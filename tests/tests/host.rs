//! The host header (`host{}` in the JSON) against /proc, read by this test around every
//! interval: load, run queue, tasks blocked on I/O, %iowait, I/O pressure, dirty memory.
//!
//! A thread reads /proc continuously (every ~2 ms) while `iotop-bpf --json -d 0.5` runs, and
//! each reading is stamped with when it started and ended. The tool reads /proc at some
//! moment before its line arrives, so each interval is compared with the readings of a
//! window that surely holds that moment (see [`Window`]). Meanwhile a writer throttled to
//! 20 direct writes a second keeps a task waiting for I/O, and a 64 MiB buffered write makes
//! dirty memory rise. The parsing here is the test's own, not the tool's.

use std::{
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, SystemTime},
};

use iotop_bpf_integration::{
    BlkioThrottle, JsonRun, LoopFs, binary, num, parse_rfc3339, require_root,
};
use serde_json::Value;

const MIB: u64 = 1 << 20;
const DIRTY_WRITE: u64 = 64 * MIB;

/// What /proc said at one moment.
#[derive(Clone, Debug)]
struct Reading {
    /// When the reads began and ended: the values are of some moment in between.
    start: SystemTime,
    end: SystemTime,
    load1: f64,
    procs_running: u64,
    procs_blocked: u64,
    /// (iowait, sum of user nice system idle iowait irq softirq steal), jiffies.
    iowait: u64,
    cpu_total: u64,
    psi_some: Option<f64>,
    psi_full: Option<f64>,
    dirty: u64,
    writeback: u64,
}

/// Dirty bytes above which the kernel starts writing back in the background:
/// `vm.dirty_background_bytes`, or `vm.dirty_background_ratio` percent of the available
/// memory (roughly what the kernel counts as dirtyable).
fn background_threshold() -> u64 {
    let sysctl = |name: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let bytes = sysctl("dirty_background_bytes");
    if bytes > 0 {
        return bytes;
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let available: u64 = field(&meminfo, "MemAvailable:")
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .parse::<u64>()
        .unwrap()
        * 1024;
    available / 100 * sysctl("dirty_background_ratio")
}

fn field<'a>(text: &'a str, line_start: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(line_start))
}

fn read_proc() -> Reading {
    let start = SystemTime::now();
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap();
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let pressure = std::fs::read_to_string("/proc/pressure/io").ok();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let end = SystemTime::now();
    let cpu: Vec<u64> = field(&stat, "cpu ")
        .unwrap()
        .split_whitespace()
        .take(8)
        .map(|v| v.parse().unwrap())
        .collect();
    let count = |name: &str| -> u64 { field(&stat, name).unwrap().trim().parse().unwrap() };
    let kib = |name: &str| -> u64 {
        field(&meminfo, name)
            .unwrap()
            .trim()
            .trim_end_matches(" kB")
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    let avg10 = |kind: &str| -> Option<f64> {
        field(pressure.as_deref()?, kind)?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("avg10="))?
            .parse()
            .ok()
    };
    Reading {
        start,
        end,
        load1: loadavg.split_whitespace().next().unwrap().parse().unwrap(),
        procs_running: count("procs_running "),
        procs_blocked: count("procs_blocked "),
        iowait: cpu[4],
        cpu_total: cpu.iter().sum(),
        psi_some: avg10("some "),
        psi_full: avg10("full "),
        dirty: kib("Dirty:"),
        writeback: kib("Writeback:"),
    }
}

/// /proc read in a loop until stopped.
struct Poller {
    readings: Arc<Mutex<Vec<Reading>>>,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<()>,
}

impl Poller {
    fn start() -> Self {
        let readings = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = thread::spawn({
            let (readings, stop) = (readings.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    let reading = read_proc();
                    readings.lock().unwrap().push(reading);
                    thread::sleep(Duration::from_millis(2));
                }
            }
        });
        Self {
            readings,
            stop,
            thread,
        }
    }

    fn stop(self) -> Vec<Reading> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        Arc::try_unwrap(self.readings)
            .unwrap()
            .into_inner()
            .unwrap()
    }
}

/// The stretch of time in which the tool surely read /proc for one interval: it ends when
/// the line arrived, and begins 50 ms earlier, or earlier still when the interval's own
/// time says so. The tool's `ts` is the sample's wall-clock time plus an offset that is the
/// same for every interval (its start-up wall-clock read came after its monotonic one), so
/// `ts - arrival` at its largest (the quickest interval to arrive) gives that offset, less
/// the quickest interval's latency; 20 ms more covers that latency.
#[derive(Clone, Copy, Debug)]
struct Window {
    from: SystemTime,
    to: SystemTime,
}

fn windows(intervals: &[(SystemTime, Value)]) -> Vec<Window> {
    let ts = |v: &Value| parse_rfc3339(v["ts"].as_str().unwrap());
    let offset = intervals
        .iter()
        .map(|(arrived, v)| ts(v).duration_since(*arrived).unwrap_or_default())
        .max()
        .unwrap_or_default();
    intervals
        .iter()
        .map(|(arrived, v)| {
            let by_latency = *arrived - Duration::from_millis(50);
            let by_ts = ts(v) - offset - Duration::from_millis(20);
            Window {
                from: by_latency.min(by_ts),
                to: *arrived,
            }
        })
        .collect()
}

/// The readings that bracket `window`: the last one ended before it, every one inside it,
/// and the first one begun after it.
fn bracketing(readings: &[Reading], window: Window) -> &[Reading] {
    let first = readings
        .iter()
        .rposition(|r| r.end <= window.from)
        .expect("a reading before the window (the poller started first)");
    let last = readings
        .iter()
        .position(|r| r.start >= window.to)
        .expect("a reading after the window (the poller stopped last)");
    &readings[first..=last]
}

fn range(readings: &[Reading], pick: impl Fn(&Reading) -> f64) -> (f64, f64) {
    readings
        .iter()
        .map(pick)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

fn f(host: &Value, name: &str) -> f64 {
    host[name]
        .as_f64()
        .unwrap_or_else(|| panic!("host.{name} is not a number: {host}"))
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn the_host_header_agrees_with_proc() {
    if !require_root("the_host_header_agrees_with_proc") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let throttle = BlkioThrottle::new(&fs.dev, 20);
    let psi = std::fs::read_to_string("/proc/pressure/io").is_ok();
    let poller = Poller::start();
    thread::sleep(Duration::from_millis(50));
    let run = JsonRun::start(&[]);

    // A task waiting for I/O: 80 direct writes throttled to 20 a second (4 s), each waiting
    // in io_schedule for its turn.
    let mut writer = start_throttled_writer(&fs, &throttle);
    thread::sleep(Duration::from_millis(1500));

    // 64 MiB of page cache made dirty, not synced: it stays dirty until write-back, after
    // vm.dirty_expire_centisecs (30 s), as long as the host's dirty memory stays under the
    // background threshold; on a machine whose threshold is small, less is written.
    let dirty_write = DIRTY_WRITE.min(background_threshold() / 2);
    let dirty_from = SystemTime::now();
    std::fs::write(
        fs.path("dirty"),
        vec![0x5a_u8; usize::try_from(dirty_write).unwrap()],
    )
    .unwrap();
    let dirty_to = SystemTime::now();
    thread::sleep(Duration::from_millis(1500));

    assert!(
        writer.wait().unwrap().success(),
        "the throttled writer failed"
    );
    let intervals = run.stop_timed();
    thread::sleep(Duration::from_millis(20));
    let readings = poller.stop();
    assert!(
        intervals.len() >= 6,
        "{} intervals in about 4 s at -d 0.5",
        intervals.len()
    );
    let windows = windows(&intervals);

    let mut blocked_seen = 0;
    for (k, ((_, interval), window)) in intervals.iter().zip(&windows).enumerate() {
        let host = &interval["host"];
        let around = bracketing(&readings, *window);
        let context = format!(
            "interval {k}: {host}\n{} readings from {:?} to {:?}",
            around.len(),
            around.first().map(|r| r.start),
            around.last().map(|r| r.end)
        );

        let load1 = check_global_figures(host, around, psi, &context);
        let (running, blocked) = check_task_counts(host, around, &context);
        if blocked > 0 {
            blocked_seen += 1;
        }

        check_dirty(host, around, &context);
        check_iowait(
            k, host, &readings, &windows, around, &context, load1, running, blocked,
        );
    }
    assert!(
        blocked_seen > 0,
        "a writer throttled to 20 writes/s waits for I/O nearly all the time, yet no interval showed a blocked task"
    );

    check_buffered_write(
        &intervals,
        &windows,
        (dirty_from, dirty_to),
        dirty_write,
        readings.len(),
        blocked_seen,
    );
}

/// The writer whose task waits for I/O: 80 direct writes in `throttle`'s cgroup.
fn start_throttled_writer(fs: &LoopFs, throttle: &BlkioThrottle) -> std::process::Child {
    let script = format!(
        "echo $$ > /sys/fs/cgroup/blkio/{}/cgroup.procs && exec \"$0\" workload direct-io --file \"$1\" --writes 80 --reads 0",
        throttle.name
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(binary())
        .arg(fs.path("throttled"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the throttled writer")
}

/// Piecewise constant and global figures: the load averages and the pressure averages. Returns
/// load1.
fn check_global_figures(host: &Value, around: &[Reading], psi: bool, context: &str) -> f64 {
    // Piecewise constant and global (the kernel updates the load every 5 s and the
    // pressure averages every 2 s, for every reader): the tool's value is one of those
    // read around it.
    let (lo, hi) = range(around, |r| r.load1);
    let load1 = f(host, "load1");
    assert!(
        (lo - 0.005..=hi + 0.005).contains(&load1),
        "load1 {load1} outside {lo}..{hi}: {context}"
    );
    assert!(
        f(host, "load5") >= 0.0 && f(host, "load15") >= 0.0,
        "{context}"
    );
    for (name, pick) in [
        (
            "psi_io_some_avg10",
            (|r: &Reading| r.psi_some) as fn(&Reading) -> Option<f64>,
        ),
        ("psi_io_full_avg10", |r: &Reading| r.psi_full),
    ] {
        if psi {
            let (lo, hi) = range(around, |r| pick(r).unwrap());
            let value = f(host, name);
            assert!(
                (lo - 0.005..=hi + 0.005).contains(&value),
                "{name} {value} outside {lo}..{hi}: {context}"
            );
        } else {
            assert!(host[name].is_null(), "no PSI here, yet {name}: {context}");
        }
    }
    load1
}

/// The counts of tasks running and blocked now, against the readings around. Returns them.
fn check_task_counts(host: &Value, around: &[Reading], context: &str) -> (f64, u64) {
    // Counts of tasks now: they change at any moment. Both the tool and this poller count
    // themselves as running when they read (and may or may not count each other), and a
    // task may wake or sleep between two readings 2 ms apart: 3 more or fewer running,
    // 1 more or fewer blocked than the readings around.
    let (lo, hi) = range(around, |r| r.procs_running as f64);
    let running = num(host, "procs_running") as f64;
    assert!(
        running >= 1.0 && (lo - 3.0..=hi + 3.0).contains(&running),
        "procs_running {running} outside {lo}..{hi} (±3): {context}"
    );
    let (lo, hi) = range(around, |r| r.procs_blocked as f64);
    let blocked = num(host, "procs_blocked");
    assert!(
        (lo - 1.0..=hi + 1.0).contains(&(blocked as f64)),
        "procs_blocked {blocked} outside {lo}..{hi} (±1): {context}"
    );
    (running, blocked)
}

/// Dirty and write-back memory, against the readings around.
fn check_dirty(host: &Value, around: &[Reading], context: &str) {
    // Dirty memory moves with what the host writes: between two readings ~2 ms apart,
    // 4 MiB at most (2 GB/s into the page cache, beyond what this machine does).
    for (name, pick) in [
        (
            "dirty_bytes",
            (|r: &Reading| r.dirty) as fn(&Reading) -> u64,
        ),
        ("writeback_bytes", |r: &Reading| r.writeback),
    ] {
        let (lo, hi) = range(around, |r| pick(r) as f64);
        let value = num(host, name) as f64;
        let slack = (4 * MIB) as f64;
        assert!(
            (lo - slack..=hi + slack).contains(&value),
            "{name} {value} outside {lo}..{hi} (±4 MiB): {context}"
        );
    }
}

/// iowait, bounded by the readings around this interval's window and the previous one's.
#[expect(
    clippy::too_many_arguments,
    reason = "a test step; the last three are printed"
)]
fn check_iowait(
    k: usize,
    host: &Value,
    readings: &[Reading],
    windows: &[Window],
    around: &[Reading],
    context: &str,
    load1: f64,
    running: f64,
    blocked: u64,
) {
    // iowait: the share of the jiffies between this interval's read of /proc/stat and the
    // previous one's. Cumulative counters, so the readings bound it: at least the iowait
    // of the shortest stretch surely inside over the jiffies of the longest stretch that
    // surely holds it, at most the converse (0.5 points for rounding, 2 for iowait's
    // known small steps back on NO_HZ kernels).
    let iowait = f(host, "iowait_pct");
    assert!(
        (0.0..=100.0).contains(&iowait),
        "iowait_pct {iowait}: {context}"
    );
    if k > 0 {
        let before = bracketing(readings, windows[k - 1]);
        let (outer_from, inner_from) = (&before[0], &before[before.len() - 1]);
        let (inner_to, outer_to) = (&around[0], &around[around.len() - 1]);
        let share = |from: &Reading, to: &Reading, over_from: &Reading, over_to: &Reading| {
            (to.iowait.saturating_sub(from.iowait)) as f64 * 100.0
                / (over_to.cpu_total.saturating_sub(over_from.cpu_total)).max(1) as f64
        };
        let lo = share(inner_from, inner_to, outer_from, outer_to);
        let hi = share(outer_from, outer_to, inner_from, inner_to).min(100.0);
        assert!(
            (lo - 2.5..=hi + 2.5).contains(&iowait),
            "iowait_pct {iowait} outside {lo:.2}..{hi:.2}: {context}"
        );
        eprintln!(
            "interval {k}: load1 {load1} running {running} blocked {blocked} iowait {iowait} (bounds {lo:.1}..{hi:.1}) psi {}/{} dirty {:.1} MiB; {} readings around",
            host["psi_io_some_avg10"],
            host["psi_io_full_avg10"],
            num(host, "dirty_bytes") as f64 / MIB as f64,
            around.len()
        );
    }
}

/// The buffered write: dirty + writeback before it and after it.
fn check_buffered_write(
    intervals: &[(SystemTime, Value)],
    windows: &[Window],
    (dirty_from, dirty_to): (SystemTime, SystemTime),
    dirty_write: u64,
    readings: usize,
    blocked_seen: u32,
) {
    // The buffered write: dirty before it (the last interval read before it began) and after
    // it (the intervals read after it ended, up to 1.5 s later). Our pages stay dirty or
    // under write-back until written (30 s), so dirty + writeback holds at least them
    // whatever else the host writes back meanwhile, less 4 MiB for the per-CPU page counts
    // the kernel folds into /proc/meminfo's totals only every second (up to 125 pages per
    // CPU for each of Dirty and Writeback).
    let reported = |v: &Value| num(&v["host"], "dirty_bytes") + num(&v["host"], "writeback_bytes");
    let before = intervals
        .iter()
        .zip(windows)
        .filter(|(_, w)| w.to < dirty_from)
        .map(|((_, v), _)| reported(v))
        .next_back()
        .expect("an interval before the write");
    let after = intervals
        .iter()
        .zip(windows)
        .filter(|(_, w)| w.from > dirty_to)
        .map(|((_, v), _)| reported(v))
        .max()
        .expect("an interval after the write");
    assert!(
        after >= dirty_write.saturating_sub(4 * MIB),
        "dirty + writeback {:.1} MiB after a {} MiB buffered write ({:.1} MiB before)",
        after as f64 / MIB as f64,
        dirty_write / MIB,
        before as f64 / MIB as f64
    );
    eprintln!(
        "host: {} intervals, {} readings of /proc; dirty + writeback {:.1} MiB before the write, {:.1} MiB after; a blocked task in {blocked_seen} intervals",
        intervals.len(),
        readings,
        before as f64 / MIB as f64,
        after as f64 / MIB as f64
    );
}
