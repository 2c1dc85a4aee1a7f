//! The figures of a shape's rounds: BPF time per I/O beside the peers' and the bound it is
//! held to, IOPS against the baseline, CPU, events; medians over the rounds.

use super::{
    Figure, MAX_TIMES_BEST_PEER, PEERS, Peer, PeerRun, PerIo, Round, Traced, Workload, budget,
    figure, modes,
};

/// Total BPF time over total I/Os of some passes.
pub(super) fn bpf_per_io<'a>(
    workload: Workload,
    passes: impl Iterator<Item = &'a Traced>,
) -> Option<f64> {
    let (ns, ios) = passes.fold((0, 0), |(ns, ios), t| match t.bpf_ns {
        Some(t_ns) => (ns + t_ns, ios + t.fio.ios(workload)),
        None => (ns, ios),
    });
    (ios > 0).then(|| ns as f64 / ios as f64)
}

pub(super) fn report(workload: Workload, rounds: &[Round]) -> Vec<Figure> {
    let name = workload.describe();
    let unit = match workload.per_io() {
        PerIo::Request => "per I/O",
        PerIo::Call => "per call",
    };
    let iotop_ratio = median(rounds.iter().map(|r| r.iotop.fio.iops / r.baseline.iops));
    let cpu = median(rounds.iter().filter_map(|r| r.iotop.cpu_share));
    let received: u64 = rounds.iter().map(|r| r.iotop.received).sum();
    let dropped: u64 = rounds.iter().map(|r| r.iotop.dropped).sum();
    let iotop_ns = bpf_per_io(
        workload,
        rounds.iter().filter_map(|r| r.iotop_cost.as_ref()),
    );
    let peers: Vec<(Peer, Option<f64>, f64)> = PEERS
        .iter()
        .filter_map(|&peer| {
            let runs: Vec<&PeerRun> = rounds
                .iter()
                .flat_map(|r| r.peers.iter().filter(|p| p.peer == peer))
                .collect();
            if runs.is_empty() {
                return None;
            }
            let ns = bpf_per_io(workload, runs.iter().filter_map(|p| p.cost.as_ref()));
            let ratio = median(rounds.iter().flat_map(|r| {
                r.peers
                    .iter()
                    .filter(|p| p.peer == peer)
                    .map(|p| p.plain.fio.iops / r.baseline.iops)
            }));
            Some((peer, ns, ratio))
        })
        .collect();
    let best_peer = peers
        .iter()
        .filter_map(|(_, ns, _)| *ns)
        .min_by(f64::total_cmp);
    let bpftrace_ns = peers
        .iter()
        .find(|(p, ..)| *p == Peer::Bpftrace)
        .and_then(|(_, ns, _)| *ns);
    let ns = |v: Option<f64>| v.map_or_else(|| "not measured".into(), |v| format!("{v:.0} ns"));
    // The bound: the absolute target where there is one, the best peer's time x1.2, and for
    // psync the bpftrace script's own time.
    let mut bound = best_peer.map(|b| b * MAX_TIMES_BEST_PEER);
    let mut target = format!("<= {MAX_TIMES_BEST_PEER}x the best peer");
    if let Some(abs) = workload.bpf_ns_target() {
        bound = Some(bound.map_or(abs, |b| b.min(abs)));
        target = format!("<= {abs:.0} ns and {target}");
    }
    if workload == Workload::Psync {
        bound = match (bound, bpftrace_ns) {
            (Some(b), Some(t)) => Some(b.min(t)),
            (b, t) => b.or(t),
        };
        target = format!("<= bpftrace's, {target}");
    }
    let mut figures = vec![figure(
        &format!("{name}: BPF time {unit}, iotop-bpf"),
        ns(iotop_ns),
        &target,
        match (iotop_ns, bound) {
            (Some(i), Some(b)) => Some(i <= b),
            _ => Some(false),
        },
    )];
    for (peer, peer_ns, _) in &peers {
        figures.push(figure(
            &format!("{name}: BPF time {unit}, {}", peer.name()),
            ns(*peer_ns),
            "(a peer)",
            None,
        ));
    }
    figures.push(figure(
        &format!("{name}: IOPS with iotop-bpf / without (median)"),
        format!("{iotop_ratio:.3}"),
        &workload
            .iops_ratio_target()
            .map_or_else(|| "(context)".into(), |t| format!(">= {t:.2}")),
        workload.iops_ratio_target().map(|t| iotop_ratio >= t),
    ));
    for (peer, _, ratio) in &peers {
        figures.push(figure(
            &format!("{name}: IOPS with {} / without (median)", peer.name()),
            format!("{ratio:.3}"),
            "(a peer)",
            None,
        ));
    }
    figures.push(figure(
        &format!("{name}: iotop-bpf CPU, % of a core"),
        format!("{:.1}%", 100.0 * cpu),
        "(context)",
        None,
    ));
    figures.extend(modes::report(workload, rounds, iotop_ns, cpu));
    figures.extend(cost_context(
        workload,
        rounds,
        (iotop_ns, iotop_ratio, cpu),
        &peers,
    ));
    figures.push(figure(
        &format!("{name}: events received / dropped"),
        format!("{received} / {dropped}"),
        "0 dropped",
        Some(dropped == 0),
    ));
    println!("\n{name}: medians over {} rounds", rounds.len());
    for f in &figures {
        println!("  {}: {}", f.what, f.measured);
    }
    figures
}

