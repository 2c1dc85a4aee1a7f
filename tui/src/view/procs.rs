//! The processes pane: who does I/O, how much, how slow. Sortable and filterable.

use std::cmp::Ordering;

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::Line,
    widgets::{Block, Borders, Row, Table, TableState},
};

use super::{Focus, SortKey, Theme, UiState, theme::SELECTED_SYMBOL};
use crate::{
    model::{ProcFigures, ProcRow, Snapshot},
    units,
};

/// The figures a row shows: the interval's, or the totals since start.
pub fn figures<'a>(row: &'a ProcRow, ui: &UiState) -> &'a ProcFigures {
    if ui.cumulative {
        &row.total
    } else {
        &row.interval
    }
}

/// Seconds the shown figures cover (for rates).
pub fn period_secs(snap: &Snapshot, ui: &UiState) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "display rates")]
    let ns = if ui.cumulative {
        snap.elapsed_ns
    } else {
        snap.interval_ns
    } as f64;
    (ns / 1e9).max(1e-9)
}

fn matches_filter(row: &ProcRow, filter: &str) -> bool {
    if filter.is_empty() {
        return true;
    }
    if let Ok(pid) = filter.parse::<u32>() {
        return row.tgid == pid;
    }
    row.comm.to_lowercase().contains(&filter.to_lowercase())
}

/// The rows shown, in order: filtered, with I/O in the shown period (the selected process
/// stays even when idle, so a drill-down does not vanish), sorted by the chosen key, ties
/// broken by pid so equal rows never swap places between refreshes.
pub fn visible<'a>(snap: &'a Snapshot, ui: &UiState) -> Vec<&'a ProcRow> {
    let mut rows: Vec<&ProcRow> = snap
        .procs
        .iter()
        .filter(|p| matches_filter(p, &ui.filter))
        .filter(|p| figures(p, ui).ios() > 0 || ui.selected_pid == Some(p.tgid))
        .collect();
    let descending = ui.sort.descending_by_default() != ui.reversed;
    rows.sort_by(|a, b| {
        let (fa, fb) = (figures(a, ui), figures(b, ui));
        let order = match ui.sort {
            SortKey::Pid => a.tgid.cmp(&b.tgid),
            SortKey::Comm => a.comm.cmp(&b.comm),
            SortKey::ReadOps => fa.reads.cmp(&fb.reads),
            SortKey::WriteOps => fa.writes.cmp(&fb.writes),
            SortKey::ReadBytes => fa.read_bytes.cmp(&fb.read_bytes),
            SortKey::WriteBytes => fa.write_bytes.cmp(&fb.write_bytes),
            SortKey::TotalBytes => fa.bytes().cmp(&fb.bytes()).then(fa.ios().cmp(&fb.ios())),
            SortKey::P50 => fa.latency.p50_ns.cmp(&fb.latency.p50_ns),
            SortKey::P99 => fa.latency.p99_ns.cmp(&fb.latency.p99_ns),
        };
        let order = if descending { order.reverse() } else { order };
        if order == Ordering::Equal {
            a.tgid.cmp(&b.tgid)
        } else {
            order
        }
    });
    rows
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &UiState, theme: &Theme) {
    let rows = visible(snap, ui);
    let secs = period_secs(snap, ui);
    let wide = area.width >= 110;
    let rate = |n: u64| {
        #[expect(clippy::cast_precision_loss, reason = "display rates")]
        let n = n as f64;
        n / secs
    };
    let mark = |key: SortKey, text: &'static str| {
        if ui.sort == key {
            let arrow = if ui.sort.descending_by_default() != ui.reversed {
                "▼"
            } else {
                "▲"
            };
            format!("{text}{arrow}")
        } else {
            text.to_string()
        }
    };
    let mut header = vec![
        mark(SortKey::Pid, "PID"),
        mark(SortKey::Comm, "COMM"),
        mark(SortKey::ReadOps, "R/s"),
        mark(SortKey::WriteOps, "W/s"),
        mark(SortKey::ReadBytes, "RMB/s"),
        mark(SortKey::WriteBytes, "WMB/s"),
        mark(SortKey::P50, "p50"),
        mark(SortKey::P99, "p99"),
    ];
    let mut widths = vec![
        Constraint::Length(8),
        Constraint::Length(16),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(7),
    ];
    if wide {
        header.extend([
            "queue".into(),
            "device".into(),
            "max".into(),
            "DISKS".into(),
        ]);
        widths.extend([
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Min(8),
        ]);
    }
    let body: Vec<Row> = rows
        .iter()
        .map(|p| {
            let f = figures(p, ui);
            let mut cells = vec![
                p.tgid.to_string(),
                p.comm.clone(),
                format!("{:.0}", rate(f.reads)),
                format!("{:.0}", rate(f.writes)),
                format!("{:.2}", units::mib(rate(f.read_bytes))),
                format!("{:.2}", units::mib(rate(f.write_bytes))),
                units::latency(f.latency.p50_ns),
                units::latency(f.latency.p99_ns),
            ];
            if wide {
                let disks: Vec<&str> = p.devices.iter().map(|d| d.name.as_str()).collect();
                cells.extend([
                    units::latency(f.queue.p50_ns),
                    units::latency(f.device.p50_ns),
                    units::latency(f.latency.max_ns),
                    disks.join(","),
                ]);
            }
            Row::new(cells)
        })
        .collect();

    let focused = ui.focus == Focus::Processes;
    let arrow = if ui.sort.descending_by_default() != ui.reversed {
        "▼"
    } else {
        "▲"
    };
    let title = format!(
        " Processes {}by {}{arrow} {}",
        if ui.cumulative { "since start " } else { "" },
        ui.sort.label(),
        if rows.is_empty() {
            "— no block I/O in this period "
        } else {
            ""
        }
    );
    let block = Block::new().borders(Borders::TOP).title(Line::styled(
        title,
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
            ui.selected_pid
                .and_then(|pid| rows.iter().position(|p| p.tgid == pid)),
        );
    }
    frame.render_stateful_widget(table, area, &mut state);
}
