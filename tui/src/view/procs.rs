//! The processes pane: who does I/O, how much, how slow, how often it syncs and at what
//! write amplification. Sortable and filterable; rows with a finding are marked.

use std::cmp::Ordering;

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Row, Table, TableState},
};

use super::{
    Focus, SortKey, Theme, UiState,
    findings::severity_of,
    theme::{SELECTED_SYMBOL, focus_mark},
};
use crate::{
    model::{ProcFigures, ProcRow, Snapshot},
    units,
};

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

fn active(f: &ProcFigures) -> bool {
    f.ios() > 0 || f.writeback_bytes > 0 || f.sync.syncs > 0 || f.dstate_ns > 0 || f.waited()
}

/// The rows shown, in order: filtered, with I/O or syncs in the shown period (the selected
/// process stays even when idle, so a drill-down does not vanish), sorted by the chosen key,
/// ties broken by pid so equal rows never swap places between refreshes.
pub fn visible<'a>(snap: &'a Snapshot, ui: &UiState) -> Vec<&'a ProcRow> {
    let mut rows: Vec<&ProcRow> = snap
        .procs
        .iter()
        .filter(|p| matches_filter(p, &ui.filter))
        .filter(|p| active(figures(p, ui)) || ui.selected_pid == Some(p.tgid))
        .collect();
    rows.sort_by(|a, b| compare(a, b, ui));
    rows
}

/// The table's order: by the chosen key, ties broken by pid so equal rows never swap places
/// between refreshes.
fn compare(a: &ProcRow, b: &ProcRow, ui: &UiState) -> Ordering {
    let descending = ui.sort.descending_by_default() != ui.reversed;
    {
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
}

/// The rows shown with `C`: the visible processes summed per cgroup, one row each, in the
/// same order. A row's `tgid` holds how many processes it sums (the PID column becomes
/// PROCS) and its `comm` the cgroup's name. Latency percentiles come from the members' log2
/// histograms (each the upper bound of its slot): coarser than a process's.
pub fn by_cgroup(snap: &Snapshot, ui: &UiState) -> Vec<ProcRow> {
    let mut groups: std::collections::BTreeMap<String, (u32, ProcFigures)> =
        std::collections::BTreeMap::new();
    for row in visible(snap, ui) {
        let name = row
            .cgroup
            .as_ref()
            .map_or_else(|| NO_CGROUP.to_string(), |c| c.name.clone());
        let (count, sum) = groups.entry(name).or_default();
        *count += 1;
        add(sum, figures(row, ui));
    }
    let mut rows: Vec<ProcRow> = groups
        .into_iter()
        .map(|(name, (count, mut sum))| {
            sum.latency = latency_of(&sum.total_hist, sum.latency.max_ns);
            sum.sync.latency = latency_of(&sum.sync.hist, sum.sync.latency.max_ns);
            ProcRow {
                tgid: count,
                comm: name,
                kernel_thread: false,
                exited: false,
                cgroup: None,
                interval: sum,
                since_start: None,
                devices: Vec::new(),
                recent_syncs: Vec::new(),
                io_limits: None,
                dirty_state: None,
            }
        })
        .collect();
    rows.sort_by(|a, b| compare(a, b, ui));
    rows
}

/// The group of processes whose requests carried no cgroup.
const NO_CGROUP: &str = "(unknown)";

/// Adds a member's figures to its group's (what sums; latency is redone from histograms).
fn add(sum: &mut ProcFigures, f: &ProcFigures) {
    sum.reads += f.reads;
    sum.writes += f.writes;
    sum.others += f.others;
    sum.flushes += f.flushes;
    sum.read_bytes += f.read_bytes;
    sum.write_bytes += f.write_bytes;
    sum.writeback_bytes += f.writeback_bytes;
    sum.wrote_back_bytes += f.wrote_back_bytes;
    sum.logical_write_bytes += f.logical_write_bytes;
    sum.dstate_ns += f.dstate_ns;
    sum.sync.syncs += f.sync.syncs;
    sum.latency.max_ns = sum.latency.max_ns.max(f.latency.max_ns);
    sum.sync.latency.max_ns = sum.sync.latency.max_ns.max(f.sync.latency.max_ns);
    for (slot, n) in sum.total_hist.slots.iter_mut().zip(f.total_hist.slots) {
        *slot += n;
    }
    for (slot, n) in sum.sync.hist.slots.iter_mut().zip(f.sync.hist.slots) {
        *slot += n;
    }
    // The wait before the request: pauses and call time sum; the group's call percentiles
    // are its worst member's (members' percentiles do not merge).
    if f.waits.dirty.pauses > 0 || f.waits.calls.latency.count > 0 {
        let mut calls = sum.waits.calls.clone();
        let mut dirty = sum.waits.dirty;
        dirty.pauses += f.waits.dirty.pauses;
        dirty.pause_ns += f.waits.dirty.pause_ns;
        calls.time_ns += f.waits.calls.time_ns;
        calls.prequeue_ns += f.waits.calls.prequeue_ns;
        let (group, member) = (&mut calls.latency, &f.waits.calls.latency);
        let count = group.count + member.count;
        if count > 0 {
            group.mean_ns = u64::try_from(
                (u128::from(group.mean_ns) * u128::from(group.count)
                    + u128::from(member.mean_ns) * u128::from(member.count))
                    / u128::from(count),
            )
            .unwrap_or(u64::MAX);
        }
        group.count = count;
        group.p50_ns = group.p50_ns.max(member.p50_ns);
        group.p99_ns = group.p99_ns.max(member.p99_ns);
        group.p999_ns = group.p999_ns.max(member.p999_ns);
        sum.waits = crate::model::Waits::new(calls, dirty);
    }
}

/// p50 and p99 from a log2 histogram: the upper bound of the slot the quantile falls in.
fn latency_of(hist: &crate::model::Log2Hist, max_ns: u64) -> crate::model::Latency {
    let count = hist.total();
    let quantile = |q: f64| -> u64 {
        #[expect(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a rank among counts"
        )]
        let rank = ((count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (slot, &n) in hist.slots.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper_ns = iotop_bpf_common::hist::slot_upper_us(slot as u32) * 1000;
                return upper_ns.min(max_ns.max(1));
            }
        }
        max_ns
    };
    crate::model::Latency {
        count,
        mean_ns: 0,
        p50_ns: quantile(0.50),
        p99_ns: quantile(0.99),
        p999_ns: quantile(0.999),
        max_ns,
    }
}