/// What the machine leaves a tracer, and where each tracer's BPF time goes: iotop-bpf's
/// (BPF time per I/O, IOPS ratio, CPU share) beside the peers' (BPF time, IOPS ratio).
fn cost_context(
    workload: Workload,
    rounds: &[Round],
    (iotop_ns, iotop_ratio, cpu): (Option<f64>, f64, f64),
    peers: &[(Peer, Option<f64>, f64)],
) -> Vec<Figure> {
    let iotop_iops = median(rounds.iter().map(|r| r.iotop.fio.iops));
    let mut added = vec![budget::Added {
        name: "iotop-bpf",
        bpf_ns: iotop_ns,
        // Its own process's CPU per I/O, beside the kernel's BPF time.
        user_ns: if iotop_iops > 0.0 {
            cpu * 1e9 / iotop_iops
        } else {
            0.0
        },
        measured_ratio: iotop_ratio,
    }];
    added.extend(peers.iter().map(|(peer, ns, ratio)| budget::Added {
        name: peer.name(),
        bpf_ns: *ns,
        user_ns: 0.0,
        measured_ratio: *ratio,
    }));
    let mut figures = budget::report(workload, rounds, &added);
    figures.push(by_program(
        workload,
        "iotop-bpf",
        rounds.iter().filter_map(|r| r.iotop_cost.as_ref()),
    ));
    for (peer, ..) in peers {
        figures.push(by_program(
            workload,
            peer.name(),
            rounds
                .iter()
                .flat_map(|r| r.peers.iter().filter(|p| p.peer == *peer))
                .filter_map(|p| p.cost.as_ref()),
        ));
    }
    figures
}

/// Where a tracer's BPF time goes: each program's time per I/O and runs per I/O, summed over
/// the passes with statistics, the costliest first.
fn by_program<'a>(
    workload: Workload,
    tracer: &str,
    passes: impl Iterator<Item = &'a Traced>,
) -> Figure {
    let mut programs: Vec<(String, u64, u64)> = Vec::new();
    let mut ios = 0;
    for pass in passes {
        ios += pass.fio.ios(workload);
        for (name, run) in &pass.programs {
            match programs.iter_mut().find(|(n, ..)| n == name) {
                Some((_, ns, runs)) => (*ns, *runs) = (*ns + run.ns, *runs + run.runs),
                None => programs.push((name.clone(), run.ns, run.runs)),
            }
        }
    }
    // Programs that ran for nothing to speak of per I/O (an exit probe) are left out.
    programs.retain(|(_, ns, _)| *ns >= ios.max(1));
    programs.sort_by_key(|(_, ns, _)| std::cmp::Reverse(*ns));
    let per_io = |v: u64| v as f64 / ios.max(1) as f64;
    let listed = programs
        .iter()
        .take(8)
        .map(|(name, ns, runs)| format!("{name} {:.0} ns ({:.2} runs)", per_io(*ns), per_io(*runs)))
        .collect::<Vec<_>>()
        .join(", ");
    figure(
        &format!(
            "{}: BPF time per I/O by program, {tracer}",
            workload.describe()
        ),
        if listed.is_empty() {
            "not measured".into()
        } else {
            listed
        },
        "(context: where it goes)",
        None,
    )
}

pub(super) fn median(values: impl Iterator<Item = f64>) -> f64 {
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
