//! `cargo xtask bench`: what iotop-bpf costs, measured beside a peer and the kernel's own
//! counts in one run, each figure printed beside its target.
//!
//! 1. fio 4 KiB random reads, io_uring QD32, on a RAM-backed loop device, in interleaved
//!    rounds of (a) no tracer, (b) `iotop-bpf --json`, (c) a bpftrace script that keeps one
//!    latency histogram. Rounds are interleaved because this machine's IOPS drift: pairs
//!    within a round are compared. Then (b) and (c) again with `kernel.bpf_stats_enabled`
//!    for BPF time (the statistics slow every program run, so IOPS come from the passes
//!    without them); I/Os are the disk's own counts.
//! 2. The same with 4 threads of synchronous reads (psync): every read puts a thread in D
//!    state, so the scheduler probes work on every I/O. The pattern of a database doing
//!    pread().
//! 3. iotop-bpf at ~200k events/s, recording: its CPU, its memory, the recording's bytes per
//!    event and mode, and how long SIGINT takes to give the prompt back.
//! 4. The live view in tmux under the same load: time to the first frame, and from `q` to
//!    the shell.

use std::{
    collections::HashSet,
    env, fs,
    io::{BufRead, BufReader, Read},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::util::{cmd, describe, find_in_path, is_root, release_binary, run, stdout_of};

#[derive(clap::Args)]
pub struct Args {
    /// Number of interleaved rounds of each workload.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// fio runtime of each measurement, in seconds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600))]
    seconds: u32,
    /// Skip the passes that measure BPF time. Those run with kernel.bpf_stats_enabled, which
    /// adds two clock reads to every BPF program run, so IOPS are always compared in passes
    /// without it.
    #[arg(long)]
    no_bpf_stats: bool,
    /// Set up and built already (used when bench re-runs itself under sudo).
    #[arg(long, hide = true)]
    prepared: bool,
    /// Only the live view's first frame and quit (to look into that figure alone).
    #[arg(long, hide = true)]
    live_view_only: bool,
}

const BPFTRACE_HIST: &str =
    "tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = nsecs; }
tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ {
  @usecs = hist((nsecs - @start[args->dev, args->sector]) / 1000);
  delete(@start[args->dev, args->sector]); }";

/// The targets (issue 9), printed beside what was measured.
const TARGET_BPF_NS_PER_IO: f64 = 500.0;
const TARGET_IOPS_RATIO: f64 = 0.90;
const TARGET_CPU_PCT_AT_200K: f64 = 5.0;
const TARGET_RSS_MIB: f64 = 40.0;
const TARGET_RECORDING_BYTES_PER_EVENT: f64 = 24.0;
const TARGET_QUIT_MS: f64 = 250.0;
const TARGET_FIRST_FRAME_MS: f64 = 300.0;
/// Events per second for the CPU, memory and recording figures.
const LOAD_IOPS: u32 = 200_000;

pub fn bench(args: &Args) -> Result<()> {
    if !args.prepared {
        crate::setup::setup(crate::setup::Scope::Bench)?;
        crate::build_release()?;
    }
    if !is_root() {
        // Build as the user (no root-owned files in target/); only the measuring needs root.
        if find_in_path("sudo").is_none() {
            bail!("bench needs root (loop devices, eBPF) and sudo is not installed: rerun as root");
        }
        let exe = env::current_exe().context("locating the xtask binary")?;
        let mut sudo = cmd("sudo");
        sudo.arg("-E").arg(exe).arg("bench").arg("--prepared");
        sudo.args([
            "--runs",
            &args.runs.to_string(),
            "--seconds",
            &args.seconds.to_string(),
        ]);
        if args.no_bpf_stats {
            sudo.arg("--no-bpf-stats");
        }
        if args.live_view_only {
            sudo.arg("--live-view-only");
        }
        return run(&mut sudo);
    }

    let binary = release_binary();
    if !binary.is_file() {
        bail!("{} is missing: run `cargo xtask build`", binary.display());
    }
    if !Path::new("/sys/kernel/tracing/events").is_dir() {
        // bpftrace reads tracepoint formats from tracefs, which is not mounted at boot here.
        run(cmd("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))?;
    }
    let ticks_per_sec: f64 = stdout_of(cmd("getconf").arg("CLK_TCK"))?
        .trim()
        .parse()
        .context("parsing `getconf CLK_TCK`")?;

    let device = LoopDevice::create()?;
    // BPF programs loaded before any run of ours (the system's own): the live view waits
    // until the earlier runs' programs are freed, back to this many.
    let programs_before = bpf_programs_loaded();
    if args.live_view_only {
        let table = live_view(&binary, &device, programs_before)?;
        print_table(&table);
        return Ok(());
    }
    let mut table = Vec::new();
    for workload in [Workload::Uring, Workload::Psync] {
        println!(
            "\nbench: {} rounds of {} s fio {} on {} (1 GiB file in /dev/shm)",
            args.runs,
            args.seconds,
            workload.describe(),
            device.dev
        );
        let mut rounds = Vec::new();
        for round in 1..=args.runs {
            let pass = |tracer: Tracer, stats: bool| {
                traced(
                    tracer,
                    &device,
                    workload,
                    args.seconds,
                    stats,
                    ticks_per_sec,
                )
            };
            let baseline = fio(&device.dev, workload, args.seconds, None)?;
            let iotop = pass(Tracer::Iotop(&binary), false)?;
            let bpftrace = pass(Tracer::Bpftrace, false)?;
            let (iotop_cost, bpftrace_cost) = if args.no_bpf_stats {
                (None, None)
            } else {
                (
                    Some(pass(Tracer::Iotop(&binary), true)?),
                    Some(pass(Tracer::Bpftrace, true)?),
                )
            };
            println!(
                "round {round}/{}: baseline {:.1}k IOPS | iotop-bpf {:.1}k ({:.1}%) | bpftrace {:.1}k ({:.1}%){}",
                args.runs,
                baseline.iops / 1e3,
                iotop.fio.iops / 1e3,
                100.0 * iotop.fio.iops / baseline.iops,
                bpftrace.fio.iops / 1e3,
                100.0 * bpftrace.fio.iops / baseline.iops,
                match (&iotop_cost, &bpftrace_cost) {
                    (Some(i), Some(b)) => format!(
                        " | BPF ns/I/O iotop-bpf {} bpftrace {}",
                        i.bpf_ns_per_io().map_or("-".into(), |v| format!("{v:.0}")),
                        b.bpf_ns_per_io().map_or("-".into(), |v| format!("{v:.0}")),
                    ),
                    _ => String::new(),
                }
            );
            rounds.push(Round {
                baseline,
                iotop,
                bpftrace,
                iotop_cost,
                bpftrace_cost,
            });
        }
        table.extend(report(workload, &rounds));
    }

    println!(
        "\nbench: iotop-bpf --record at ~{}k events/s, then the live view in tmux",
        LOAD_IOPS / 1000
    );
    table.extend(under_load(&binary, &device, ticks_per_sec)?);
    table.extend(live_view(&binary, &device, programs_before)?);
    print_table(&table);
    Ok(())
}

/// One line of the final table.
struct Figure {
    what: String,
    measured: String,
    target: String,
    /// `None`: no target, shown for context.
    met: Option<bool>,
}

fn figure(what: &str, measured: String, target: &str, met: Option<bool>) -> Figure {
    Figure {
        what: what.to_owned(),
        measured,
        target: target.to_owned(),
        met,
    }
}

fn print_table(table: &[Figure]) {
    println!(
        "\n{:<58} {:>16}  {:<24} verdict",
        "figure", "measured", "target"
    );
    for f in table {
        let verdict = match f.met {
            Some(true) => "MET",
            Some(false) => "MISSED",
            None => "-",
        };
        println!(
            "{:<66} {:>14}  {:<24} {verdict}",
            f.what, f.measured, f.target
        );
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    /// 4 KiB random reads, io_uring, queue depth 32.
    Uring,
    /// 4 KiB random reads, 4 threads of pread (a thread in D for every read).
    Psync,
}

impl Workload {
    fn describe(self) -> &'static str {
        match self {
            Self::Uring => "4k randread io_uring QD32",
            Self::Psync => "4k randread psync, 4 threads",
        }
    }

    fn fio_args(self) -> &'static [&'static str] {
        match self {
            Self::Uring => &["--ioengine=io_uring", "--iodepth=32"],
            Self::Psync => &["--ioengine=psync", "--numjobs=4", "--group_reporting"],
        }
    }
}

/// One round: fio alone, under each tracer, and under each with BPF statistics on.
struct Round {
    baseline: Fio,
    iotop: Traced,
    bpftrace: Traced,
    iotop_cost: Option<Traced>,
    bpftrace_cost: Option<Traced>,
}

fn report(workload: Workload, rounds: &[Round]) -> Vec<Figure> {
    let iotop_ratio = median(rounds.iter().map(|r| r.iotop.fio.iops / r.baseline.iops));
    let bpftrace_ratio = median(rounds.iter().map(|r| r.bpftrace.fio.iops / r.baseline.iops));
    let cpu = median(rounds.iter().filter_map(|r| r.iotop.cpu_share));
    let received: u64 = rounds.iter().map(|r| r.iotop.received).sum();
    let dropped: u64 = rounds.iter().map(|r| r.iotop.dropped).sum();
    // Summed over the rounds: total BPF time over total I/Os.
    let bpf_per_io = |pick: fn(&Round) -> Option<&Traced>| {
        let (ns, ios) =
            rounds
                .iter()
                .filter_map(pick)
                .fold((0, 0), |(ns, ios), t| match t.bpf_ns {
                    Some(t_ns) => (ns + t_ns, ios + t.fio.ios),
                    None => (ns, ios),
                });
        (ios > 0).then(|| ns as f64 / ios as f64)
    };
    let (iotop_ns, bpftrace_ns) = (
        bpf_per_io(|r| r.iotop_cost.as_ref()),
        bpf_per_io(|r| r.bpftrace_cost.as_ref()),
    );
    let name = workload.describe();
    let ns = |v: Option<f64>| v.map_or_else(|| "not measured".into(), |v| format!("{v:.0} ns"));
    let figures = vec![
        figure(
            &format!("{name}: BPF time per I/O, iotop-bpf"),
            ns(iotop_ns),
            match workload {
                Workload::Uring => "<= 500 ns, < bpftrace",
                Workload::Psync => "(context)",
            },
            match (workload, iotop_ns, bpftrace_ns) {
                (Workload::Uring, Some(i), Some(b)) => Some(i <= TARGET_BPF_NS_PER_IO && i < b),
                (Workload::Uring, ..) => Some(false),
                _ => None,
            },
        ),
        figure(
            &format!("{name}: BPF time per I/O, bpftrace histogram"),
            ns(bpftrace_ns),
            "(the peer)",
            None,
        ),
        figure(
            &format!("{name}: IOPS with iotop-bpf / without (median)"),
            format!("{:.3}", iotop_ratio),
            match workload {
                Workload::Uring => ">= 0.90",
                Workload::Psync => "(context)",
            },
            (workload == Workload::Uring).then_some(iotop_ratio >= TARGET_IOPS_RATIO),
        ),
        figure(
            &format!("{name}: IOPS with bpftrace / without (median)"),
            format!("{:.3}", bpftrace_ratio),
            "(the peer)",
            None,
        ),
        figure(
            &format!("{name}: iotop-bpf CPU, % of a core"),
            format!("{:.1}%", 100.0 * cpu),
            "(context)",
            None,
        ),
        figure(
            &format!("{name}: events received / dropped"),
            format!("{received} / {dropped}"),
            "0 dropped",
            Some(dropped == 0),
        ),
    ];
    println!("\n{name}: medians over {} rounds", rounds.len());
    for f in &figures {
        println!("  {}: {}", f.what, f.measured);
    }
    figures
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// A loop device over a sparse 1 GiB file in /dev/shm, detached and deleted on drop.
struct LoopDevice {
    file: PathBuf,
    dev: String,
}

impl LoopDevice {
    fn create() -> Result<Self> {
        let file = PathBuf::from(format!(
            "/dev/shm/iotop-bpf-bench-{}.img",
            std::process::id()
        ));
        let result = fs::File::create(&file)
            .and_then(|f| f.set_len(1 << 30))
            .with_context(|| format!("creating {}", file.display()))
            .and_then(|()| {
                stdout_of(
                    cmd("losetup")
                        .args(["-f", "--show", "--direct-io=off"])
                        .arg(&file),
                )
            });
        match result {
            Ok(out) => Ok(Self {
                file,
                dev: out.trim().to_owned(),
            }),
            Err(err) => {
                let _ = fs::remove_file(&file);
                Err(err)
            }
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if let Err(err) = run(cmd("losetup").args(["-d", &self.dev])) {
            eprintln!("warning: could not detach {}: {err:#}", self.dev);
        }
        if let Err(err) = fs::remove_file(&self.file) {
            eprintln!("warning: could not remove {}: {err}", self.file.display());
        }
    }
}

/// Reads a block device completed since it appeared: the kernel's own count.
fn disk_reads(dev: &str) -> Result<u64> {
    let name = dev.trim_start_matches("/dev/");
    let stat = fs::read_to_string(format!("/sys/block/{name}/stat"))
        .with_context(|| format!("reading /sys/block/{name}/stat"))?;
    stat.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("unexpected /sys/block/{name}/stat: {stat}"))
}

#[derive(Clone, Copy)]
struct Fio {
    iops: f64,
    /// Reads the disk completed while fio ran (its own counters, not fio's estimate).
    ios: u64,
}

/// Runs fio on the device; `rate` caps the IOPS.
fn fio(dev: &str, workload: Workload, seconds: u32, rate: Option<u32>) -> Result<Fio> {
    let before = disk_reads(dev)?;
    let mut fio = cmd("fio");
    fio.args([
        "--name=r",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=terse",
    ])
    .args(workload.fio_args());
    if let Some(rate) = rate {
        fio.arg(format!("--rate_iops={rate}"));
    }
    let out = stdout_of(&mut fio)?;
    let ios = disk_reads(dev)?.saturating_sub(before);
    // Terse v3: 1 version, 2 fio version, 3 job name, 4 group, 5 error, 6 read KiB,
    // 7 read KiB/s, 8 read IOPS, 9 read runtime (ms).
    let line = out
        .lines()
        .find(|l| l.starts_with("3;"))
        .context("no terse v3 line in fio's output")?;
    let fields: Vec<&str> = line.split(';').collect();
    let iops: f64 = fields
        .get(7)
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("fio terse field 8 is not a number: {line}"))?;
    if iops <= 0.0 {
        bail!("fio measured 0 IOPS: {line}");
    }
    Ok(Fio { iops, ios })
}

enum Tracer<'a> {
    Iotop(&'a Path),
    Bpftrace,
}

struct Traced {
    fio: Fio,
    /// CPU time of the user-space process per second of fio, iotop-bpf only.
    cpu_share: Option<f64>,
    received: u64,
    dropped: u64,
    /// BPF run time of the tool's programs while fio ran.
    bpf_ns: Option<u64>,
}

impl Traced {
    fn bpf_ns_per_io(&self) -> Option<f64> {
        let ns = self.bpf_ns?;
        (self.fio.ios > 0).then(|| ns as f64 / self.fio.ios as f64)
    }
}

/// fio under a tracer; with `stats`, kernel.bpf_stats_enabled is on (and restored after).
fn traced(
    tracer: Tracer,
    device: &LoopDevice,
    workload: Workload,
    seconds: u32,
    stats: bool,
    ticks_per_sec: f64,
) -> Result<Traced> {
    let stats = stats.then(BpfStatsSwitch::enable).flatten();
    let started = Instant::now();
    let mut tool = match tracer {
        Tracer::Iotop(binary) => {
            let mut tool = Background::spawn(
                "iotop-bpf",
                cmd(binary).args(["--batch", "--json", "-d", "1"]),
            )?;
            // The first line means the programs are loaded and attached.
            tool.wait_line(Duration::from_secs(60))?;
            thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
            tool
        }
        Tracer::Bpftrace => {
            let tool = Background::spawn("bpftrace", cmd("bpftrace").args(["-e", BPFTRACE_HIST]))?;
            thread::sleep(Duration::from_secs(3)); // it prints "Attaching" before it attaches
            tool
        }
    };
    tool.check_alive()?;
    let pid = tool.child.id();
    let (cpu_before, bpf_before, t0) = (cpu_ticks(pid)?, prog_stats(pid), Instant::now());
    let fio = fio(&device.dev, workload, seconds, None)?;
    let (cpu_after, bpf_after, wall) = (cpu_ticks(pid)?, prog_stats(pid), t0.elapsed());
    tool.check_alive()?;
    let is_iotop = matches!(tracer, Tracer::Iotop(_));
    let (lines, _) = tool.stop()?;

    let (received, dropped) = if is_iotop {
        event_totals(&lines)?
    } else {
        (0, 0)
    };
    let bpf_ns = match (bpf_before, bpf_after) {
        (Some(before), Some(after)) if stats.is_some() => Some(after.saturating_sub(before)),
        _ => None,
    };
    Ok(Traced {
        fio,
        cpu_share: is_iotop.then(|| {
            cpu_after.saturating_sub(cpu_before) as f64 / ticks_per_sec / wall.as_secs_f64()
        }),
        received,
        dropped,
        bpf_ns,
    })
}

/// Records received and dropped, summed over iotop-bpf's JSON lines.
fn event_totals(lines: &[String]) -> Result<(u64, u64)> {
    let (mut received, mut dropped, mut reports) = (0, 0, 0);
    for line in lines {
        if let (Some(r), Some(d)) = (
            events_field(line, "received"),
            events_field(line, "dropped"),
        ) {
            (received, dropped, reports) = (received + r, dropped + d, reports + 1);
        }
    }
    if reports == 0 {
        bail!("iotop-bpf printed no JSON line with events.received and events.dropped");
    }
    Ok((received, dropped))
}

/// What one run of iotop-bpf under ~`LOAD_IOPS` reads per second cost.
struct Loaded {
    events_per_sec: f64,
    cpu_pct: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
    received: u64,
    dropped: u64,
    quit_ms: f64,
    /// The recording's size and mode, when recording.
    recording: Option<(u64, u32)>,
}

/// iotop-bpf --json under ~`LOAD_IOPS` reads per second, recording or not.
fn run_loaded(
    binary: &Path,
    device: &LoopDevice,
    ticks_per_sec: f64,
    record: bool,
) -> Result<Loaded> {
    let recording = env::temp_dir().join(format!("iotop-bpf-bench-{}.rec", std::process::id()));
    let _ = fs::remove_file(&recording);
    let mut command = cmd(binary);
    command.args(["--batch", "--json", "-d", "1"]);
    if record {
        command.arg("--record").arg(&recording);
    }
    let mut tool = Background::spawn("iotop-bpf", &mut command)?;
    tool.wait_line(Duration::from_secs(60))?;
    let pid = tool.child.id();
    // Warm up, then measure over the steady part.
    let seconds = 8;
    let load = {
        let dev = device.dev.clone();
        thread::spawn(move || fio(&dev, Workload::Uring, seconds, Some(LOAD_IOPS)))
    };
    thread::sleep(Duration::from_secs(2));
    let (cpu_before, t0) = (cpu_ticks(pid)?, Instant::now());
    thread::sleep(Duration::from_secs(u64::from(seconds) - 3));
    let (cpu_after, wall) = (cpu_ticks(pid)?, t0.elapsed());
    let rss_kib = status_field(pid, "VmRSS:")?;
    let hwm_kib = status_field(pid, "VmHWM:")?;
    let fio = load
        .join()
        .map_err(|_| anyhow::anyhow!("fio thread panicked"))??;
    tool.check_alive()?;
    let (lines, quit) = tool.stop()?;
    let (received, dropped) = event_totals(&lines)?;
    let recording = if record {
        let meta = fs::metadata(&recording)
            .with_context(|| format!("the recording {} is missing", recording.display()))?;
        let _ = fs::remove_file(&recording);
        Some((meta.len(), meta.permissions().mode() & 0o777))
    } else {
        None
    };
    Ok(Loaded {
        events_per_sec: fio.iops,
        cpu_pct: 100.0 * cpu_after.saturating_sub(cpu_before) as f64
            / ticks_per_sec
            / wall.as_secs_f64(),
        rss_mib: rss_kib as f64 / 1024.0,
        peak_rss_mib: hwm_kib as f64 / 1024.0,
        received,
        dropped,
        quit_ms: quit.as_secs_f64() * 1e3,
        recording,
    })
}

/// iotop-bpf at ~`LOAD_IOPS` events/s, then recording: CPU, RSS, recording size and mode,
/// and SIGINT to exit.
fn under_load(binary: &Path, device: &LoopDevice, ticks_per_sec: f64) -> Result<Vec<Figure>> {
    let plain = run_loaded(binary, device, ticks_per_sec, false)?;
    let recorded = run_loaded(binary, device, ticks_per_sec, true)?;
    for (name, run) in [("--json", &plain), ("--json --record", &recorded)] {
        println!(
            "  {name}: fio {:.0}k IOPS; iotop-bpf CPU {:.1}%, RSS {:.1} MiB (peak {:.1}), {} events ({} dropped), SIGINT to exit {:.0} ms",
            run.events_per_sec / 1e3,
            run.cpu_pct,
            run.rss_mib,
            run.peak_rss_mib,
            run.received,
            run.dropped,
            run.quit_ms,
        );
    }
    let (bytes, mode) = recorded.recording.unwrap_or((0, 0));
    let bytes_per_event = bytes as f64 / recorded.received.max(1) as f64;
    println!("  recording: {bytes} bytes, {bytes_per_event:.1} B/event, mode {mode:o}");
    let load = format!("at {:.0}k events/s", plain.events_per_sec / 1e3);
    let rec_load = format!("at {:.0}k events/s", recorded.events_per_sec / 1e3);
    Ok(vec![
        figure(
            &format!("iotop-bpf CPU {load}, % of a core"),
            format!("{:.1}%", plain.cpu_pct),
            "<= 5%",
            Some(plain.cpu_pct <= TARGET_CPU_PCT_AT_200K),
        ),
        figure(
            &format!("iotop-bpf RSS {load}"),
            format!("{:.1} MiB", plain.rss_mib),
            "<= 40 MiB",
            Some(plain.rss_mib <= TARGET_RSS_MIB),
        ),
        figure(
            &format!("SIGINT to exit (--json) {load}"),
            format!("{:.0} ms", plain.quit_ms),
            "<= 250 ms",
            Some(plain.quit_ms <= TARGET_QUIT_MS),
        ),
        figure(
            &format!("iotop-bpf CPU {rec_load}, recording"),
            format!("{:.1}%", recorded.cpu_pct),
            "(context)",
            None,
        ),
        figure(
            &format!("recording size {rec_load}"),
            format!("{bytes_per_event:.1} B/event"),
            "<= 24 B/event, 0 dropped",
            Some(bytes_per_event <= TARGET_RECORDING_BYTES_PER_EVENT && recorded.dropped == 0),
        ),
        figure(
            "recording file mode",
            format!("{mode:o}"),
            "600",
            Some(mode == 0o600),
        ),
    ])
}

/// The live view in tmux under load: time to the first frame, and from `q` to the shell.
fn live_view(binary: &Path, device: &LoopDevice, programs_before: usize) -> Result<Vec<Figure>> {
    if find_in_path("tmux").is_none() {
        bail!("tmux is missing: run `cargo xtask setup`");
    }
    let session = format!("iotop-bpf-bench-{}", std::process::id());
    // The runs before this one quit at once and leave their probes to be detached: by a
    // child, then by the kernel's own deferred release (RCU grace periods under the
    // tracepoint lock). Attaching meanwhile waits for all of it (a first frame at ~1 s
    // instead of ~250 ms): measured apart, and said.
    let detach = wait_for_detached(binary, programs_before)?;
    println!(
        "  waited {:.0} ms for the earlier runs' probes to be detached",
        detach.as_secs_f64() * 1e3
    );
    let load = {
        let dev = device.dev.clone();
        thread::spawn(move || fio(&dev, Workload::Uring, 6, Some(LOAD_IOPS)))
    };
    thread::sleep(Duration::from_secs(1));
    let command = format!("{}; echo EXIT=$?; sleep 30", binary.display());
    let started = Instant::now();
    run(cmd("tmux").args([
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]))?;
    let _kill = KillSession(session.clone());
    let screen = || stdout_of(cmd("tmux").args(["capture-pane", "-p", "-t", &session]));
    let wait = |text: &str, from: Instant| -> Result<Duration> {
        let deadline = from + Duration::from_secs(20);
        loop {
            if screen()?.contains(text) {
                return Ok(from.elapsed());
            }
            if Instant::now() > deadline {
                bail!("the live view never showed {text:?}:\n{}", screen()?);
            }
            thread::sleep(Duration::from_millis(2));
        }
    };
    // The status line ("every 1.0s") is drawn with the first frame.
    let first = wait("every ", started)?;
    thread::sleep(Duration::from_secs(2));
    let pressed = Instant::now();
    run(cmd("tmux").args(["send-keys", "-t", &session, "q"]))?;
    let quit = wait("EXIT=", pressed)?;
    let fio = load
        .join()
        .map_err(|_| anyhow::anyhow!("fio thread panicked"))??;
    let (first_ms, quit_ms) = (first.as_secs_f64() * 1e3, quit.as_secs_f64() * 1e3);
    println!(
        "  live view under {:.0}k IOPS: first frame {first_ms:.0} ms after launch, q to shell {quit_ms:.0} ms (tmux polled every 2 ms)",
        fio.iops / 1e3
    );
    Ok(vec![
        figure(
            "live view: launch to first frame, under load",
            format!("{first_ms:.0} ms"),
            "<= 300 ms",
            Some(first_ms <= TARGET_FIRST_FRAME_MS),
        ),
        figure(
            "live view: q to the shell prompt, under load",
            format!("{quit_ms:.0} ms"),
            "<= 250 ms",
            Some(quit_ms <= TARGET_QUIT_MS),
        ),
    ])
}

/// JITed BPF programs loaded now (each is a `bpf_prog_<tag>_<name>` symbol until freed).
fn bpf_programs_loaded() -> usize {
    std::fs::read_to_string("/proc/kallsyms").map_or(0, |symbols| {
        symbols
            .lines()
            .filter(|line| line.contains(" bpf_prog_"))
            .count()
    })
}

/// Waits (at most 20 s) until no process runs `binary` (the children that earlier runs left
/// to detach their probes) and the kernel has freed their programs: back to
/// `programs_before`. Returns how long that took.
fn wait_for_detached(binary: &Path, programs_before: usize) -> Result<Duration> {
    let started = Instant::now();
    let binary = binary
        .canonicalize()
        .with_context(|| format!("resolve {}", binary.display()))?;
    let running = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|entry| {
                entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| name.parse::<u32>().is_ok())
                    && std::fs::read_link(entry.path().join("exe")).is_ok_and(|exe| exe == binary)
            })
    };
    while running() || bpf_programs_loaded() > programs_before {
        if started.elapsed() > Duration::from_secs(20) {
            bail!(
                "{} BPF programs are loaded 20 s after the last run quit ({programs_before} before the bench)",
                bpf_programs_loaded()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(started.elapsed())
}

/// Kills a tmux session on drop.
struct KillSession(String);

impl Drop for KillSession {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

/// A `kB` field of /proc/PID/status.
fn status_field(pid: u32, key: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}

/// The number under `"key"` after `"events"` in one JSON line (the workspace's serde_json
/// is not worth a lock-file change for two counters).
fn events_field(line: &str, key: &str) -> Option<u64> {
    let events = &line[line.find("\"events\"")?..];
    let pattern = format!("\"{key}\"");
    let rest = events[events.find(&pattern)? + pattern.len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..digits].parse().ok()
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised comm (which may hold spaces) start at field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    match (field(14), field(15)) {
        (Some(utime), Some(stime)) => Ok(utime + stime),
        _ => bail!("unexpected /proc/{pid}/stat: {stat}"),
    }
}

/// BPF run time of the programs a process holds open, from /proc/PID/fdinfo (works without
/// bpftool, and counts exactly that process's programs). None if it holds none.
fn prog_stats(pid: u32) -> Option<u64> {
    let mut seen = HashSet::new();
    let mut total = None;
    for entry in fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        // A descriptor may close while we look: skip it.
        if !fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:bpf-prog")
        {
            continue;
        }
        let Ok(info) = fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            entry.file_name().to_string_lossy()
        )) else {
            continue;
        };
        let value = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
        };
        // Two fds of one program must count once.
        if !seen.insert(value("prog_id:").unwrap_or_default().to_owned()) {
            continue;
        }
        let ns: u64 = value("run_time_ns:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        total = Some(total.unwrap_or(0) + ns);
    }
    total
}

