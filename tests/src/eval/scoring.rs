//! Scoring a run: each figure against its oracle, and the findings against what was
//! expected.

use super::runner::{DiskStat, Figures};
use super::*;

/// Device read bytes judged against diskstats from this many (see `magnitudes`).
const MIN_JUDGED_READ_BYTES: u64 = 1 << 20;

/// The `read_amplification` finding's figure (median over its intervals) against the device's
/// read bytes over the run (diskstats) per byte the program asked for (its own count).
fn read_amplification(
    tool: &Figures,
    before: &DiskStat,
    after: &DiskStat,
    asked_bytes: u64,
) -> Magnitude {
    let oracle = float(after.read_bytes.saturating_sub(before.read_bytes)) / float(asked_bytes);
    let mut values = tool.read_amplification.clone();
    values.sort_by(f64::total_cmp);
    let median = values.get(values.len() / 2).copied();
    Magnitude {
        what: "read_amplification".into(),
        unit: Unit::Ratio,
        tool: median.unwrap_or(0.0),
        oracle,
        source: "diskstats / the program's lookups",
        judged: median.is_some(),
        note: if median.is_some() {
            String::new()
        } else {
            "finding not raised".into()
        },
    }
}

pub(super) fn magnitudes(
    w: &Workload,
    fs: Fs,
    tool: &Figures,
    before: &DiskStat,
    after: &DiskStat,
    trace: Option<&Trace>,
    filefrag: String,
) -> Vec<Magnitude> {
    let device_bytes = after.write_bytes.saturating_sub(before.write_bytes);
    let read_bytes = after.read_bytes.saturating_sub(before.read_bytes);
    let mut reads = judged(
        "device read bytes".into(),
        Unit::Bytes,
        tool.disk_read_bytes,
        read_bytes,
        "diskstats",
    );
    // Below a MiB they are the filesystem's own metadata reads around the run (diskstats is
    // read before the tool starts and after it stops: 14 KiB against 2 KiB on ext4).
    if read_bytes < MIN_JUDGED_READ_BYTES {
        reads.judged = false;
        reads.note = "under 1 MiB: the filesystem's own reads around the run".into();
    }
    let mut out = vec![
        reads,
        judged(
            "device write bytes".into(),
            Unit::Bytes,
            tool.disk_write_bytes,
            device_bytes,
            "diskstats",
        ),
        judged(
            "device write requests".into(),
            Unit::Count,
            tool.disk_writes,
            after.writes.saturating_sub(before.writes),
            "diskstats",
        ),
    ];
    for check in w.checks {
        if let Check::ReadAmplification { asked_bytes } = *check {
            out.push(read_amplification(tool, before, after, asked_bytes));
        }
    }
    let Some(trace) = trace else {
        return out;
    };
    if w.checks.contains(&Check::Syncs) {
        syncs(tool, trace, &mut out);
    }
    if w.checks.contains(&Check::LogicalWrites) {
        let mut logical = judged(
            "logical write bytes".into(),
            Unit::Bytes,
            tool.logical_write_bytes,
            trace.write_bytes,
            "strace",
        );
        logical.note = logical_gaps(tool, trace);
        out.push(logical);
    }
    if w.checks.contains(&Check::Amplification) {
        let oracle = if trace.fs_write_bytes == 0 {
            0.0
        } else {
            float(device_bytes) / float(trace.fs_write_bytes)
        };
        let mut values = tool.amplification.clone();
        values.sort_by(f64::total_cmp);
        let median = values.get(values.len() / 2).copied();
        out.push(Magnitude {
            what: "write_amplification".into(),
            unit: Unit::Ratio,
            tool: median.unwrap_or(0.0),
            oracle,
            source: "diskstats / strace",
            judged: median.is_some(),
            note: if median.is_some() {
                String::new()
            } else {
                "finding not raised".into()
            },
        });
    }
    if w.checks.contains(&Check::SmallSyncCost) {
        out.push(small_sync_cost(fs, tool, trace, device_bytes));
    }
    if w.checks.contains(&Check::Zeroing) {
        zeroing(fs, tool, trace, filefrag, &mut out);
    }
    out
}

/// A judged figure: the tool's against its oracle's.
fn judged(what: String, unit: Unit, tool: u64, oracle: u64, source: &'static str) -> Magnitude {
    Magnitude {
        what,
        unit,
        tool: float(tool),
        oracle: float(oracle),
        source,
        judged: true,
        note: String::new(),
    }
}

