//! The status bar (top line) and the key line (bottom line).

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use super::{Theme, UiState};
use crate::{model::Snapshot, units};

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &UiState, theme: &Theme) {
    let e = &snap.events;
    let mut spans = vec![
        Span::styled("iotop-bpf", theme.title),
        Span::raw(format!(" {} {} ", ui.host, ui.kernel)),
        Span::raw(format!("up {} ", units::elapsed(snap.elapsed_ns))),
        Span::raw(format!("{:.0} ev/s ", snap.rate(e.received))),
    ];
    let dropped = if ui.cumulative {
        e.dropped_total
    } else {
        e.dropped
    };
    let dropped_text = format!("dropped {dropped} ");
    spans.push(if dropped > 0 {
        Span::styled(dropped_text, theme.warn)
    } else {
        Span::raw(dropped_text)
    });
    // What the tool costs: BPF time per I/O ("~" when sampled in an earlier interval) and
    // its own CPU.
    let approx = if e.bpf_sampled { "~" } else { "" };
    match (e.bpf_cpu_pct, e.bpf_ns_per_io) {
        (Some(pct), Some(ns)) => spans.push(Span::raw(format!("bpf {approx}{pct:.1}% {ns}ns/io "))),
        (Some(pct), None) => spans.push(Span::raw(format!("bpf {approx}{pct:.1}% "))),
        _ => {}
    }
    if let Some(pct) = e.cpu_pct {
        spans.push(Span::raw(format!("cpu {pct:.1}% ")));
    }
    spans.push(Span::raw(format!("every {:.1}s ", snap.interval_secs())));
    if !snap.dstate.is_empty() {
        spans.push(Span::styled(
            format!("D:{} ", snap.dstate.len()),
            theme.warn,
        ));
    }
    // The modes go right after the name: on a narrow terminal the end of the line is cut off.
    if ui.cumulative {
        spans.insert(1, Span::styled(" [TOTALS]", theme.key));
    }
    if ui.paused {
        spans.insert(
            1,
            Span::styled(format!(" {}", paused_label(snap, ui)), theme.warn),
        );
    }
    frame.render_widget(Line::from(spans), area);
}

/// `[PAUSED 12:03:04Z]`, and while stepping back `[PAUSED 12:03:04Z -42s]`: the wall-clock
/// time (UTC) of the interval on screen, and how far behind the newest it is.
fn paused_label(snap: &Snapshot, ui: &UiState) -> String {
    let clock = units::time_of_day(ui.started_unix_ms + snap.elapsed_ns / 1_000_000);
    if ui.back == 0 {
        format!("[PAUSED {clock}Z]")
    } else {
        let behind = ui.back * snap.interval_ns / 1_000_000_000;
        format!("[PAUSED {clock}Z -{behind}s]")
    }
}

pub fn render_keys(frame: &mut Frame, area: Rect, ui: &UiState, theme: &Theme) {
    let line = if ui.editing_filter {
        Line::from(vec![
            Span::styled("Filter (comm or pid): ", theme.key),
            Span::raw(format!("{}_", ui.filter)),
            Span::styled("  Enter apply  Esc clear", theme.dim),
        ])
    } else if let Some(message) = &ui.message {
        Line::from(Span::styled(message.clone(), theme.key))
    } else if let Some(caption) = &ui.caption {
        Line::from(Span::styled(caption.clone(), theme.warn))
    } else if let Some(note) = ui.notes.first() {
        Line::from(vec![
            Span::styled("degraded: ", theme.warn),
            Span::raw(note.clone()),
        ])
    } else {
        let mut spans = Vec::new();
        for (key, what) in [
            ("q", "quit"),
            ("spc", "pause"),
            ("Tab", "pane"),
            ("s/<>", "sort"),
            ("/", "filter"),
            ("c", "totals"),
            ("?", "help"),
            ("H", "heat map"),
            ("[ ]", "past"),
            ("w", "save"),
        ] {
            spans.push(Span::styled(key, theme.key));
            spans.push(Span::raw(format!(" {what}  ")));
        }
        if !ui.filter.is_empty() {
            spans.push(Span::styled(format!("filter: {}", ui.filter), theme.warn));
        }
        Line::from(spans)
    };
    frame.render_widget(line, area);
}
