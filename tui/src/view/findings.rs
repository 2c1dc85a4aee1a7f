//! The findings pane: named pathological patterns, worst and newest first. Severity shows as
//! a symbol and a word as well as a colour; a finding whose pattern stopped is dimmed and says
//! since when.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
};

use super::Theme;
use crate::model::{
    Snapshot,
    findings::{Finding, Severity},
};

/// The worst active finding about a process, for marking its row.
pub fn severity_of(snap: &Snapshot, tgid: u32) -> Option<Severity> {
    snap.findings
        .iter()
        .filter(|f| f.active && f.tgid == Some(tgid))
        .map(|f| f.severity)
        .max()
}

pub fn severity_word(severity: Severity) -> &'static str {
    match severity {
        Severity::Critical => "CRIT",
        Severity::Warning => "WARN",
        Severity::Info => "INFO",
    }
}

/// Rows the pane wants (0 when there is nothing to show); fewer on a short terminal.
pub fn wanted_rows(snap: &Snapshot, compact: bool) -> u16 {
    if snap.findings.is_empty() {
        0
    } else {
        let most = if compact { 2 } else { 4 };
        u16::try_from(snap.findings.len())
            .unwrap_or(u16::MAX)
            .min(most)
            + 1
    }
}

pub fn line<'a>(finding: &'a Finding, now_ns: u64, theme: &Theme) -> Line<'a> {
    let (symbol, style) = theme.severity(finding.severity);
    let mut spans = vec![
        Span::styled(
            format!("{symbol} {} ", severity_word(finding.severity)),
            style,
        ),
        Span::styled(format!("{} ", finding.kind.name()), theme.key),
        Span::raw(finding.summary.as_str()),
    ];
    if !finding.active {
        let ago = now_ns.saturating_sub(finding.last_seen_ns) / 1_000_000_000;
        spans.push(Span::raw(format!(" (ended {ago}s ago)")));
        for span in &mut spans {
            span.style = theme.dim;
        }
    }
    Line::from(spans)
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, theme: &Theme) {
    let active = snap.findings.iter().filter(|f| f.active).count();
    let title = format!(" Findings: {active} active (Enter on a process: why and how to fix) ");
    let block = Block::new()
        .borders(Borders::TOP)
        .title(Line::styled(title, theme.title));
    let lines: Vec<Line> = snap
        .findings
        .iter()
        .map(|f| line(f, snap.now_ns, theme))
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}