/// The sync calls against strace's, in all and by kind (when there are several).
fn syncs(tool: &Figures, trace: &Trace, out: &mut Vec<Magnitude>) {
    let splits = tool.kinds.contains_key(SRF_WRITE);
    let oracle_kinds = trace.kinds_for(splits);
    // `syncs` leaves write-back starts out where the tool names them apart.
    let oracle_syncs = oracle_kinds
        .iter()
        .filter(|(kind, _)| kind.as_str() != SRF_WRITE)
        .map(|(_, n)| n)
        .sum();
    out.push(judged(
        "syncs".into(),
        Unit::Count,
        tool.syncs,
        oracle_syncs,
        "strace",
    ));
    let kinds: BTreeSet<&String> = tool.kinds.keys().chain(oracle_kinds.keys()).collect();
    // One kind alone is the total again.
    if kinds.len() > 1 {
        for kind in kinds {
            out.push(judged(
                format!("syncs: {kind}"),
                Unit::Count,
                tool.kinds.get(kind).copied().unwrap_or(0),
                oracle_kinds.get(kind).copied().unwrap_or(0),
                "strace",
            ));
        }
    } else if let Some(kind) = kinds.first()
        && let Some(last) = out.last_mut()
    {
        last.what = format!("syncs ({kind})");
    }
}

/// What a small sync costs the device: a block, and its share of what the device wrote
/// beyond the files' data.
fn small_sync_cost(fs: Fs, tool: &Figures, trace: &Trace, device_bytes: u64) -> Magnitude {
    let block = u64::from(fs.block);
    let beyond_data = device_bytes.saturating_sub(trace.fs_data_blocks_bytes(block));
    let oracle = block
        + beyond_data
            .checked_div(trace.committing_syncs())
            .unwrap_or(0);
    let mut cost = judged(
        "device bytes per small sync".into(),
        Unit::Bytes,
        tool.small_sync_device_bytes
            .checked_div(tool.small_syncs)
            .unwrap_or(0),
        oracle,
        "block + (diskstats - data) / syncs",
    );
    cost.judged = tool.small_syncs > 0;
    cost.note = format!(
        "{} small syncs; {} beyond the files' data over {} committing syncs",
        tool.small_syncs,
        bytes(float(beyond_data)),
        trace.committing_syncs()
    );
    cost
}

/// The writes that zero a block's head or tail, and the bytes they zero, against the
/// prediction from strace and the filesystem's geometry.
fn zeroing(fs: Fs, tool: &Figures, trace: &Trace, filefrag: String, out: &mut Vec<Magnitude>) {
    // btrfs takes no direct write that is not aligned to its sector size: it falls back
    // to buffered I/O, and nothing is zeroed.
    let (tail_writes, zeroed) = if fs.kind == "btrfs" {
        (0, 0)
    } else {
        trace.predicted_zeroing(u64::from(fs.block))
    };
    let mut writes = judged(
        "zeroing writes".into(),
        Unit::Count,
        tool.zeroing_writes,
        tail_writes,
        "strace + geometry",
    );
    // The finding may count what the process row does not (zeroing inside EOF).
    if let Some((n, z)) = tool.finding_zeroing
        && n != tool.zeroing_writes
    {
        writes.note = format!("the finding's evidence: {n} writes, {}", bytes(float(z)));
    }
    out.push(writes);
    let mut bytes = judged(
        "zeroed bytes".into(),
        Unit::Bytes,
        tool.zeroed_bytes,
        zeroed,
        "strace + geometry",
    );
    bytes.note = filefrag;
    out.push(bytes);
}

/// Where the tool's logical write bytes fall short of strace's, process by process: writers
/// the JSON never lists (no device I/O, sync or D time of their own: a process writing only
/// into pipes), and listed ones whose totals hold less than they wrote (with the interval of
/// their first row: bytes written before it are not in `totals`).
pub(super) fn logical_gaps(tool: &Figures, trace: &Trace) -> String {
    let mut parts = Vec::new();
    let by_process = trace.write_bytes_by_process();
    let unlisted: Vec<u64> = by_process
        .iter()
        .filter(|(pid, bytes)| **bytes > 0 && !tool.listed.contains_key(pid))
        .map(|(_, &bytes)| bytes)
        .collect();
    if !unlisted.is_empty() {
        parts.push(format!(
            "{} of it by {} processes never listed",
            bytes(float(unlisted.iter().sum())),
            unlisted.len()
        ));
    }
    let mut short: Vec<(u64, String)> = tool
        .listed
        .iter()
        .filter_map(|(pid, (comm, total, first))| {
            let wrote = by_process.get(pid).copied().unwrap_or(0);
            let missing = wrote.saturating_sub(*total);
            (missing > 64 << 10 && missing * 10 > wrote).then(|| {
                (
                    missing,
                    format!(
                        "{comm} (pid {pid}) {} of {} (first row: interval {first})",
                        bytes(float(*total)),
                        bytes(float(wrote))
                    ),
                )
            })
        })
        .collect();
    short.sort_by_key(|s| std::cmp::Reverse(s.0));
    parts.extend(short.into_iter().take(2).map(|(_, text)| text));
    parts.join("; ")
}

