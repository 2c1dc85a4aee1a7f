//! `sync_storm`: a process syncs over and over, each call making little durable (SQLite in
//! autocommit mode: journal, directory and database syncs for every row; a package manager
//! syncing every file it unpacks). Batching would cut the number of commits the device does.
//!
//! Judged on the distribution of calls: the typical payload is the mean of the calls that
//! made at least one unit durable (a unit: the larger of the filesystem block and the memory
//! page), leaving out the largest tenth so a few big syncs cannot hide many small ones; the
//! tiny companion calls (a journal header, a directory) do not drag it down. A batched writer
//! (a thousand rows per transaction: ~13 KiB journal and ~53 KiB database syncs) is typical
//! at ~8 units and is not a storm; autocommit is typical at ~2.
//!
//! The calls must also write: a sync that finds its data already on the device (aligned
//! O_DIRECT writes, then fdatasync) only flushes the device's cache, which `flush_heavy`
//! judges. Settled calls must average at least one filesystem block of device writes, unless
//! most are pairs: a sub-block payload the calling thread wrote by O_DIRECT just before the
//! sync (InnoDB writes each commit's redo log block so, then fdatasyncs it). That is a
//! database committing row by row, a flush per row, rewriting its log block in pieces: the
//! storm group commit exists for, which a user wants named (a RAM-backed device's free
//! flushes never raise `flush_heavy`). Whole blocks written by O_DIRECT then flushed are
//! not pairs: every commit writes whole blocks, and the flush alone is `flush_heavy`'s.
//!
//! io_uring syncs have no measured payload (io_uring's writes are not system calls the
//! probes count): what each wrote itself stands for it, a bound from above for the data
//! pages it had to write.
//!
//! A storm lasts: calls that all settled within [`MIN_STORM_SPAN_NS`] are one flush of a
//! program's files (PostgreSQL's checkpoint at shutdown: 11-21 fsyncs in 3-14 ms, each of a
//! different file, once), judged only when there are at least [`MIN_BURST_SYNCS`] of them
//! (dpkg on a RAM disk: 170-340 in 0.2-0.3 s). Fewer than that in an interval is named only
//! once seen [`THIN_MIN_STREAK`] intervals running, as `write_amplification`'s thin cadence
//! is (etcd's start: bbolt creates its database with 14 fdatasyncs in 102 ms, then syncs
//! only its log).
//!
//! Severity: critical when the process spends at least half of its syncing stretch (first
//! call's start to last call's end in the interval) waiting in them.

use super::{Evidence, Finding, FindingKind, Scene, Severity, round1};
use crate::{ProcRow, SyncedFiles, quantity};

/// Sync calls in the interval, and per second of it.
pub const MIN_SYNCS: u64 = 10;
pub const MIN_SYNCS_PER_S: f64 = 10.0;
/// The typical call makes fewer units than this durable.
pub const MAX_TYPICAL_UNITS: u64 = 4;
/// The largest share of calls left out of the typical payload.
pub const TRIM: f64 = 0.1;
/// Share of the syncing stretch spent inside sync calls for it to be critical.
pub const CRITICAL_SYNC_TIME_SHARE: f64 = 0.5;
/// The syncing stretch is counted as at least this long (a burst of a few calls).
pub const MIN_SPAN_NS: u64 = 100_000_000;
/// Calls settled over a shorter stretch than this are one burst, not a storm ...
pub const MIN_STORM_SPAN_NS: u64 = 50_000_000;
/// ... unless there are at least this many of them. Fewer than this in an interval must
/// also keep coming: seen this many intervals running.
pub const MIN_BURST_SYNCS: u64 = 50;
pub const THIN_MIN_STREAK: u32 = 3;

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios for display and thresholds"
)]
pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let s = &proc.interval.sync;
    // Judged on the calls settled in the interval: payload, time and cost of the same calls.
    let settled = s.small.calls + s.large.calls + s.empty + s.unmeasured.calls + s.dirs.calls;
    let rate = scene.rate(settled);
    if settled < MIN_SYNCS || rate < MIN_SYNCS_PER_S {
        return None;
    }
    if s.settled_span_ns < MIN_STORM_SPAN_NS && settled < MIN_BURST_SYNCS {
        return None;
    }
    // Calls on a filesystem of unknown block size are not judged.
    let unit = u64::from(s.fs_block_size.max(scene.page_size));
    if s.fs_block_size == 0 || unit == 0 {
        return None;
    }
    let typical = s
        .settled_payload
        .trimmed_mean_from(unit, 1.0 - TRIM)
        .or_else(|| s.settled_payload.trimmed_mean_from(0, 1.0 - TRIM))?;
    if typical >= unit * MAX_TYPICAL_UNITS {
        return None;
    }
    let device = [&s.small, &s.large, &s.unmeasured, &s.dirs]
        .iter()
        .map(|p| p.own_bytes + p.charged_bytes)
        .sum::<u64>();
    // A commit whose sub-block payload its thread wrote by O_DIRECT just before the sync
    // (the pair) wrote it: less than a block, and a flush, per row.
    let paired = s.direct_pairs * 2 >= settled;
    if settled == 0 || (device / settled < u64::from(s.fs_block_size) && !paired) {
        return None;
    }
    let span_ns = s.settled_span_ns.max(MIN_SPAN_NS);
    let share = (s.settled_time_ns as f64 / span_ns as f64).min(1.0);
    let mut finding = Finding::new(
        scene,
        FindingKind::SyncStorm,
        if share >= CRITICAL_SYNC_TIME_SHARE {
            Severity::Critical
        } else {
            Severity::Warning
        },
    )
    .of_process(proc)
    .persisting(if settled < MIN_BURST_SYNCS {
        THIN_MIN_STREAK
    } else {
        1
    });
    finding.dev = s.disk.or_else(|| Scene::main_disk(proc));
    // The files of the calls judged (settled in the interval, made up to `SETTLE_NS` before).
    let synced = &s.settled_files;
    finding.files = synced.top.iter().map(|(path, _)| path.clone()).collect();
    let files = files_clause(&mut finding, synced);
    // Mostly calls whose payload is not measured (io_uring, or a flush of write-back started
    // before on files the probes could not name): their payload is what they wrote themselves.
    let unmeasured = s.unmeasured.calls * 2 > settled;
    finding.summary = format!(
        "{} (pid {}): {} {}s in {}{files}, each {} ~{}{}; {:.0}% of that time waiting in them (p99 {})",
        proc.comm,
        proc.tgid,
        settled,
        s.kind,
        quantity::latency(s.settled_span_ns.max(1)),
        if unmeasured { "writing" } else { "making" },
        quantity::bytes(typical),
        if unmeasured {
            " itself (payload not measured: io_uring, or write-back started before)"
        } else {
            " durable"
        },
        share * 100.0,
        quantity::latency(s.latency.p99_ns)
    );
    if paired {
        finding.summary.push_str(&format!(
            "; {} of them flushed a log block written by O_DIRECT just before",
            s.direct_pairs
        ));
    }
    finding.evidence = evidence(scene, s, settled, share, typical, unit, unmeasured);
    finding.why = "every sync waits for the device (and a journal commit and cache flush); \
                   synced a few KiB at a time, the waiting dominates the work"
        .to_string();
    finding.fix = if paired {
        // A database's per-row commit: each writes its log block, then waits for a flush.
        "commit several rows per transaction, or let commits share one flush (group commit: \
         concurrent clients; InnoDB: innodb_flush_log_at_trx_commit=2 where losing up to a \
         second of commits to a crash of the host is acceptable)"
            .to_string()
    } else if synced.elsewhere > 0 {
        // Many files, each synced a few times at most: an installer, an unpacker.
        super::write_amplification::MANY_FILES_FIX.to_string()
    } else {
        "make each sync carry more: group rows into transactions (SQLite: BEGIN..COMMIT, \
         or journal_mode=WAL with synchronous=NORMAL), batch records per fsync, or move the \
         file to a faster device"
            .to_string()
    };
    Some(finding)
}

