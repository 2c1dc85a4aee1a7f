//! The live view. One pane, one module; every pane renders from the [`Snapshot`] and the
//! [`UiState`] only, and reads the rows it lists from [`Rows`], derived from both once a
//! frame.
//!
//! ```text
//! ┌ status: [PAUSED] host kernel uptime events/s dropped interval D:n     ┐
//! │   ld r b wa psi dirty: load, run queue, blocked, iowait, I/O pressure │
//! ├ Disks ─ iostat -x columns, one row per disk ─────────────────────────┤
//! ├ Processes ─ PID COMM R/s W/s RMB/s WMB/s p50 p99 SYNC/s AMP ─────────┤
//! ├ Findings ─ ‼ CRIT write_amplification lab001 pid 42 /file 128x ... ──┤
//! ├ D state ─ PID/TID COMM BLOCKED EPISODES WHERE (if any thread is stuck) ┤
//! ├ Latency ─ selected disk/process: queue hist │ device hist ───────────┤
//! │   or (H) its heat map: latency over time, sparklines of rates and p99 │
//! └ keys / filter prompt / degraded notes                                ┘
//! ```

pub mod buckets;
pub mod detail;
pub mod disks;
pub mod dstate;
pub mod finding;
pub mod findings;
pub mod heatmap;
pub mod help;
pub mod latency;
pub mod procs;
mod rows;
mod state;
pub mod status;
pub mod table;
pub mod text;
pub mod theme;
pub mod trend;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    widgets::Paragraph,
};

pub use self::{
    rows::Rows,
    state::{Focus, HeatKind, Link, Rec, SortKey, UiState},
    theme::Theme,
};
use crate::{history::History, model::Snapshot};

/// Below this the panes cannot show their columns: say so instead of drawing garbage.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 16;

/// Below this many rows space is short: optional panes shrink and idle disks hide, so the
/// processes keep room.
pub const COMPACT_HEIGHT: u16 = 30;

/// Where each pane goes on the screen (a pane not shown has no rows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Panes {
    pub status: Rect,
    pub disks: Rect,
    pub procs: Rect,
    pub findings: Rect,
    pub dstate: Rect,
    /// The latency histograms, or the heat map (`H`).
    pub latency: Rect,
    pub keys: Rect,
    /// Everything between the status line and the key line: where the drill-down and a
    /// finding's text go.
    pub body: Rect,
}

/// Rows each pane would like.
#[derive(Clone, Copy, Debug)]
struct Wants {
    disks: u16,
    procs: u16,
    findings: u16,
    dstate: u16,
    latency: u16,
}

/// The fewest rows the latency pane gives up to others: its title, the queue/device line
/// and four rows of bars.
const LATENCY_FLOOR: u16 = 6;

/// Rows of each pane, top to bottom (status, disks, processes, findings, D state, latency,
/// keys), adding up to `height` exactly. The processes first get up to a fifth of the
/// screen. When everything wanted does not fit, panes give rows up in this order, each down to a floor: the latency pane (to six rows), the D state
/// (to its sentence), the findings (to two lines), the disks (to one row), the processes (to
/// one row), then the latency pane again (to its title and two rows). Rows to spare go to
/// the processes as far as they have rows to show, then to the latency pane.
fn heights(height: u16, want: Wants) -> [u16; 7] {
    let avail = height.saturating_sub(2);
    let mut rows = [
        want.disks,
        // The processes are the table people read: a fifth of the screen before the
        // optional panes give anything up.
        want.procs.min(height / 5 + 2),
        want.findings,
        want.dstate,
        want.latency,
    ];
    // (pane, floor) in the order they give rows up.
    let steps = [
        (4, LATENCY_FLOOR.min(want.latency)),
        (3, want.dstate.min(2)),
        (2, want.findings.min(3)),
        (0, want.disks.min(3)),
        (1, 3),
        (4, 3),
        (2, 0),
        (3, 0),
        (0, 0),
        (4, 0),
        (1, 0),
    ];
    for (pane, floor) in steps {
        while rows.iter().sum::<u16>() > avail && rows[pane] > floor {
            rows[pane] -= 1;
        }
    }
    let spare = avail.saturating_sub(rows.iter().sum::<u16>());
    let more = spare.min(want.procs.saturating_sub(rows[1]));
    rows[1] += more;
    rows[4] += spare - more;
    [1, rows[0], rows[1], rows[2], rows[3], rows[4], 1]
}

/// Disks in view on a screen `height` rows high.
pub fn disks_in_view<'a>(snap: &'a Snapshot, ui: &UiState, height: u16) -> disks::InView<'a> {
    disks::shown(snap, ui, height < COMPACT_HEIGHT)
}

