//! The processes pane: who does I/O, how much, how slow, how often it syncs and at what
//! write amplification. Sortable and filterable; rows with a finding are marked and kept in
//! view; kernel workers that come and go under new names (`kworker/u8:3`) fold into one row
//! per kind (`kworker ×6`, `x` expands them); the order is kept from one interval to the
//! next unless a row is clearly ahead ([`Steady`]).

use std::{borrow::Cow, cmp::Ordering, collections::HashMap};

use ratatui::{
    layout::Rect,
    text::{Line, Span},
};

#[cfg(test)]
use super::findings::severities;
use super::{
    Focus, Rows, SortKey, Theme, UiState,
    state::{OrderOf, RowKey, Steady},
    table, text,
    theme::focus_mark,
};
use crate::{
    model::{ProcFigures, ProcRow, Snapshot, findings::Severity},
    units,
};

mod columns;

pub use columns::sort_keys;
use columns::{columns, sort_column_from};

/// The figures a row shows: the interval's, or the totals since start.
pub fn figures<'a>(row: &'a ProcRow, ui: &UiState) -> &'a ProcFigures {
    if ui.cumulative {
        row.total()
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
    // A pid, or several separated by commas (`-p 1,2`).
    let pids: Option<Vec<u32>> = filter.split(',').map(|p| p.trim().parse().ok()).collect();
    if let Some(pids) = pids {
        return pids.contains(&row.tgid);
    }
    row.comm.to_lowercase().contains(&filter.to_lowercase())
}

/// A process is listed when it did something in the shown period, is selected, or has an
/// active finding (`marked`: its row tells the finding's story even in a quiet second).
fn listed(marked: &HashMap<u32, Severity>, row: &ProcRow, ui: &UiState) -> bool {
    figures(row, ui).active() || ui.selected_pid == Some(row.tgid) || marked.contains_key(&row.tgid)
}

/// The processes shown, in the sort's order: filtered, with I/O or syncs in the shown
/// period or an active finding (`marked`; the selected process stays even when idle, so a
/// drill-down does not vanish), ties broken by pid so equal rows never swap places between
/// refreshes. Not folded, and not in the kept order: [`Rows::entries`] are the table's rows.
pub(super) fn visible_of<'a>(
    snap: &'a Snapshot,
    ui: &UiState,
    marked: &HashMap<u32, Severity>,
) -> Vec<&'a ProcRow> {
    let mut rows: Vec<&ProcRow> = snap
        .procs
        .iter()
        .filter(|p| matches_filter(p, &ui.filter))
        .filter(|p| listed(marked, p, ui))
        .collect();
    rows.sort_by(|a, b| compare(a, b, ui));
    rows
}

/// [`visible_of`], the findings' marks taken from `snap`.
#[cfg(test)]
pub fn visible<'a>(snap: &'a Snapshot, ui: &UiState) -> Vec<&'a ProcRow> {
    visible_of(snap, ui, &severities(snap))
}

/// Listed processes the filter hides (0 without a filter).
pub(super) fn filtered_out(
    snap: &Snapshot,
    ui: &UiState,
    marked: &HashMap<u32, Severity>,
) -> usize {
    if ui.filter.is_empty() {
        return 0;
    }
    snap.procs
        .iter()
        .filter(|p| listed(marked, p, ui) && !matches_filter(p, &ui.filter))
        .count()
}

/// The kind of a kernel worker whose threads come and go under new names as its pool grows
/// and shrinks (`kworker/u8:3` this second, `kworker/u8:7` the next): such rows fold into
/// one per kind. Named kernel threads that stay (jbd2, xfsaild, flush threads of a device)
/// are not folded.
pub fn worker_kind(row: &ProcRow) -> Option<&'static str> {
    (row.kernel_thread && row.comm.starts_with("kworker/")).then_some("kworker")
}

/// One row of the table: a process, a cgroup (`C`), or kernel workers of one kind folded.
#[derive(Clone, Debug)]
pub struct Entry<'a> {
    pub row: Cow<'a, ProcRow>,
    /// Workers folded into this row (0: a process or a cgroup).
    pub folded: usize,
}

