//! The figures of a shape's rounds: BPF time per I/O beside the peers' and the bound it is
//! held to, IOPS against the baseline, CPU, events; medians over the rounds.

use super::{
    Figure, PEERS, Peer, PerIo, Workload, budget,
    cost::{Cost, FloorNs},
    figure, modes,
    round::{PeerRun, Round, Traced},
    shapes::PeerRef,
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

/// A peer's figures over the rounds.
pub(super) struct PeerFigures {
    pub peer: Peer,
    pub cost: Option<Cost>,
    /// Median IOPS ratio without statistics.
    pub ratio: f64,
}

/// Every pass with statistics of the rounds, whichever tracer.
fn stats_passes(rounds: &[Round]) -> impl Iterator<Item = &Traced> {
    rounds.iter().flat_map(|r| {
        [&r.iotop_cost, &r.summed_cost, &r.compared_cost]
            .into_iter()
            .filter_map(Option::as_ref)
            .chain(r.peers.iter().filter_map(|p| p.cost.as_ref()))
    })
}

fn peer_figures(workload: Workload, rounds: &[Round], floor: FloorNs) -> Vec<PeerFigures> {
    PEERS
        .iter()
        .filter_map(|&peer| {
            let runs: Vec<&PeerRun> = rounds
                .iter()
                .flat_map(|r| r.peers.iter().filter(|p| p.peer == peer))
                .collect();
            if runs.is_empty() {
                return None;
            }
            let cost = Cost::of(workload, runs.iter().filter_map(|p| p.cost.as_ref()), floor);
            let ratio = median(rounds.iter().flat_map(|r| {
                r.peers
                    .iter()
                    .filter(|p| p.peer == peer)
                    .map(|p| p.plain.fio.iops / r.baseline.iops)
            }));
            Some(PeerFigures { peer, cost, ratio })
        })
        .collect()
}

/// `ns` as the table writes it: the time, and beside it the time less the floor.
fn ns_text(cost: Option<Cost>) -> String {
    match cost {
        None => "not measured".into(),
        Some(Cost {
            ns,
            net_ns: Some(net),
            ..
        }) => format!("{ns:.0} ns ({net:.0} net)"),
        Some(c) => format!("{:.0} ns", c.ns),
    }
}

/// The tool's BPF time against the shape's bounds: the target as written, and whether it
/// holds (`None`: no bound, or a peer it needs was not measured).
fn bpf_verdict(
    workload: Workload,
    iotop: Option<Cost>,
    peers: &[PeerFigures],
) -> (String, Option<bool>) {
    let bounds = workload.bpf_bounds();
    if bounds.is_empty() {
        return ("(context: the peers trace no write call)".into(), None);
    }
    let ns_of = |peer: Peer| {
        peers
            .iter()
            .find(|p| p.peer == peer)
            .and_then(|p| p.cost)
            .map(|c| c.ns)
    };
    let best = peers
        .iter()
        .filter_map(|p| p.cost.map(|c| c.ns))
        .min_by(f64::total_cmp);
    let mut texts = Vec::new();
    let mut met = Some(true);
    for &(whose, factor) in bounds {
        let (name, peer_ns) = match whose {
            PeerRef::Best => ("the best peer's".to_owned(), best),
            PeerRef::One(peer) => (format!("{}'s", peer.program_name()), ns_of(peer)),
        };
        texts.push(if factor == 1.0 {
            format!("<= {name}")
        } else {
            format!("<= {factor}x {name}")
        });
        met = match (met, iotop, peer_ns) {
            (Some(m), Some(i), Some(p)) => Some(m && i.ns <= factor * p),
            (_, None, _) => Some(false),
            _ => None,
        };
    }
    (texts.join(" and "), met)
}

pub(super) fn report(workload: Workload, rounds: &[Round]) -> Vec<Figure> {
    let name = workload.describe();
    let unit = match workload.per_io() {
        PerIo::Request => "per I/O",
        PerIo::Call => "per call",
    };
    let floor = FloorNs::of(stats_passes(rounds));
    let iotop_ratio = median(rounds.iter().map(|r| r.iotop.fio.iops / r.baseline.iops));
    let cpu = median(rounds.iter().filter_map(|r| r.iotop.cpu_share));
    let received: u64 = rounds.iter().map(|r| r.iotop.received).sum();
    let dropped: u64 = rounds.iter().map(|r| r.iotop.dropped).sum();
    let iotop = Cost::of(
        workload,
        rounds.iter().filter_map(|r| r.iotop_cost.as_ref()),
        floor,
    );
    let iotop_ns = iotop.map(|c| c.ns);
    let peers = peer_figures(workload, rounds, floor);
    let (target, met) = bpf_verdict(workload, iotop, &peers);
    let mut figures = vec![figure(
        &format!("{name}: BPF time {unit}, iotop-bpf"),
        ns_text(iotop),
        &target,
        met,
    )];
    for p in &peers {
        figures.push(figure(
            &format!("{name}: BPF time {unit}, {}", p.peer.name()),
            ns_text(p.cost),
            "(a peer)",
            None,
        ));
    }
    figures.push(figure(
        &format!("{name}: what statistics add per program run (floor)"),
        floor.describe(),
        "(context: empty programs, same passes)",
        None,
    ));
    figures.extend(runs_figures(workload, iotop, &peers));
    figures.extend(iops_figures(workload, iotop_ratio, &peers));
    figures.extend(compared(workload, rounds, floor));
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

/// Programs run per I/O, the tool's against its target, and the peers'.
fn runs_figures(workload: Workload, iotop: Option<Cost>, peers: &[PeerFigures]) -> Vec<Figure> {
    let name = workload.describe();
    let runs =
        |c: Option<Cost>| c.map_or_else(|| "not measured".into(), |c| format!("{:.2}", c.runs));
    let target = workload.runs_per_io_target();
    let mut figures = vec![figure(
        &format!("{name}: programs run per I/O, iotop-bpf"),
        runs(iotop),
        &target.map_or_else(|| "(context)".into(), |t| format!("<= {t}")),
        target.map(|t| iotop.is_some_and(|c| c.runs <= t)),
    )];
    figures.extend(peers.iter().map(|p| {
        figure(
            &format!("{name}: programs run per I/O, {}", p.peer.name()),
            runs(p.cost),
            "(a peer)",
            None,
        )
    }));
    figures
}

/// IOPS kept without statistics: the tool's against biolatency's less the margin, the peers'.
fn iops_figures(workload: Workload, iotop_ratio: f64, peers: &[PeerFigures]) -> Vec<Figure> {
    let name = workload.describe();
    let biolatency = peers
        .iter()
        .find(|p| p.peer == Peer::Biolatency)
        .map(|p| p.ratio);
    let (target, met) = match (workload.iops_kept_margin(), biolatency) {
        (Some(m), Some(b)) => (
            format!(">= biolatency's - {m} ({:.3})", b - m),
            Some(iotop_ratio >= b - m),
        ),
        (Some(m), None) => (format!(">= biolatency's - {m} (not measured)"), None),
        (None, _) => ("(context)".into(), None),
    };
    let mut figures = vec![figure(
        &format!("{name}: IOPS with iotop-bpf / without (median, statistics off)"),
        format!("{iotop_ratio:.3}"),
        &target,
        met,
    )];
    figures.extend(peers.iter().map(|p| {
        figure(
            &format!("{name}: IOPS with {} / without (median)", p.peer.name()),
            format!("{:.3}", p.ratio),
            "(a peer)",
            None,
        )
    }));
    figures
}

/// The build measured beside this one (`--compare`): its BPF time, runs and IOPS.
fn compared(workload: Workload, rounds: &[Round], floor: FloorNs) -> Vec<Figure> {
    let name = workload.describe();
    if rounds.iter().all(|r| r.compared.is_none()) {
        return Vec::new();
    }
    let cost = Cost::of(
        workload,
        rounds.iter().filter_map(|r| r.compared_cost.as_ref()),
        floor,
    );
    let ratio = median(
        rounds
            .iter()
            .filter_map(|r| r.compared.as_ref().map(|c| c.fio.iops / r.baseline.iops)),
    );
    vec![
        figure(
            &format!("{name}: BPF time per I/O, the compared build"),
            ns_text(cost),
            "(context: A/B)",
            None,
        ),
        figure(
            &format!("{name}: programs run per I/O, the compared build"),
            cost.map_or_else(|| "not measured".into(), |c| format!("{:.2}", c.runs)),
            "(context: A/B)",
            None,
        ),
        figure(
            &format!("{name}: IOPS with the compared build / without (median)"),
            format!("{ratio:.3}"),
            "(context: A/B)",
            None,
        ),
    ]
}

/// What the machine leaves a tracer, and where each tracer's BPF time goes: iotop-bpf's
/// (BPF time per I/O, IOPS ratio, CPU share) beside the peers' (BPF time, IOPS ratio).
fn cost_context(
    workload: Workload,
    rounds: &[Round],
    (iotop_ns, iotop_ratio, cpu): (Option<f64>, f64, f64),
    peers: &[PeerFigures],
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
    added.extend(peers.iter().map(|p| budget::Added {
        name: p.peer.name(),
        bpf_ns: p.cost.map(|c| c.ns),
        user_ns: 0.0,
        measured_ratio: p.ratio,
    }));
    let mut figures = budget::report(workload, rounds, &added);
    figures.push(by_program(
        workload,
        "iotop-bpf",
        rounds.iter().filter_map(|r| r.iotop_cost.as_ref()),
    ));
    for peer in peers.iter().map(|p| p.peer) {
        figures.push(by_program(
            workload,
            peer.name(),
            rounds
                .iter()
                .flat_map(|r| r.peers.iter().filter(|p| p.peer == peer))
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
