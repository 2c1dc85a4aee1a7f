//! `sync_storm`: a process spends most of its time waiting in sync calls that each make
//! little durable (SQLite in autocommit mode: a journal and a database fsync per row).
//!
//! A batched writer whose syncs carry plenty of payload (a transaction of a thousand rows per
//! commit, a copy that syncs once per file) may also wait in its syncs a lot; that is the
//! price of durability paid efficiently, not a storm: the median payload per call decides.

use super::{Evidence, Finding, FindingKind, Scene, Severity, round1};
use crate::model::{ProcRow, quantity};

pub const MIN_SYNCS_PER_S: f64 = 10.0;
/// Share of the interval spent inside sync calls (summed over its threads).
pub const MIN_SYNC_TIME_SHARE: f64 = 0.5;
pub const CRITICAL_SYNC_TIME_SHARE: f64 = 0.9;
/// The median call makes at most this many filesystem blocks durable.
pub const MAX_MEDIAN_PAYLOAD_BLOCKS: u64 = 16;

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for display and thresholds"
)]
pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let s = &proc.interval.sync;
    let rate = scene.rate(s.syncs);
    let share = s.time_ns as f64 / scene.interval_ns.max(1) as f64;
    if rate < MIN_SYNCS_PER_S || share < MIN_SYNC_TIME_SHARE {
        return None;
    }
    // The block size of what it syncs; calls without a known filesystem are not judged.
    let block = Some(s.fs_block_size).filter(|&b| b > 0)?;
    let max_payload = u64::from(block) * MAX_MEDIAN_PAYLOAD_BLOCKS;
    if s.payload_p50 > max_payload {
        return None;
    }
    let mut finding = Finding::new(
        scene,
        FindingKind::SyncStorm,
        if share >= CRITICAL_SYNC_TIME_SHARE {
            Severity::Critical
        } else {
            Severity::Warning
        },
    )
    .of_process(proc);
    finding.dev = Scene::main_disk(proc);
    finding.files = s.files.iter().map(|(path, _)| path.clone()).collect();
    let files = match s.files.as_slice() {
        [] => String::new(),
        [(one, _)] => format!(" on {one}"),
        [(first, a), (second, b), rest @ ..] => format!(
            " on {first} ({a}x), {second} ({b}x){}",
            if rest.is_empty() {
                String::new()
            } else {
                format!(" and {} more", rest.len())
            }
        ),
    };
    finding.summary = format!(
        "{} (pid {}): {rate:.0} {}s/s{files}, {:.0}% of its time waiting in them, {} made durable per call (p50), p99 {}",
        proc.comm,
        proc.tgid,
        s.kind,
        share * 100.0,
        quantity::bytes(s.payload_p50),
        quantity::latency(s.latency.p99_ns)
    );
    finding.evidence = vec![
        ("syncs_per_s", Evidence::Ratio(round1(rate))),
        (
            "sync_time_share",
            Evidence::Ratio((share * 1000.0).round() / 1000.0),
        ),
        ("payload_bytes_p50", Evidence::Count(s.payload_p50)),
        ("sync_p50_us", Evidence::Count(s.latency.p50_ns / 1000)),
        ("sync_p99_us", Evidence::Count(s.latency.p99_ns / 1000)),
        ("sync_kind", Evidence::Text(s.kind.to_string())),
        (
            "files",
            Evidence::Count(u64::try_from(s.files.len()).unwrap_or(u64::MAX)),
        ),
    ];
    finding.why = "every sync waits for the device (and a journal commit and cache flush); \
                   synced a few KiB at a time, the waiting dominates the work"
        .to_string();
    finding.fix =
        "make each sync carry more: group rows into transactions (SQLite: BEGIN..COMMIT, \
                   or journal_mode=WAL with synchronous=NORMAL), batch records per fsync, or \
                   move the file to a faster device"
            .to_string();
    Some(finding)
}