impl Entry<'_> {
    pub fn key(&self, ui: &UiState) -> RowKey {
        if self.folded > 0 || ui.by_cgroup {
            RowKey::Group(self.row.comm.clone())
        } else {
            RowKey::Pid(self.row.tgid)
        }
    }

    /// The process of the row (`None` for a group).
    pub fn pid(&self, ui: &UiState) -> Option<u32> {
        (self.folded == 0 && !ui.by_cgroup).then_some(self.row.tgid)
    }
}

/// What the current order was made for.
pub fn order_of(ui: &UiState) -> OrderOf {
    OrderOf {
        sort: ui.sort,
        reversed: ui.reversed,
        cumulative: ui.cumulative,
        by_cgroup: ui.by_cgroup,
        expand_workers: ui.expand_workers,
    }
}

/// The table's rows in the sort's own order, from the `visible` processes: processes (or
/// cgroups), kernel workers folded by kind unless `x` expanded them. A worker that is
/// selected or has a finding (`marked`) keeps a row of its own, and a kind with one worker
/// is not folded.
pub(super) fn ranked<'a>(
    visible: &[&'a ProcRow],
    marked: &HashMap<u32, Severity>,
    ui: &UiState,
) -> Vec<Entry<'a>> {
    if ui.by_cgroup {
        return cgroup_rows(visible, ui)
            .into_iter()
            .map(|row| Entry {
                row: Cow::Owned(row),
                folded: 0,
            })
            .collect();
    }
    let rows = visible;
    let foldable = |p: &ProcRow| {
        !ui.expand_workers
            && ui.selected_pid != Some(p.tgid)
            && !marked.contains_key(&p.tgid)
            && worker_kind(p).is_some()
    };
    let mut kinds: Vec<(&'static str, Vec<&ProcRow>)> = Vec::new();
    for row in rows.iter().filter(|p| foldable(p)) {
        let kind = worker_kind(row).unwrap_or_default();
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, members)) => members.push(row),
            None => kinds.push((kind, vec![row])),
        }
    }
    kinds.retain(|(_, members)| members.len() > 1);
    let folded = |p: &ProcRow| {
        kinds
            .iter()
            .any(|(_, m)| m.iter().any(|r| r.tgid == p.tgid))
    };
    let mut out: Vec<Entry> = rows
        .iter()
        .filter(|p| !folded(p))
        .map(|&row| Entry {
            row: Cow::Borrowed(row),
            folded: 0,
        })
        .collect();
    for (kind, members) in &kinds {
        out.push(Entry {
            row: Cow::Owned(fold(kind, members, ui)),
            folded: members.len(),
        });
    }
    out.sort_by(|a, b| compare(&a.row, &b.row, ui));
    out
}

/// Workers of one kind as one row: `kworker ×6`, the members' figures summed by the model.
fn fold(kind: &str, members: &[&ProcRow], ui: &UiState) -> ProcRow {
    let interval = ProcFigures::sum(members.iter().map(|p| &p.interval));
    let since_start = ui
        .cumulative
        .then(|| Box::new(ProcFigures::sum(members.iter().map(|p| p.total()))));
    let mut devices: Vec<crate::model::ProcDeviceRow> = Vec::new();
    for d in members.iter().flat_map(|p| &p.devices) {
        if !devices.iter().any(|have| have.dev == d.dev) {
            devices.push(d.clone());
        }
    }
    ProcRow {
        tgid: 0,
        comm: format!("{kind} ×{}", members.len()),
        kernel_thread: true,
        exited: false,
        cgroup: None,
        interval,
        since_start,
        devices,
        recent_syncs: Vec::new(),
        io_limits: None,
        dirty_state: None,
    }
}

/// The table's rows in the order shown ([`Rows::entries`]).
#[cfg(test)]
pub fn entries<'a>(snap: &'a Snapshot, ui: &UiState) -> Vec<Entry<'a>> {
    Rows::new(snap, ui).entries
}

