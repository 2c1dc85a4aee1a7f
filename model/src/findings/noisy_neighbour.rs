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
/// A thread of the victim blocked (D state) this long in one call, with too few calls
/// finished to take a p50 from, is a stall: its wait so far is its latency now. Never
/// critical: where it waits is not always the disk.
pub const MIN_STALL_NS: u64 = 250_000_000;

/// What the victim's latency is now.
#[derive(Clone, Copy)]
enum Now {
    /// The p50 of its calls (or requests) that finished in the interval.
    P50(u64),
    /// One call not finished, blocked this long so far.
    Stalled(u64),
}

impl Now {
    fn ns(self) -> u64 {
        match self {
            Self::P50(ns) | Self::Stalled(ns) => ns,
        }
    }
}

/// The longest wait of a thread of `proc` blocked now, if it finished too little to be seen.
fn stalled(scene: &Scene, proc: &ProcRow) -> Option<u64> {
    scene
        .dstate
        .iter()
        .filter(|t| t.tgid == proc.tgid)
        .filter_map(|t| t.blocked_ns)
        .max()
        .filter(|&ns| ns >= MIN_STALL_NS)
}

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
    let now = match baseline::seen(proc) {
        Some(s) if s.dev == base.dev && s.measure == base.measure => Now::P50(s.p50_ns),
        Some(_) => return None,
        None => Now::Stalled(stalled(scene, proc)?),
    };
    let rise = now.ns() as f64 / base.p50_ns.max(1) as f64;
    if rise < MIN_RISE || now.ns() < base.p50_ns.saturating_add(MIN_RISE_NS) {
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
    let (read, written) = neighbour
        .devices
        .iter()
        .find(|d| d.dev == base.dev)
        .map_or((0, 0), |d| (d.read_bytes, d.write_bytes));
    // A buffered writer's bytes reach the disk as its flushers' requests: its write-back.
    let written_back = neighbour.interval.writeback_bytes;
    let moved = read + written + written_back;
    let how = if written_back > written.max(read) {
        "written back"
    } else if written >= read {
        "written"
    } else {
        "read"
    };
    let rate = scene.rate(moved);
    Some(describe(
        scene,
        proc,
        base,
        &Verdict {
            neighbour,
            now,
            rise,
            share,
            others,
            disk,
            how,
            rate,
        },
    ))
}

/// What [`check`] found, for [`describe`] to put in words.
struct Verdict<'a> {
    neighbour: &'a ProcRow,
    now: Now,
    rise: f64,
    share: f64,
    others: f64,
    disk: String,
    /// How the neighbour moves its bytes: "read", "written" or "written back".
    how: &'static str,
    rate: f64,
}

fn describe(scene: &Scene, proc: &ProcRow, base: &Baseline, v: &Verdict) -> Finding {
    let Verdict {
        neighbour,
        now,
        rise,
        share,
        others,
        ref disk,
        how,
        rate,
    } = *v;
    let mut finding = Finding::new(
        scene,
        FindingKind::NoisyNeighbour,
        if rise >= CRITICAL_RISE && matches!(now, Now::P50(_)) {
            Severity::Critical
        } else {
            Severity::Warning
        },
    )
    .of_process(proc);
    finding.dev = Some(base.dev);
    // The files it syncs; a stalled process synced none in the interval: those it synced
    // before.
    let synced = if proc.interval.sync.files.is_empty() {
        &proc.total().sync.files
    } else {
        &proc.interval.sync.files
    };
    finding.files = synced
        .iter()
        .take(2)
        .map(|(path, _)| path.clone())
        .collect();
    let measure = base.measure.name();
    let syncing = finding
        .files
        .first()
        .map_or_else(String::new, |file| format!(", syncing {file},"));
    let seen_now = match now {
        Now::P50(ns) => format!("{measure} p50 {}", quantity::latency(ns)),
        Now::Stalled(ns) => format!("one call blocked {} so far", quantity::latency(ns)),
    };
    // A stall's ratio to a p50 runs to thousands: the two figures say it better.
    let against = match now {
        Now::P50(_) => format!("{} its", quantity::times(rise)),
        Now::Stalled(_) => "against its".to_string(),
    };
    finding.summary = format!(
        "{} (pid {}){syncing} waits behind {} (pid {}) on {disk}: {seen_now}, {against} {} baseline; {} holds {:.0}% of {disk}'s busy time ({}/s {})",
        proc.comm,
        proc.tgid,
        neighbour.comm,
        neighbour.tgid,
        quantity::latency(base.p50_ns),
        neighbour.comm,
        share * 100.0,
        quantity::bytes(rate as u64),
        how,
    );
    finding.evidence = vec![
        ("latency", Evidence::Text(measure.to_string())),
        match now {
            Now::P50(ns) => ("p50_us", Evidence::Count(ns / 1000)),
            Now::Stalled(ns) => ("stalled_ms", Evidence::Count(ns / 1_000_000)),
        },
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
        "{}'s {} hold the disk: {}'s wait in its queue behind them, and each of its \
         flushes waits for their writes in the device's cache",
        neighbour.comm,
        if how == "written back" {
            "pages, written back by the kernel's flushers,"
        } else {
            "requests"
        },
        proc.comm
    );
    finding.fix = if how == "written back" {
        // ionice does not reach write-back (the flusher writes it), and io.max does only
        // where the cgroup's write-back is its own (cgroup v2).
        format!(
            "throttle {} (pid {}): cgroup v2 io.max (a wbps limit on {disk}, which its \
             write-back obeys) or a lower io.weight; or make write-back start sooner and \
             smaller (vm.dirty_background_bytes); or move one of them to another disk",
            neighbour.comm, neighbour.tgid
        )
    } else {
        format!(
            "throttle or re-prioritise {} (pid {}): cgroup v2 io.max (a wbps/wiops limit on \
             {disk}) or a lower io.weight, or ionice -c3 under the BFQ scheduler; or move one \
             of them to another disk",
            neighbour.comm, neighbour.tgid
        )
    };
    finding
}
