//! The heat map pane (`H`): the selected disk's or process's latency over time, as Brendan
//! Gregg draws latency heat maps: time on x (one column per interval, the newest at the
//! right), log2 latency buckets on y (the slowest at the top), each cell shaded by how many
//! requests (or sync calls) of that interval fell in that bucket. Shades are characters
//! (` ░▒▓█`, log scale, relative to the busiest cell in view) so it reads without colour;
//! any non-zero cell is at least `░`, so outliers stand out. `l` switches between total,
//! queue and device time, and for a process its sync-call latency. Above the map, three
//! sparklines give the subject's rates and p99 over the same time.
//!
//! It reads the compact history only (see [`crate::history`]), ending at the interval on
//! screen, so stepping back while paused moves the map with the rest of the screen.

use ratatui::{
    Frame,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{
    Focus, HeatKind, Rows, Theme, UiState, buckets, disks, table, text,
    trend::{SHADES, Shading, count, sparkline},
};
use crate::{
    history::{Column, Frame as HistFrame, History},
    model::{Dev, Log2Hist, Snapshot},
    units,
};

/// Width of the latency labels left of the map.
const LABEL_WIDTH: u16 = 7;

/// Whose latency the map shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Disk(Dev, String),
    Proc(u32, String),
}

/// The latency pane's subject: the selected disk (disks focused) or process (processes
/// focused, among the `rows` listed), else the busiest disk of the interval.
pub fn subject(snap: &Snapshot, rows: &Rows, ui: &UiState) -> Option<Subject> {
    let disk = || {
        let rows = disks::visible(snap, ui);
        let row = ui
            .selected_disk
            .and_then(|dev| rows.iter().find(|d| d.dev == dev))
            .or_else(|| rows.iter().max_by_key(|d| disks::figures(d, ui).requests()))?;
        Some(Subject::Disk(row.dev, row.name.clone()))
    };
    match ui.focus {
        Focus::Disks => disk(),
        // The findings pane leaves the process selection as it was.
        Focus::Processes | Focus::Findings => {
            match ui
                .selected_pid
                .and_then(|pid| rows.visible.iter().find(|p| p.tgid == pid))
            {
                Some(row) => Some(Subject::Proc(row.tgid, row.comm.clone())),
                None => disk(),
            }
        }
    }
}

/// The kind a subject can show: sync latency is a process's.
fn effective_kind(subject: &Subject, kind: HeatKind) -> HeatKind {
    match (subject, kind) {
        (Subject::Disk(..), HeatKind::Sync) => HeatKind::Total,
        _ => kind,
    }
}

fn column<'a>(frame: &'a HistFrame, subject: &Subject, kind: HeatKind) -> Option<&'a Column> {
    match subject {
        Subject::Disk(dev, _) => frame.disk(*dev).map(|d| match kind {
            HeatKind::Total | HeatKind::Sync => &d.total,
            HeatKind::Queue => &d.queue,
            HeatKind::Device => &d.device,
        }),
        Subject::Proc(tgid, _) => frame.proc(*tgid).map(|p| match kind {
            HeatKind::Total => &p.total,
            HeatKind::Queue => &p.queue,
            HeatKind::Device => &p.device,
            HeatKind::Sync => &p.sync,
        }),
    }
}

