//! The latency pane: a live biolatency for the selected disk or process, queue time and
//! device time side by side, with fine-grained percentiles above the log2 bars. The rows
//! span the data's range, outliers in the last row (see [`super::buckets`]).

use iotop_bpf_common::hist::SLOTS;
use ratatui::{
    Frame,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{
    Focus, Rows, Theme, UiState,
    buckets::{self, Bucket},
    disks, procs, table, text,
};
use crate::{
    model::{CallFigures, Latency, Log2Hist, Snapshot},
    units,
};

/// What the pane shows.
struct Subject {
    name: String,
    total: Latency,
    queue: Latency,
    device: Latency,
    queue_hist: Log2Hist,
    device_hist: Log2Hist,
    /// A disk with an I/O scheduler: its name and queue time split as btt does (mean G2I,
    /// mean I2D, and the share of requests timed through the scheduler, %).
    scheduler: Option<(String, u64, u64, u64)>,
    /// A process's direct I/O calls, when it made any.
    calls: Option<CallFigures>,
}

fn subject(snap: &Snapshot, rows: &Rows, ui: &UiState) -> Option<Subject> {
    let disk = || {
        let rows = disks::visible(snap, ui);
        let row = ui
            .selected_disk
            .and_then(|dev| rows.iter().find(|d| d.dev == dev))
            .or_else(|| rows.iter().max_by_key(|d| disks::figures(d, ui).requests()))?;
        let f = disks::figures(row, ui);
        Some(Subject {
            name: format!("disk {}", row.name),
            total: f.latency,
            queue: f.queue,
            device: f.device,
            queue_hist: f.queue_hist,
            device_hist: f.device_hist,
            scheduler: row.scheduler.clone().zip(f.scheduler_split_ns()).map(
                |(name, (g2i, i2d))| {
                    (
                        name,
                        g2i,
                        i2d,
                        f.inserted * 100 / f.requests().max(f.inserted),
                    )
                },
            ),
            calls: None,
        })
    };
    match ui.focus {
        Focus::Disks => disk(),
        // The findings pane leaves the process selection as it was.
        Focus::Processes | Focus::Findings => {
            let Some(row) = ui
                .selected_pid
                .and_then(|pid| rows.visible.iter().find(|p| p.tgid == pid))
            else {
                return disk();
            };
            let f = procs::figures(row, ui);
            Some(Subject {
                name: format!("pid {} {}", row.tgid, row.comm),
                total: f.latency,
                queue: f.queue,
                device: f.device,
                queue_hist: f.queue_hist,
                device_hist: f.device_hist,
                scheduler: None,
                calls: (f.waits.calls.latency.count > 0).then(|| f.waits.calls.clone()),
            })
        }
    }
}

/// A power-of-two microsecond bound in a short unit (truncated, as biolatency's labels).
fn short_us(us: u64) -> (u64, &'static str) {
    match us {
        0..1_000 => (us, "us"),
        1_000..1_000_000 => (us / 1_000, "ms"),
        _ => (us / 1_000_000, "s"),
    }
}

/// `[lo, hi)` of a slot, short: `<1us`, `1-2us`, `512us-1ms`, `1-2ms`, `1-2s`.
pub fn slot_label(slot: usize) -> String {
    if slot == 0 {
        return "<1us".to_string();
    }
    let ((lo, lo_unit), (hi, hi_unit)) = (short_us(1 << (slot - 1)), short_us(1 << slot));
    if slot == SLOTS - 1 {
        format!(">={lo}{lo_unit}")
    } else if lo_unit == hi_unit {
        format!("{lo}-{hi}{hi_unit}")
    } else {
        format!("{lo}{lo_unit}-{hi}{hi_unit}")
    }
}

/// One side's bars: a row per bucket of `plan` (see [`buckets`]), the slowest at the bottom,
/// as biolatency prints them. `width`: the side's columns, one of them left as a gap.
fn bars<'a>(hist: &Log2Hist, plan: &[Bucket], width: u16, style: Style) -> Vec<Line<'a>> {
    let most = plan.iter().map(|b| b.count(hist)).max().unwrap_or(0).max(1);
    let bar_width = usize::from(width.saturating_sub(21));
    plan.iter()
        .map(|b| {
            let n = b.count(hist);
            let len = usize::try_from(u128::from(n) * bar_width as u128 / u128::from(most))
                .unwrap_or(bar_width);
            let len = if n > 0 { len.max(1) } else { 0 };
            let label = buckets::range_label(b, hist);
            Line::from(vec![
                Span::raw(format!("{label:>11} {n:>7} ")),
                Span::styled("█".repeat(len), style),
            ])
        })
        .collect()
}

/// The queue side's scheduler line in `width` columns: btt's split of the queue time,
/// `mq-deadline G2I 1.5us I2D 1.6us avg (38% of requests)`, in the longest form that fits
/// (then without `avg`, then without the scheduler's name), never cut into the device side.
fn scheduler_line(
    name: &str,
    g2i: u64,
    i2d: u64,
    share: u64,
    width: usize,
    theme: &Theme,
) -> Line<'static> {
    let split = format!("G2I {} I2D {}", units::latency(g2i), units::latency(i2d));
    let forms = [
        (Some(name), format!("{split} avg ({share}% of requests)")),
        (Some(name), format!("{split} avg ({share}%)")),
        (Some(name), format!("{split} ({share}%)")),
        (None, format!("{split} ({share}%)")),
        (None, split.clone()),
    ];
    let line = |(name, rest): &(Option<&str>, String)| match name {
        Some(name) => Line::from(vec![
            Span::styled(format!("{name} "), theme.key),
            Span::raw(rest.clone()),
        ]),
        None => Line::raw(rest.clone()),
    };
    let fitting = forms
        .iter()
        .map(line)
        .find(|l| l.width() <= width)
        .unwrap_or_else(|| line(&forms[forms.len() - 1]));
    text::fit(fitting, width)
}