/// WARN/CRIT kinds raised for the workload: its processes' findings, and its disk's.
pub(super) fn raised_for(
    intervals: &[Value],
    pids: &BTreeSet<u32>,
    dev: &str,
) -> Vec<(String, String)> {
    let mut raised: Vec<(String, String)> = Vec::new();
    for f in intervals
        .iter()
        .flat_map(|i| i["findings"].as_array().into_iter().flatten())
    {
        let severity = f["severity"].as_str().unwrap_or("");
        if severity != "warning" && severity != "critical" {
            continue;
        }
        let mine = match f["pid"].as_u64() {
            Some(pid) => u32::try_from(pid).is_ok_and(|pid| pids.contains(&pid)),
            None => f["dev"].as_str() == Some(dev),
        };
        let kind = f["kind"].as_str().unwrap_or("?").to_string();
        if mine && !raised.iter().any(|(k, _)| *k == kind) {
            raised.push((kind, f["summary"].as_str().unwrap_or("").to_string()));
        }
    }
    raised
}

/// What a wrong cell's findings said: every distinct finding of the kinds that made it
/// wrong (raised where nothing was expected, or not naming the workload's file), with the
/// interval it came in, its summary and its evidence. A cell that is wrong one run in
/// fifty is diagnosed from this, in the CI log, or not at all.
pub(super) fn evidence_of(
    intervals: &[Value],
    pids: &BTreeSet<u32>,
    dev: &str,
    kinds: &[String],
) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for (n, interval) in intervals.iter().enumerate() {
        for f in interval["findings"].as_array().into_iter().flatten() {
            let kind = f["kind"].as_str().unwrap_or("?");
            let severity = f["severity"].as_str().unwrap_or("");
            let mine = match f["pid"].as_u64() {
                Some(pid) => u32::try_from(pid).is_ok_and(|pid| pids.contains(&pid)),
                None => f["dev"].as_str() == Some(dev),
            };
            if !mine || !kinds.iter().any(|k| k == kind) || severity == "info" {
                continue;
            }
            let line = format!(
                "{kind} ({severity}, {} pid {}): {} | file {} | evidence {}",
                f["comm"].as_str().unwrap_or("?"),
                f["pid"],
                f["summary"].as_str().unwrap_or(""),
                f["file"],
                f["evidence"]
            );
            // The same finding is listed every interval it lasts: once, from its first.
            if !lines.iter().any(|l| l.ends_with(&line)) {
                lines.push(format!("interval {n}: {line}"));
            }
        }
    }
    // Bounded: a storm of distinct findings must not flood the CI log.
    let total = lines.len();
    if total > 12 {
        lines.truncate(12);
        lines.push(format!("... and {} more", total - 12));
    }
    lines
}

pub(super) fn score(
    w: &Workload,
    fs: Fs,
    raised: Vec<(String, String)>,
    magnitudes: Vec<Magnitude>,
    seconds: f64,
    workload_seconds: f64,
) -> Cell {
    let expect: &[&[&str]] = if w.quiet_on.contains(&fs) {
        &[]
    } else {
        w.expect
    };
    let is_raised = |kind: &str| raised.iter().any(|(k, _)| k == kind);
    let true_positives = expect
        .iter()
        .filter(|group| group.iter().any(|k| is_raised(k)))
        .count();
    let false_positives = raised
        .iter()
        .map(|(k, _)| k)
        .filter(|k| {
            !expect.iter().any(|group| group.contains(&k.as_str()))
                && !w.tolerate.contains(&k.as_str())
                && !w.tolerate_on.contains(&(fs, k.as_str()))
        })
        .cloned()
        .collect();
    let unnamed = raised
        .iter()
        .filter(|(k, _)| expect.iter().any(|group| group.contains(&k.as_str())))
        .find(|(_, summary)| !w.file.split('|').any(|name| summary.contains(name)))
        .map(|(k, _)| k.clone());
    Cell {
        workload: w.name,
        about: w.about,
        fs,
        expected: expect.iter().map(|group| group.join(" or ")).collect(),
        true_positives,
        false_negatives: expect.len() - true_positives,
        false_positives,
        unnamed,
        raised,
        magnitudes,
        seconds,
        workload_seconds,
        known_miss: w
            .known_miss_on
            .iter()
            .find(|(on, _)| *on == fs)
            .map(|&(_, why)| why),
        first_named_s: None,
        evidence: Vec::new(),
    }
}