/// kernel.bpf_stats_enabled set to 1 while alive, then restored.
struct BpfStatsSwitch {
    previous: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStatsSwitch {
    fn enable() -> Option<Self> {
        let previous = fs::read_to_string(BPF_STATS).ok()?.trim().to_owned();
        match fs::write(BPF_STATS, "1") {
            Ok(()) => Some(Self { previous }),
            Err(err) => {
                eprintln!("warning: cannot enable {BPF_STATS} ({err}): BPF time not measured");
                None
            }
        }
    }
}

impl Drop for BpfStatsSwitch {
    fn drop(&mut self) {
        if let Err(err) = fs::write(BPF_STATS, &self.previous) {
            eprintln!(
                "warning: could not restore {BPF_STATS} to {}: {err}",
                self.previous
            );
        }
    }
}

/// A tracer running in the background, its output read by threads (so it never blocks on a
/// full pipe). Dropping it kills the process, so an error anywhere leaves nothing behind.
struct Background {
    name: &'static str,
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Background {
    fn spawn(name: &'static str, command: &mut Command) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start `{}`", describe(command)))?;
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().context("no stdout pipe")?;
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().context("no stderr pipe")?;
        let stderr = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Self {
            name,
            child,
            lines,
            seen: Vec::new(),
            stderr: Some(stderr),
        })
    }

