//! `cargo xtask bench`: fio 4 KiB random reads on a RAM-backed loop device, in interleaved
//! rounds of (a) no tracer, (b) `iotop-bpf --batch --json`, (c) a bpftrace latency histogram.
//! Rounds are interleaved because this machine's IOPS drift: pairs within a round are compared.

use std::{
    collections::HashSet,
    env, fs,
    io::{BufRead, BufReader, Read},
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
    /// Number of interleaved rounds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// fio runtime of each measurement, in seconds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600))]
    seconds: u32,
    /// Don't enable kernel.bpf_stats_enabled during (b) and (c). The stats give BPF time per
    /// I/O, but add two clock reads to every BPF program run (slightly lowering b's and c's IOPS).
    #[arg(long)]
    no_bpf_stats: bool,
    /// Set up and built already (used when bench re-runs itself under sudo).
    #[arg(long, hide = true)]
    prepared: bool,
}

const BPFTRACE_HIST: &str =
    "tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = nsecs; }
tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ {
  @usecs = hist((nsecs - @start[args->dev, args->sector]) / 1000);
  delete(@start[args->dev, args->sector]); }";

pub fn bench(args: &Args) -> Result<()> {
    if !args.prepared {
        crate::setup::setup(true)?;
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
    println!(
        "\nbench: {} rounds of {} s fio 4k randread QD32 (io_uring) on {} (1 GiB file in /dev/shm)",
        args.runs, args.seconds, device.dev
    );
    let mut rounds = Vec::new();
    for round in 1..=args.runs {
        let baseline = fio(&device.dev, args.seconds)?;
        let iotop = traced(Tracer::Iotop(&binary), &device.dev, args, ticks_per_sec)?;
        let bpftrace = traced(Tracer::Bpftrace, &device.dev, args, ticks_per_sec)?;
        println!(
            "round {round}/{}: baseline {:.1}k IOPS | iotop-bpf {:.1}k ({:.1}%) | bpftrace {:.1}k ({:.1}%)",
            args.runs,
            baseline.iops / 1e3,
            iotop.fio.iops / 1e3,
            100.0 * iotop.fio.iops / baseline.iops,
            bpftrace.fio.iops / 1e3,
            100.0 * bpftrace.fio.iops / baseline.iops,
        );
        rounds.push((baseline, iotop, bpftrace));
    }
    report(&rounds);
    Ok(())
}

fn report(rounds: &[(Fio, Traced, Traced)]) {
    let iotop_ratio = median(rounds.iter().map(|(b, i, _)| i.fio.iops / b.iops));
    let bpftrace_ratio = median(rounds.iter().map(|(b, _, t)| t.fio.iops / b.iops));
    let cpu = median(rounds.iter().filter_map(|(_, i, _)| i.cpu_share));
    let received: u64 = rounds.iter().map(|(_, i, _)| i.received).sum();
    let dropped: u64 = rounds.iter().map(|(_, i, _)| i.dropped).sum();
    let bpf_per_io = |pick: fn(&(Fio, Traced, Traced)) -> &Traced| {
        let (ns, ios) = rounds
            .iter()
            .map(pick)
            .fold((0, 0.0), |(ns, ios), t| match t.bpf_ns {
                Some(t_ns) => (ns + t_ns, ios + t.fio.ios),
                None => (ns, ios),
            });
        if ios > 0.0 {
            format!("{:.0} ns", ns as f64 / ios)
        } else {
            "not measured".into()
        }
    };

    println!(
        "\nmedians over {} rounds (ratios to the same round's baseline):",
        rounds.len()
    );
    println!("  iotop-bpf: {:.1}% of baseline IOPS", 100.0 * iotop_ratio);
    println!(
        "  bpftrace:  {:.1}% of baseline IOPS",
        100.0 * bpftrace_ratio
    );
    println!(
        "  iotop-bpf CPU while fio ran: {:.1}% of a core",
        100.0 * cpu
    );
    println!("  iotop-bpf events: {received} received, {dropped} dropped");
    println!(
        "  BPF time per fio I/O: iotop-bpf {}, bpftrace {}",
        bpf_per_io(|r| &r.1),
        bpf_per_io(|r| &r.2)
    );
    let met = iotop_ratio >= 0.95 && dropped == 0;
    println!(
        "target: iotop-bpf >= 95% of baseline IOPS with 0 drops: {}",
        if met { "MET" } else { "MISSED" }
    );
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

#[derive(Clone, Copy)]
struct Fio {
    iops: f64,
    /// Reads completed: IOPS times the runtime fio reports.
    ios: f64,
}

fn fio(dev: &str, seconds: u32) -> Result<Fio> {
    let out = stdout_of(cmd("fio").args([
        "--name=r",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=io_uring",
        "--iodepth=32",
        &format!("--runtime={seconds}"),
        "--time_based",
        "--output-format=terse",
    ]))?;
    // Terse v3: 1 version, 2 fio version, 3 job name, 4 group, 5 error, 6 read KiB,
    // 7 read KiB/s, 8 read IOPS, 9 read runtime (ms).
    let line = out
        .lines()
        .find(|l| l.starts_with("3;"))
        .context("no terse v3 line in fio's output")?;
    let fields: Vec<&str> = line.split(';').collect();
    let field = |n: usize| -> Result<f64> {
        fields
            .get(n - 1)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("fio terse field {n} is not a number: {line}"))
    };
    let (iops, runtime_ms) = (field(8)?, field(9)?);
    if iops <= 0.0 {
        bail!("fio measured 0 IOPS: {line}");
    }
    Ok(Fio {
        iops,
        ios: iops * runtime_ms / 1e3,
    })
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

fn traced(tracer: Tracer, dev: &str, args: &Args, ticks_per_sec: f64) -> Result<Traced> {
    // Restored when this returns, so the baseline always runs without the stats' overhead.
    let stats = (!args.no_bpf_stats).then(BpfStatsSwitch::enable).flatten();
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
    let fio = fio(dev, args.seconds)?;
    let (cpu_after, bpf_after, wall) = (cpu_ticks(pid)?, prog_stats(pid), t0.elapsed());
    tool.check_alive()?;
    let is_iotop = matches!(tracer, Tracer::Iotop(_));
    let lines = tool.stop()?;

    let (mut received, mut dropped, mut reports) = (0, 0, 0);
    for line in lines.iter().filter(|_| is_iotop) {
        if let (Some(r), Some(d)) = (
            events_field(line, "received"),
            events_field(line, "dropped"),
        ) {
            (received, dropped, reports) = (received + r, dropped + d, reports + 1);
        }
    }
    if is_iotop && reports == 0 {
        bail!("iotop-bpf printed no JSON line with events.received and events.dropped");
    }
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

    /// SIGINT (both tools print their final report on it), then its stdout lines.
    fn stop(mut self) -> Result<Vec<String>> {
        run(cmd("kill").args(["-INT", &self.child.id().to_string()]))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                eprintln!("warning: {} ignored SIGINT for 10 s: killing it", self.name);
                self.child.kill()?;
                self.child.wait()?;
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let mut lines = std::mem::take(&mut self.seen);
        // The reader thread ends at EOF, which closes the channel.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        Ok(lines)
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
