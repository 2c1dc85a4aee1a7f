//! The drill-down of one process (Enter): its sync calls (latency histogram and the most
//! recent calls with their files), what it wrote and what was written for it, and its
//! findings with why and how to fix them.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph, Row, Table, Wrap},
};

use super::{Theme, UiState, findings, latency::slot_label, procs};
use crate::{
    model::{Latency, Party, ProcFigures, ProcRow, Snapshot, SyncFigures, quantity},
    units,
};

/// The most frequent request sizes, byte-exact (a 512-byte write is not a "0-1K" bucket).
fn size_mix(sizes: &[(u32, u64)]) -> String {
    let mut by_count = sizes.to_vec();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut parts: Vec<String> = by_count
        .iter()
        .take(6)
        .map(|(bytes, n)| format!("{n}x {bytes} B"))
        .collect();
    if by_count.len() > 6 {
        parts.push(format!("+{} more sizes", by_count.len() - 6));
    }
    parts.join(", ")
}

fn parties(list: &[Party]) -> String {
    list.iter()
        .map(|p| {
            format!(
                "{} (pid {}) {}",
                p.comm,
                p.tgid,
                units::bytes(p.bytes as f64)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &UiState, theme: &Theme) {
    let Some(row) = ui
        .selected_pid
        .and_then(|pid| snap.procs.iter().find(|p| p.tgid == pid))
    else {
        return;
    };
    frame.render_widget(Clear, area);
    let title = format!(
        " pid {} {} — {} — Esc/Enter back ",
        row.tgid,
        row.comm,
        if ui.cumulative {
            "since start"
        } else {
            "this interval"
        }
    );
    let block = Block::bordered().title(Line::styled(title, theme.title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let summary = summary_lines(row, snap, ui, theme);
    // Long lines (findings' why and fix) wrap; count the rows they take.
    let width = usize::from(inner.width.max(1));
    let wrapped: usize = summary
        .iter()
        .map(|l| l.width().max(1).div_ceil(width))
        .sum();
    let summary_rows = u16::try_from(wrapped)
        .unwrap_or(u16::MAX)
        .min(inner.height.saturating_sub(4));
    let [top, bottom] =
        Layout::vertical([Constraint::Length(summary_rows), Constraint::Min(3)]).areas(inner);
    frame.render_widget(Paragraph::new(summary).wrap(Wrap { trim: false }), top);
    let hist_width = if inner.width >= 100 { 34 } else { 27 };
    let [hist_area, calls_area] =
        Layout::horizontal([Constraint::Length(hist_width), Constraint::Min(20)]).areas(bottom);
    render_sync_hist(frame, hist_area, row, ui, theme);
    render_recent_calls(frame, calls_area, row, theme);
}

fn summary_lines<'a>(
    row: &'a ProcRow,
    snap: &'a Snapshot,
    ui: &UiState,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let f = procs::figures(row, ui);
    let secs = procs::period_secs(snap, ui);
    #[expect(clippy::cast_precision_loss, reason = "display rates")]
    let rate = |n: u64| n as f64 / secs;
    let s = &f.sync;
    let mut lines = vec![
        Line::from(vec![
            Span::styled("I/O   ", theme.key),
            Span::raw(format!(
                "{:.0} r/s {:.0} w/s  read {}/s write {}/s  latency {}",
                rate(f.reads),
                rate(f.writes),
                units::bytes(rate(f.read_bytes)),
                units::bytes(rate(f.write_bytes)),
                latency_summary(&f.latency),
            )),
        ]),
        Line::from(vec![
            Span::styled("SYNC  ", theme.key),
            Span::raw(format!(
                "{:.0}/s ({} calls{}, {} failed)  latency {}",
                rate(s.syncs),
                s.syncs,
                kinds(&s.kinds),
                s.errors,
                latency_summary(&s.latency),
            )),
        ]),
        Line::from(vec![
            Span::styled("WRITE ", theme.key),
            Span::raw(format!(
                "asked {} (synced {} in {} writes) · device {} own, {} inside syncs · {} charged · AMP {}",
                units::bytes(f.logical_write_bytes as f64),
                units::bytes(s.window_bytes as f64),
                s.window_writes,
                units::bytes(f.write_bytes as f64),
                units::bytes(s.in_sync_write_bytes as f64),
                units::bytes(s.charged_write_bytes as f64),
                s.amplification()
                    .map_or_else(|| "-".to_string(), quantity::times),
            )),
        ]),
    ];
    lines.extend(wait_lines(row, f, secs, theme));
    // What each sync call cost, by population (settled calls).
    push_sync_costs(&mut lines, s, theme);
    let honouring: Vec<&str> = row
        .devices
        .iter()
        .filter(|d| d.fua_supported)
        .map(|d| d.name.as_str())
        .collect();
    if f.fua_writes > 0 || !honouring.is_empty() {
        lines.push(Line::from(vec![
            Span::styled("FUA   ", theme.key),
            Span::raw(format!(
                "{} writes made durable by the device on their own ({} honours FUA)",
                f.fua_writes,
                honouring.join(", "),
            )),
        ]));
    }
    for (label, sizes) in [("W SIZES", &f.write_sizes), ("R SIZES", &f.read_sizes)] {
        if !sizes.is_empty() {
            lines.push(Line::from(vec![
                Span::styled(format!("{label} "), theme.key),
                Span::raw(size_mix(sizes)),
            ]));
        }
    }
    push_parties(&mut lines, f, secs, theme);
    push_findings(&mut lines, row, snap, theme);
    lines
}

/// What each of its settled sync calls cost, small and large apart, and its io_uring syncs
/// (whose payload is not measured).
fn push_sync_costs(lines: &mut Vec<Line<'_>>, s: &SyncFigures, theme: &Theme) {
    for (label, p) in [("small", &s.small), ("large", &s.large)] {
        if p.calls > 0 {
            lines.push(Line::from(vec![
                Span::styled(format!("      {label} syncs "), theme.dim),
                Span::raw(format!(
                    "{} calls, {} durable each → {} own + {} charged: {}",
                    p.calls,
                    quantity::bytes(p.mean_payload()),
                    quantity::bytes(p.mean_own()),
                    quantity::bytes(p.mean_charged()),
                    p.amplification()
                        .map_or_else(|| "-".to_string(), quantity::times),
                )),
            ]));
        }
    }
    if s.unmeasured.calls > 0 {
        let p = &s.unmeasured;
        lines.push(Line::from(vec![
            Span::styled("      io_uring syncs ", theme.dim),
            Span::raw(format!(
                "{} calls, payload not measured → {} own + {} charged each",
                p.calls,
                quantity::bytes(p.mean_own()),
                quantity::bytes(p.mean_charged()),
            )),
        ]));
    }
}

/// Who wrote for it and for whom it wrote: inside sync calls, and by write-back of dirty
/// pages.
fn push_parties(lines: &mut Vec<Line<'_>>, f: &ProcFigures, secs: f64, theme: &Theme) {
    #[expect(clippy::cast_precision_loss, reason = "display rates")]
    let rate = |n: u64| n as f64 / secs;
    let s = &f.sync;
    if !s.charged_from.is_empty() {
        lines.push(Line::from(vec![
            Span::styled("      written for it by ", theme.dim),
            Span::raw(parties(&s.charged_from)),
        ]));
    }
    if !s.on_behalf_of.is_empty() {
        lines.push(Line::from(vec![
            Span::styled("      wrote on behalf of ", theme.dim),
            Span::raw(parties(&s.on_behalf_of)),
        ]));
    }
    // Write-back: its dirty pages, written by a flusher (or, for a flusher, whose).
    if f.writeback_bytes > 0 {
        lines.push(Line::from(vec![
            Span::styled("WBACK ", theme.key),
            Span::raw(format!(
                "{}/s of its dirty pages written back by {}",
                units::bytes(rate(f.writeback_bytes)),
                parties(&f.written_back_by),
            )),
        ]));
    }
    if f.wrote_back_bytes > 0 {
        lines.push(Line::from(vec![
            Span::styled("WBACK ", theme.key),
            Span::raw(format!(
                "wrote back {}/s of dirty pages for {}",
                units::bytes(rate(f.wrote_back_bytes)),
                parties(&f.wrote_back_for),
            )),
        ]));
    }
}

/// Its findings, each with its files, why and how to fix it.
fn push_findings<'a>(lines: &mut Vec<Line<'a>>, row: &ProcRow, snap: &'a Snapshot, theme: &Theme) {
    for finding in snap.findings.iter().filter(|f| f.tgid == Some(row.tgid)) {
        // The pane's line, uncut: the drill-down wraps it instead.
        let one = findings::Group {
            key: findings::GroupKey::of(finding),
            members: vec![finding],
        };
        lines.push(findings::line(
            &one,
            snap.now_ns,
            usize::from(u16::MAX),
            theme,
        ));
        if !finding.files.is_empty() {
            lines.push(Line::from(vec![
                Span::styled("      file: ", theme.key),
                Span::raw(finding.files.join(", ")),
            ]));
        }
        lines.push(Line::from(vec![
            Span::styled("      why: ", theme.key),
            Span::raw(finding.why.as_str()),
        ]));
        lines.push(Line::from(vec![
            Span::styled("      fix: ", theme.key),
            Span::raw(finding.fix.as_str()),
        ]));
    }
}

fn render_sync_hist(frame: &mut Frame, area: Rect, row: &ProcRow, ui: &UiState, theme: &Theme) {
    let hist = procs::figures(row, ui).sync.hist;
    let first = hist.slots.iter().position(|&n| n > 0);
    let last = hist.slots.iter().rposition(|&n| n > 0);
    let mut lines = vec![Line::styled("sync latency", theme.key)];
    if let (Some(first), Some(last)) = (first, last) {
        let max = hist.slots[first..=last]
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(1);
        let width = usize::from(area.width.saturating_sub(20));
        for slot in (first..=last).take(usize::from(area.height.saturating_sub(1))) {
            let n = hist.slots[slot];
            let len =
                usize::try_from(u128::from(n) * width as u128 / u128::from(max)).unwrap_or(width);
            lines.push(Line::from(vec![
                Span::raw(format!("{:>10} {n:>6} ", slot_label(slot))),
                Span::styled(
                    "█".repeat(if n > 0 { len.max(1) } else { 0 }),
                    theme.device_bar,
                ),
            ]));
        }
    } else {
        lines.push(Line::styled("no sync calls", theme.dim));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// `: 300 O_DSYNC write, 2 fsync` (nothing for a single kind).
fn kinds(kinds: &[(&str, u64)]) -> String {
    if kinds.len() < 2 {
        return kinds
            .first()
            .map_or_else(String::new, |(kind, _)| format!(", {kind}"));
    }
    let mut by_calls = kinds.to_vec();
    by_calls.sort_by_key(|k| std::cmp::Reverse(k.1));
    format!(
        ": {}",
        by_calls
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn render_recent_calls(frame: &mut Frame, area: Rect, row: &ProcRow, theme: &Theme) {
    // The call column fits the longest kind shown (`io_uring O_DSYNC write`).
    let call_width = row
        .recent_syncs
        .iter()
        .map(|c| c.kind.name().len())
        .max()
        .unwrap_or(0)
        .clamp(9, 22);
    let rows: Vec<Row> = row
        .recent_syncs
        .iter()
        .map(|c| {
            Row::new([
                c.kind.name().to_string(),
                c.fd.map_or_else(|| "-".into(), |fd| fd.to_string()),
                units::latency(c.latency_ns),
                if c.kind.payload_measured() {
                    c.window_bytes.to_string()
                } else {
                    "?".into()
                },
                c.cost.map_or_else(
                    || "…".into(),
                    |(own, charged)| quantity::bytes(own + charged),
                ),
                if c.ret < 0 {
                    format!("err {}", -c.ret)
                } else {
                    "ok".into()
                },
                c.file.clone(),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(u16::try_from(call_width).unwrap_or(22)),
            Constraint::Length(3),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(9),
            Constraint::Length(4),
            Constraint::Min(10),
        ],
    )
    .header(
        Row::new(["call", "fd", "latency", "bytes", "device", "ret", "file"]).style(theme.header),
    );
    frame.render_widget(table, area);
}

/// Its direct I/O calls against its requests, its cgroup's I/O limits and its dirty pauses:
/// the waits its requests do not show.
fn wait_lines<'a>(row: &'a ProcRow, f: &'a ProcFigures, secs: f64, theme: &Theme) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    let c = &f.waits.calls;
    if c.latency.count > 0 {
        #[expect(clippy::cast_precision_loss, reason = "display rates")]
        let rate = c.latency.count as f64 / secs;
        let reference = c.disks.first().map_or_else(String::new, |d| {
            format!(
                " · {} p99 {}",
                if d.own_requests {
                    "requests"
                } else {
                    "disk's requests"
                },
                units::latency(d.request_p99_ns)
            )
        });
        lines.push(Line::from(vec![
            Span::styled("CALLS ", theme.key),
            Span::raw(format!(
                "direct I/O {rate:.0}/s  latency p50 {} p99 {} p99.9 {}{reference} · outside requests {} ({:.0}%)",
                units::latency(c.latency.p50_ns),
                units::latency(c.latency.p99_ns),
                units::latency(c.latency.p999_ns),
                units::latency(c.prequeue_ns),
                c.prequeue_share() * 100.0,
            )),
        ]));
    }
    if let Some(limits) = &row.io_limits {
        let controls: Vec<String> = limits
            .limits
            .iter()
            .map(crate::model::findings::io_throttled::describe)
            .chain(limits.iocost.iter().map(|d| format!("iocost on {d}")))
            .chain(
                limits
                    .iolatency
                    .iter()
                    .map(|(d, t)| format!("io.latency {d} target={t}")),
            )
            .collect();
        lines.push(Line::from(vec![
            Span::styled("CGROUP ", theme.key),
            Span::raw(format!(
                "{}: {}",
                if limits.cgroup.is_empty() {
                    "?"
                } else {
                    limits.cgroup.as_str()
                },
                if controls.is_empty() {
                    "no I/O limit".to_string()
                } else {
                    controls.join(", ")
                }
            )),
        ]));
    }
    if f.waits.dirty.pauses > 0 {
        #[expect(clippy::cast_precision_loss, reason = "a display percentage")]
        let pct = f.waits.dirty.pause_ns as f64 / 1e9 / secs * 100.0;
        let state = row.dirty_state.as_deref().map_or_else(String::new, |s| {
            format!(
                " writing back to {}: {} dirty, the limit {}",
                s.bdi,
                quantity::bytes(s.dirty_bytes),
                quantity::bytes(s.limit_bytes)
            )
        });
        lines.push(Line::from(vec![
            Span::styled("DIRTY ", theme.key),
            Span::raw(format!(
                "paused {} times for {} ({pct:.0}% of the time) by dirty throttling;{state}",
                f.waits.dirty.pauses,
                units::latency(f.waits.dirty.pause_ns),
            )),
        ]));
    }
    lines
}

fn latency_summary(l: &Latency) -> String {
    format!(
        "p50 {} p99 {} max {}",
        units::latency(l.p50_ns),
        units::latency(l.p99_ns),
        units::latency(l.max_ns)
    )
}