/// The value a row is sorted by, for the kept order's margin (`None`: names and pids).
fn sort_value(f: &ProcFigures, sort: SortKey) -> Option<f64> {
    #[expect(clippy::cast_precision_loss, reason = "compared within a margin")]
    let n = |v: u64| Some(v as f64);
    match sort {
        SortKey::Pid | SortKey::Comm => None,
        SortKey::ReadOps => n(f.reads),
        SortKey::WriteOps => n(f.writes),
        SortKey::ReadBytes => n(f.read_bytes),
        SortKey::WriteBytes => n(f.write_bytes_caused()),
        SortKey::TotalBytes => n(f.bytes_caused()),
        SortKey::P50 => n(f.latency.p50_ns),
        SortKey::P99 => n(f.latency.p99_ns),
        SortKey::Syncs => n(f.sync.syncs),
        SortKey::SyncP99 => n(f.sync.latency.p99_ns),
        SortKey::Amplification => Some(f.sync.amplification().unwrap_or(0.0)),
        SortKey::DState => n(f.dstate_ns),
    }
}

/// The order for a new interval on screen: the previous one, where no row overtook.
/// `rows`: the table's rows in the sort's own order ([`ranked`]).
pub(super) fn advance_order<'e, 'a: 'e>(
    rows: impl Iterator<Item = &'e Entry<'a>>,
    ui: &UiState,
) -> Steady {
    let ranked: Vec<(RowKey, Option<f64>)> = rows
        .map(|e| (e.key(ui), sort_value(figures(&e.row, ui), ui.sort)))
        .collect();
    let descending = ui.sort.descending_by_default() != ui.reversed;
    ui.order.next(order_of(ui), &ranked, descending)
}

/// The table's order: by the chosen key, ties broken by pid so equal rows never swap places
/// between refreshes.
fn compare(a: &ProcRow, b: &ProcRow, ui: &UiState) -> Ordering {
    let descending = ui.sort.descending_by_default() != ui.reversed;
    let (fa, fb) = (figures(a, ui), figures(b, ui));
    let order = match ui.sort {
        SortKey::Pid => a.tgid.cmp(&b.tgid),
        SortKey::Comm => a.comm.cmp(&b.comm),
        SortKey::ReadOps => fa.reads.cmp(&fb.reads),
        SortKey::WriteOps => fa.writes.cmp(&fb.writes),
        SortKey::ReadBytes => fa.read_bytes.cmp(&fb.read_bytes),
        SortKey::WriteBytes => fa.write_bytes_caused().cmp(&fb.write_bytes_caused()),
        SortKey::TotalBytes => fa
            .bytes_caused()
            .cmp(&fb.bytes_caused())
            .then(fa.ios().cmp(&fb.ios())),
        SortKey::P50 => fa.latency.p50_ns.cmp(&fb.latency.p50_ns),
        SortKey::P99 => fa.latency.p99_ns.cmp(&fb.latency.p99_ns),
        SortKey::Syncs => fa.sync.syncs.cmp(&fb.sync.syncs),
        SortKey::SyncP99 => fa.sync.latency.p99_ns.cmp(&fb.sync.latency.p99_ns),
        SortKey::DState => fa.dstate_ns.cmp(&fb.dstate_ns),
        SortKey::Amplification => fa
            .sync
            .amplification()
            .unwrap_or(0.0)
            .total_cmp(&fb.sync.amplification().unwrap_or(0.0)),
    };
    let order = if descending { order.reverse() } else { order };
    if order == Ordering::Equal {
        a.tgid.cmp(&b.tgid).then(a.comm.cmp(&b.comm))
    } else {
        order
    }
}

/// [`cgroup_rows`] of the visible processes.
#[cfg(test)]
pub fn by_cgroup(snap: &Snapshot, ui: &UiState) -> Vec<ProcRow> {
    cgroup_rows(&visible(snap, ui), ui)
}

/// The rows shown with `C`: the `visible` processes summed per cgroup, one row each, in the
/// same order. A row's `tgid` holds how many processes it sums (the PID column becomes
/// PROCS) and its `comm` the cgroup's name. Latency percentiles come from the members' log2
/// histograms (each the upper bound of its slot): coarser than a process's.
fn cgroup_rows(visible: &[&ProcRow], ui: &UiState) -> Vec<ProcRow> {
    let mut rows: Vec<ProcRow> =
        crate::model::cgroups(visible.iter().map(|&row| (row, figures(row, ui))))
            .into_iter()
            .map(|group| ProcRow {
                tgid: u32::try_from(group.members).unwrap_or(u32::MAX),
                comm: group.name,
                kernel_thread: false,
                exited: false,
                cgroup: None,
                interval: group.figures,
                since_start: None,
                devices: Vec::new(),
                recent_syncs: Vec::new(),
                io_limits: None,
                dirty_state: None,
            })
            .collect();
    rows.sort_by(|a, b| compare(a, b, ui));
    rows
}

