//! A tracer's BPF cost over some passes with statistics: time per I/O, program runs per
//! I/O, and the time left once each run's floor (what the statistics add to it, calibrated in
//! the same passes: `floor.rs`) is taken off.

use super::{
    Workload,
    floor::{FloorRuns, Runs},
    round::Traced,
};

/// `enum bpf_prog_type` of programs attached through a BPF trampoline or as `tp_btf`.
const PROG_TYPE_TRACING: u32 = 26;

/// The floor per run, by kind of program.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct FloorNs {
    /// Raw tracepoints (and classic ones: the same `bpf_prog_run` is timed).
    pub raw: Option<f64>,
    /// `tp_btf`, fentry, fexit.
    pub btf: Option<f64>,
}

impl FloorNs {
    /// The floor over every pass with statistics of some rounds.
    pub(super) fn of<'a>(passes: impl Iterator<Item = &'a Traced>) -> Self {
        let runs = passes.fold(FloorRuns::default(), |sum, t| sum.add(t.floor));
        Self {
            raw: runs.raw.per_run(),
            btf: runs.btf.per_run(),
        }
    }

    /// What the statistics add to one run of a program of `prog_type`.
    fn per_run(self, prog_type: u32) -> Option<f64> {
        if prog_type == PROG_TYPE_TRACING {
            self.btf.or(self.raw)
        } else {
            self.raw
        }
    }

    pub(super) fn describe(self) -> String {
        let ns = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.0} ns"));
        format!("raw_tp {}, tp_btf {}", ns(self.raw), ns(self.btf))
    }
}

/// One tracer's cost per I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Cost {
    pub ns: f64,
    pub runs: f64,
    /// `ns` less each run's floor (`None` without a floor).
    pub net_ns: Option<f64>,
}

impl Cost {
    /// Over `passes` (with statistics), `None` when none measured anything.
    pub(super) fn of<'a>(
        workload: Workload,
        passes: impl Iterator<Item = &'a Traced>,
        floor: FloorNs,
    ) -> Option<Self> {
        let (mut total, mut ios, mut net, mut measured) = (Runs::default(), 0, Some(0.0), false);
        for pass in passes {
            if pass.bpf_ns.is_none() {
                continue;
            }
            measured = true;
            ios += pass.fio.ios(workload);
            for (_, p) in &pass.programs {
                total = total.add(Runs {
                    ns: p.ns,
                    runs: p.runs,
                });
                net = net.and_then(|sum| {
                    Some(sum + p.ns as f64 - p.runs as f64 * floor.per_run(p.prog_type)?)
                });
            }
        }
        (measured && ios > 0).then(|| {
            let ios = ios as f64;
            Self {
                ns: total.ns as f64 / ios,
                runs: total.runs as f64 / ios,
                net_ns: net.map(|n| n / ios),
            }
        })
    }
}
