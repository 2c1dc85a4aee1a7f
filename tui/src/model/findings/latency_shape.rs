//! `bimodal_latency`: two clear latency populations on a disk or in a process (cache hits and
//! misses, requests stuck behind flushes or throttling): the average describes neither.
//! `small_random_io`: sub-4 KiB requests scattered over the disk.

use iotop_bpf_common::hist::slot_upper_us;

use super::{Evidence, Finding, FindingKind, Severity, per_second};
use crate::model::{Log2Hist, ProcRow, Snapshot};

/// Samples before a histogram's shape means anything.
pub const BIMODAL_MIN_SAMPLES: u64 = 200;
/// Each mode holds at least this share of the samples ...
pub const BIMODAL_MIN_MODE_SHARE: f64 = 0.15;
/// ... the modes are at least this many log2 slots apart (8x) ...
pub const BIMODAL_MIN_SLOTS_APART: usize = 3;
/// ... and the valley between them is below this share of the smaller mode.
pub const BIMODAL_MAX_VALLEY: f64 = 0.25;

pub const SMALL_MAX_AVG_BYTES: u64 = 4095;
pub const SMALL_MIN_PER_S: f64 = 100.0;
pub const SMALL_MAX_SEQUENTIAL_SHARE: f64 = 0.2;

/// The two modes `(slot, count)` of a log2 histogram, lower first, if it has two clear ones.
#[expect(clippy::cast_precision_loss, reason = "shares of counts")]
pub fn two_modes(hist: &Log2Hist) -> Option<((usize, u64), (usize, u64))> {
    let total = hist.total();
    if total < BIMODAL_MIN_SAMPLES {
        return None;
    }
    let s = &hist.slots;
    let peaks: Vec<(usize, u64)> = (0..s.len())
        .filter(|&i| {
            s[i] > 0 && (i == 0 || s[i] >= s[i - 1]) && (i + 1 == s.len() || s[i] > s[i + 1])
        })
        .map(|i| (i, s[i]))
        .filter(|&(_, n)| n as f64 >= total as f64 * BIMODAL_MIN_MODE_SHARE)
        .collect();
    for (a, &(i, ni)) in peaks.iter().enumerate() {
        for &(j, nj) in &peaks[a + 1..] {
            if j - i < BIMODAL_MIN_SLOTS_APART {
                continue;
            }
            let valley = s[i + 1..j].iter().copied().min().unwrap_or(0);
            if (valley as f64) < ni.min(nj) as f64 * BIMODAL_MAX_VALLEY {
                return Some(((i, ni), (j, nj)));
            }
        }
    }
    None
}

fn describe(slot: usize) -> String {
    let upper = slot_upper_us(u32::try_from(slot).unwrap_or(0));
    if upper >= 2_000 {
        format!("~{}ms", upper / 2_000)
    } else {
        format!("~{}us", upper / 2)
    }
}

pub fn detect(snap: &Snapshot) -> Vec<Finding> {
    let mut found = Vec::new();
    for disk in &snap.disks {
        if let Some(modes) = two_modes(&disk.interval.total_hist) {
            found.push(bimodal(
                snap,
                None,
                &disk.name,
                Some(disk.dev),
                modes,
                disk.interval.total_hist.total(),
            ));
        }
    }
    for proc in &snap.procs {
        if let Some(modes) = two_modes(&proc.interval.total_hist) {
            let dev = proc.devices.first().map(|d| d.dev);
            found.push(bimodal(
                snap,
                Some(proc),
                &proc.comm,
                dev,
                modes,
                proc.interval.total_hist.total(),
            ));
        }
        found.extend(small_random(snap, proc));
    }
    found
}

#[expect(clippy::cast_precision_loss, reason = "shares for display")]
fn bimodal(
    snap: &Snapshot,
    proc: Option<&ProcRow>,
    name: &str,
    dev: Option<crate::model::Dev>,
    ((low, nl), (high, nh)): ((usize, u64), (usize, u64)),
    total: u64,
) -> Finding {
    let who = proc.map_or_else(
        || name.to_string(),
        |p| format!("{} (pid {})", p.comm, p.tgid),
    );
    Finding {
        kind: FindingKind::BimodalLatency,
        severity: Severity::Info,
        tgid: proc.map(|p| p.tgid),
        comm: name.to_string(),
        dev,
        file: None,
        summary: format!(
            "{who}: two latency populations, {:.0}% around {} and {:.0}% around {}",
            nl as f64 / total as f64 * 100.0,
            describe(low),
            nh as f64 / total as f64 * 100.0,
            describe(high)
        ),
        evidence: vec![
            (
                "fast_mode_upper_us",
                Evidence::Count(slot_upper_us(u32::try_from(low).unwrap_or(0))),
            ),
            ("fast_mode_requests", Evidence::Count(nl)),
            (
                "slow_mode_upper_us",
                Evidence::Count(slot_upper_us(u32::try_from(high).unwrap_or(0))),
            ),
            ("slow_mode_requests", Evidence::Count(nh)),
        ],
        why: "requests fall into two groups with different paths (cache hit vs miss, reads behind \
              writes or flushes, throttled vs not): averages and p50 hide the slow group"
            .to_string(),
        fix: "find what the slow group has in common: drill into the processes and compare queue \
              vs device time, reads vs writes, and sync calls"
            .to_string(),
        active: true,
        first_seen_ns: snap.now_ns,
        last_seen_ns: snap.now_ns,
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for thresholds and display"
)]
fn small_random(snap: &Snapshot, proc: &ProcRow) -> Option<Finding> {
    let f = &proc.interval;
    let requests = f.reads + f.writes;
    let rate = per_second(snap, requests);
    if requests == 0 || rate < SMALL_MIN_PER_S {
        return None;
    }
    let avg = f.bytes() / requests;
    let sequential = f.sequential as f64 / requests as f64;
    if avg > SMALL_MAX_AVG_BYTES || sequential > SMALL_MAX_SEQUENTIAL_SHARE {
        return None;
    }
    Some(Finding {
        kind: FindingKind::SmallRandomIo,
        severity: Severity::Info,
        tgid: Some(proc.tgid),
        comm: proc.comm.clone(),
        dev: proc.devices.first().map(|d| d.dev),
        file: None,
        summary: format!(
            "{} (pid {}): {rate:.0} requests/s averaging {avg} bytes, {:.0}% sequential",
            proc.comm,
            proc.tgid,
            sequential * 100.0
        ),
        evidence: vec![
            ("requests_per_s", Evidence::Ratio(rate.round())),
            ("avg_request_bytes", Evidence::Count(avg)),
            ("sequential_share", Evidence::Ratio((sequential * 100.0).round() / 100.0)),
        ],
        why: "requests smaller than a page, scattered over the disk: each costs a full I/O \
              (and a read-modify-write below the device's block size), so throughput is bound by IOPS"
            .to_string(),
        fix: "read and write in larger, aligned units (4 KiB or more), batch neighbouring updates, \
              or let the page cache merge them"
            .to_string(),
        active: true,
        first_seen_ns: snap.now_ns,
        last_seen_ns: snap.now_ns,
    })
}
