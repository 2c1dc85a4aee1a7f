//! `dirty_throttled`: a buffered writer spends most of its time paused by
//! `balance_dirty_pages()`. It dirties page cache faster than the device writes it back, and
//! once dirty memory nears its limit (`vm.dirty_bytes`, or `vm.dirty_ratio` of available
//! memory) the kernel sleeps the writer so write-back can catch up: its `write()` calls look
//! slow although none of its own requests is.
//!
//! Fires when the pauses (summed over its threads) take at least [`MIN_PAUSE_SHARE`] of the
//! interval in at least [`MIN_PAUSES`] pauses; critical from [`CRITICAL_PAUSE_SHARE`]. Names
//! the dirty limits and the device being written back, with its write rate. The limits are
//! global: a writer to a fast or idle device is paused too while another device's write-back
//! holds the dirty memory; when its own device holds less than half of it, the device named
//! is the one with the most dirty pages at the paused writers' last pauses.

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::{DirtySettings, ProcRow, quantity};

pub const MIN_PAUSES: u64 = 3;
pub const MIN_PAUSE_SHARE: f64 = 0.5;
pub const CRITICAL_PAUSE_SHARE: f64 = 0.9;

/// `vm.dirty_bytes = 8 MiB` or `vm.dirty_ratio = 20%` (whichever the kernel uses), and the
/// background threshold likewise.
pub fn limits_text(s: &DirtySettings) -> (String, String) {
    let dirty = if s.dirty_bytes > 0 {
        format!("vm.dirty_bytes = {}", quantity::bytes(s.dirty_bytes))
    } else {
        format!("vm.dirty_ratio = {}%", s.dirty_ratio)
    };
    let background = if s.background_bytes > 0 {
        format!(
            "vm.dirty_background_bytes = {}",
            quantity::bytes(s.background_bytes)
        )
    } else {
        format!("vm.dirty_background_ratio = {}%", s.background_ratio)
    };
    (dirty, background)
}

pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let d = &proc.interval.waits.dirty;
    #[expect(clippy::cast_precision_loss, reason = "a ratio")]
    let share = d.pause_ns as f64 / scene.interval_ns.max(1) as f64;
    if d.pauses < MIN_PAUSES || share < MIN_PAUSE_SHARE {
        return None;
    }
    let state = proc.dirty_state.as_deref().cloned().unwrap_or_default();
    // Its own device holds little of the dirty memory: the one slow to drain is another's.
    let holder = (state.wb_dirty_bytes.saturating_mul(2) < state.dirty_bytes)
        .then(|| {
            scene
                .procs
                .iter()
                .filter_map(|p| p.dirty_state.as_deref())
                .filter(|s| s.bdi != state.bdi && s.wb_dirty_bytes > state.wb_dirty_bytes)
                .max_by_key(|s| s.wb_dirty_bytes)
        })
        .flatten();
    let drain = holder.unwrap_or(&state);
    let disk = drain
        .dev()
        .and_then(|dev| scene.disks.iter().find(|row| row.dev == dev));
    let device = match disk {
        Some(row) => format!(
            "{} ({}) writes back {}/s",
            row.name,
            row.dev,
            quantity::bytes(scene.rate(row.interval.write_bytes).round() as u64)
        ),
        None if drain.bdi.is_empty() => "its device".to_string(),
        None => format!("device {}", drain.bdi),
    };
    let device = match holder {
        Some(h) => format!(
            "{device} holding {} of it (its own device {} holds {})",
            quantity::bytes(h.wb_dirty_bytes),
            if state.bdi.is_empty() {
                "?"
            } else {
                &state.bdi
            },
            quantity::bytes(state.wb_dirty_bytes)
        ),
        None => device,
    };
    let (dirty_knob, background_knob) = scene
        .dirty_settings
        .as_ref()
        .map(limits_text)
        .unwrap_or_else(|| ("vm.dirty_* unread".to_string(), String::new()));
    let mut finding = Finding::new(
        scene,
        FindingKind::DirtyThrottled,
        if share >= CRITICAL_PAUSE_SHARE {
            Severity::Critical
        } else {
            Severity::Warning
        },
    )
    .of_process(proc);
    finding.dev = drain.dev();
    finding.summary = format!(
        "{} (pid {}): paused by dirty throttling {:.0}% of the time ({} pauses, {}): dirty memory at its limit ({} dirty of {}; {dirty_knob}{}{background_knob}) while {device}",
        proc.comm,
        proc.tgid,
        share.min(1.0) * 100.0,
        d.pauses,
        quantity::latency(d.pause_ns),
        quantity::bytes(state.dirty_bytes),
        quantity::bytes(state.limit_bytes),
        if background_knob.is_empty() { "" } else { ", " },
    );
    finding.evidence = vec![
        ("pauses", Evidence::Count(d.pauses)),
        ("pause_ms", Evidence::Count(d.pause_ns / 1_000_000)),
        (
            "pause_share",
            Evidence::Ratio((share.min(1.0) * 1000.0).round() / 1000.0),
        ),
        ("dirty_limit_bytes", Evidence::Count(state.limit_bytes)),
        ("dirty_bytes", Evidence::Count(state.dirty_bytes)),
        ("device_dirty_bytes", Evidence::Count(drain.wb_dirty_bytes)),
        ("bdi", Evidence::Text(drain.bdi.clone())),
        ("own_bdi", Evidence::Text(state.bdi.clone())),
        ("dirty_limit", Evidence::Text(dirty_knob)),
        ("dirty_background", Evidence::Text(background_knob)),
    ];
    if let Some(row) = disk {
        finding.evidence.extend([
            ("device", Evidence::Text(row.name.clone())),
            (
                "device_write_bytes_per_s",
                Evidence::Count(scene.rate(row.interval.write_bytes).round() as u64),
            ),
        ]);
    }
    finding.why = "balance_dirty_pages() sleeps a writer that dirties page cache faster than its \
                   device writes it back, to keep dirty memory under vm.dirty_bytes (or \
                   vm.dirty_ratio of available memory): its write() calls wait on the device \
                   without any request of its own"
        .to_string();
    finding.fix = "the device draining the write-back is the bottleneck: make it faster or lift \
                   its throttling, spread the writes out, or write with O_DIRECT; raise \
                   vm.dirty_bytes / vm.dirty_background_bytes only to absorb bursts (more data \
                   at risk and longer syncs)"
        .to_string();
    Some(finding)
}