/// Three series for the sparklines: (label, values per interval, how to print the last).
type Series = (&'static str, Vec<f64>, fn(f64) -> String);

fn series(frames: &[&HistFrame], subject: &Subject, kind: HeatKind) -> [Series; 3] {
    #[expect(clippy::cast_precision_loss, reason = "display rates")]
    let per_s = |n: u64, f: &HistFrame| n as f64 / (f.interval_ns.max(1) as f64 / 1e9);
    #[expect(clippy::cast_precision_loss, reason = "display latencies")]
    let ns = |n: u64| n as f64;
    let rate = |v: f64| count(v.round() as u64);
    let mb = |v: f64| format!("{:.1}", units::mib(v));
    let lat = |v: f64| units::latency(v as u64);
    match subject {
        Subject::Disk(dev, _) => {
            let points: Vec<_> = frames.iter().map(|f| (f, f.disk(*dev))).collect();
            [
                (
                    "IOPS",
                    points
                        .iter()
                        .map(|(f, d)| d.map_or(0.0, |d| per_s(d.requests, f)))
                        .collect(),
                    rate,
                ),
                (
                    "MB/s",
                    points
                        .iter()
                        .map(|(f, d)| d.map_or(0.0, |d| per_s(d.bytes, f)))
                        .collect(),
                    mb,
                ),
                (
                    "p99",
                    points
                        .iter()
                        .map(|(_, d)| d.map_or(0.0, |d| ns(d.p99_ns)))
                        .collect(),
                    lat,
                ),
            ]
        }
        Subject::Proc(tgid, _) => {
            let points: Vec<_> = frames.iter().map(|f| (f, f.proc(*tgid))).collect();
            [
                (
                    "MB/s",
                    points
                        .iter()
                        .map(|(f, p)| p.map_or(0.0, |p| per_s(p.bytes, f)))
                        .collect(),
                    mb,
                ),
                (
                    "sync/s",
                    points
                        .iter()
                        .map(|(f, p)| p.map_or(0.0, |p| per_s(p.syncs, f)))
                        .collect(),
                    rate,
                ),
                if kind == HeatKind::Sync {
                    (
                        "sync p99",
                        points
                            .iter()
                            .map(|(_, p)| p.map_or(0.0, |p| ns(p.sync_p99_ns)))
                            .collect(),
                        lat,
                    )
                } else {
                    (
                        "p99",
                        points
                            .iter()
                            .map(|(_, p)| p.map_or(0.0, |p| ns(p.p99_ns)))
                            .collect(),
                        lat,
                    )
                },
            ]
        }
    }
}

/// Seconds as a short offset: `-45s`, `-3m`, `-1h`.
fn ago(secs: u64) -> String {
    match secs {
        0 => "now".to_string(),
        1..120 => format!("-{secs}s"),
        120..7_200 => format!("-{}m", secs / 60),
        _ => format!("-{}h", secs / 3_600),
    }
}

/// The time axis: `└` then ticks every 10 columns, labelled with the age of that column
/// relative to the rightmost (the interval on screen).
fn axis(columns: usize, interval_ns: u64) -> String {
    let mut chars: Vec<char> = vec!['─'; columns];
    let mut labels: Vec<(usize, String)> = Vec::new();
    for back in (0..columns).step_by(10) {
        let at = columns - 1 - back;
        chars[at] = '┴';
        labels.push((at, ago(back as u64 * interval_ns / 1_000_000_000)));
    }
    // Labels sit left of their tick where they fit and do not run into the next label.
    let mut next_free = columns;
    for (at, label) in labels {
        let len = label.chars().count();
        if at + 1 < len + 1 || at > next_free {
            continue;
        }
        let start = at + 1 - len;
        if at < next_free && start > 0 {
            for (i, c) in label.chars().enumerate() {
                chars[start - 1 + i] = c;
            }
            next_free = start.saturating_sub(2);
        }
    }
    std::iter::once('└').chain(chars).collect()
}

/// The pane's lines in `area`: the title (what the shades count), the sparklines, the
/// map and its time axis.
pub fn lines(
    snap: &Snapshot,
    history: &History,
    rows: &Rows,
    ui: &UiState,
    theme: &Theme,
    area: Rect,
) -> Vec<Line<'static>> {
    let width = usize::from(area.width);
    let Some(subject) = subject(snap, rows, ui) else {
        let why = if ui.probes_loading {
            "the probes are loading"
        } else {
            "no block I/O yet"
        };
        return table::empty_pane(" Heat map ", why, theme, area);
    };
    let kind = effective_kind(&subject, ui.heat_kind);
    let inner_height = area.height.saturating_sub(1);
    let columns = usize::from(area.width.saturating_sub(LABEL_WIDTH + 1));
    let frames: Vec<&HistFrame> = history.frames_until(snap.seq, columns).collect();
    // The longest interval is the set one: the last of a run (cut by quit) may be shorter.
    let interval_ns = frames
        .iter()
        .map(|f| f.interval_ns)
        .max()
        .unwrap_or(snap.interval_ns);
    let hists: Vec<Option<Log2Hist>> = frames
        .iter()
        .map(|f| column(f, &subject, kind).map(Column::hist))
        .collect();
    let used: Vec<Log2Hist> = hists.iter().flatten().copied().collect();
    let (name, what) = title_words(&subject, kind, ui);
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let step_secs = interval_ns as f64 / 1e9;
    let span_ns = u64::try_from(frames.len()).unwrap_or(0) * interval_ns;
    let base = format!(" Heat map {name}: {what}");
    let detail = format!(
        ", {} shown, 1 col = {step_secs:.1}s (l: kind)",
        units::elapsed(span_ns).trim_start_matches("0:")
    );
    let mut lines: Vec<Line<'static>> = Vec::new();
    let used_refs: Vec<&Log2Hist> = used.iter().collect();
    let spark_row = inner_height >= 5;
    let rows = usize::from(inner_height).saturating_sub(usize::from(spark_row) + 1);
    let plan = buckets::plan(&used_refs, rows);
    let max = used
        .iter()
        .flat_map(|h| plan.iter().map(move |b| b.count(h)))
        .max()
        .unwrap_or(0);
    let shading = Shading::new(max);
    // The title says what the shades count; the details go first when the line is short.
    let mut legend = String::from(" ");
    for (level, min) in shading.thresholds().iter().enumerate() {
        if let Some(min) = min {
            legend.push_str(&format!("{}{} ", SHADES[level + 1], count(*min)));
        }
    }
    let title = [format!("{base}{detail} "), format!("{base} ")]
        .into_iter()
        .find(|t| t.chars().count() + legend.chars().count() + 4 <= width)
        .unwrap_or_else(|| format!("{base} "));
    let title_line = table::title_line(
        vec![
            Span::styled(title, theme.title),
            Span::raw("─"),
            Span::styled(legend, theme.dim),
        ],
        width,
    );
    if inner_height < 3 || columns == 0 {
        return vec![title_line];
    }

    // Sparklines of the subject's rates and p99, one row, side by side.
    if spark_row {
        lines.push(sparklines(&frames, &subject, kind, width, theme));
    }

    // The rows span the range observed in view (see `buckets`): from its low percentile to
    // its maximum, outliers in the top row when the pane is short.
    if plan.is_empty() {
        lines.push(text::fit(
            Line::styled("  nothing in view yet for this subject", theme.dim),
            width,
        ));
        lines.insert(0, title_line);
        return lines;
    }
    let pad = columns - hists.len();
    for bucket in plan.iter().rev() {
        lines.push(heat_row(
            bucket, &used_refs, &hists, pad, &shading, theme, width,
        ));
    }
    // Empty rows above the slowest bucket, so the axis stays at the bottom.
    while lines.len() < usize::from(inner_height) - 1 {
        lines.insert(usize::from(spark_row), Line::raw(""));
    }
    let mut axis_line = vec![Span::raw(format!(
        "{:>w$}",
        "",
        w = usize::from(LABEL_WIDTH)
    ))];
    axis_line.push(Span::styled(axis(columns, interval_ns), theme.dim));
    lines.push(text::fit(Line::from(axis_line), width));
    lines.insert(0, title_line);
    lines
}

