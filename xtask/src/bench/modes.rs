//! Streaming against aggregation mode, measured side by side in the same rounds: what each
//! costs per I/O here, and what that projects to at 1M and 2M IOPS (issue 20).

use super::{Figure, PerIo, Workload, bpf_per_io, figure, median, round::Round};

/// Rates the projection is made for, I/Os per second.
const PROJECTED: [f64; 2] = [1e6, 2e6];

/// The aggregating passes' figures beside streaming's, and the projections.
pub(super) fn report(
    workload: Workload,
    rounds: &[Round],
    streaming_ns: Option<f64>,
    streaming_cpu: f64,
) -> Vec<Figure> {
    if rounds.iter().all(|r| r.summed.is_none()) {
        return Vec::new();
    }
    let name = workload.describe();
    let unit = match workload.per_io() {
        PerIo::Request => "per I/O",
        PerIo::Call => "per call",
    };
    let summed_ns = bpf_per_io(
        workload,
        rounds.iter().filter_map(|r| r.summed_cost.as_ref()),
    );
    let summed_ratio = median(
        rounds
            .iter()
            .filter_map(|r| Some(r.summed.as_ref()?.fio.iops / r.baseline.iops)),
    );
    let summed_cpu = median(rounds.iter().filter_map(|r| r.summed.as_ref()?.cpu_share));
    let ns = |v: Option<f64>| v.map_or_else(|| "not measured".into(), |v| format!("{v:.0} ns"));
    let mut figures = vec![
        figure(
            &format!("{name}: BPF time {unit}, iotop-bpf aggregating"),
            ns(summed_ns),
            &format!("(streaming: {})", ns(streaming_ns)),
            None,
        ),
        figure(
            &format!("{name}: IOPS with iotop-bpf aggregating / without"),
            format!("{summed_ratio:.3}"),
            "(context)",
            None,
        ),
        figure(
            &format!("{name}: iotop-bpf CPU aggregating, % of a core"),
            format!("{:.1}%", 100.0 * summed_cpu),
            &format!("(streaming: {:.1}%)", 100.0 * streaming_cpu),
            None,
        ),
    ];
    if workload.per_io() == PerIo::Request {
        // The tool's CPU per I/O here, from its share of a core at the IOPS it ran under.
        let per_io = |cpu: f64, pick: fn(&Round) -> f64| {
            let iops = median(rounds.iter().map(pick));
            (iops > 0.0).then(|| cpu / iops)
        };
        let streaming_user = per_io(streaming_cpu, |r| r.iotop.fio.iops);
        let summed_user = per_io(summed_cpu, |r| {
            r.summed.as_ref().map_or(f64::NAN, |s| s.fio.iops)
        });
        for rate in PROJECTED {
            for (mode, bpf, user) in [
                ("streaming", streaming_ns, streaming_user),
                ("aggregating", summed_ns, summed_user),
            ] {
                let measured = match (bpf, user) {
                    (Some(bpf), Some(user)) => {
                        format!("{:.2} + {:.2} CPU", bpf * rate / 1e9, user * rate)
                    }
                    _ => "not measured".into(),
                };
                figures.push(figure(
                    &format!("{name}: at {:.0}M IOPS, {mode}: BPF + tool CPU", rate / 1e6),
                    measured,
                    "(projection)",
                    None,
                ));
            }
        }
    }
    figures
}