/// One column of the table.
struct Column {
    header: &'static str,
    width: u16,
    sort: Option<SortKey>,
    /// Shown only when the pane is at least this wide.
    min_pane_width: u16,
    cell: fn(&ProcRow, &ProcFigures, f64) -> String,
}

fn per_s(n: u64, secs: f64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "display rates")]
    let n = n as f64;
    n / secs
}

/// The narrow set fits 80 characters (with the selection mark); wider terminals add the
/// rest (direct I/O call latency from 136, dirty pauses from 142, the cgroup from 166, all of
/// them from 180).
const COLUMNS: &[Column] = &[
    Column {
        header: "PID",
        width: 7,
        sort: Some(SortKey::Pid),
        min_pane_width: 0,
        cell: |p, _, _| p.tgid.to_string(),
    },
    Column {
        header: "COMM",
        width: 14,
        sort: Some(SortKey::Comm),
        min_pane_width: 0,
        cell: |p, _, _| p.comm.clone(),
    },
    Column {
        header: "R/s",
        width: 6,
        sort: Some(SortKey::ReadOps),
        min_pane_width: 0,
        cell: |_, f, s| format!("{:.0}", per_s(f.reads, s)),
    },
    Column {
        header: "W/s",
        width: 6,
        sort: Some(SortKey::WriteOps),
        min_pane_width: 0,
        cell: |_, f, s| format!("{:.0}", per_s(f.writes, s)),
    },
    Column {
        header: "RMB/s",
        width: 7,
        sort: Some(SortKey::ReadBytes),
        min_pane_width: 0,
        cell: |_, f, s| format!("{:.2}", units::mib(per_s(f.read_bytes, s))),
    },
    Column {
        header: "WMB/s",
        width: 7,
        sort: Some(SortKey::WriteBytes),
        min_pane_width: 0,
        // Write-back counts on the process that dirtied the pages, not on the flusher.
        cell: |_, f, s| format!("{:.2}", units::mib(per_s(f.write_bytes_caused(), s))),
    },
    Column {
        header: "p50",
        width: 6,
        sort: Some(SortKey::P50),
        min_pane_width: 0,
        cell: |_, f, _| units::latency(f.latency.p50_ns),
    },
    Column {
        header: "p99",
        width: 6,
        sort: Some(SortKey::P99),
        min_pane_width: 0,
        cell: |_, f, _| units::latency(f.latency.p99_ns),
    },
    Column {
        header: "max",
        width: 6,
        sort: None,
        min_pane_width: 110,
        cell: |_, f, _| units::latency(f.latency.max_ns),
    },
    Column {
        header: "C.p99",
        width: 6,
        sort: None,
        min_pane_width: 136,
        cell: |_, f, _| call_p99(f),
    },
    Column {
        header: "PREQ",
        width: 5,
        sort: None,
        min_pane_width: 136,
        cell: |_, f, _| prequeue_share(f),
    },
    Column {
        header: "SYNC/s",
        width: 6,
        sort: Some(SortKey::Syncs),
        min_pane_width: 0,
        cell: |_, f, s| sync_rate(f, s),
    },
    Column {
        header: "S.p50",
        width: 6,
        sort: None,
        min_pane_width: 110,
        cell: |_, f, _| sync_latency(f, f.sync.latency.p50_ns),
    },
    Column {
        header: "S.p99",
        width: 6,
        sort: Some(SortKey::SyncP99),
        min_pane_width: 110,
        cell: |_, f, _| sync_latency(f, f.sync.latency.p99_ns),
    },
    Column {
        header: "S.max",
        width: 6,
        sort: None,
        min_pane_width: 110,
        cell: |_, f, _| sync_latency(f, f.sync.latency.max_ns),
    },
    Column {
        header: "LMB/s",
        width: 6,
        sort: None,
        min_pane_width: 120,
        cell: |_, f, s| format!("{:.2}", units::mib(per_s(f.logical_write_bytes, s))),
    },
    Column {
        header: "AMP",
        width: 5,
        sort: Some(SortKey::Amplification),
        min_pane_width: 0,
        cell: |_, f, _| amplification(f),
    },
    Column {
        header: "D",
        width: 5,
        sort: Some(SortKey::DState),
        min_pane_width: 90,
        cell: |_, f, s| dstate_share(f, s),
    },
    Column {
        header: "PAUSE",
        width: 5,
        sort: None,
        min_pane_width: 142,
        cell: |_, f, s| dirty_share(f, s),
    },
    Column {
        header: "DISKS",
        width: 12,
        sort: None,
        min_pane_width: 180,
        cell: |p, _, _| disks(p),
    },
    Column {
        header: "CGROUP",
        width: 22,
        sort: None,
        min_pane_width: 166,
        cell: |p, _, _| {
            p.cgroup
                .as_ref()
                .map_or_else(|| "-".into(), |c| c.name.clone())
        },
    },
];