/// The rows with an active finding (`marked`), as indices into `entries`, the worst first:
/// they stay in view however the table is sorted.
pub(super) fn pinned(
    entries: &[Entry],
    marked: &HashMap<u32, Severity>,
    ui: &UiState,
) -> Vec<usize> {
    let mut pinned: Vec<(std::cmp::Reverse<_>, usize)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let severity = e.pid(ui).and_then(|pid| marked.get(&pid).copied())?;
            Some((std::cmp::Reverse(severity), i))
        })
        .collect();
    pinned.sort();
    pinned.into_iter().map(|(_, i)| i).collect()
}

/// Which rows are in view when not all fit in `room`: the selection and the rows with a
/// finding (`pinned`, the most important first) as long as they leave a place; the rest of
/// the room a run of rows from the top, moved down just enough to reach the selection.
/// Ascending row indices.
pub fn window(total: usize, room: usize, selected: Option<usize>, pinned: &[usize]) -> Vec<usize> {
    if total <= room {
        return (0..total).collect();
    }
    if room == 0 {
        return Vec::new();
    }
    let mut keep: Vec<usize> = selected.into_iter().collect();
    // Pinned rows leave one place to the run, so the table's top row (or the rows next to
    // the selection) stays in view too.
    for &p in pinned {
        if keep.len() < room.saturating_sub(1).max(1) && !keep.contains(&p) {
            keep.push(p);
        }
    }
    let run = room - keep.len();
    // The run ends at the selection when the selection is below it.
    let start = selected.map_or(0, |s| (s + 1).saturating_sub(run + 1));
    let mut shown = keep;
    let mut at = start;
    while shown.len() < room && at < total {
        if !shown.contains(&at) {
            shown.push(at);
        }
        at += 1;
    }
    // Near the end, the run reaches back up instead.
    let mut back = start;
    while shown.len() < room && back > 0 {
        back -= 1;
        if !shown.contains(&back) {
            shown.push(back);
        }
    }
    shown.sort_unstable();
    shown
}

/// The title: focus, period, sort (and whether its column is off screen), the filter and
/// what it hides, rows left out. Short forms when the line is narrow; the sort and the
/// filter always stay.
fn title(ui: &UiState, width: u16, filtered: usize, more: usize, empty: bool) -> String {
    let descending = ui.sort.descending_by_default() != ui.reversed;
    let arrow = if descending { "▼" } else { "▲" };
    let focused = ui.focus == Focus::Processes;
    let head = format!(
        "{}Processes {}by {}{arrow}",
        focus_mark(focused),
        if ui.cumulative { "since start " } else { "" },
        ui.sort.label(),
    );
    let hidden_from = sort_column_from(ui.sort, ui.by_cgroup).filter(|&from| width < from);
    let filter = |max: usize| {
        if ui.filter.is_empty() {
            String::new()
        } else if filtered > 0 {
            format!(
                " · filter \"{}\" hides {filtered}",
                text::elide(&ui.filter, max)
            )
        } else {
            format!(" · filter \"{}\"", text::elide(&ui.filter, max))
        }
    };
    let tail = if empty {
        if ui.probes_loading {
            " — the probes are loading".to_string()
        } else if ui.filter.is_empty() {
            " — no block I/O in this period".to_string()
        } else {
            " — nothing matches the filter".to_string()
        }
    } else if more > 0 {
        format!(" · +{more} more")
    } else {
        String::new()
    };
    let long = format!(
        "{head}{}{}{tail} ",
        hidden_from.map_or_else(String::new, |from| format!(
            " (its column shows from {from} columns)"
        )),
        filter(32)
    );
    if text::width(&long) < usize::from(width) {
        return long;
    }
    format!(
        "{head}{}{}{tail} ",
        if hidden_from.is_some() {
            " (column hidden)"
        } else {
            ""
        },
        filter(12)
    )
}

