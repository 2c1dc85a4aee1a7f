//! `write_amplification`: small writes, each made durable by its own sync (Brendan Gregg's
//! lab001, a logger that fsyncs every record, appends to an `O_DSYNC` file: each such write
//! runs the filesystem's fsync before it returns, and is one sync call here).
//!
//! Every such sync writes at least one whole filesystem block for the few bytes that changed
//! and, on a journaling filesystem, a commit (descriptor, metadata, commit block and a cache
//! flush) on top: 128-byte records on ext4 cost ~16 KiB each, over 100x.
//!
//! Judged per call: each settled sync call knows its payload and what the device wrote for
//! it. Calls that made less than one filesystem block durable are the small population; the
//! finding fires when they are the process's typical sync (a few big syncs, such as lab001's
//! 2 MiB record every 200th, do not hide them), and its amplification is that of the small
//! population: the same figure as the `AMP` column.
//!
//! A cadence, not a burst: a handful of small syncs in one interval (a program's start-up
//! writing its pid file) is named only if it keeps coming interval after interval.
//!
//! `sync_file_range` is not judged here (see `model::sync`): it writes only the data pages
//! write-back would write anyway, and commits no journal and flushes no cache, so the block a
//! small file costs it is not amplification caused by syncing.

use super::{Evidence, Finding, FindingKind, Scene, Severity, round1};
use crate::{ProcRow, SyncFigures, SyncPopulation, labels::Label, quantity};

/// Fewer small syncs than this per second is not a cadence worth naming.
pub const MIN_SMALL_SYNCS_PER_S: f64 = 5.0;
/// Fewer small syncs than this in one interval is a handful, which a one-off burst holds as
/// well as a cadence does: PostgreSQL rewrites and fsyncs postmaster.pid 7-8 times within
/// ~0.1 s at start, SQLite's CREATE TABLE makes 3 small fdatasyncs, redis 3 as it creates its
/// AOF, and nothing follows (each is 14/s over a 0.5 s interval). Loggers, lab001, `dd
/// oflag=dsync` and maildir make hundreds an interval.
pub const MIN_SMALL_SYNCS: u64 = 10;
/// Below [`MIN_SMALL_SYNCS`], the pattern must be seen this many intervals running: a burst
/// settles over two intervals at most, a slow cadence keeps coming.
pub const THIN_MIN_STREAK: u32 = 3;
/// Small syncs must be at least this share of the settled calls with a payload.
pub const MIN_SMALL_SHARE: f64 = 0.5;
/// Device bytes per payload byte of the small calls.
pub const MIN_AMPLIFICATION: f64 = 4.0;
/// From here on it is critical.
pub const CRITICAL_AMPLIFICATION: f64 = 32.0;
/// The remedy for many files synced one by one (an installer): one sync for them all, or none
/// where no file must survive a crash on its own.
pub const MANY_FILES_FIX: &str = "sync the files together, not one by one: write them all, \
    then one syncfs (or fsync them in a row after it); where a single file need not survive a \
    crash (a chroot, an image or container build) skip per-file syncs (dpkg --force-unsafe-io, \
    eatmydata)";