fn sync_rate(f: &ProcFigures, secs: f64) -> String {
    if f.sync.syncs == 0 {
        "-".into()
    } else {
        format!("{:.0}", per_s(f.sync.syncs, secs))
    }
}

fn sync_latency(f: &ProcFigures, ns: u64) -> String {
    if f.sync.syncs == 0 {
        "-".into()
    } else {
        units::latency(ns)
    }
}

/// The write amplification of its typical sync call (one definition with the finding).
fn amplification(f: &ProcFigures) -> String {
    f.sync
        .amplification()
        .map_or_else(|| "-".into(), crate::model::quantity::times)
}

/// Time in D as a share of the period (100% = one thread blocked the whole time).
fn dstate_share(f: &ProcFigures, secs: f64) -> String {
    if f.dstate_ns == 0 {
        return "-".into();
    }
    #[expect(clippy::cast_precision_loss, reason = "a display percentage")]
    let pct = f.dstate_ns as f64 / 1e9 / secs * 100.0;
    format!("{pct:.0}%")
}

/// The p99 latency of its direct I/O calls, entry to completion (`-` without calls).
fn call_p99(f: &ProcFigures) -> String {
    if f.waits.calls.latency.count == 0 {
        "-".into()
    } else {
        units::latency(f.waits.calls.latency.p99_ns)
    }
}