/// The title's words: whose map (a disk or a process) and of what.
fn title_words(subject: &Subject, kind: HeatKind, ui: &UiState) -> (String, &'static str) {
    let name = match subject {
        Subject::Disk(_, name) => format!("disk {name}"),
        Subject::Proc(pid, comm) => format!("pid {pid} {comm}"),
    };
    let what = match (kind, subject) {
        (HeatKind::Sync, _) => "sync call latency",
        (HeatKind::Queue, _) => "queue time",
        (HeatKind::Device, _) => "device time",
        (HeatKind::Total, Subject::Disk(..)) if ui.heat_kind == HeatKind::Sync => {
            "total (sync latency is a process's)"
        }
        (HeatKind::Total, _) => "total latency",
    };
    (name, what)
}

/// Sparklines of the subject's rates and p99, one row, side by side.
fn sparklines(
    frames: &[&HistFrame],
    subject: &Subject,
    kind: HeatKind,
    width: usize,
    theme: &Theme,
) -> Line<'static> {
    let all = series(frames, subject, kind);
    let each = width / 3;
    let mut spans = Vec::new();
    for (label, values, show) in all {
        let last = show(values.last().copied().unwrap_or(0.0));
        let w = each.saturating_sub(label.len() + last.len() + 3).max(1);
        spans.push(Span::styled(format!("{label} "), theme.key));
        spans.push(Span::styled(sparkline(&values, w), theme.device_bar));
        spans.push(Span::raw(format!(" {last:<w$}", w = last.len() + 1)));
    }
    text::fit(Line::from(spans), width)
}

/// One row of the map: the bucket's floor, then a cell per column (`pad` blank ones first
/// while the history is shorter than the pane), shaded by its count.
fn heat_row(
    bucket: &buckets::Bucket,
    used: &[&Log2Hist],
    hists: &[Option<Log2Hist>],
    pad: usize,
    shading: &Shading,
    theme: &Theme,
    width: usize,
) -> Line<'static> {
    let label = buckets::floor_label(bucket, used);
    let mut spans = vec![Span::raw(format!(
        "{label:>w$}│",
        w = usize::from(LABEL_WIDTH)
    ))];
    spans.push(Span::raw(" ".repeat(pad)));
    // Runs of one shade share a span (fewer spans, same look).
    let mut run = String::new();
    let mut run_level = usize::MAX;
    for h in hists {
        let level = h.as_ref().map_or(0, |h| shading.level(bucket.count(h)));
        if level != run_level && !run.is_empty() {
            spans.push(Span::styled(
                std::mem::take(&mut run),
                heat_style(theme, run_level),
            ));
        }
        run_level = level;
        run.push(SHADES[level]);
    }
    if !run.is_empty() {
        spans.push(Span::styled(run, heat_style(theme, run_level)));
    }
    text::fit(Line::from(spans), width)
}

pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    history: &History,
    rows: &Rows,
    ui: &UiState,
    theme: &Theme,
) {
    frame.render_widget(
        Paragraph::new(lines(snap, history, rows, ui, theme, area)),
        area,
    );
}

fn heat_style(theme: &Theme, level: usize) -> Style {
    theme.heat[level.min(theme.heat.len() - 1)]
}
