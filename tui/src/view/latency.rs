//! The latency pane: a live biolatency for the selected disk or process, queue time and
//! device time side by side, with fine-grained percentiles above the log2 bars. The rows
//! span the data's range, outliers in the last row (see [`super::buckets`]).

use iotop_bpf_common::hist::SLOTS;
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::Style,
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
};

use super::{
    Focus, Theme, UiState,
    buckets::{self, Bucket},
    disks, procs,
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

fn subject(snap: &Snapshot, ui: &UiState) -> Option<Subject> {
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
            let rows = procs::visible(snap, ui);
            let Some(row) = ui
                .selected_pid
                .and_then(|pid| rows.iter().find(|p| p.tgid == pid))
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
/// as biolatency prints them.
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

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &UiState, theme: &Theme) {
    let Some(s) = subject(snap, ui) else {
        let block = Block::new()
            .borders(Borders::TOP)
            .title(Line::styled(" Latency ", theme.title));
        frame.render_widget(
            Paragraph::new("no block I/O yet")
                .style(theme.dim)
                .block(block),
            area,
        );
        return;
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
    let block = Block::new()
        .borders(Borders::TOP)
        .title(Line::styled(title, theme.title));
    let mut inner = block.inner(area);
    frame.render_widget(block, area);
    if let Some(calls) = &s.calls {
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
        let [top, rest] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
        frame.render_widget(Paragraph::new(line), top);
        inner = rest;
    }
    let [left, right] =
        Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(inner);
    let header_rows = if s.scheduler.is_some() { 2 } else { 1 };
    let rows = usize::from(inner.height.saturating_sub(header_rows));
    for (area, label, lat, hist, style) in [
        (left, "queue", s.queue, &s.queue_hist, theme.queue_bar),
        (right, "device", s.device, &s.device_hist, theme.device_bar),
    ] {
        let mut lines = vec![Line::from(vec![
            Span::styled(format!("{label} "), theme.key),
            Span::raw(format!(
                "p50 {} p99 {}",
                units::latency(lat.p50_ns),
                units::latency(lat.p99_ns)
            )),
        ])];
        if let Some((name, g2i, i2d, share)) = &s.scheduler {
            // The same row on both sides, so the bars stay aligned.
            lines.push(if label == "queue" {
                Line::from(vec![
                    Span::styled(format!("{name} "), theme.key),
                    Span::raw(format!(
                        "G2I {} I2D {} avg ({share}%)",
                        units::latency(*g2i),
                        units::latency(*i2d)
                    )),
                ])
            } else {
                Line::styled("(D2C)", theme.dim)
            });
        }
        // Each side's rows span its own range: queue time is often octaves below device time.
        let plan = buckets::plan(&[hist], rows);
        lines.extend(bars(hist, &plan, area.width, style));
        frame.render_widget(Paragraph::new(lines), area);
    }
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
