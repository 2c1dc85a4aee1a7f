//! iotop-bpf under a steady load: its CPU, memory and recording, SIGINT to exit, and the
//! live view's first frame in tmux.

use std::{
    env, fs,
    os::unix::fs::PermissionsExt,
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::{
    Figure, LOAD_IOPS, LoopDevice, TARGET_CPU_PCT_AT_200K, TARGET_FIRST_FRAME_MS, TARGET_QUIT_MS,
    TARGET_RECORDING_BYTES_PER_EVENT, TARGET_RSS_MIB, figure,
    fio::fio,
    process::{Background, cpu_ticks, status_field},
    round::event_totals,
    shapes::Workload,
};
use crate::util::{cmd, find_in_path, run, stdout_of};

/// What one run of iotop-bpf under ~`LOAD_IOPS` reads per second cost.
pub(super) struct Loaded {
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
pub(super) fn run_loaded(
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
pub(super) fn under_load(
    binary: &Path,
    device: &LoopDevice,
    ticks_per_sec: f64,
) -> Result<Vec<Figure>> {
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
pub(super) fn live_view(
    binary: &Path,
    device: &LoopDevice,
    programs_before: usize,
) -> Result<Vec<Figure>> {
    if find_in_path("tmux").is_none() {
        bail!("tmux is missing: run `cargo xtask setup`");
    }
    let session = format!("iotop-bpf-bench-{}", std::process::id());
    // The runs before this one quit at once and leave their probes to be detached: by a
    // child, then by the kernel's own deferred release (RCU grace periods under the
    // tracepoint lock). Attaching meanwhile waits for all of it (a first frame at ~1 s
    // instead of ~250 ms): measured apart, and said.
    let detach = wait_for_detached(&[binary], programs_before)?;
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
    // The status line ("every 1.0s") is drawn with the first frame, before the probes load;
    // the key line says so until they are (`app::STARTING`).
    let first = wait("every ", started)?;
    let attached = {
        let deadline = started + Duration::from_secs(20);
        loop {
            let text = screen()?;
            if text.contains("every ") && !text.contains("loading the probes") {
                break started.elapsed();
            }
            if Instant::now() > deadline {
                bail!("the live view never attached its probes:\n{text}");
            }
            thread::sleep(Duration::from_millis(2));
        }
    };
    thread::sleep(Duration::from_secs(2));
    let pressed = Instant::now();
    run(cmd("tmux").args(["send-keys", "-t", &session, "q"]))?;
    let quit = wait("EXIT=", pressed)?;
    let fio = load
        .join()
        .map_err(|_| anyhow::anyhow!("fio thread panicked"))??;
    let (first_ms, quit_ms) = (first.as_secs_f64() * 1e3, quit.as_secs_f64() * 1e3);
    let attached_ms = attached.as_secs_f64() * 1e3;
    println!(
        "  live view under {:.0}k IOPS: first frame {first_ms:.0} ms after launch, the probes attached {attached_ms:.0} ms, q to shell {quit_ms:.0} ms (tmux polled every 2 ms)",
        fio.iops / 1e3
    );
    Ok(vec![
        figure(
            "live view: launch to first frame, under load",
            format!("{first_ms:.0} ms"),
            &format!("<= {TARGET_FIRST_FRAME_MS:.0} ms"),
            Some(first_ms <= TARGET_FIRST_FRAME_MS),
        ),
        figure(
            "live view: launch to the probes attached, under load",
            format!("{attached_ms:.0} ms"),
            "(context)",
            None,
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
pub(super) fn bpf_programs_loaded() -> usize {
    std::fs::read_to_string("/proc/kallsyms").map_or(0, |symbols| {
        symbols
            .lines()
            .filter(|line| line.contains(" bpf_prog_"))
            .count()
    })
}

/// Waits (at most 20 s) until no process runs one of `binaries` (the children that earlier
/// runs left to detach their probes) and the kernel has freed their programs: back to
/// `programs_before`. Returns how long that took.
pub(super) fn wait_for_detached(binaries: &[&Path], programs_before: usize) -> Result<Duration> {
    let started = Instant::now();
    let binaries = binaries
        .iter()
        .map(|b| {
            b.canonicalize()
                .with_context(|| format!("resolve {}", b.display()))
        })
        .collect::<Result<Vec<_>>>()?;
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
                    && std::fs::read_link(entry.path().join("exe"))
                        .is_ok_and(|exe| binaries.contains(&exe))
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
pub(super) struct KillSession(String);

impl Drop for KillSession {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}
