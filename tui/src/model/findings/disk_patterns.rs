//! Disk-level patterns: `queue_dominated` (requests wait longer to be issued than the device
//! takes to serve them, btt's Q2D vs D2C) and `flush_heavy` (cache flushes at a rate that
//! drains the device's write cache over and over).

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::model::{DiskRow, quantity};

/// Requests in one interval before the queue/device split means anything.
pub const QUEUE_MIN_REQUESTS: u64 = 50;
/// Median queue time at least this many times the median device time ...
pub const QUEUE_MIN_RATIO: u64 = 4;
/// ... and at least this long.
pub const QUEUE_MIN_P50_NS: u64 = 1_000_000;

pub const FLUSH_MIN_PER_S: f64 = 20.0;
/// Flushes per write request.
pub const FLUSH_MIN_SHARE: f64 = 0.25;

pub fn detect(scene: &Scene) -> Vec<Finding> {
    scene
        .disks
        .iter()
        .flat_map(|d| [queue_dominated(scene, d), flush_heavy(scene, d)])
        .flatten()
        .collect()
}

fn finding(scene: &Scene, disk: &DiskRow, kind: FindingKind, summary: String) -> Finding {
    let mut finding = Finding::new(scene, kind, Severity::Warning);
    finding.comm.clone_from(&disk.name);
    finding.dev = Some(disk.dev);
    finding.summary = summary;
    finding
}

fn queue_dominated(scene: &Scene, disk: &DiskRow) -> Option<Finding> {
    let f = &disk.interval;
    let (queue, device) = (f.queue.p50_ns, f.device.p50_ns);
    if f.queue.count < QUEUE_MIN_REQUESTS
        || queue < QUEUE_MIN_P50_NS
        || queue < device.saturating_mul(QUEUE_MIN_RATIO)
    {
        return None;
    }
    let mut found = finding(
        scene,
        disk,
        FindingKind::QueueDominated,
        format!(
            "{}: requests wait {} to be issued but the device serves them in {} (p50): the bottleneck is before the device",
            disk.name,
            quantity::latency(queue),
            quantity::latency(device)
        ),
    );
    found.evidence = vec![
        ("queue_p50_us", Evidence::Count(queue / 1000)),
        ("queue_p99_us", Evidence::Count(f.queue.p99_ns / 1000)),
        ("device_p50_us", Evidence::Count(device / 1000)),
        ("device_p99_us", Evidence::Count(f.device.p99_ns / 1000)),
        ("requests", Evidence::Count(f.queue.count)),
        (
            "aqu_sz",
            Evidence::Ratio((f.queue_size * 100.0).round() / 100.0),
        ),
    ];
    found.why = "queue time (created -> issued) is spent in the I/O scheduler, plugging or a full \
                 device queue, not in the device"
        .to_string();
    found.fix =
        "check the I/O scheduler and its settings, nr_requests and the device queue depth, \
                 and who floods the queue (sort processes by I/O)"
            .to_string();
    Some(found)
}

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for thresholds and display"
)]
fn flush_heavy(scene: &Scene, disk: &DiskRow) -> Option<Finding> {
    let f = &disk.interval;
    let rate = scene.rate(f.flushes);
    let share = f.flushes as f64 / f.writes.max(1) as f64;
    if rate < FLUSH_MIN_PER_S || share < FLUSH_MIN_SHARE {
        return None;
    }
    let mut found = finding(
        scene,
        disk,
        FindingKind::FlushHeavy,
        format!(
            "{}: {rate:.0} cache flushes/s, one per {:.1} writes",
            disk.name,
            1.0 / share.max(1e-9)
        ),
    );
    found.evidence = vec![
        (
            "flushes_per_s",
            Evidence::Ratio((rate * 10.0).round() / 10.0),
        ),
        (
            "writes_per_s",
            Evidence::Ratio((scene.rate(f.writes) * 10.0).round() / 10.0),
        ),
        (
            "flushes_per_write",
            Evidence::Ratio((share * 100.0).round() / 100.0),
        ),
    ];
    found.why =
        "each sync of a journaling filesystem ends with a cache flush (or FUA write); each \
                 flush waits until the device's volatile cache is on stable media"
            .to_string();
    found.fix =
        "sync less often (group commit); a device with power-loss protection makes flushes \
                 cheap"
            .to_string();
    Some(found)
}