    fn wait_line(&mut self, timeout: Duration) -> Result<()> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                self.seen.push(line);
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => bail!("{} printed nothing in {timeout:?}", self.name),
            Err(RecvTimeoutError::Disconnected) => self.died(),
        }
    }

    fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(_) => self.died(),
        }
    }

    fn died(&mut self) -> Result<()> {
        let status = self.child.wait()?;
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        bail!("{} exited early ({status}): {}", self.name, stderr.trim())
    }

    /// SIGINT (both tools print their final report on it), then its stdout lines and the
    /// time it took to exit.
    fn stop(mut self) -> Result<(Vec<String>, Duration)> {
        let sent = Instant::now();
        run(cmd("kill").args(["-INT", &self.child.id().to_string()]))?;
        let deadline = sent + Duration::from_secs(10);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                eprintln!("warning: {} ignored SIGINT for 10 s: killing it", self.name);
                self.child.kill()?;
                self.child.wait()?;
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        let took = sent.elapsed();
        let mut lines = std::mem::take(&mut self.seen);
        // The reader thread ends at EOF, which closes the channel.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        Ok((lines, took))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // No-op for a process already reaped by stop().
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_counters_are_read_from_the_events_object() {
        let line =
            r#"{"t":1,"events": {"received_total": 9, "received": 120, "dropped":3},"disks":[]}"#;
        assert_eq!(events_field(line, "received"), Some(120));
        assert_eq!(events_field(line, "dropped"), Some(3));
        assert_eq!(events_field(r#"{"disks":[]}"#, "dropped"), None);
        assert_eq!(
            events_field(r#"{"events":{"dropped":"x"}}"#, "dropped"),
            None
        );
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert!(median(std::iter::empty()).is_nan());
    }
}
