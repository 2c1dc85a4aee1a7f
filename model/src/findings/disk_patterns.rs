//! Disk-level patterns: `queue_dominated` (requests wait longer to be issued than the device
//! takes to serve them, btt's Q2D vs D2C) and `flush_heavy` (cache flushes at a rate that
//! drains the device's write cache over and over, and take a good share of its time).
//!
//! A flush is judged by what it costs the device, as the kernel measured it: on a device
//! without a volatile cache (or backed by RAM) a flush is nearly free and many of them are no
//! pathology.

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::{DiskRow, quantity};

/// Requests in one interval before the queue/device split means anything.
pub const QUEUE_MIN_REQUESTS: u64 = 50;
/// Median queue time at least this many times the median device time ...
pub const QUEUE_MIN_RATIO: u64 = 4;
/// ... and at least this long.
pub const QUEUE_MIN_P50_NS: u64 = 1_000_000;

pub const FLUSH_MIN_PER_S: f64 = 20.0;
/// Bytes written per flush below this many memory pages: the cache is drained for little.
pub const FLUSH_MAX_PAGES_PER_FLUSH: u64 = 16;
/// Share of the interval the flushes took (summed over flushes in flight).
pub const FLUSH_MIN_TIME_SHARE: f64 = 0.1;

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
    let bytes_per_flush = f.write_bytes / f.flushes.max(1);
    let time_share = f.flush_time_ns as f64 / scene.interval_ns.max(1) as f64;
    if rate < FLUSH_MIN_PER_S
        || scene.page_size == 0
        || bytes_per_flush >= u64::from(scene.page_size) * FLUSH_MAX_PAGES_PER_FLUSH
        || time_share < FLUSH_MIN_TIME_SHARE
    {
        return None;
    }
    let mut found = finding(
        scene,
        disk,
        FindingKind::FlushHeavy,
        format!(
            "{}: {rate:.0} cache flushes/s, one per {} written ({:.1} writes), taking {:.0}% of the time",
            disk.name,
            quantity::bytes(bytes_per_flush),
            1.0 / share.max(1e-9),
            (time_share * 100.0).min(100.0)
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
        ("bytes_per_flush", Evidence::Count(bytes_per_flush)),
        (
            "flush_time_share",
            Evidence::Ratio((time_share * 1000.0).round() / 1000.0),
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
