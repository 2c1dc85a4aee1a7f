//! The disks pane, iostat -x style; on wide terminals (150 columns and more) each disk also
//! gets sparklines of its IOPS, MB/s and p99 over the history kept (10 minutes at 1 s).
//! When space is short, idle disks give their rows to the processes, and the title counts
//! them (`+2 idle`).

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{
    Focus, Theme, UiState, procs::period_secs, table, theme::focus_mark, trend::sparkline,
};
use crate::{
    history::History,
    model::{DiskFigures, DiskRow, Snapshot},
    units,
};

/// The iostat columns, DEVICE to %util.
const NARROW_WIDTHS: [u16; 9] = [10, 7, 7, 7, 7, 8, 8, 7, 6];
/// flush/s, queue p50, dev p50, p99.
const WIDE_WIDTHS: [u16; 4] = [8, 10, 8, 7];

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

/// The most disk rows the pane takes.
pub const MOST_ROWS: usize = 6;

/// The disks in view, and how many idle ones were left out.
#[derive(Clone, Debug, Default)]
pub struct InView<'a> {
    pub rows: Vec<&'a DiskRow>,
    pub idle: usize,
}

/// The disks in view, in name order. When space is `short` (a short screen) or there are
/// more than [`MOST_ROWS`] disks, disks without a request in the shown period are left out
/// (the selected one stays); beyond that, the last.
pub fn shown<'a>(snap: &'a Snapshot, ui: &UiState, short: bool) -> InView<'a> {
    let all = visible(snap, ui);
    let busy = |d: &DiskRow| figures(d, ui).requests() > 0 || ui.selected_disk == Some(d.dev);
    let mut rows: Vec<&DiskRow> = if short || all.len() > MOST_ROWS {
        all.iter().copied().filter(|d| busy(d)).collect()
    } else {
        all.clone()
    };
    let idle = all.len() - rows.len();
    rows.truncate(MOST_ROWS);
    InView { rows, idle }
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

/// The pane's lines in `area`: the title, the header and a row per disk in view (`shown`).
pub fn lines(
    snap: &Snapshot,
    history: &History,
    ui: &UiState,
    theme: &Theme,
    area: Rect,
    in_view: &InView,
) -> Vec<Line<'static>> {
    let (shown, idle) = (&in_view.rows, in_view.idle);
    let width = usize::from(area.width);
    let secs = period_secs(snap, ui);
    // The wide columns when they fit whole (113 columns).
    let wide = table::total_width(&[NARROW_WIDTHS.as_slice(), &WIDE_WIDTHS].concat()) <= width;
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
    let mut widths: Vec<u16> = NARROW_WIDTHS.to_vec();
    if wide {
        if merges {
            header.extend(["rrqm/s", "wrqm/s"]);
            widths.extend([7, 7]);
        }
        header.extend(["flush/s", "queue p50", "dev p50", "p99"]);
        widths.extend(WIDE_WIDTHS);
    }
    if sparks {
        header.extend(["IOPS trend", "MB/s trend", "p99 trend"]);
        widths.extend([spark; 3]);
    }
    let focused = ui.focus == Focus::Disks;
    // The rows that fit under the title and the header, the selected disk among them.
    let room = usize::from(area.height.saturating_sub(2));
    let selected = ui
        .selected_disk
        .and_then(|dev| shown.iter().position(|d| d.dev == dev));
    let fitting: Vec<&DiskRow> = super::procs::window(shown.len(), room, selected, &[])
        .into_iter()
        .map(|i| shown[i])
        .collect();
    let more = shown.len() - fitting.len();
    let mut title = format!("{}Disks ", focus_mark(focused));
    if shown.is_empty() && idle > 0 {
        title = format!("{}Disks: all {idle} idle ", focus_mark(focused));
    } else {
        if idle > 0 {
            title.push_str(&format!("· +{idle} idle "));
        }
        if more > 0 {
            title.push_str(&format!("· +{more} more "));
        }
    }
    let mut out = vec![table::title_line(
        vec![Span::styled(
            title,
            if focused { theme.key } else { theme.title },
        )],
        width,
    )];
    if area.height < 2 || shown.is_empty() {
        return out;
    }
    let names: Vec<String> = header.iter().map(ToString::to_string).collect();
    out.push(table::header(&names, &widths, width, theme.header));
    for d in fitting {
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
        let chosen = focused && ui.selected_disk == Some(d.dev);
        out.push(table::selectable_row(
            chosen,
            cells.into_iter().map(Line::raw).collect(),
            &widths,
            width,
            theme.selected,
        ));
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
    in_view: &InView,
) {
    let lines = lines(snap, history, ui, theme, area, in_view);
    frame.render_widget(Paragraph::new(lines), area);
}
