//! `read_amplification`: the device reads far more than the process asks for. A program that
//! touches a large memory-mapped file at random from a cold cache takes a major fault per
//! page, and the kernel reads around each (128 KiB by default, `read_ahead_kb`): 4 KiB asked,
//! 128 KiB read, 32x. The read side of "4 KiB amplification", the classic pathology of
//! mmap-based databases and search indexes (MongoDB and Elasticsearch document readahead
//! tuning because of it).
//!
//! What it asked for: its page faults (a page each: major ones that read, minor ones that
//! used a page read around before) and the bytes its read calls returned, from /proc, set
//! against its device read bytes. Fires only when most of those bytes are
//! readahead (`REQ_RAHEAD`: read ahead of, or around, what was asked) and the reads do not
//! follow each other: a sequential reader uses what it reads ahead (cat, cp, a sequential
//! scan of a mapping: few major faults, every page read used), and stays quiet. A process
//! whose /proc totals were not sampled over the interval (it started before the probes and
//! was first seen now) is not judged.

use super::{Evidence, Finding, FindingKind, Scene, Severity, round1};
use crate::{ProcRow, quantity};

/// Device read bytes in the interval, and per second of it.
pub const MIN_READ_BYTES: u64 = 8 << 20;
pub const MIN_READ_BYTES_PER_S: f64 = 4.0 * 1024.0 * 1024.0;
/// Readahead reads are at least this share of the device read bytes.
pub const MIN_READAHEAD_SHARE: f64 = 0.5;
/// At most this share of the read requests followed the previous one (a sequential reader
/// uses what it reads ahead).
pub const MAX_SEQUENTIAL_SHARE: f64 = 0.5;
/// Device read bytes per byte asked for.
pub const MIN_AMPLIFICATION: f64 = 4.0;
/// From here on it is critical.
pub const CRITICAL_AMPLIFICATION: f64 = 16.0;
/// Seen this many intervals running: a program starting from a cold cache reads its code
/// and libraries around a few faults (python's start: 6 major faults, 8 MiB read), once.
pub const MIN_STREAK: u32 = 2;

#[expect(clippy::cast_precision_loss, reason = "ratios for thresholds")]
pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let f = &proc.interval;
    let r = &f.read_demand;
    let read = f.read_bytes;
    if proc.kernel_thread
        || !r.asked_known
        || read < MIN_READ_BYTES
        || scene.rate(read) < MIN_READ_BYTES_PER_S
        || r.requests == 0
        || (r.readahead_bytes as f64) < read as f64 * MIN_READAHEAD_SHARE
        || r.sequential as f64 > r.requests as f64 * MAX_SEQUENTIAL_SHARE
    {
        return None;
    }
    let page = u64::from(scene.page_size.max(4096));
    // Every fault asked for a page: a major one read it (and around it), a minor one used a
    // page read around before (or anonymous memory: an upper bound, so never a false ratio).
    let faulted = (r.major_faults + r.minor_faults).saturating_mul(page);
    let asked = faulted.saturating_add(r.read_call_bytes);
    if asked == 0 {
        return None;
    }
    let ratio = read as f64 / asked as f64;
    if ratio < MIN_AMPLIFICATION {
        return None;
    }
    let by_faults = faulted >= r.read_call_bytes;
    let mut finding = Finding::new(
        scene,
        FindingKind::ReadAmplification,
        if ratio >= CRITICAL_AMPLIFICATION {
            Severity::Critical
        } else {
            Severity::Warning
        },
    )
    .of_process(proc)
    .persisting(MIN_STREAK);
    finding.dev = Scene::main_disk(proc);
    finding.files = r.files.iter().map(|(path, _)| path.clone()).collect();
    let per_read = r
        .readahead_bytes
        .checked_div(r.readahead_requests)
        .unwrap_or(0);
    let how = if by_faults {
        format!(
            "{} page faults ({} major) asked {}",
            r.major_faults + r.minor_faults,
            r.major_faults,
            quantity::bytes(faulted)
        )
    } else {
        format!("read calls asked {}", quantity::bytes(r.read_call_bytes))
    };
    let file = match r.files.first() {
        Some((path, bytes)) => format!(
            "; {} of it from {path}",
            quantity::bytes(*bytes).trim_start()
        ),
        None => String::new(),
    };
    finding.summary = format!(
        "{} (pid {}): {} read amplification, {how}, the device read {} in ~{} readahead reads{file}",
        proc.comm,
        proc.tgid,
        quantity::times(ratio),
        quantity::bytes(read),
        quantity::bytes(per_read),
    );
    finding.evidence = vec![
        ("amplification", Evidence::Ratio(round1(ratio))),
        ("device_read_bytes", Evidence::Count(read)),
        ("asked_bytes", Evidence::Count(asked)),
        ("major_faults", Evidence::Count(r.major_faults)),
        ("minor_faults", Evidence::Count(r.minor_faults)),
        ("read_call_bytes", Evidence::Count(r.read_call_bytes)),
        ("readahead_bytes", Evidence::Count(r.readahead_bytes)),
        ("readahead_reads", Evidence::Count(r.readahead_requests)),
        ("readahead_bytes_avg", Evidence::Count(per_read)),
        (
            "sequential_share",
            Evidence::Ratio(round1(r.sequential as f64 / r.requests as f64 * 100.0) / 100.0),
        ),
        (
            "read_by",
            Evidence::Text(
                if by_faults {
                    "mmap faults"
                } else {
                    "read calls"
                }
                .to_string(),
            ),
        ),
    ];
    finding.why = if by_faults {
        "each page fault on a file mapping reads around the page (read_ahead_kb, 128 KiB by \
         default); touched at random, the rest is never used and evicts what is"
            .to_string()
    } else {
        "the kernel reads ahead of each read call; read at random, what it reads ahead is \
         never used and evicts what is"
            .to_string()
    };
    finding.fix = if by_faults {
        "madvise(MADV_RANDOM) on the mapping (LMDB: MDB_NORDAHEAD, readahead=False), or lower \
         the device's read_ahead_kb; O_DIRECT where the program keeps a cache of its own"
            .to_string()
    } else {
        "posix_fadvise(POSIX_FADV_RANDOM) on the file, or lower the device's read_ahead_kb; \
         O_DIRECT where the program keeps a cache of its own"
            .to_string()
    };
    Some(finding)
}
