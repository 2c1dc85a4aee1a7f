//! The page's sections, each written into the page in turn: the findings on the timeline
//! with their evidence, the disks' charts, the top processes, the threads in D state.

use std::fmt::Write as _;

use super::{
    PROC_HEAT_MAPS, bytes, disk_columns, disk_series, evidence_text, ns_f, per_s, proc_columns,
    proc_table, secs, subject,
};
use crate::model::findings::Severity;
use crate::report::{
    svg::{self, BarRow, Scale, TimeAxis, esc},
    timeline::{DiskCell, FindingTrack, Timeline},
};

/// The findings, the worst first: their bars over time, then each one's details.
pub(super) fn findings(out: &mut String, t: &Timeline, axis: &TimeAxis) {
    let findings: Vec<_> = {
        let mut f: Vec<_> = t.findings.values().collect();
        f.sort_by(|a, b| {
            b.finding
                .severity
                .cmp(&a.finding.severity)
                .then(a.episodes[0].0.cmp(&b.episodes[0].0))
        });
        f
    };
    let _ = write!(
        out,
        "<h2 id=\"findings\">Findings ({})</h2>",
        findings.len()
    );
    if findings.is_empty() {
        out.push_str("<p>No pathological pattern was found in this recording.</p>");
    } else {
        let rows: Vec<BarRow> = findings
            .iter()
            .enumerate()
            .map(|(i, track)| {
                let f = &track.finding;
                BarRow {
                    label: format!("{} {} {}", f.severity.short(), f.kind.name(), subject(f, t)),
                    class: match f.severity {
                        Severity::Critical => "crit",
                        Severity::Warning => "warn",
                        Severity::Info => "info",
                    },
                    spans: track.episodes.clone(),
                    link: Some(format!("finding-{i}")),
                }
            })
            .collect();
        out.push_str(&svg::bars(
            "Findings over time (click one for its evidence and fix)",
            axis,
            &rows,
        ));
        for (i, track) in findings.iter().enumerate() {
            finding(out, i, track, axis);
        }
    }
}

/// One finding's details, `finding-{i}` for its bar's link: when it was seen, its files,
/// evidence, why and fix.
fn finding(out: &mut String, i: usize, track: &FindingTrack, axis: &TimeAxis) {
    let f = &track.finding;
    let span = |(a, b): &(u64, u64)| format!("{}–{}", axis.clock(*a), axis.clock(*b));
    let episodes = &track.episodes;
    // A pattern that comes and goes: its first and last stays, and how many.
    let when: Vec<String> = if episodes.len() > 6 {
        let active: u64 = episodes.iter().map(|(a, b)| b - a).sum();
        let mut w: Vec<String> = episodes[..3].iter().map(span).collect();
        w.push(format!(
            "… ({} stays, {} in all) …",
            episodes.len(),
            secs(active)
        ));
        w.extend(episodes[episodes.len() - 2..].iter().map(span));
        w
    } else {
        episodes.iter().map(span).collect()
    };
    let _ = write!(
        out,
        "<div class=\"finding {}\" id=\"finding-{i}\"><div class=\"sum\">{} {}: {}</div>",
        f.severity.name(),
        f.severity.short(),
        esc(f.kind.name()),
        esc(&f.summary)
    );
    let _ = write!(out, "<div>seen {}</div>", esc(&when.join(", ")));
    if !f.files.is_empty() {
        let _ = write!(out, "<div>files: {}</div>", esc(&f.files.join(", ")));
    }
    if !f.evidence.is_empty() {
        let evidence: Vec<String> = f
            .evidence
            .iter()
            .map(|(k, v)| format!("{k}={}", evidence_text(v)))
            .collect();
        let _ = write!(
            out,
            "<div class=\"ev\">evidence: {}</div>",
            esc(&evidence.join(", "))
        );
    }
    let _ = write!(
        out,
        "<div><b>why:</b> {}</div><div><b>fix:</b> {}</div></div>",
        esc(&f.why),
        esc(&f.fix)
    );
}