/// The pane's lines in `area`: the title, the header, and a row per entry in view.
pub fn lines(
    snap: &Snapshot,
    derived: &Rows,
    ui: &UiState,
    theme: &Theme,
    area: Rect,
) -> Vec<Line<'static>> {
    let width = usize::from(area.width);
    let rows = &derived.entries;
    let secs = period_secs(snap, ui);
    let descending = ui.sort.descending_by_default() != ui.reversed;
    let arrow = if descending { "▼" } else { "▲" };
    let (columns, widths) = columns(area.width, ui.by_cgroup);
    let headers: Vec<String> = columns
        .iter()
        .map(|c| {
            if ui.by_cgroup && c.header == "PID" {
                "PROCS".to_string()
            } else if ui.by_cgroup && c.header == "COMM" {
                "CGROUP".to_string()
            } else if c.sort == Some(ui.sort) {
                format!("{}{arrow}", c.header)
            } else {
                c.header.to_string()
            }
        })
        .collect();
    let focused = ui.focus == Focus::Processes;
    let selected = if focused {
        ui.selected_pid
            .and_then(|pid| rows.iter().position(|e| e.pid(ui) == Some(pid)))
    } else {
        None
    };
    // Rows with an active finding stay in view however the table is sorted, the worst first
    // when they do not all fit.
    let marked = &derived.marked;
    let room = usize::from(area.height.saturating_sub(2));
    let in_view = window(rows.len(), room, selected, &derived.pinned);
    let title = title(
        ui,
        area.width,
        derived.filtered_out,
        rows.len() - in_view.len(),
        rows.is_empty(),
    );
    let mut out = vec![table::title_line(
        vec![Span::styled(
            title,
            if focused { theme.key } else { theme.title },
        )],
        width,
    )];
    if area.height < 2 {
        return out;
    }
    out.push(table::header(&headers, &widths, width, theme.header));
    for i in in_view {
        let entry = &rows[i];
        let p: &ProcRow = &entry.row;
        let f = figures(p, ui);
        let severity = entry.pid(ui).and_then(|pid| marked.get(&pid).copied());
        let cells: Vec<Line<'static>> = columns
            .iter()
            .map(|c| {
                if c.header == "PID" && entry.folded > 0 {
                    return Line::raw("-");
                }
                let text = (c.cell)(p, f, secs);
                if c.header == "COMM"
                    && let Some(severity) = severity
                {
                    // The finding's symbol before the name, so the mark survives without colour.
                    let (symbol, style) = theme.severity(severity);
                    return Line::from(vec![
                        Span::styled(format!("{symbol} "), style),
                        Span::raw(text),
                    ]);
                }
                Line::raw(text)
            })
            .collect();
        let chosen = Some(i) == selected;
        out.push(table::selectable_row(
            chosen,
            cells,
            &widths,
            width,
            theme.selected,
        ));
    }
    out
}

pub fn render(
    frame: &mut ratatui::Frame,
    area: Rect,
    snap: &Snapshot,
    rows: &Rows,
    ui: &UiState,
    theme: &Theme,
) {
    frame.render_widget(
        ratatui::widgets::Paragraph::new(lines(snap, rows, ui, theme, area)),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_keeps_the_selection_and_the_rows_with_a_finding() {
        assert_eq!(window(3, 5, None, &[]), [0, 1, 2]);
        assert_eq!(window(10, 3, None, &[]), [0, 1, 2]);
        // A culprit at row 8 of 10 in a pane of 3 rows: the top two and it.
        assert_eq!(window(10, 3, None, &[8]), [0, 1, 8]);
        // The selection further down: the run ends at it, the culprit stays.
        assert_eq!(window(10, 4, Some(6), &[8]), [4, 5, 6, 8]);
        assert_eq!(window(10, 3, Some(9), &[]), [7, 8, 9]);
        // A pinned row inside the run does not take a second place.
        assert_eq!(window(10, 3, None, &[1]), [0, 1, 2]);
        // More pinned rows than room: the first of them, and the top row stays.
        assert_eq!(window(10, 3, None, &[7, 8, 9]), [0, 7, 8]);
        assert_eq!(window(10, 3, Some(5), &[7, 8, 9]), [4, 5, 7]);
        assert_eq!(window(10, 1, Some(5), &[7]), [5]);
        assert_eq!(window(10, 0, Some(5), &[7]), Vec::<usize>::new());
    }
}