/// The summary's files: the one synced, the first two and how many more, or, past the files
/// kept, how many and a recent one (listed first in `finding.files`).
fn files_clause(finding: &mut Finding, synced: &SyncedFiles) -> String {
    match synced.top.as_slice() {
        [] => String::new(),
        [(one, _)] => format!(" on {one}"),
        // More files than are kept, each synced a few times at most: a recent one says what
        // kind they are (an installer's new files), the most synced may be the odd one.
        [(first, a), ..] if synced.elsewhere > 0 => {
            let many = format!(
                " on {} files or more, the most synced {first} ({a}x)",
                synced.top.len() + 1
            );
            match synced.recent.iter().find(|r| *r != first) {
                Some(other) => {
                    if !finding.files.contains(other) {
                        finding.files.insert(0, other.clone());
                    }
                    format!("{many}, lately {other}")
                }
                None => many,
            }
        }
        [(first, a), (second, b), rest @ ..] => format!(
            " on {first} ({a}x), {second} ({b}x){}",
            if rest.is_empty() {
                String::new()
            } else {
                format!(" and {} more", rest.len())
            }
        ),
    }
}

/// The figures behind the finding.
fn evidence(
    scene: &Scene,
    s: &crate::SyncFigures,
    settled: u64,
    share: f64,
    typical: u64,
    unit: u64,
    unmeasured: bool,
) -> Vec<(crate::labels::Label, Evidence)> {
    let rate = scene.rate(settled);
    vec![
        ("syncs_per_s", Evidence::Ratio(round1(rate))),
        ("syncs", Evidence::Count(settled)),
        ("syncing_ms", Evidence::Count(s.settled_span_ns / 1_000_000)),
        (
            "sync_time_share",
            Evidence::Ratio((share * 1000.0).round() / 1000.0),
        ),
        ("typical_payload_bytes", Evidence::Count(typical)),
        (
            "payload_bytes_p50",
            Evidence::Count(s.settled_payload.quantile(0.5)),
        ),
        ("unit_bytes", Evidence::Count(unit)),
        (
            "sync_time_ms",
            Evidence::Count(s.settled_time_ns / 1_000_000),
        ),
        ("sync_p50_us", Evidence::Count(s.latency.p50_ns / 1000)),
        ("sync_p99_us", Evidence::Count(s.latency.p99_ns / 1000)),
        ("sync_kind", Evidence::Text(s.kind.to_string())),
        (
            "payload",
            Evidence::Text(
                if unmeasured {
                    "own device writes (not measured: io_uring, or write-back started before)"
                } else {
                    "measured"
                }
                .to_string(),
            ),
        ),
        (
            "files",
            Evidence::Count(u64::try_from(s.files.len()).unwrap_or(u64::MAX)),
        ),
    ]
}
