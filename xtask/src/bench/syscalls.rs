//! The sixth shape: a host's other system calls. A web server or a database's network side
//! makes millions of system calls a second that are no I/O; a tracer of I/O should cost them
//! nothing. A loop of `getppid` on every CPU, alone and under `iotop-bpf --json` in
//! interleaved rounds: its rate with the tool against without (statistics off), and the
//! tool's BPF time per call (statistics on). The peers trace no system call and are not run.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    Args, Figure, figure,
    load::wait_for_detached,
    median,
    round::{Measured, Tracer, under},
};

/// BPF time per call a tracer may add where the kernel has trampolines (issue 27).
const TARGET_NS: f64 = 5.0;
/// The loop's rate it must keep there.
const TARGET_RATIO: f64 = 0.99;

/// Calls made, and in how long.
#[derive(Clone, Copy)]
struct Rate {
    calls: u64,
    secs: f64,
}

impl Rate {
    fn per_sec(self) -> f64 {
        self.calls as f64 / self.secs
    }
}

/// `getppid` in a loop on one thread per CPU for `seconds`.
fn getppid_loop(seconds: u32) -> Rate {
    let cpus = thread::available_parallelism().map_or(1, usize::from);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..cpus)
        .map(|_| {
            let (stop, calls) = (Arc::clone(&stop), Arc::clone(&calls));
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // A real system call each time (glibc neither caches nor vDSOs it).
                    std::hint::black_box(std::os::unix::process::parent_id());
                    n += 1;
                }
                calls.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(u64::from(seconds)));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    Rate {
        calls: calls.load(Ordering::Relaxed),
        secs: started.elapsed().as_secs_f64(),
    }
}

/// One round: the loop alone, under the tool, and under the tool with statistics.
struct Round {
    alone: Rate,
    plain: Rate,
    cost: Option<Measured<Rate>>,
}

/// The rounds and their figures.
pub(super) fn bench(
    args: &Args,
    binary: &Path,
    programs_before: usize,
    ticks_per_sec: f64,
) -> Result<Vec<Figure>> {
    println!(
        "\nbench: {} rounds of {} s of a getppid loop on every CPU",
        args.runs, args.seconds
    );
    let tracer = Tracer::Iotop(binary, false);
    let mut rounds = Vec::new();
    for round_no in 1..=args.runs {
        wait_for_detached(&[binary], programs_before)?;
        let alone = getppid_loop(args.seconds);
        wait_for_detached(&[binary], programs_before)?;
        let plain = under(tracer, false, ticks_per_sec, || {
            Ok(getppid_loop(args.seconds))
        })?
        .what;
        let cost = if args.no_bpf_stats {
            None
        } else {
            wait_for_detached(&[binary], programs_before)?;
            Some(under(tracer, true, ticks_per_sec, || {
                Ok(getppid_loop(args.seconds))
            })?)
        };
        println!(
            "round {round_no}/{}: alone {:.2}M calls/s | iotop-bpf {:.2}M ({:.1}%){}",
            args.runs,
            alone.per_sec() / 1e6,
            plain.per_sec() / 1e6,
            100.0 * plain.per_sec() / alone.per_sec(),
            cost.as_ref().map_or_else(String::new, |c| format!(
                ", {:.1} ns per call",
                bpf_ns(c) / c.what.calls as f64
            )),
        );
        rounds.push(Round { alone, plain, cost });
    }
    Ok(report(&rounds))
}

fn bpf_ns(m: &Measured<Rate>) -> f64 {
    m.programs.iter().map(|(_, p)| p.ns as f64).sum()
}

fn report(rounds: &[Round]) -> Vec<Figure> {
    let name = "getppid loop, every CPU";
    let ratio = median(rounds.iter().map(|r| r.plain.per_sec() / r.alone.per_sec()));
    let costs: Vec<&Measured<Rate>> = rounds.iter().filter_map(|r| r.cost.as_ref()).collect();
    let calls: u64 = costs.iter().map(|c| c.what.calls).sum();
    let per_call = |v: f64| v / calls.max(1) as f64;
    let ns = per_call(costs.iter().map(|c| bpf_ns(c)).sum());
    let runs = per_call(
        costs
            .iter()
            .flat_map(|c| c.programs.iter())
            .map(|(_, p)| p.runs as f64)
            .sum(),
    );
    // With trampolines the tool runs nothing on a getppid; a program that still runs about
    // once per call is the raw sys_enter/sys_exit fallback.
    let raw_fallback = costs
        .iter()
        .flat_map(|c| c.programs.iter())
        .any(|(n, p)| n.contains("sys_e") && p.runs * 2 >= calls);
    let scope = if raw_fallback {
        " where the kernel has trampolines (none here: the raw sys_enter/sys_exit run)"
    } else {
        ""
    };
    let listed = costs
        .iter()
        .flat_map(|c| c.programs.iter())
        .filter(|(_, p)| p.runs * 100 >= calls)
        .map(|(n, p)| format!("{n} {:.1} runs", p.runs as f64 / calls.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        figure(
            &format!("{name}: BPF time per call, iotop-bpf"),
            if costs.is_empty() {
                "not measured".into()
            } else {
                format!("{ns:.1} ns")
            },
            &format!("<= {TARGET_NS} ns{scope}"),
            (!raw_fallback && !costs.is_empty()).then_some(ns <= TARGET_NS),
        ),
        figure(
            &format!("{name}: programs run per call, iotop-bpf"),
            format!("{runs:.2}"),
            &format!(
                "(context: {})",
                if listed.is_empty() { "none" } else { &listed }
            ),
            None,
        ),
        figure(
            &format!("{name}: calls/s with iotop-bpf / without (median)"),
            format!("{ratio:.3}"),
            &format!(">= {TARGET_RATIO}{scope}"),
            (!raw_fallback).then_some(ratio >= TARGET_RATIO),
        ),
    ]
}