#[expect(clippy::cast_precision_loss, reason = "ratios for thresholds")]
pub fn check(scene: &Scene, proc: &ProcRow) -> Option<Finding> {
    let s = &proc.interval.sync;
    let (small, large) = (&s.small, &s.large);
    let judged = small.calls + large.calls;
    if judged == 0
        || scene.rate(small.calls) < MIN_SMALL_SYNCS_PER_S
        || (small.calls as f64) < judged as f64 * MIN_SMALL_SHARE
    {
        return None;
    }
    // The typical population is the small one here, so this is the AMP column's figure.
    let ratio = s.amplification()?;
    if ratio < MIN_AMPLIFICATION {
        return None;
    }
    let charged = small.mean_charged();
    let journal = s
        .charged_from
        .first()
        .map_or_else(|| "the journal".to_string(), |p| p.comm.clone());
    let kind = s.kind;
    let block = small.fs_block_size;
    let mut populations = describe(kind, small, large, s.commit_records, &journal);
    if s.dirs.calls > 0 {
        populations.push_str(&format!(
            "; and {} directory {kind}s at {} each",
            s.dirs.calls,
            quantity::bytes(
                (s.dirs.own_bytes + s.dirs.charged_bytes)
                    .checked_div(s.dirs.calls)
                    .unwrap_or(0)
            ),
        ));
    }
    let mut finding = Finding::new(
        scene,
        FindingKind::WriteAmplification,
        if ratio >= CRITICAL_AMPLIFICATION {
            Severity::Critical
        } else {
            Severity::Warning
        },
    )
    .of_process(proc)
    .persisting(if small.calls < MIN_SMALL_SYNCS {
        THIN_MIN_STREAK
    } else {
        1
    });
    finding.dev = s.disk.or_else(|| Scene::main_disk(proc));
    finding.files = s.small_files.iter().map(|(path, _)| path.clone()).collect();
    let file = files_clause(&mut finding, s);
    let typical = if small.min_payload == small.max_payload {
        quantity::bytes(small.max_payload)
    } else {
        format!("~{}", quantity::bytes(small.mean_payload()))
    };
    // "fsync after 128 B writes", or "128 B O_DSYNC writes" for writes that sync themselves.
    let pattern = if s.kind_is_write() {
        format!("{typical} {kind}s")
    } else {
        format!("{kind} after {typical} writes")
    };
    finding.summary = format!(
        "{} (pid {}): {} write amplification, {pattern}: {populations}{file}",
        proc.comm,
        proc.tgid,
        quantity::times(ratio),
    );
    finding.evidence = evidence(scene, s, ratio, journal);
    // Only what the evidence shows: a journal commit where journal writes were charged, a
    // cache flush where the calls flushed.
    let extra = match (charged > 0, small.flushes > 0) {
        (true, true) => ", plus a journal commit and a cache flush",
        (true, false) => ", plus a journal commit",
        (false, true) => ", plus a cache flush",
        (false, false) => "",
    };
    finding.why = format!(
        "each {kind} of less than a {block}-byte filesystem block still writes a whole block{extra}"
    );
    finding.fix = fix(s);
    Some(finding)
}

/// The summary's files: the one synced, the first of a few, or, past the files kept, how
/// many and a recent one (listed first in `finding.files`).
fn files_clause(finding: &mut Finding, s: &SyncFigures) -> String {
    let listed = finding.files.clone();
    match listed.as_slice() {
        [] => String::new(),
        [one] if s.small_files_elsewhere == 0 => format!("; file {one}"),
        [first, ..] if s.small_files_elsewhere == 0 => format!("; files {first} and others"),
        // More files than are kept: each synced a few times at most (an installer, a
        // mail queue). A recent one says what kind they are; the most synced may be the odd
        // one.
        [first, ..] => {
            let many = format!(
                "; {} files or more, the most synced {first}",
                s.small_files.len() + 1
            );
            match s.small_files_recent.iter().find(|r| *r != first) {
                Some(other) => {
                    if !finding.files.contains(other) {
                        finding.files.insert(0, other.clone());
                    }
                    format!("{many}, lately {other}")
                }
                None => many,
            }
        }
    }
}

/// The figures behind the finding: the amplification and the two populations it comes from.
#[expect(clippy::cast_precision_loss, reason = "a ratio")]
fn evidence(scene: &Scene, s: &SyncFigures, ratio: f64, journal: String) -> Vec<(Label, Evidence)> {
    let (small, large) = (&s.small, &s.large);
    let own = small.mean_own();
    let charged = small.mean_charged();
    let kind = s.kind;
    let block = small.fs_block_size;
    // Of the calls judged (they settle an interval or so after they end, when this
    // interval's own windows may hold none).
    let avg_write = small.mean_write();
    vec![
        ("amplification", Evidence::Ratio(round1(ratio))),
        ("small_syncs", Evidence::Count(small.calls)),
        ("large_syncs", Evidence::Count(large.calls)),
        ("empty_syncs", Evidence::Count(s.empty)),
        (
            "small_payload_bytes_avg",
            Evidence::Count(small.mean_payload()),
        ),
        ("small_device_bytes_own_avg", Evidence::Count(own)),
        ("small_device_bytes_charged_avg", Evidence::Count(charged)),
        (
            "large_payload_bytes_avg",
            Evidence::Count(large.mean_payload()),
        ),
        (
            "large_amplification",
            Evidence::Ratio(round1(large.amplification().unwrap_or(0.0))),
        ),
        (
            "data_amplification",
            Evidence::Ratio(round1(
                small.own_bytes as f64 / small.payload_bytes.max(1) as f64,
            )),
        ),
        ("avg_write_bytes", Evidence::Count(avg_write)),
        ("fs_block_size", Evidence::Count(u64::from(block))),
        (
            "small_syncs_per_s",
            Evidence::Ratio(round1(scene.rate(small.calls))),
        ),
        ("sync_kind", Evidence::Text(kind.to_string())),
        ("charged_to_journal_thread", Evidence::Text(journal)),
    ]
}

