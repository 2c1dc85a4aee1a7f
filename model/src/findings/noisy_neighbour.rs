//! `noisy_neighbour`: a process's latency on a disk rose well above its own baseline while
//! other processes held most of that disk's busy time: it waits behind them. "Who is making
//! my database slow?" is the first question of most storage incidents; this names who
//! waits (its latency now against its baseline), behind whom (their share of the disk's busy
//! time, and what they move), and the fix: throttle or re-prioritise them, or move one away.
//!
//! The baseline is the process's own, from intervals when its disk was its own (see
//! `crate::baseline`): a cold start has none, and no finding. A process alone on its disk,
//! or whose latency did not rise, is never a victim. Busy time is device time summed per
//! process, from streamed requests and, in aggregation mode, from the kernel's sums.

use super::{Evidence, Finding, FindingKind, Scene, Severity, round1};
use crate::{
    ProcRow,
    baseline::{self, Baseline},
    quantity,
};

/// The latency now is at least this many times the baseline ...
pub const MIN_RISE: f64 = 4.0;
/// ... and at least this much above it (0.05 ms to 0.2 ms is no incident).
pub const MIN_RISE_NS: u64 = 1_000_000;
/// Others hold at least this share of the disk's busy time ...
pub const MIN_OTHERS_SHARE: f64 = 0.5;
/// ... and the neighbour named at least this share.
pub const MIN_NEIGHBOUR_SHARE: f64 = 0.3;
/// From here on it is critical: the victim waits over ten times as long as it did.
pub const CRITICAL_RISE: f64 = 10.0;

/// Every victim of the interval, one finding each, naming its worst neighbour.
pub fn detect(scene: &Scene) -> Vec<Finding> {
    scene
        .baselines
        .iter()
        .filter_map(|b| {
            let proc = scene.procs.iter().find(|p| p.tgid == b.tgid)?;
            check(scene, proc, b)
        })
        .collect()
}

#[expect(clippy::cast_precision_loss, reason = "ratios and rates for display")]
fn check(scene: &Scene, proc: &ProcRow, base: &Baseline) -> Option<Finding> {
    let now = baseline::seen(proc).filter(|s| s.dev == base.dev && s.measure == base.measure)?;
    let rise = now.p50_ns as f64 / base.p50_ns.max(1) as f64;
    if rise < MIN_RISE || now.p50_ns < base.p50_ns.saturating_add(MIN_RISE_NS) {
        return None;
    }
    let (by, total) = baseline::busy_on(scene.procs, base.dev);
    if total == 0 {
        return None;
    }
    let own = by
        .iter()
        .find(|(p, _)| p.tgid == proc.tgid)
        .map_or(0, |(_, ns)| *ns);
    let others = total.saturating_sub(own) as f64 / total as f64;
    let (neighbour, ns) = by
        .iter()
        .filter(|(p, _)| p.tgid != proc.tgid)
        .max_by_key(|(p, ns)| (*ns, std::cmp::Reverse(p.tgid)))?;
    let share = *ns as f64 / total as f64;
    if others < MIN_OTHERS_SHARE || share < MIN_NEIGHBOUR_SHARE {
        return None;
    }
    let disk = scene
        .disks
        .iter()
        .find(|d| d.dev == base.dev)
        .map_or_else(|| base.dev.to_string(), |d| d.name.clone());
    let moved = neighbour
        .devices
        .iter()
        .find(|d| d.dev == base.dev)
        .map_or(0, |d| d.read_bytes + d.write_bytes);
    let written = neighbour
        .devices
        .iter()
        .find(|d| d.dev == base.dev)
        .is_some_and(|d| d.write_bytes >= d.read_bytes);
    let rate = scene.rate(moved);
    let mut finding = Finding::new(
        scene,
        FindingKind::NoisyNeighbour,
        if rise >= CRITICAL_RISE {
            Severity::Critical
        } else {
            Severity::Warning
        },
    )
    .of_process(proc);
    finding.dev = Some(base.dev);
    finding.files = proc
        .interval
        .sync
        .files
        .iter()
        .take(2)
        .map(|(path, _)| path.clone())
        .collect();
    let measure = base.measure.name();
    let syncing = finding
        .files
        .first()
        .map_or_else(String::new, |file| format!(", syncing {file},"));
    finding.summary = format!(
        "{} (pid {}){syncing} waits behind {} (pid {}) on {disk}: {measure} p50 {}, {} its {} baseline; {} holds {:.0}% of {disk}'s busy time ({}/s {})",
        proc.comm,
        proc.tgid,
        neighbour.comm,
        neighbour.tgid,
        quantity::latency(now.p50_ns),
        quantity::times(rise),
        quantity::latency(base.p50_ns),
        neighbour.comm,
        share * 100.0,
        quantity::bytes(rate as u64),
        if written { "written" } else { "read" },
    );
    finding.evidence = vec![
        ("latency", Evidence::Text(measure.to_string())),
        ("p50_us", Evidence::Count(now.p50_ns / 1000)),
        ("baseline_p50_us", Evidence::Count(base.p50_ns / 1000)),
        ("rise", Evidence::Ratio(round1(rise))),
        (
            "baseline_intervals",
            Evidence::Count(u64::from(base.intervals)),
        ),
        ("neighbour_pid", Evidence::Count(u64::from(neighbour.tgid))),
        ("neighbour", Evidence::Text(neighbour.comm.clone())),
        (
            "neighbour_busy_share",
            Evidence::Ratio(round1(share * 100.0) / 100.0),
        ),
        (
            "others_busy_share",
            Evidence::Ratio(round1(others * 100.0) / 100.0),
        ),
        ("neighbour_bytes_per_s", Evidence::Count(rate as u64)),
    ];
    finding.why = format!(
        "{}'s requests hold the disk: {}'s wait in its queue behind them, and each of its \
         flushes waits for their writes in the device's cache",
        neighbour.comm, proc.comm
    );
    finding.fix = format!(
        "throttle or re-prioritise {} (pid {}): cgroup v2 io.max (a wbps/wiops limit on {disk}) \
         or a lower io.weight, or ionice -c3 under the BFQ scheduler; or move one of them to \
         another disk",
        neighbour.comm, neighbour.tgid
    );
    Some(finding)
}
