//! The help overlay (`?`).

use ratatui::{
    Frame,
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph},
};

use super::Theme;

pub const KEYS: &[(&str, &str)] = &[
    ("q, Ctrl-C", "quit"),
    ("space, p", "pause the display (counting goes on)"),
    ("Tab", "switch pane: processes / findings / disks"),
    ("↑ ↓ j k", "select a row; Home End: first / last"),
    ("Enter", "open the process (syncs, files) or the finding"),
    ("s < >, r", "next / left / right sort column; r reverses"),
    ("H", "heat map of the selection's latency over time"),
    ("l", "heat map of total / queue / device / sync time"),
    ("[ ] ← →", "step through past intervals (pauses)"),
    ("w", "save the screen as .txt and .md (findings)"),
    ("/", "filter: command name or pid; Enter applies"),
    ("c", "totals since start instead of this interval"),
    ("C", "one row per cgroup (container, pod, unit)"),
    ("x", "kernel workers one row each / one per kind"),
    ("Esc", "clear selection and filter"),
    ("?", "this help"),
];

pub fn render(frame: &mut Frame, area: Rect, theme: &Theme) {
    let width = 66.min(area.width);
    #[expect(clippy::cast_possible_truncation, reason = "a short constant list")]
    let height = (KEYS.len() as u16 + 8).min(area.height);
    let [popup] = Layout::horizontal([Constraint::Length(width)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(popup);
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|(key, what)| {
            Line::from(vec![
                Span::styled(format!("{key:>12}  "), theme.key),
                Span::raw(*what),
            ])
        })
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "queue = created→issued (scheduler, plug, throttling)",
        theme.dim,
    ));
    lines.push(Line::styled(
        "device = issued→completed (the driver and the disk)",
        theme.dim,
    ));
    lines.push(Line::styled(
        "SYNC: fsync fdatasync sync_file_range syncfs sync msync",
        theme.dim,
    ));
    lines.push(Line::styled(
        "  O_DSYNC writes, io_uring syncs  LMB/s asked  AMP device/asked",
        theme.dim,
    ));
    lines.push(Line::styled(
        "top line: ld load  r running  b I/O-blocked  wa %iowait  psi io",
        theme.dim,
    ));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" iotop-bpf keys ")),
        popup,
    );
}
