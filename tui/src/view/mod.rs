//! The live view. One pane, one module; every pane renders from the [`Snapshot`] and the
//! [`UiState`] only.
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
mod state;
pub mod status;
pub mod text;
pub mod theme;
pub mod trend;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    widgets::Paragraph,
};

pub use self::{
    state::{Focus, HeatKind, Link, SortKey, UiState},
    theme::Theme,
};
use crate::{history::History, model::Snapshot};

/// Below this the panes cannot show their columns: say so instead of drawing garbage.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 16;

/// Draws the whole screen: `snap` is the interval on screen (the newest, or a past one while
/// stepping back), `history` what came before it (sparklines, heat maps).
pub fn render(frame: &mut Frame, snap: &Snapshot, history: &History, ui: &UiState, theme: &Theme) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "Terminal too small: {}x{}, iotop-bpf needs at least {MIN_WIDTH}x{MIN_HEIGHT}. Enlarge it or press q.",
            area.width, area.height
        );
        frame.render_widget(
            Paragraph::new(msg).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let disk_rows = u16::try_from(snap.disks.len())
        .unwrap_or(u16::MAX)
        .clamp(1, 6);
    // Below 30 rows the optional panes shrink so the processes keep room.
    let compact = area.height < 30;
    // Findings are the story of an incident: more of them as the screen grows.
    let most_findings = match area.height {
        0..30 => 2,
        30..50 => 4,
        _ => 6,
    };
    let finding_rows = findings::wanted_rows(snap, most_findings);
    let dstate_rows = dstate::wanted_rows(snap, compact);
    // The latency pane gets a third of the screen, plus whatever the processes do not need.
    let proc_rows = u16::try_from(procs::visible(snap, ui).len())
        .unwrap_or(u16::MAX)
        .max(3);
    let spare = area
        .height
        .saturating_sub(1 + disk_rows + 2 + proc_rows + 2 + finding_rows + dstate_rows + 1);
    // Compact, it still gets four rows of bars (under its title and the queue/device line):
    // fewer cannot show a range of more than two octaves.
    let latency_base = if compact && finding_rows + dstate_rows > 0 {
        6
    } else {
        (area.height / 3).clamp(7, 16)
    };
    let latency_rows = latency_base.max(spare);
    let [
        status_area,
        disks_area,
        procs_area,
        findings_area,
        dstate_area,
        latency_area,
        keys_area,
    ] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(disk_rows + 2),
        Constraint::Min(5),
        Constraint::Length(finding_rows),
        Constraint::Length(dstate_rows),
        Constraint::Length(latency_rows),
        Constraint::Length(1),
    ])
    .areas(area);
    status::render(frame, status_area, snap, ui, theme);
    disks::render(frame, disks_area, snap, history, ui, theme);
    procs::render(frame, procs_area, snap, ui, theme);
    if finding_rows > 0 {
        findings::render(frame, findings_area, snap, ui, theme);
    }
    if dstate_rows > 0 {
        dstate::render(frame, dstate_area, snap, theme);
    }
    if ui.show_heatmap {
        heatmap::render(frame, latency_area, snap, history, ui, theme);
    } else {
        latency::render(frame, latency_area, snap, ui, theme);
    }
    status::render_keys(frame, keys_area, ui, theme);
    // Everything between the status line and the key line.
    let body = Rect {
        y: area.y + 1,
        height: area.height.saturating_sub(2),
        ..area
    };
    if ui.show_finding {
        finding::render(frame, body, snap, ui, theme);
    } else if ui.show_detail {
        detail::render(frame, body, snap, ui, theme);
    }
    if ui.show_help {
        help::render(frame, area, theme);
    }
}

#[cfg(test)]
mod tests;
