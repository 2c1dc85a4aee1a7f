//! `cargo xtask bench`: what iotop-bpf costs, measured beside a peer and the kernel's own
//! counts in one run, each figure printed beside its target.
//!
//! 1. Six I/O shapes ([`shapes::ALL`]: io_uring QD32 and psync random reads, libaio random
//!    direct writes, buffered write-back, a 128-byte write + fsync logger, in one thread and
//!    in four), each by fio on a
//!    RAM-backed loop device, in interleaved rounds of (a) no tracer, (b) `iotop-bpf
//!    --json`, (c) each peer ([`shapes::PEERS`]: a bpftrace script keeping one latency
//!    histogram, libbpf-tools' biolatency and biotop). Rounds are interleaved because this
//!    machine's IOPS drift: passes within a round are compared. Then (b) and (c) again with
//!    `kernel.bpf_stats_enabled` for BPF time (the statistics slow every program run, so
//!    IOPS come from the passes without them); I/Os are the disk's own counts, or fio's
//!    calls where the disk sees them merged (buffered, the logger). A peer that cannot run on
//!    this kernel is said so, with its own message.
//!    With statistics, two empty programs are attached too (`floor.rs`): what the
//!    statistics add to every run, so each tracer's time is also shown less its runs times
//!    that floor, beside its programs run per I/O.
//! 2. A loop of `getppid` on every CPU (`syscalls.rs`): what the tool costs a host's system
//!    calls that are no I/O.
//! 3. iotop-bpf at ~200k events/s, recording: its CPU, its memory, the recording's bytes per
//!    event and mode, and how long SIGINT takes to give the prompt back.
//! 4. The live view in tmux under the same load: time to the first frame, and from `q` to
//!    the shell.

use std::{
    env,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};

use crate::util::{cmd, find_in_path, is_root, release_binary, run, stdout_of};

mod budget;
mod cost;
mod fio;
mod floor;
mod load;
mod modes;
mod process;
mod report;
mod round;
mod shapes;
mod syscalls;
use load::{bpf_programs_loaded, live_view, under_load};
use report::{bpf_per_io, median, report};
use round::{measure_round, print_round};
use shapes::{PEERS, Peer, PerIo, Workload};

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
    /// Only these shapes (comma-separated: uring, psync, libaio, buffered, lab001,
    /// syscalls), and no figures under load: a look at one shape's cost, not the whole table.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Another iotop-bpf binary measured beside this one in every round (an A/B of two
    /// builds: copy the earlier build's binary aside first).
    #[arg(long)]
    compare: Option<PathBuf>,
    /// Leave the peers out (an A/B of builds needs no peer).
    #[arg(long)]
    no_peers: bool,
    /// Leave iotop-bpf's aggregation-mode passes out.
    #[arg(long)]
    no_aggregating: bool,
}

/// `--only`'s name of the system-call loop, which is no fio shape.
const SYSCALLS: &str = "syscalls";

/// The targets (issues 9 and 20), printed beside what was measured; per shape in
/// [`shapes`].
const TARGET_CPU_PCT_AT_200K: f64 = 5.0;
const TARGET_RSS_MIB: f64 = 40.0;
const TARGET_RECORDING_BYTES_PER_EVENT: f64 = 24.0;
const TARGET_QUIT_MS: f64 = 250.0;
/// Issue 20 (issue 9 had asked 300 ms).
const TARGET_FIRST_FRAME_MS: f64 = 250.0;
/// Events per second for the CPU, memory and recording figures.
const LOAD_IOPS: u32 = 200_000;

pub fn bench(args: &Args) -> Result<()> {
    if !args.prepared {
        crate::setup::setup(crate::setup::Scope::Bench)?;
        crate::build_release()?;
    }
    if !is_root() {
        // Build as the user (no root-owned files in target/); only the measuring needs root.
        return rerun_with_sudo(args);
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
    // Peers that cannot run on this kernel, with their reason: tried once, then left out.
    let mut unable: Vec<(Peer, String)> = Vec::new();
    for peer in PEERS {
        if !peer.installed() {
            unable.push((peer, format!("{} is not installed", peer.program())));
        }
    }
    if let Some(unknown) = args
        .only
        .iter()
        .find(|o| *o != SYSCALLS && !shapes::ALL.iter().any(|w| w.short() == o.as_str()))
    {
        bail!(
            "bench --only: no shape {unknown:?} (uring, psync, libaio, buffered, lab001, syscalls)"
        );
    }
    let compare = args.compare.as_deref();
    if let Some(other) = compare
        && !other.is_file()
    {
        bail!("bench --compare: {} is not a file", other.display());
    }
    let binaries: Vec<&Path> = std::iter::once(binary.as_path()).chain(compare).collect();
    for workload in shapes::ALL
        .into_iter()
        .filter(|w| args.only.is_empty() || args.only.iter().any(|o| o == w.short()))
    {
        println!(
            "\nbench: {} rounds of {} s fio {} on {} (1 GiB file in /dev/shm)",
            args.runs,
            args.seconds,
            workload.describe(),
            device.dev
        );
        let mut rounds = Vec::new();
        for round_no in 1..=args.runs {
            let round = measure_round(
                args,
                &binaries,
                &device,
                workload,
                programs_before,
                ticks_per_sec,
                &mut unable,
            )?;
            print_round(round_no, args.runs, workload, &round);
            rounds.push(round);
        }
        table.extend(report(workload, &rounds));
    }
    if args.only.is_empty() || args.only.iter().any(|o| o == SYSCALLS) {
        table.extend(syscalls::bench(
            args,
            &binary,
            programs_before,
            ticks_per_sec,
        )?);
    }
    for (peer, why) in &unable {
        table.push(figure(
            &format!("{}: not measured", peer.name()),
            why.clone(),
            "(a peer)",
            None,
        ));
    }

    if !args.only.is_empty() {
        print_table(&table);
        return Ok(());
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

/// Runs bench again as root through sudo, with the same options, once built as the user.
fn rerun_with_sudo(args: &Args) -> Result<()> {
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
    if !args.only.is_empty() {
        sudo.arg("--only").arg(args.only.join(","));
    }
    if let Some(other) = &args.compare {
        sudo.arg("--compare").arg(other);
    }
    for (set, flag) in [
        (args.no_peers, "--no-peers"),
        (args.no_aggregating, "--no-aggregating"),
    ] {
        if set {
            sudo.arg(flag);
        }
    }
    run(&mut sudo)
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

/// A loop device over a sparse 1 GiB file in /dev/shm, detached and deleted on drop: the
/// demo's and the tests' (`iotop-bpf-loopfs`), without a filesystem (fio writes to it).
struct LoopDevice {
    /// `/dev/loop7`.
    dev: String,
    _device: iotop_bpf_loopfs::LoopDevice,
}

impl LoopDevice {
    fn create() -> Result<Self> {
        let file = PathBuf::from(format!(
            "/dev/shm/iotop-bpf-bench-{}.img",
            std::process::id()
        ));
        let device =
            iotop_bpf_loopfs::LoopDevice::create(file, 1 << 30).map_err(anyhow::Error::msg)?;
        // A loop device keeps the scheduler its last user set (a test's mq-deadline costs
        // every tracer's probes, and the queue, more per request): the shapes are measured
        // without one, as a loop device comes.
        device
            .scheduler_none()
            .with_context(|| format!("setting {}'s scheduler to none", device.name))?;
        Ok(Self {
            dev: device.device.clone(),
            _device: device,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{median, process::events_field};

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