/// The panes' places on a screen of `area` (`None`: too small to draw them), for the `rows`
/// of `snap`.
pub fn layout(area: Rect, snap: &Snapshot, rows: &Rows, ui: &UiState) -> Option<Panes> {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return None;
    }
    let in_view = disks_in_view(snap, ui, area.height);
    // A title, and a header and the rows when there are rows.
    let disk_rows = match u16::try_from(in_view.rows.len()).unwrap_or(u16::MAX) {
        0 => 1,
        n => n + 2,
    };
    // Below 30 rows the optional panes shrink so the processes keep room.
    let compact = area.height < COMPACT_HEIGHT;
    // Findings are the story of an incident: more of them as the screen grows.
    let most_findings = match area.height {
        0..30 => 2,
        30..50 => 4,
        _ => 6,
    };
    let finding_rows = findings::wanted_rows(&rows.groups, most_findings);
    let rows = heights(
        area.height,
        Wants {
            disks: disk_rows,
            procs: u16::try_from(rows.entries.len())
                .unwrap_or(u16::MAX)
                .saturating_add(2),
            findings: finding_rows,
            dstate: dstate::wanted_rows(snap, compact),
            // A third of the screen; compact, with findings or threads in D to show, six:
            // four rows of bars under its title and the queue/device line (fewer cannot show
            // a range of more than two octaves).
            latency: if compact && finding_rows + dstate::wanted_rows(snap, true) > 0 {
                LATENCY_FLOOR
            } else {
                (area.height / 3).clamp(7, 16)
            },
        },
    );
    let [status, disks, procs, findings, dstate, latency, keys] =
        Layout::vertical(rows.map(Constraint::Length)).areas(area);
    let body = Rect {
        y: area.y + 1,
        height: area.height.saturating_sub(2),
        ..area
    };
    Some(Panes {
        status,
        disks,
        procs,
        findings,
        dstate,
        latency,
        keys,
        body,
    })
}

/// Draws the whole screen: `snap` is the interval on screen (the newest, or a past one while
/// stepping back), `history` what came before it (sparklines, heat maps). Each pane draws
/// the lines it laid out for its place, nothing more.
pub fn render(frame: &mut Frame, snap: &Snapshot, history: &History, ui: &UiState, theme: &Theme) {
    let area = frame.area();
    let rows = Rows::new(snap, ui);
    let Some(panes) = layout(area, snap, &rows, ui) else {
        let msg = format!(
            "Terminal too small: {}x{}, iotop-bpf needs at least {MIN_WIDTH}x{MIN_HEIGHT}. Enlarge it or press q.",
            area.width, area.height
        );
        frame.render_widget(
            Paragraph::new(msg).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    };
    status::render(frame, panes.status, snap, ui, theme);
    let in_view = disks_in_view(snap, ui, area.height);
    disks::render(frame, panes.disks, snap, history, ui, theme, &in_view);
    procs::render(frame, panes.procs, snap, &rows, ui, theme);
    if panes.findings.height > 0 {
        findings::render(frame, panes.findings, snap, &rows.groups, ui, theme);
    }
    if panes.dstate.height > 0 {
        dstate::render(frame, panes.dstate, snap, theme);
    }
    if ui.show_heatmap {
        heatmap::render(frame, panes.latency, snap, history, &rows, ui, theme);
    } else {
        latency::render(frame, panes.latency, snap, &rows, ui, theme);
    }
    status::render_keys(frame, panes.keys, ui, theme);
    if ui.show_finding {
        finding::render(frame, panes.body, snap, &rows.groups, ui, theme);
    } else if ui.show_detail {
        detail::render(frame, panes.body, snap, ui, theme);
    }
    if ui.show_help {
        help::render(frame, area, theme);
    }
}

// The render tests' helpers (`ui`, `draw_with`, `text`) are the crate's, so the tests that
// drive the whole `App` (in `app`, above the view) draw the screen the same way.
#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn pane_heights_add_up_and_give_way_in_order() {
        let want = Wants {
            disks: 6,
            procs: 14,
            findings: 5,
            dstate: 6,
            latency: 10,
        };
        for height in MIN_HEIGHT..=80 {
            let rows = heights(height, want);
            assert_eq!(rows.iter().sum::<u16>(), height, "{height}: {rows:?}");
            assert!(
                rows[2] >= 3.min(height - MIN_HEIGHT + 3),
                "{height}: {rows:?}"
            );
        }
        // 30 rows: the latency pane gives up rows first, to its floor; the D state next.
        assert_eq!(heights(30, want), [1, 6, 8, 5, 3, 6, 1]);
        // Tall: everything as wanted, the processes whole, the rest to the latency pane.
        assert_eq!(heights(60, want), [1, 6, 14, 5, 6, 27, 1]);
        // The smallest screen still has a row of each.
        let rows = heights(MIN_HEIGHT, want);
        assert!(rows.iter().all(|&r| r >= 1), "{rows:?}");
    }
}
