//! The D-state pane: threads stuck in uninterruptible sleep now (live), where they wait, and
//! the longest recent episodes.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::{Theme, table, text};
use crate::{
    model::{Snapshot, wait_site},
    units,
};

/// Rows the pane wants: 0 when no thread is or recently was in a long D episode; on a short
/// terminal two, the title and one thread in a sentence (no header), so the processes keep
/// room.
pub fn wanted_rows(snap: &Snapshot, compact: bool) -> u16 {
    let rows = snap.dstate.len() + snap.dstate_recent.len().min(3);
    if rows == 0 {
        0
    } else if compact {
        2
    } else {
        u16::try_from(rows).unwrap_or(u16::MAX).min(6) + 2
    }
}

/// The thread that matters most, in one line: the longest blocked now, else the latest
/// episode. `4711/4711 make blocked 7.00s in kernel_clone <- __x64_sys_vfork`.
fn sentence(snap: &Snapshot, theme: &Theme, width: usize) -> Option<Line<'static>> {
    if let Some(d) = snap.dstate.first() {
        let blocked = match d.blocked_ns {
            Some(ns) => units::latency(ns),
            None => format!("over {}", units::elapsed(snap.elapsed_ns)),
        };
        let style = if d.blocked_ns.unwrap_or(u64::MAX) >= 1_000_000_000 {
            theme.warn
        } else {
            theme.title
        };
        let more = match snap.dstate.len() {
            1 => String::new(),
            n => format!(" (+{} more)", n - 1),
        };
        let text = format!(
            " {}/{} {} blocked {blocked} in {}{more}",
            d.tgid,
            d.tid,
            d.comm,
            wait_site(&d.stack, d.no_stack, 2)
        );
        return Some(text::fit(Line::styled(text, style), width));
    }
    let e = snap.dstate_recent.first()?;
    let text = format!(
        " {}/{} {} was blocked {} {}s ago in {}",
        e.tgid,
        e.tid,
        e.comm,
        units::latency(e.duration_ns),
        snap.now_ns.saturating_sub(e.ended_ns) / 1_000_000_000,
        wait_site(&e.stack, e.no_stack, 2)
    );
    Some(text::fit(Line::styled(text, theme.dim), width))
}

/// The fixed columns (PID/TID, COMM, BLOCKED, EPISODES); WHERE gets the rest of the line.
const FIXED: [u16; 4] = [13, 15, 9, 11];

/// The pane's lines in `area`: the title, the header, the threads in D now, then as many
/// recent episodes as fit (three at most), dimmed. WHERE is cut with `…` at the edge. In two
/// rows, the title and one thread in a sentence.
pub fn lines(snap: &Snapshot, theme: &Theme, area: Rect) -> Vec<Line<'static>> {
    let width = usize::from(area.width);
    let frames = if area.width >= 110 { 4 } else { 2 };
    let where_width = u16::try_from(width.saturating_sub(table::total_width(&FIXED) + 1))
        .unwrap_or(u16::MAX)
        .max(10);
    let widths = [FIXED[0], FIXED[1], FIXED[2], FIXED[3], where_width];
    let title = format!(
        " D state: {} blocked now (uninterruptible sleep) ",
        snap.dstate.len()
    );
    let mut out = vec![table::title_line(
        vec![Span::styled(title, theme.title)],
        width,
    )];
    if area.height < 2 {
        return out;
    }
    if area.height == 2 {
        out.extend(sentence(snap, theme, width));
        return out;
    }
    let names: Vec<String> = ["PID/TID", "COMM", "BLOCKED", "EPISODES", "WHERE"]
        .iter()
        .map(ToString::to_string)
        .collect();
    out.push(table::header(&names, &widths, width, theme.header));
    let room = usize::from(area.height - 2);
    for d in snap.dstate.iter().take(room) {
        let blocked = match d.blocked_ns {
            Some(ns) => units::latency(ns),
            None => format!(">{}", units::elapsed(snap.elapsed_ns)),
        };
        let history = if d.episodes > 0 {
            format!("{}x {}", d.episodes, units::latency(d.total_ns))
        } else {
            "-".into()
        };
        let style = if d.blocked_ns.unwrap_or(u64::MAX) >= 1_000_000_000 {
            theme.warn
        } else {
            theme.title
        };
        let cells = [
            format!("{}/{}", d.tgid, d.tid),
            d.comm.clone(),
            blocked,
            history,
            wait_site(&d.stack, d.no_stack, frames),
        ];
        out.push(
            table::row(
                " ",
                cells.into_iter().map(Line::raw).collect(),
                &widths,
                width,
            )
            .style(style),
        );
    }
    let left = room.saturating_sub(snap.dstate.len());
    for e in snap.dstate_recent.iter().take(left.min(3)) {
        let cells = [
            format!("{}/{}", e.tgid, e.tid),
            e.comm.clone(),
            format!("was {}", units::latency(e.duration_ns)),
            format!(
                "{}s ago",
                snap.now_ns.saturating_sub(e.ended_ns) / 1_000_000_000
            ),
            wait_site(&e.stack, e.no_stack, frames),
        ];
        out.push(
            table::row(
                " ",
                cells.into_iter().map(Line::raw).collect(),
                &widths,
                width,
            )
            .style(theme.dim),
        );
    }
    out
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    frame.render_widget(Paragraph::new(lines(snap, theme, area)), area);
}
