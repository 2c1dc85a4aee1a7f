//! The D-state pane: threads stuck in uninterruptible sleep now (live), where they wait, and
//! the longest recent episodes.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::Line,
    widgets::{Block, Borders, Row, Table},
};

use super::Theme;
use crate::{
    model::{Snapshot, wait_site},
    units,
};

/// Rows the pane wants: 0 when no thread is or recently was in a long D episode; fewer on a
/// short terminal.
pub fn wanted_rows(snap: &Snapshot, compact: bool) -> u16 {
    let rows = snap.dstate.len() + snap.dstate_recent.len().min(3);
    let most = if compact { 1 } else { 6 };
    if rows == 0 {
        0
    } else {
        u16::try_from(rows).unwrap_or(u16::MAX).min(most) + 2
    }
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let frames = if area.width >= 110 { 4 } else { 2 };
    let mut rows: Vec<Row> = snap
        .dstate
        .iter()
        .map(|d| {
            let blocked = match d.blocked_ns {
                Some(ns) => units::latency(ns),
                None => format!(">{}", units::elapsed(snap.elapsed_ns)),
            };
            let history = if d.episodes > 0 {
                format!("{}x {}", d.episodes, units::latency(d.total_ns))
            } else {
                "-".into()
            };
            Row::new([
                format!("{}/{}", d.tgid, d.tid),
                d.comm.clone(),
                blocked,
                history,
                wait_site(&d.stack, d.no_stack, frames),
            ])
            .style(if d.blocked_ns.unwrap_or(u64::MAX) >= 1_000_000_000 {
                theme.warn
            } else {
                theme.title
            })
        })
        .collect();
    let room = usize::from(area.height.saturating_sub(2)).saturating_sub(rows.len());
    rows.extend(snap.dstate_recent.iter().take(room.min(3)).map(|e| {
        Row::new([
            format!("{}/{}", e.tgid, e.tid),
            e.comm.clone(),
            format!("was {}", units::latency(e.duration_ns)),
            format!(
                "{}s ago",
                snap.now_ns.saturating_sub(e.ended_ns) / 1_000_000_000
            ),
            wait_site(&e.stack, e.no_stack, frames),
        ])
        .style(theme.dim)
    }));
    let title = format!(
        " D state: {} blocked now (uninterruptible sleep) ",
        snap.dstate.len()
    );
    let table = Table::new(
        rows,
        [
            Constraint::Length(13),
            Constraint::Length(15),
            Constraint::Length(9),
            Constraint::Length(11),
            Constraint::Min(10),
        ],
    )
    .header(Row::new(["PID/TID", "COMM", "BLOCKED", "EPISODES", "WHERE"]).style(theme.header))
    .block(
        Block::new()
            .borders(Borders::TOP)
            .title(Line::styled(title, theme.title)),
    );
    frame.render_widget(table, area);
}
