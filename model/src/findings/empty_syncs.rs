//! `empty_syncs`: a process syncs files it did not write since their last sync, and each
//! such call still costs a cache flush. ext4 and XFS flush the device's write cache on fsync
//! even when the file had nothing to write (the flush may be the only thing that makes an
//! earlier write durable, so they cannot know it is useless). A writer that fsyncs all its
//! files after every write to one of them (`sysbench fileio --file-fsync-freq=1` over four
//! files) pays three empty fsyncs, three flushes, per write.
//!
//! Judged on settled calls: most must have had nothing written since their fd's previous
//! sync (`window_bytes` 0), at a rate, and the empty ones must have flushed.

use super::{Evidence, Finding, FindingKind, Scene, Severity, round1};
use crate::ProcRow;

/// Empty calls in the interval, and per second of it.
pub const MIN_EMPTY: u64 = 10;
pub const MIN_EMPTY_PER_S: f64 = 5.0;
/// Share of the settled calls that were empty.
pub const MIN_EMPTY_SHARE: f64 = 0.5;
/// Flushes per empty call: below this the empty calls cost (almost) nothing.
pub const MIN_FLUSHES_PER_EMPTY: f64 = 0.5;
/// Fewer empty calls than this in an interval are named only once seen [`THIN_MIN_STREAK`]
/// intervals running: a server syncing every file it has open as it shuts down (MariaDB:
/// 28 and 25 empty fdatasyncs of its tables and logs over two intervals, then exit) is a
/// burst, not a habit; sysbench's fsync of every file after each write makes thousands.
pub const MIN_STEADY_EMPTY: u64 = 50;
pub const THIN_MIN_STREAK: u32 = 3;

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for thresholds and display"
)]
pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let s = &proc.interval.sync;
    let settled = s.small.calls + s.large.calls + s.empty + s.dirs.calls;
    if s.empty < MIN_EMPTY || scene.rate(s.empty) < MIN_EMPTY_PER_S {
        return None;
    }
    let share = s.empty as f64 / settled as f64;
    let per_empty = s.empty_flushes as f64 / s.empty as f64;
    if share < MIN_EMPTY_SHARE || per_empty < MIN_FLUSHES_PER_EMPTY {
        return None;
    }
    let mut finding = Finding::new(scene, FindingKind::EmptySyncs, Severity::Warning)
        .of_process(proc)
        .persisting(if s.empty < MIN_STEADY_EMPTY {
            THIN_MIN_STREAK
        } else {
            1
        });
    finding.dev = s.disk.or_else(|| Scene::main_disk(proc));
    finding.files = s.empty_files.iter().map(|(path, _)| path.clone()).collect();
    let files = match s.empty_files.as_slice() {
        [] => String::new(),
        [(one, n)] => format!(" (all {n} on {one})"),
        [(first, a), rest @ ..] => format!(
            " ({a} on {first} and {} on {} other file{})",
            rest.iter().map(|(_, n)| n).sum::<u64>(),
            rest.len(),
            if rest.len() == 1 { "" } else { "s" }
        ),
    };
    let kind = s.kind;
    finding.summary = format!(
        "{} (pid {}): {} of {} {kind}s had nothing to make durable{files}, yet each flushed the disk's cache: {} flushes for nothing",
        proc.comm, proc.tgid, s.empty, settled, s.empty_flushes
    );
    finding.evidence = vec![
        ("empty_syncs", Evidence::Count(s.empty)),
        ("syncs", Evidence::Count(settled)),
        (
            "empty_share",
            Evidence::Ratio(round1(share * 100.0) / 100.0),
        ),
        ("empty_flushes", Evidence::Count(s.empty_flushes)),
        ("flushes_per_empty_sync", Evidence::Ratio(round1(per_empty))),
        (
            "empty_syncs_per_s",
            Evidence::Ratio(round1(scene.rate(s.empty))),
        ),
        ("sync_kind", Evidence::Text(kind.to_string())),
    ];
    finding.why = format!(
        "a {kind} of a file with nothing written since its last sync still flushes the device's write cache, which costs a device round trip and stalls every other writer's flush"
    );
    finding.fix = format!(
        "{kind} only the files written since their last sync (keep a set of dirty files), or one syncfs for a whole batch"
    );
    Some(finding)
}