/// The remedy: sync files together (an installer), drop O_DSYNC for batches, or batch
/// records.
fn fix(s: &SyncFigures) -> String {
    let kind = s.kind;
    if s.small_files_elsewhere > 0 {
        // More files than are kept, each synced a few times at most: an installer or an
        // unpacker syncing file by file; more records per sync is not the remedy.
        MANY_FILES_FIX.to_string()
    } else if s.kind_is_write() {
        format!(
            "open the file without {}: write records in batches and fdatasync once per batch \
             (group commit), write whole blocks, or preallocate the file",
            if kind.starts_with("O_SYNC") {
                "O_SYNC"
            } else {
                "O_DSYNC"
            }
        )
    } else if crate::SyncKind::Fdatasync.name() != kind
        && crate::SyncKind::UringFdatasync.name() != kind
    {
        "batch records and sync less often (group commit), write whole blocks, or \
         preallocate the file and use fdatasync"
            .to_string()
    } else if s.small.mean_charged() * 4 <= u64::from(s.fs_block_size) {
        // etcd's log: preallocated and fdatasynced already, each call commits little journal;
        // the block each rewrites is the cost, and only fewer syncs or whole blocks cut it.
        format!(
            "batch records and sync less often (group commit: one fdatasync for many writers' \
             records) or write whole blocks; it already fdatasyncs and commits little journal \
             (~{} a call): each call costs the block it rewrites, and waits for the device's \
             cache flush",
            quantity::bytes(s.small.mean_charged())
        )
    } else {
        "batch records and sync less often (group commit), write whole blocks, or \
         preallocate the file by writing it (fdatasync still commits a journal for an append's \
         size or an fallocated extent's first write)"
            .to_string()
    }
}

/// "199 of 200 fsyncs made 128 B durable at 131x (4 KiB own + 12.4 KiB by jbd2/loop0-8
/// each); 1 of 200 made 2 MiB durable at 1.1x".
fn describe(
    kind: &str,
    small: &SyncPopulation,
    large: &SyncPopulation,
    records: u64,
    journal: &str,
) -> String {
    let all = small.calls + large.calls + records;
    let payload = |p: &SyncPopulation| {
        if p.min_payload == p.max_payload {
            quantity::bytes(p.max_payload)
        } else {
            format!("~{}", quantity::bytes(p.mean_payload()))
        }
    };
    // Data written out before the call by sync_file_range is still the call's to make durable.
    let ahead = small.ahead_bytes.checked_div(small.calls).unwrap_or(0);
    let own = if ahead > 0 {
        format!(
            "{} own, {} of it written out before by sync_file_range,",
            quantity::bytes(small.mean_own()),
            quantity::bytes(ahead)
        )
    } else {
        format!("{} own", quantity::bytes(small.mean_own()))
    };
    let mut text = format!(
        "{} of {all} {kind}s made {} durable at {} ({own} + {} by {journal} each)",
        small.calls,
        payload(small),
        quantity::times(small.amplification().unwrap_or(0.0)),
        quantity::bytes(small.mean_charged()),
    );
    if large.calls > 0 {
        text.push_str(&format!(
            "; {} of {all} made {} durable at {}",
            large.calls,
            payload(large),
            quantity::times(large.amplification().unwrap_or(0.0)),
        ));
    }
    if records > 0 {
        text.push_str(&format!(
            "; {records} right after a large one, judged with it"
        ));
    }
    text
}