/// Each disk that did I/O: its rates, throughput and latency percentiles over time, and its
/// queue and device time heat maps.
pub(super) fn disks(out: &mut String, t: &Timeline, axis: &TimeAxis) {
    out.push_str("<h2 id=\"disks\">Disks</h2>");
    let busy = |cells: &[DiskCell]| {
        cells
            .iter()
            .any(|c| c.latency.count > 0 || c.reads + c.writes > 0)
    };
    let mut shown = 0;
    for track in t.disks.values().filter(|d| busy(&d.cells)) {
        shown += 1;
        let name = esc(&track.name);
        let total_requests: u64 = track.cells.iter().map(|c| c.reads + c.writes).sum();
        let total_bytes: u64 = track
            .cells
            .iter()
            .map(|c| c.read_bytes + c.write_bytes)
            .sum();
        let _ = write!(
            out,
            "<h3 id=\"disk-{name}\">{name}</h3><p class=\"meta\">{total_requests} reads and writes, {} moved</p>",
            bytes(total_bytes)
        );
        out.push_str(&svg::lines(
            &format!("{} IOPS", track.name),
            axis,
            Scale::Rate,
            &[
                (
                    "reads/s",
                    disk_series(t, &track.cells, |c, s| per_s(c.reads, s)),
                ),
                (
                    "writes/s",
                    disk_series(t, &track.cells, |c, s| per_s(c.writes, s)),
                ),
            ],
        ));
        out.push_str(&svg::lines(
            &format!("{} throughput", track.name),
            axis,
            Scale::Bytes,
            &[
                (
                    "read",
                    disk_series(t, &track.cells, |c, s| per_s(c.read_bytes, s)),
                ),
                (
                    "write",
                    disk_series(t, &track.cells, |c, s| per_s(c.write_bytes, s)),
                ),
            ],
        ));
        out.push_str(&svg::lines(
            &format!("{} latency percentiles", track.name),
            axis,
            Scale::Latency,
            &[
                (
                    "p50",
                    disk_series(t, &track.cells, |c, _| ns_f(c.latency.p50_ns())),
                ),
                (
                    "p99",
                    disk_series(t, &track.cells, |c, _| ns_f(c.latency.p99_ns)),
                ),
                (
                    "p99.9",
                    disk_series(t, &track.cells, |c, _| ns_f(c.latency.p999_ns)),
                ),
            ],
        ));
        out.push_str(&svg::heat_map(
            &format!("{} queue time heat map (created → issued)", track.name),
            axis,
            &disk_columns(t, &track.cells, |c| c.queue),
            false,
        ));
        out.push_str(&svg::heat_map(
            &format!("{} device time heat map (issued → completed)", track.name),
            axis,
            &disk_columns(t, &track.cells, |c| c.device),
            false,
        ));
    }
    if shown == 0 {
        out.push_str("<p>No block I/O in this recording.</p>");
    }
}

/// The top processes by bytes moved and by time waiting in sync calls, and the heat maps of
/// the first of them.
pub(super) fn processes(out: &mut String, t: &Timeline, axis: &TimeAxis, top: usize) {
    out.push_str("<h2 id=\"processes\">Processes</h2>");
    let by_bytes = t.top_procs(|p| p.read_bytes + p.write_bytes, top);
    let by_wait = t.top_procs(|p| p.sync_ns, top);
    proc_table(out, "By bytes moved", &by_bytes);
    proc_table(
        out,
        "By time waiting in sync calls (fsync and friends)",
        &by_wait,
    );
    let mut drawn: Vec<u32> = Vec::new();
    for p in by_wait.iter().chain(&by_bytes).take(PROC_HEAT_MAPS) {
        if drawn.contains(&p.tgid) {
            continue;
        }
        drawn.push(p.tgid);
        let sync = p.syncs > 0;
        out.push_str(&svg::heat_map(
            &format!(
                "pid {} {}: {} heat map",
                p.tgid,
                p.comm,
                if sync {
                    "sync call latency"
                } else {
                    "request latency"
                }
            ),
            axis,
            &proc_columns(t, p, sync),
            false,
        ));
    }
}

/// The threads seen in D state for over 1 ms, the longest first, on the timeline.
pub(super) fn dstate(out: &mut String, t: &Timeline, axis: &TimeAxis) {
    let _ = write!(
        out,
        "<h2 id=\"dstate\">D state ({} stays over 1 ms)</h2>",
        t.episodes.len()
    );
    if t.episodes.is_empty() {
        out.push_str("<p>No thread was seen blocked in D state for over 1 ms.</p>");
    } else {
        let mut by_thread: Vec<(u32, u64)> = Vec::new();
        for e in &t.episodes {
            match by_thread.iter_mut().find(|(tid, _)| *tid == e.tid) {
                Some((_, total)) => *total += e.to_ns - e.from_ns,
                None => by_thread.push((e.tid, e.to_ns - e.from_ns)),
            }
        }
        by_thread.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let rows: Vec<BarRow> = by_thread
            .iter()
            .take(20)
            .map(|&(tid, total)| {
                let mine: Vec<_> = t.episodes.iter().filter(|e| e.tid == tid).collect();
                let e = mine[0];
                BarRow {
                    label: format!(
                        "{} (pid {}, tid {tid}): {} in D, in {}",
                        e.comm,
                        e.tgid,
                        secs(total),
                        e.site
                    ),
                    class: if mine.iter().any(|e| e.open) {
                        "open"
                    } else {
                        "dst"
                    },
                    spans: mine.iter().map(|e| (e.from_ns, e.to_ns)).collect(),
                    link: None,
                }
            })
            .collect();
        out.push_str(&svg::bars(
            "Threads in D state (uninterruptible sleep)",
            axis,
            &rows,
        ));
        out.push_str("<p class=\"note\">Lighter bars: still blocked when the recording ended.</p>");
    }
}
