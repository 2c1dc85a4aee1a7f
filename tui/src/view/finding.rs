//! A finding's full text (Enter in the findings pane): what, who (every pid it covers), the
//! file, why, the fix, when it was seen and the evidence, each wrapped under its label. It
//! reads the finding from the snapshot on screen, never from the process's row, so it stays
//! readable after the process exited, for as long as the finding is listed.

use ratatui::{
    Frame,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph},
};

use super::{
    Theme, UiState,
    findings::{self, Group},
    text,
};
use crate::{
    clock,
    model::{
        Snapshot,
        findings::{Evidence, FADE_NS},
    },
};

/// The wall-clock time (UTC) of a moment of the run, given as `CLOCK_MONOTONIC` ns.
fn clock(snap: &Snapshot, ui: &UiState, at_ns: u64) -> String {
    let before_end = snap.now_ns.saturating_sub(at_ns);
    let elapsed = snap.elapsed_ns.saturating_sub(before_end);
    format!(
        "{}Z",
        clock::time_of_day(ui.started_unix_ms + elapsed / 1_000_000)
    )
}

fn evidence(value: &Evidence) -> String {
    match value {
        Evidence::Count(n) => n.to_string(),
        Evidence::Ratio(x) => {
            let text = format!("{x:.1}");
            text.strip_suffix(".0").map_or(text.clone(), str::to_string)
        }
        Evidence::Text(t) => t.clone(),
    }
}

/// The pids, each marked `(exited)` where this interval saw it exit. A pid without a row is
/// only quiet, not known gone, so it is not marked.
fn pids(group: &Group, snap: &Snapshot) -> String {
    let pids = group.pids();
    let list: Vec<String> = pids
        .iter()
        .map(|pid| {
            if snap.procs.iter().any(|p| p.tgid == *pid && p.exited) {
                format!("{pid} (exited)")
            } else {
                pid.to_string()
            }
        })
        .collect();
    let word = if pids.len() == 1 { "pid" } else { "pids" };
    format!("{} {word} {}", group.key.who, list.join(", "))
}

/// The text in `width` columns, label by label.
pub fn lines(
    group: &Group,
    snap: &Snapshot,
    ui: &UiState,
    width: usize,
    theme: &Theme,
) -> Vec<Line<'static>> {
    let lead = group.lead();
    let mut items: Vec<(&str, String, Style)> =
        vec![("what", findings::numbers(lead), Style::new())];
    let who = if group.pids().is_empty() {
        group.key.who.clone()
    } else {
        pids(group, snap)
    };
    items.push(("who", who, Style::new()));
    if !lead.files.is_empty() {
        items.push(("file", lead.files.join(", "), theme.file));
    }
    if let Some(dev) = lead.dev {
        let name = snap
            .disks
            .iter()
            .find(|d| d.dev == dev)
            .map_or_else(|| dev.to_string(), |d| d.name.clone());
        items.push(("disk", name, Style::new()));
    }
    items.push(("why", lead.why.clone(), Style::new()));
    items.push(("fix", lead.fix.clone(), theme.key));
    let first = group
        .members
        .iter()
        .map(|f| f.first_seen_ns)
        .min()
        .unwrap_or(lead.first_seen_ns);
    let last = group.last_seen_ns();
    let seen = if group.active() {
        format!(
            "active: first seen {}, last {}",
            clock(snap, ui, first),
            clock(snap, ui, last)
        )
    } else {
        format!(
            "ended {} ago: first seen {}, last {}; listed for {} s after",
            findings::ago(snap.now_ns, last),
            clock(snap, ui, first),
            clock(snap, ui, last),
            FADE_NS / 1_000_000_000
        )
    };
    items.push(("seen", seen, Style::new()));
    if !lead.evidence.is_empty() {
        let list: Vec<String> = lead
            .evidence
            .iter()
            .map(|(k, v)| format!("{k}={}", evidence(v)))
            .collect();
        items.push(("evidence", list.join(" "), theme.dim));
    }
    // The other pids' own sentences: their numbers may differ from the lead's.
    for other in group.members.iter().skip(1) {
        items.push(("also", other.summary.clone(), theme.dim));
    }
    let mut out = Vec::new();
    for (label, body, style) in items {
        let label = format!("{label:<9}");
        for (lead, line) in text::hanging(&label, &body, width) {
            out.push(Line::from(vec![
                Span::styled(lead, theme.key),
                Span::styled(line, style),
            ]));
        }
    }
    out
}

/// The furthest the text can scroll on a `(width, height)` screen: the overlay covers all
/// but the status and key lines, inside a border.
pub fn max_scroll(snap: &Snapshot, ui: &UiState, (width, height): (u16, u16)) -> u16 {
    let groups = findings::groups(snap);
    let Some(group) = findings::selected(&groups, ui).map(|i| &groups[i]) else {
        return 0;
    };
    let total = lines(
        group,
        snap,
        ui,
        usize::from(width.saturating_sub(2)),
        &Theme::default(),
    )
    .len();
    let rows = usize::from(height.saturating_sub(4));
    u16::try_from(total.saturating_sub(rows)).unwrap_or(u16::MAX)
}

/// The overlay over `area`; nothing when the selected finding is no longer listed among the
/// findings pane's `groups`.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    snap: &Snapshot,
    groups: &[Group],
    ui: &UiState,
    theme: &Theme,
) {
    let Some(group) = findings::selected(groups, ui).map(|i| &groups[i]) else {
        return;
    };
    frame.render_widget(Clear, area);
    let (symbol, style) = theme.severity(group.severity());
    let state = if group.active() { "active" } else { "ended" };
    let head = format!(
        " {symbol} {} {} {} — {state} ",
        group.severity().short(),
        group.key.kind.name(),
        findings::who(group)
    );
    let inner_width = usize::from(area.width.saturating_sub(2));
    let lines = lines(group, snap, ui, inner_width, theme);
    let rows = usize::from(area.height.saturating_sub(2));
    let scroll = usize::from(ui.scroll).min(lines.len().saturating_sub(rows));
    let more = lines.len().saturating_sub(scroll + rows);
    // Rows below the frame are counted, so a cut text never reads as the whole.
    let hint = if more > 0 || scroll > 0 {
        format!(" j/k: {more} more · Esc back ")
    } else {
        " Esc back ".to_string()
    };
    let head = text::elide(&head, inner_width.saturating_sub(text::width(&hint) + 1));
    let block = Block::bordered()
        .title(Line::styled(head, style))
        .title(Line::styled(hint, theme.dim).right_aligned());
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let shown: Vec<Line> = lines.into_iter().skip(scroll).take(rows).collect();
    frame.render_widget(Paragraph::new(shown), inner);
}