/// The share of its direct I/O call time spent outside any request (the wait before the
/// request: blk-throttle, iocost, a full queue).
fn prequeue_share(f: &ProcFigures) -> String {
    if f.waits.calls.latency.count == 0 {
        "-".into()
    } else {
        format!("{:.0}%", f.waits.calls.prequeue_share() * 100.0)
    }
}

/// Time its writers were paused by dirty throttling, as a share of the period.
fn dirty_share(f: &ProcFigures, secs: f64) -> String {
    if f.waits.dirty.pause_ns == 0 {
        return "-".into();
    }
    #[expect(clippy::cast_precision_loss, reason = "a display percentage")]
    let pct = f.waits.dirty.pause_ns as f64 / 1e9 / secs * 100.0;
    format!("{pct:.0}%")
}

fn disks(p: &ProcRow) -> String {
    p.devices
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &UiState, theme: &Theme) {
    let groups = ui.by_cgroup.then(|| by_cgroup(snap, ui));
    let rows: Vec<&ProcRow> = match &groups {
        Some(groups) => groups.iter().collect(),
        None => visible(snap, ui),
    };
    let secs = period_secs(snap, ui);
    let descending = ui.sort.descending_by_default() != ui.reversed;
    let arrow = if descending { "▼" } else { "▲" };
    let columns: Vec<&Column> = COLUMNS
        .iter()
        .filter(|c| area.width >= c.min_pane_width)
        // Cgroup rows make room for their names: the maxima and the median sync latency go
        // (their percentiles are coarse anyway), and the per-process cgroup column.
        .filter(|c| !ui.by_cgroup || !matches!(c.header, "max" | "S.p50" | "S.max" | "CGROUP"))
        .collect();
    let header = Row::new(columns.iter().map(|c| {
        if ui.by_cgroup && c.header == "PID" {
            "PROCS".to_string()
        } else if ui.by_cgroup && c.header == "COMM" {
            "CGROUP".to_string()
        } else if c.sort == Some(ui.sort) {
            format!("{}{arrow}", c.header)
        } else {
            c.header.to_string()
        }
    }))
    .style(theme.header);
    let widths: Vec<Constraint> = columns
        .iter()
        .map(|c| match c.header {
            // A cgroup's name is longer than a command's.
            "COMM" if ui.by_cgroup => Constraint::Length(22),
            _ => Constraint::Length(c.width),
        })
        .collect();

    let body: Vec<Row> = rows
        .iter()
        .map(|p| {
            let f = figures(p, ui);
            Row::new(columns.iter().map(|c| {
                let text = (c.cell)(p, f, secs);
                if c.header == "COMM"
                    && let Some(severity) = severity_of(snap, p.tgid)
                {
                    // The finding's symbol before the name, so the mark survives without colour.
                    let (symbol, style) = theme.severity(severity);
                    return Cell::from(Line::from(vec![
                        Span::styled(format!("{symbol} "), style),
                        Span::raw(text),
                    ]));
                }
                Cell::from(text)
            }))
        })
        .collect();

    let focused = ui.focus == Focus::Processes;
    let title = format!(
        "{}Processes {}by {}{arrow} {}",
        focus_mark(focused),
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
        .header(header)
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