/// The pane's lines in `area`: the title, the calls line of a process with direct I/O
/// calls, then queue time and device time side by side, each side's lines fitted to its
/// half with a column to spare, so one side never runs into the other.
pub fn lines(
    snap: &Snapshot,
    rows: &Rows,
    ui: &UiState,
    theme: &Theme,
    area: Rect,
) -> Vec<Line<'static>> {
    let width = usize::from(area.width);
    let Some(s) = subject(snap, rows, ui) else {
        let why = if ui.probes_loading {
            "the probes are loading"
        } else {
            "no block I/O yet"
        };
        return table::empty_pane(" Latency ", why, theme, area);
    };
    let title = format!(
        " Latency {}: p50 {} p99 {} p99.9 {} max {} n={} ",
        s.name,
        units::latency(s.total.p50_ns),
        units::latency(s.total.p99_ns),
        units::latency(s.total.p999_ns),
        units::latency(s.total.max_ns),
        s.total.count,
    );
    let mut out = vec![table::title_line(
        vec![Span::styled(title, theme.title)],
        width,
    )];
    let mut height = usize::from(area.height.saturating_sub(1));
    if let Some(calls) = &s.calls
        && height > 0
    {
        // Its direct I/O calls, entry to completion, next to its requests: what the requests
        // do not show (the wait before the request).
        let line = Line::from(vec![
            Span::styled("calls ", theme.key),
            Span::raw(format!(
                "p50 {} p99 {} n={} · outside requests {} ({:.0}% of call time)",
                units::latency(calls.latency.p50_ns),
                units::latency(calls.latency.p99_ns),
                calls.latency.count,
                units::latency(calls.prequeue_ns),
                calls.prequeue_share() * 100.0,
            )),
        ]);
        out.push(text::fit(line, width));
        height -= 1;
    }
    let left = area.width / 2;
    let right = area.width - left;
    let header_rows = if s.scheduler.is_some() { 2 } else { 1 };
    let rows = height.saturating_sub(header_rows);
    let mut sides: Vec<Vec<Line<'static>>> = Vec::new();
    for (side, label, lat, hist, style) in [
        (left, "queue", s.queue, &s.queue_hist, theme.queue_bar),
        (right, "device", s.device, &s.device_hist, theme.device_bar),
    ] {
        // A column of each side is left blank: the sides never touch.
        let room = usize::from(side.saturating_sub(1));
        let mut lines = vec![text::fit(
            Line::from(vec![
                Span::styled(format!("{label} "), theme.key),
                Span::raw(format!(
                    "p50 {} p99 {}",
                    units::latency(lat.p50_ns),
                    units::latency(lat.p99_ns)
                )),
            ]),
            room,
        )];
        if let Some((name, g2i, i2d, share)) = &s.scheduler {
            // The same row on both sides, so the bars stay aligned.
            lines.push(if label == "queue" {
                scheduler_line(name, *g2i, *i2d, *share, room, theme)
            } else {
                text::fit(Line::styled("(D2C)", theme.dim), room)
            });
        }
        // Each side's rows span its own range: queue time is often octaves below device time.
        let plan = buckets::plan(&[hist], rows);
        lines.extend(
            bars(hist, &plan, side, style)
                .into_iter()
                .map(|l| text::fit(l, room)),
        );
        lines.truncate(height);
        sides.push(lines);
    }
    let rows_out = sides.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..rows_out {
        let l = sides[0].get(i).cloned().unwrap_or_default();
        let mut line = text::pad(l, usize::from(left));
        if let Some(r) = sides[1].get(i) {
            line.spans.extend(r.spans.iter().cloned());
        }
        out.push(line);
    }
    out
}

pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    rows: &Rows,
    ui: &UiState,
    theme: &Theme,
) {
    frame.render_widget(Paragraph::new(lines(snap, rows, ui, theme, area)), area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_labels() {
        assert_eq!(slot_label(0), "<1us");
        assert_eq!(slot_label(1), "1-2us");
        assert_eq!(slot_label(7), "64-128us");
        assert_eq!(slot_label(10), "512us-1ms");
        assert_eq!(slot_label(11), "1-2ms");
        assert_eq!(slot_label(20), "524ms-1s");
        assert_eq!(slot_label(SLOTS - 1), ">=1073s");
    }
}
