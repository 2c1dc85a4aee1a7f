//! `io_throttled`: a process's direct I/O calls wait far longer than its requests take. The
//! wait is before the request exists (blk-throttle holds bios over a cgroup's limit and
//! releases them from a kworker; iocost and io.latency delay them; a full request queue makes
//! the submitter wait for a tag) or around it, and request latency, iostat's await and the
//! block tracepoints never show it: only the call's latency does.
//!
//! Judged per disk of the process's calls (see `model::throttle` for the pre-queue time):
//! at least [`MIN_CALLS`] calls, a call p99 of at least [`MIN_CALL_P99_NS`] and at least
//! [`MIN_RATIO`] times the reference request p99, and at least [`MIN_PREQUEUE_SHARE`] of the
//! call time spent beyond that reference. A healthy workload's calls are as slow as their
//! requests (a call split into many requests is about as slow as its slowest): the p99
//! ratio stays near 1 and little time lies beyond the requests' p99.
//!
//! Severity: the cgroup's I/O controls on that disk (from the feed: v1
//! `blkio.throttle.*_device`, v2 `io.max`, iocost, io.latency) say what holds the calls.
//! With one found it is `WARN` (`CRIT` when even the median call waits: p50 at least
//! [`MIN_RATIO`] times the requests' p99 and at least 1 ms); without, the cause is
//! unconfirmed and it is `INFO`.

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::{CallDisk, IoLimit, LimitKind, ProcRow, quantity};

/// Calls on the disk in the interval.
pub const MIN_CALLS: u64 = 20;
/// Call p99 at least this long (shorter waits are not worth a finding)...
pub const MIN_CALL_P99_NS: u64 = 10_000_000;
/// ... and at least this many times the requests' p99.
pub const MIN_RATIO: u64 = 4;
/// Share of the call time beyond the requests' p99.
pub const MIN_PREQUEUE_SHARE: f64 = 0.25;
/// A median call at least this long (and [`MIN_RATIO`] times the requests' p99) is critical.
pub const CRITICAL_P50_NS: u64 = 1_000_000;

#[expect(clippy::cast_precision_loss, reason = "a ratio")]
fn share(d: &CallDisk) -> f64 {
    (d.prequeue_ns as f64 / d.time_ns.max(1) as f64).min(1.0)
}

fn held(d: &CallDisk) -> bool {
    d.latency.count >= MIN_CALLS
        && d.latency.p99_ns >= MIN_CALL_P99_NS
        && d.latency.p99_ns >= d.request_p99_ns.saturating_mul(MIN_RATIO)
        && share(d) >= MIN_PREQUEUE_SHARE
}

/// The key of a limit in a v2 `io.max` line.
fn io_max_key(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::ReadBps => "rbps",
        LimitKind::WriteBps => "wbps",
        LimitKind::ReadIops => "riops",
        LimitKind::WriteIops => "wiops",
    }
}

/// How a limit reads in its file: `blkio.throttle.write_iops_device 7:0 800` or
/// `io.max 7:0 wiops=800`.
pub fn describe(limit: &IoLimit) -> String {
    if limit.file.ends_with("io.max") {
        format!(
            "io.max {} {}={}",
            limit.dev,
            io_max_key(limit.kind),
            limit.value
        )
    } else {
        format!(
            "blkio.throttle.{}_device {} {}",
            limit.kind.name(),
            limit.dev,
            limit.value
        )
    }
}

pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let d = proc
        .interval
        .waits
        .calls
        .disks
        .iter()
        .filter(|d| held(d))
        .max_by_key(|d| d.prequeue_ns)?;
    let disk_name = scene
        .disks
        .iter()
        .find(|row| row.dev == d.disk)
        .map_or_else(|| d.disk.to_string(), |row| row.name.clone());
    let controls = proc.io_limits.as_deref();
    let limits: Vec<&IoLimit> = controls
        .map(|c| c.limits.iter().filter(|l| l.dev == d.disk).collect())
        .unwrap_or_default();
    let iocost = controls.is_some_and(|c| c.iocost.contains(&d.disk));
    let iolatency = controls.and_then(|c| c.iolatency.iter().find(|(dev, _)| *dev == d.disk));
    let cgroup = controls.map_or("?", |c| c.cgroup.as_str());
    let mut what: Vec<String> = limits.iter().map(|l| describe(l)).collect();
    if iocost {
        what.push(format!("iocost (io.cost.qos enable=1 on {})", d.disk));
    }
    if let Some((dev, target)) = iolatency {
        what.push(format!("io.latency {dev} target={target}"));
    }
    let severity = if what.is_empty() {
        Severity::Info
    } else if d.latency.p50_ns >= CRITICAL_P50_NS
        && d.latency.p50_ns >= d.request_p99_ns.saturating_mul(MIN_RATIO)
    {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let mut finding = Finding::new(scene, FindingKind::IoThrottled, severity).of_process(proc);
    finding.dev = Some(d.disk);
    let reference = if d.own_requests {
        "its requests"
    } else {
        "requests on the disk"
    };
    let cause = if what.is_empty() {
        format!(
            "no blkio/io.max limit, iocost or io.latency found on {disk_name} for its cgroup {cgroup}"
        )
    } else {
        format!("throttled by cgroup {cgroup}: {}", what.join(", "))
    };
    finding.summary = format!(
        "{} (pid {}): direct I/O calls on {disk_name} take p99 {} but {reference} p99 {}: {:.0}% of the call time ({} in {} calls) is spent outside any request — {cause}",
        proc.comm,
        proc.tgid,
        quantity::latency(d.latency.p99_ns),
        quantity::latency(d.request_p99_ns),
        share(d) * 100.0,
        quantity::latency(d.prequeue_ns),
        d.latency.count,
    );
    finding.evidence = vec![
        ("calls", Evidence::Count(d.latency.count)),
        ("call_p50_us", Evidence::Count(d.latency.p50_ns / 1000)),
        ("call_p99_us", Evidence::Count(d.latency.p99_ns / 1000)),
        ("request_p99_us", Evidence::Count(d.request_p99_ns / 1000)),
        (
            "request_reference",
            Evidence::Text(if d.own_requests { "own" } else { "disk" }.to_string()),
        ),
        ("prequeue_ms", Evidence::Count(d.prequeue_ns / 1_000_000)),
        (
            "prequeue_share",
            Evidence::Ratio((share(d) * 1000.0).round() / 1000.0),
        ),
        ("cgroup", Evidence::Text(cgroup.to_string())),
    ];
    if let Some(limit) = limits.first() {
        finding.evidence.extend([
            ("limit", Evidence::Text(describe(limit))),
            ("limit_kind", Evidence::Text(limit.kind.name().to_string())),
            ("limit_value", Evidence::Count(limit.value)),
            ("limit_file", Evidence::Text(limit.file.clone())),
        ]);
    }
    if iocost {
        finding
            .evidence
            .push(("iocost", Evidence::Text(format!("enabled on {}", d.disk))));
    }
    finding.why = "blk-throttle (cgroup blkio/io.max limits), iocost and io.latency hold a bio \
                   before it becomes a request, and a full request queue makes the caller wait \
                   for a tag: request latency, iostat's await and the block tracepoints never \
                   see that wait, only the call does"
        .to_string();
    finding.fix = match limits.first() {
        Some(limit) if limit.file.ends_with("io.max") => format!(
            "raise or lift the limit (echo \"{} {}=max\" > {}), move the workload to a cgroup \
             with room, or pace it under the limit so callers do not queue behind it",
            limit.dev,
            io_max_key(limit.kind),
            limit.file
        ),
        Some(limit) => format!(
            "raise or lift the limit (echo \"{} 0\" > {}), move the workload to a cgroup with \
             room, or pace it under the limit (e.g. fio --rate_iops) so callers do not queue \
             behind it",
            limit.dev, limit.file
        ),
        None if !what.is_empty() => "check the iocost/io.latency configuration of the disk \
                                     and the cgroup's weight against its neighbours"
            .to_string(),
        None => "find the wait outside the request: a limit in a parent cgroup iotop-bpf cannot \
                 read, iocost (io.cost.qos), the device's request queue (nr_requests, queue \
                 depth), or O_DSYNC writes syncing after the data"
            .to_string(),
    };
    Some(finding)
}
