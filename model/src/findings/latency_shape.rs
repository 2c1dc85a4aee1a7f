//! `bimodal_latency`: two clear latency populations on a disk or in a process (cache hits and
//! misses, requests stuck behind flushes or throttling): the average describes neither.
//! Kernel threads (flushers, journal) serve many masters and are left out.
//! `small_random_io`: requests below the device's minimum I/O size, scattered over the disk.
//! Both are `INFO`: shapes worth a look, not pathologies with a fix.

use iotop_bpf_common::hist::slot_upper_us;

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::{Dev, Log2Hist, ProcRow};

/// Samples before a histogram's shape means anything.
pub const BIMODAL_MIN_SAMPLES: u64 = 200;
/// Each mode holds at least this share of the samples ...
pub const BIMODAL_MIN_MODE_SHARE: f64 = 0.15;
/// ... the modes are at least this many log2 slots apart (8x) ...
pub const BIMODAL_MIN_SLOTS_APART: usize = 3;
/// ... and the valley between them is below this share of the smaller mode.
pub const BIMODAL_MAX_VALLEY: f64 = 0.25;

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

pub fn detect(scene: &Scene) -> Vec<Finding> {
    let mut found = Vec::new();
    for disk in scene.disks {
        if let Some(modes) = two_modes(&disk.interval.total_hist) {
            found.push(bimodal(
                scene,
                None,
                &disk.name,
                Some(disk.dev),
                modes,
                disk.interval.total_hist.total(),
            ));
        }
    }
    for proc in scene.procs.iter().filter(|p| !p.kernel_thread) {
        if let Some(modes) = two_modes(&proc.interval.total_hist) {
            found.push(bimodal(
                scene,
                Some(proc),
                &proc.comm,
                Scene::main_disk(proc),
                modes,
                proc.interval.total_hist.total(),
            ));
        }
        found.extend(small_random(scene, proc));
    }
    found
}

#[expect(clippy::cast_precision_loss, reason = "shares for display")]
fn bimodal(
    scene: &Scene,
    proc: Option<&ProcRow>,
    name: &str,
    dev: Option<Dev>,
    ((low, nl), (high, nh)): ((usize, u64), (usize, u64)),
    total: u64,
) -> Finding {
    let who = proc.map_or_else(
        || name.to_string(),
        |p| format!("{} (pid {})", p.comm, p.tgid),
    );
    let mut finding = Finding::new(scene, FindingKind::BimodalLatency, Severity::Info);
    if let Some(proc) = proc {
        finding = finding.of_process(proc);
    } else {
        finding.comm = name.to_string();
    }
    finding.dev = dev;
    finding.summary = format!(
        "{who}: two latency populations, {:.0}% around {} and {:.0}% around {}",
        nl as f64 / total as f64 * 100.0,
        describe(low),
        nh as f64 / total as f64 * 100.0,
        describe(high)
    );
    finding.evidence = vec![
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
    ];
    finding.why = "requests fall into two groups with different paths (cache hit vs miss, reads \
                   behind writes or flushes, throttled vs not): averages and p50 hide the slow group"
        .to_string();
    finding.fix = "find what the slow group has in common: drill into the processes and compare \
                   queue vs device time, reads vs writes, and sync calls"
        .to_string();
    finding
}

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for thresholds and display"
)]
fn small_random(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let f = &proc.interval;
    let requests = f.reads + f.writes;
    let rate = scene.rate(requests);
    if requests == 0 || rate < SMALL_MIN_PER_S {
        return None;
    }
    // "Small" is the device's own minimum: below it a write is a read-modify-write.
    let dev = Scene::main_disk(proc)?;
    let geometry = scene.disks.iter().find(|d| d.dev == dev)?.geometry;
    let unit = u64::from(geometry.minimum_io_size.max(geometry.physical_block_size));
    let avg = f.bytes() / requests;
    let sequential = f.sequential as f64 / requests as f64;
    if unit == 0 || avg >= unit || sequential > SMALL_MAX_SEQUENTIAL_SHARE {
        return None;
    }
    let mut finding =
        Finding::new(scene, FindingKind::SmallRandomIo, Severity::Info).of_process(proc);
    finding.dev = Some(dev);
    finding.summary = format!(
        "{} (pid {}): {rate:.0} requests/s averaging {avg} bytes (device unit {unit}), {:.0}% sequential",
        proc.comm,
        proc.tgid,
        sequential * 100.0
    );
    finding.evidence = vec![
        ("requests_per_s", Evidence::Ratio(rate.round())),
        ("avg_request_bytes", Evidence::Count(avg)),
        ("device_min_io_bytes", Evidence::Count(unit)),
        (
            "sequential_share",
            Evidence::Ratio((sequential * 100.0).round() / 100.0),
        ),
    ];
    finding.why = format!(
        "requests smaller than the device's {unit}-byte unit, scattered over the disk: each costs \
         a full I/O (and a write is a read-modify-write), so throughput is bound by IOPS"
    );
    finding.fix = format!(
        "read and write in aligned units of {unit} bytes or more, batch neighbouring updates, or \
         let the page cache merge them"
    );
    Some(finding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_modes_needs_separation_mass_and_a_valley() {
        let hist = |pairs: &[(usize, u64)]| {
            let mut h = crate::Log2Hist::default();
            for &(slot, n) in pairs {
                h.slots[slot] = n;
            }
            h
        };
        assert!(two_modes(&hist(&[(5, 300), (12, 200)])).is_some());
        assert!(
            two_modes(&hist(&[(5, 300), (6, 200)])).is_none(),
            "adjacent slots are one wide mode"
        );
        assert!(
            two_modes(&hist(&[(5, 300), (9, 10)])).is_none(),
            "a thin tail is not a mode"
        );
        assert!(
            two_modes(&hist(&[(5, 300), (6, 250), (7, 250), (8, 250), (9, 300)])).is_none(),
            "no valley"
        );
        assert!(
            two_modes(&hist(&[(5, 50), (12, 50)])).is_none(),
            "too few samples"
        );
    }
}
