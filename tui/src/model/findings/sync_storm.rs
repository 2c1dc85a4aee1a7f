//! `sync_storm`: a process spends most of its time waiting in sync calls.

use super::{Evidence, Finding, FindingKind, Severity, per_second};
use crate::{
    model::{ProcRow, Snapshot},
    units,
};

/// Share of the interval spent inside sync calls (summed over its threads).
pub const MIN_SYNC_TIME_SHARE: f64 = 0.5;
pub const MIN_SYNCS_PER_S: f64 = 10.0;

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for display and thresholds"
)]
pub fn check(snap: &Snapshot, proc: &ProcRow) -> Option<Finding> {
    let s = &proc.interval.sync;
    let rate = per_second(snap, s.syncs);
    let waited_ns = s.latency.mean_ns.saturating_mul(s.syncs);
    let share = waited_ns as f64 / snap.interval_ns.max(1) as f64;
    if rate < MIN_SYNCS_PER_S || share < MIN_SYNC_TIME_SHARE {
        return None;
    }
    Some(Finding {
        kind: FindingKind::SyncStorm,
        severity: if share >= 0.9 {
            Severity::Critical
        } else {
            Severity::Warning
        },
        tgid: Some(proc.tgid),
        comm: proc.comm.clone(),
        dev: proc.devices.first().map(|d| d.dev),
        file: None,
        summary: format!(
            "{} (pid {}): {:.0} sync calls/s, {:.0}% of its time waiting in them (p99 {})",
            proc.comm,
            proc.tgid,
            rate,
            share * 100.0,
            units::latency(s.latency.p99_ns)
        ),
        evidence: vec![
            ("syncs_per_s", Evidence::Ratio((rate * 10.0).round() / 10.0)),
            (
                "sync_time_share",
                Evidence::Ratio((share * 1000.0).round() / 1000.0),
            ),
            ("sync_p50_us", Evidence::Count(s.latency.p50_ns / 1000)),
            ("sync_p99_us", Evidence::Count(s.latency.p99_ns / 1000)),
        ],
        why: "every sync waits for the device (and a journal commit and cache flush); done often, \
              the waiting dominates the work"
            .to_string(),
        fix: "sync less often: group commits, batch records per sync, or use fdatasync on \
              preallocated files; or move the log to a faster device"
            .to_string(),
        active: true,
        first_seen_ns: snap.now_ns,
        last_seen_ns: snap.now_ns,
    })
}
