//! One round of a shape: fio alone, then under each tracer, each without and with BPF
//! statistics; and what one pass under a tracer measured.

use std::{
    path::Path,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

use super::{
    Args, LoopDevice, PEERS, Peer, Workload,
    fio::{Fio, fio},
    floor::{Floor, FloorRuns},
    load::wait_for_detached,
    process::{
        Background, BpfStatsSwitch, ProgRun, cpu_ticks, events_field, prog_deltas, prog_stats,
    },
};
use crate::util::cmd;

/// One round: fio alone, under iotop-bpf and under each peer, and under each with BPF
/// statistics on.
pub(super) struct Round {
    pub baseline: Fio,
    pub iotop: Traced,
    pub iotop_cost: Option<Traced>,
    /// iotop-bpf in aggregation mode (unless `--no-aggregating`).
    pub summed: Option<Traced>,
    pub summed_cost: Option<Traced>,
    /// Another build measured beside this one (`--compare`).
    pub compared: Option<Traced>,
    pub compared_cost: Option<Traced>,
    pub peers: Vec<PeerRun>,
}

pub(super) struct PeerRun {
    pub peer: Peer,
    pub plain: Traced,
    pub cost: Option<Traced>,
}

#[derive(Clone, Copy)]
pub(super) enum Tracer<'a> {
    /// The binary, and whether in aggregation mode from the start.
    Iotop(&'a Path, bool),
    Peer(Peer),
}

pub(super) struct Traced {
    pub fio: Fio,
    /// CPU time of the user-space process per second of fio, iotop-bpf only.
    pub cpu_share: Option<f64>,
    pub received: u64,
    pub dropped: u64,
    /// BPF run time of the tool's programs while fio ran.
    pub bpf_ns: Option<u64>,
    /// The same, program by program (with statistics on).
    pub programs: Vec<(String, ProgRun)>,
    /// What the floor programs ran meanwhile (with statistics on).
    pub floor: FloorRuns,
}

impl Traced {
    pub fn bpf_ns_per_io(&self, workload: Workload) -> Option<f64> {
        let ns = self.bpf_ns?;
        let ios = self.fio.ios(workload);
        (ios > 0).then(|| ns as f64 / ios as f64)
    }
}

/// One round of `workload`: fio alone, then under each tracer, each also with BPF statistics
/// on unless `--no-bpf-stats`. A peer that cannot run is added to `unable` and left out of
/// this round and the next.
pub(super) fn measure_round(
    args: &Args,
    binaries: &[&Path],
    device: &LoopDevice,
    workload: Workload,
    programs_before: usize,
    ticks_per_sec: f64,
    unable: &mut Vec<(Peer, String)>,
) -> Result<Round> {
    let stats = !args.no_bpf_stats;
    let pass = |tracer: Tracer, stats: bool| {
        // The previous tracer's programs are freed by the kernel seconds after it
        // exited and run on every I/O meanwhile: measured next to them, a pass pays
        // for both (the figures of every tracer rose ~1.5x when passes followed each
        // other at once).
        wait_for_detached(binaries, programs_before)?;
        traced(tracer, device, workload, args.seconds, stats, ticks_per_sec)
    };
    // A tracer's pass without statistics, then with (unless `--no-bpf-stats`).
    let both = |tracer: Tracer| -> Result<(Traced, Option<Traced>)> {
        let plain = pass(tracer, false)?;
        let cost = if stats {
            Some(pass(tracer, true)?)
        } else {
            None
        };
        Ok((plain, cost))
    };
    wait_for_detached(binaries, programs_before)?;
    let baseline = fio(&device.dev, workload, args.seconds, None)?;
    let (iotop, iotop_cost) = both(Tracer::Iotop(binaries[0], false))?;
    // The same with aggregation mode on from the start (it switches on by itself
    // only past its rate, which these shapes may not reach).
    let (summed, summed_cost) = if args.no_aggregating {
        (None, None)
    } else {
        let (plain, cost) = both(Tracer::Iotop(binaries[0], true))?;
        (Some(plain), cost)
    };
    let (compared, compared_cost) = match binaries.get(1) {
        Some(other) => {
            let (plain, cost) = both(Tracer::Iotop(other, false))?;
            (Some(plain), cost)
        }
        None => (None, None),
    };
    let mut peers = Vec::new();
    for peer in PEERS {
        if args.no_peers || unable.iter().any(|(p, _)| *p == peer) {
            continue;
        }
        match both(Tracer::Peer(peer)) {
            Ok((plain, cost)) => peers.push(PeerRun { peer, plain, cost }),
            Err(err) => {
                let why = format!("{err:#}");
                let why = why.lines().last().unwrap_or_default().to_owned();
                println!("  {} cannot run here: {why}", peer.name());
                unable.push((peer, why));
            }
        }
    }
    Ok(Round {
        baseline,
        iotop,
        iotop_cost,
        summed,
        summed_cost,
        compared,
        compared_cost,
        peers,
    })
}

/// A round's line: the IOPS of each pass against the baseline, and its BPF time per I/O.
pub(super) fn print_round(round_no: u32, runs: u32, workload: Workload, round: &Round) {
    let ns = |t: Option<&Traced>| {
        t.and_then(|t| t.bpf_ns_per_io(workload))
            .map_or("-".into(), |v| format!("{v:.0}"))
    };
    let base = round.baseline.iops;
    let pass = |name: &str, plain: Option<&Traced>, cost: Option<&Traced>| {
        plain.map_or_else(String::new, |p| {
            format!(
                " | {name} {:.1}k ({:.1}%, {} ns)",
                p.fio.iops / 1e3,
                100.0 * p.fio.iops / base,
                ns(cost)
            )
        })
    };
    println!(
        "round {round_no}/{runs}: baseline {:.1}k IOPS{}{}{}{}",
        base / 1e3,
        pass("iotop-bpf", Some(&round.iotop), round.iotop_cost.as_ref()),
        pass(
            "aggregating",
            round.summed.as_ref(),
            round.summed_cost.as_ref()
        ),
        pass(
            "compared",
            round.compared.as_ref(),
            round.compared_cost.as_ref()
        ),
        round
            .peers
            .iter()
            .map(|p| pass(p.peer.name(), Some(&p.plain), p.cost.as_ref()))
            .collect::<String>(),
    );
}

/// A tracer started in the background, its programs attached.
pub(super) struct Started {
    pub tool: Background,
    pub is_iotop: bool,
}

/// Starts `tracer` and waits until its programs are attached.
pub(super) fn start(tracer: Tracer) -> Result<Started> {
    let started = Instant::now();
    let tool = match tracer {
        Tracer::Iotop(binary, aggregating) => {
            let mut command = cmd(binary);
            command.args(["--batch", "--json", "-d", "1"]);
            if aggregating {
                command.env("IOTOP_BPF_AGGREGATE_ABOVE", "0");
            }
            let mut tool = Background::spawn("iotop-bpf", &mut command)?;
            // The first line means the programs are loaded and attached.
            tool.wait_line(Duration::from_secs(60))?;
            thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
            tool
        }
        Tracer::Peer(peer) => {
            let tool = Background::spawn(peer.name(), cmd(peer.program()).args(peer.args()))?;
            // bpftrace prints "Attaching" before it attaches; the others print nothing
            // until their first report.
            thread::sleep(Duration::from_secs(3));
            tool
        }
    };
    Ok(Started {
        tool,
        is_iotop: matches!(tracer, Tracer::Iotop(..)),
    })
}

/// What `measure` did under a started tracer: its result, the tracer's CPU share, its
/// programs' run time (with `stats`) and the floor's meanwhile.
pub(super) struct Measured<T> {
    pub what: T,
    pub cpu_share: Option<f64>,
    pub programs: Vec<(String, ProgRun)>,
    pub floor: FloorRuns,
    pub lines: Vec<String>,
}

/// Runs `measure` under `tracer`; with `stats`, kernel.bpf_stats_enabled is on (and
/// restored after) and the floor programs are attached.
pub(super) fn under<T>(
    tracer: Tracer,
    stats: bool,
    ticks_per_sec: f64,
    measure: impl FnOnce() -> Result<T>,
) -> Result<Measured<T>> {
    let stats = stats.then(BpfStatsSwitch::enable).flatten();
    let floor = stats.as_ref().and_then(|_| Floor::attach());
    let Started { mut tool, is_iotop } = start(tracer)?;
    tool.check_alive()?;
    let pid = tool.child.id();
    let floor_before = floor.as_ref().map(Floor::runs);
    let (cpu_before, bpf_before, t0) = (cpu_ticks(pid)?, prog_stats(pid), Instant::now());
    let what = measure()?;
    let (cpu_after, bpf_after, wall) = (cpu_ticks(pid)?, prog_stats(pid), t0.elapsed());
    let floor = match (floor.as_ref().map(Floor::runs), floor_before) {
        (Some(after), Some(before)) => FloorRuns {
            raw: after.raw.since(before.raw),
            btf: after.btf.since(before.btf),
        },
        _ => FloorRuns::default(),
    };
    // Named now, while the programs are loaded (/proc/kallsyms loses them once it exits).
    let programs = match (&bpf_before, &bpf_after) {
        (Some(before), Some(after)) if stats.is_some() => prog_deltas(before, after),
        _ => Vec::new(),
    };
    tool.check_alive()?;
    let (lines, _) = tool.stop()?;
    Ok(Measured {
        what,
        cpu_share: is_iotop.then(|| {
            cpu_after.saturating_sub(cpu_before) as f64 / ticks_per_sec / wall.as_secs_f64()
        }),
        programs,
        floor,
        lines: if is_iotop { lines } else { Vec::new() },
    })
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
    let m = under(tracer, stats, ticks_per_sec, || {
        fio(&device.dev, workload, seconds, None)
    })?;
    let (received, dropped) = if m.cpu_share.is_some() {
        event_totals(&m.lines)?
    } else {
        (0, 0)
    };
    let bpf_ns = (!m.programs.is_empty()).then(|| m.programs.iter().map(|(_, p)| p.ns).sum());
    Ok(Traced {
        fio: m.what,
        cpu_share: m.cpu_share,
        received,
        dropped,
        bpf_ns,
        programs: m.programs,
        floor: m.floor,
    })
}

/// Records received and dropped, summed over iotop-bpf's JSON lines.
pub(super) fn event_totals(lines: &[String]) -> Result<(u64, u64)> {
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
