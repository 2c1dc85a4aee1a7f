//! The disks pane, iostat -x style; on wide terminals (150 columns and more) each disk also
//! gets sparklines of its IOPS, MB/s and p99 over the history kept (10 minutes at 1 s).

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::Line,
    widgets::{Block, Borders, Row, Table, TableState},
};

use super::{
    Focus, Theme, UiState,
    procs::period_secs,
    theme::{SELECTED_SYMBOL, focus_mark},
    trend::sparkline,
};
use crate::{
    history::History,
    model::{DiskFigures, DiskRow, Snapshot},
    units,
};

/// Width of the fixed columns (with the wide extras, spacing and the selection mark): the
/// sparklines get what is left.
const FIXED_WIDTH: u16 = 116;
/// Width of the merge columns (`rrqm/s`, `wrqm/s`, with spacing): shown only where the
/// sparklines keep room for their titles, which matter more.
const MERGES_WIDTH: u16 = 16;
/// A sparkline as wide as its title (`IOPS trend`).
const READABLE_SPARK: u16 = 10;
/// Narrowest useful sparkline.
const MIN_SPARK: u16 = 8;

pub fn figures<'a>(row: &'a DiskRow, ui: &UiState) -> &'a DiskFigures {
    if ui.cumulative {
        &row.total
    } else {
        &row.interval
    }
}

/// Disks in name order (stable: iostat order).
pub fn visible<'a>(snap: &'a Snapshot, _ui: &UiState) -> Vec<&'a DiskRow> {
    snap.disks.iter().collect()
}

/// Per interval up to the one on screen: (IOPS, bytes/s, p99 ns) of a disk.
fn trends(history: &History, snap: &Snapshot, row: &DiskRow) -> [Vec<f64>; 3] {
    let mut out: [Vec<f64>; 3] = Default::default();
    for frame in history.frames_until(snap.seq, crate::history::FRAMES) {
        #[expect(clippy::cast_precision_loss, reason = "display rates")]
        let secs = frame.interval_ns.max(1) as f64 / 1e9;
        let point = frame.disk(row.dev);
        #[expect(clippy::cast_precision_loss, reason = "display rates")]
        let values = point.map_or([0.0; 3], |d| {
            [
                d.requests as f64 / secs,
                d.bytes as f64 / secs,
                d.p99_ns as f64,
            ]
        });
        for (series, value) in out.iter_mut().zip(values) {
            series.push(value);
        }
    }
    out
}

pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    history: &History,
    ui: &UiState,
    theme: &Theme,
) {
    let rows = visible(snap, ui);
    let secs = period_secs(snap, ui);
    let wide = area.width >= 110;
    let merges = wide && area.width >= FIXED_WIDTH + MERGES_WIDTH + 3 * (READABLE_SPARK + 1);
    let fixed = FIXED_WIDTH + if merges { MERGES_WIDTH } else { 0 };
    // What is left after the fixed columns, split in three sparklines (1 column of spacing).
    let spark = (area.width.saturating_sub(fixed) / 3)
        .saturating_sub(1)
        .min(40);
    let sparks = wide && spark >= MIN_SPARK && !ui.cumulative;
    let rate = |n: u64| {
        #[expect(clippy::cast_precision_loss, reason = "display rates")]
        let n = n as f64;
        n / secs
    };
    let mut header: Vec<&str> = vec![
        "DEVICE", "r/s", "w/s", "rMB/s", "wMB/s", "r_await", "w_await", "aqu-sz", "%util",
    ];
    let mut widths = vec![
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(6),
    ];
    if wide {
        if merges {
            header.extend(["rrqm/s", "wrqm/s"]);
            widths.extend([Constraint::Length(7), Constraint::Length(7)]);
        }
        header.extend(["flush/s", "queue p50", "dev p50", "p99"]);
        widths.extend([
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(7),
        ]);
    }
    if sparks {
        header.extend(["IOPS trend", "MB/s trend", "p99 trend"]);
        widths.extend([Constraint::Length(spark); 3]);
    }
    let body: Vec<Row> = rows
        .iter()
        .map(|d| {
            let f = figures(d, ui);
            let mut cells = vec![
                d.name.clone(),
                format!("{:.0}", rate(f.reads)),
                format!("{:.0}", rate(f.writes)),
                format!("{:.2}", units::mib(rate(f.read_bytes))),
                format!("{:.2}", units::mib(rate(f.write_bytes))),
                units::latency(f.read_await_ns),
                units::latency(f.write_await_ns),
                format!("{:.2}", f.queue_size),
                format!("{:.1}", f.util_pct),
            ];
            if wide {
                if merges {
                    cells.extend([
                        format!("{:.0}", rate(f.read_merges)),
                        format!("{:.0}", rate(f.write_merges)),
                    ]);
                }
                cells.extend([
                    format!("{:.0}", rate(f.flushes)),
                    units::latency(f.queue.p50_ns),
                    units::latency(f.device.p50_ns),
                    units::latency(f.latency.p99_ns),
                ]);
            }
            if sparks {
                for series in trends(history, snap, d) {
                    cells.push(sparkline(&series, usize::from(spark)));
                }
            }
            Row::new(cells)
        })
        .collect();
    let focused = ui.focus == Focus::Disks;
    let block = Block::new().borders(Borders::TOP).title(Line::styled(
        format!("{}Disks ", focus_mark(focused)),
        if focused { theme.key } else { theme.title },
    ));
    let table = Table::new(body, widths)
        .header(Row::new(header).style(theme.header))
        .block(block)
        .row_highlight_style(theme.selected)
        .highlight_symbol(SELECTED_SYMBOL);
    let mut state = TableState::default();
    if focused {
        state.select(
            ui.selected_disk
                .and_then(|dev| rows.iter().position(|d| d.dev == dev)),
        );
    }
    frame.render_stateful_widget(table, area, &mut state);
}
