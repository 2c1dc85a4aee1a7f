//! The status bar (top line) and the key line (bottom line).
//!
//! The status line is fitted to the terminal rather than cut off: when everything does not fit,
//! the least telling parts go first (the kernel release, the interval, the tool's own cost,
//! ...), so the host header (load, run queue, blocked tasks, iowait, I/O pressure, dirty memory)
//! stays readable at 80 columns. It comes in a long form when the whole line fits with it.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use super::{Link, Rec, Theme, UiState, text};
use crate::{
    clock,
    model::{HostFigures, Snapshot},
    units,
};

/// How long a part of the status line stays when the line is too long: parts of the lowest
/// rank go first (the rightmost of equals first). Ranks are listed in the order they go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Keep {
    Kernel,
    Interval,
    BpfCost,
    OwnCpu,
    Uptime,
    Hostname,
    EventRate,
    /// Dropped records, when there are none (a non-zero count is a warning: it stays).
    NothingDropped,
    HostFigures,
    Warning,
    /// The name and the modes (paused, totals).
    Always,
}

struct Part {
    span: Span<'static>,
    keep: Keep,
}

fn part(text: String, keep: Keep) -> Part {
    Part {
        span: Span::raw(text),
        keep,
    }
}

/// The status line in `width` columns.
pub fn line(snap: &Snapshot, ui: &UiState, theme: &Theme, width: usize) -> Line<'static> {
    let mut parts = tool_parts(snap, ui, theme);
    let host_at = parts.len();
    if let Some(long) = host_long(&snap.host) {
        parts.push(part(long, Keep::HostFigures));
        if line_width(&parts) <= width {
            return Line::from(spans(parts));
        }
        parts.remove(host_at);
    }
    if let Some(short) = host_short(&snap.host) {
        parts.push(part(short, Keep::HostFigures));
    }
    fit(&mut parts, width);
    // What always stays (the name, the modes) may still not fit a very narrow line.
    text::fit(Line::from(spans(parts)), width)
}

pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, ui: &UiState, theme: &Theme) {
    frame.render_widget(line(snap, ui, theme, usize::from(area.width)), area);
}

/// Everything but the host figures: the name, modes, this host, the tool's events and cost.
fn tool_parts(snap: &Snapshot, ui: &UiState, theme: &Theme) -> Vec<Part> {
    let e = &snap.events;
    let mut parts = vec![Part {
        span: Span::styled("iotop-bpf", theme.title),
        keep: Keep::Always,
    }];
    // The modes go right after the name, where they are seen first.
    if ui.paused {
        parts.push(Part {
            span: Span::styled(format!(" {}", paused_label(snap, ui)), theme.warn),
            keep: Keep::Always,
        });
    }
    if ui.cumulative {
        parts.push(Part {
            span: Span::styled(" [TOTALS]", theme.key),
            keep: Keep::Always,
        });
    }
    // Aggregation mode: plain requests are summed in the kernel, not streamed one by one
    // (their latencies and sizes are then known to a slot, not exactly).
    if e.aggregating {
        parts.push(Part {
            span: Span::styled(" [AGG]", theme.key),
            keep: Keep::Always,
        });
    }
    // A second viewer (`attach`): whether it is receiving, and what it lost.
    let link = match &ui.link {
        None => None,
        Some(Link::Attached { lost: 0 }) => Some((" [attached]".to_string(), theme.key)),
        Some(Link::Attached { lost }) => Some((format!(" [attached, {lost} lost]"), theme.warn)),
        Some(Link::Lost { .. }) => Some((" [DISCONNECTED]".to_string(), theme.warn)),
    };
    if let Some((text, style)) = link {
        parts.push(Part {
            span: Span::styled(text, style),
            keep: Keep::Always,
        });
    }
    // Recording: whether it still is, and what it left out.
    let rec = match &ui.recording {
        None => None,
        Some(Rec::On { dropped: 0 }) => Some((" [REC]".to_string(), theme.key)),
        Some(Rec::On { dropped }) => Some((format!(" [REC, {dropped} lost]"), theme.warn)),
        Some(Rec::Stopped(_)) => Some((" [REC STOPPED]".to_string(), theme.warn)),
    };
    if let Some((text, style)) = rec {
        parts.push(Part {
            span: Span::styled(text, style),
            keep: Keep::Always,
        });
    }
    parts.push(part(format!(" {}", ui.host), Keep::Hostname));
    parts.push(part(format!(" {}", ui.kernel), Keep::Kernel));
    parts.push(part(" ".to_string(), Keep::Always));
    parts.push(part(
        format!("up {} ", units::elapsed(snap.elapsed_ns)),
        Keep::Uptime,
    ));
    parts.push(part(
        format!("{:.0} ev/s ", snap.rate(e.received)),
        Keep::EventRate,
    ));
    let dropped = if ui.cumulative {
        e.dropped_total
    } else {
        e.dropped
    };
    let dropped_text = format!("dropped {dropped} ");
    parts.push(if dropped > 0 {
        Part {
            span: Span::styled(dropped_text, theme.warn),
            keep: Keep::Warning,
        }
    } else {
        part(dropped_text, Keep::NothingDropped)
    });
    // What the tool costs: BPF time per I/O ("~" when sampled in an earlier interval) and
    // its own CPU.
    let approx = if e.bpf_sampled { "~" } else { "" };
    match (e.bpf_cpu_pct, e.bpf_ns_per_io) {
        (Some(pct), Some(ns)) => parts.push(part(
            format!("bpf {approx}{pct:.1}% {ns}ns/io "),
            Keep::BpfCost,
        )),
        (Some(pct), None) => parts.push(part(format!("bpf {approx}{pct:.1}% "), Keep::BpfCost)),
        _ => {}
    }
    if let Some(pct) = e.cpu_pct {
        parts.push(part(format!("cpu {pct:.1}% "), Keep::OwnCpu));
    }
    parts.push(part(
        format!("every {:.1}s ", snap.interval_secs()),
        Keep::Interval,
    ));
    if !snap.dstate.is_empty() {
        parts.push(Part {
            span: Span::styled(format!("D:{} ", snap.dstate.len()), theme.warn),
            keep: Keep::Warning,
        });
    }
    parts
}

fn line_width(parts: &[Part]) -> usize {
    parts.iter().map(|p| p.span.width()).sum()
}

/// Drops parts, least telling first, until the line fits in `width` (or only what always
/// stays is left; the terminal then cuts the end).
fn fit(parts: &mut Vec<Part>, width: usize) {
    while line_width(parts) > width {
        let weakest = parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.keep != Keep::Always)
            .min_by(|(i, a), (j, b)| a.keep.cmp(&b.keep).then(j.cmp(i)))
            .map(|(i, _)| i);
        match weakest {
            Some(i) => {
                parts.remove(i);
            }
            None => break,
        }
    }
}

fn spans(parts: Vec<Part>) -> Vec<Span<'static>> {
    parts.into_iter().map(|p| p.span).collect()
}

/// `12`, `2.1`, `4`, `0.4`: one decimal below 10 (none when it is 0), none above.
fn short(x: f64) -> String {
    let text = if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    };
    match text.strip_suffix(".0") {
        Some(whole) => whole.to_string(),
        None => text,
    }
}

/// `ld 2.1 r3 b1 wa 4% psi 12/3 dirty 40M`: only what is known; `None` when nothing is
/// (a replay of a recording made before the host was sampled).
fn host_short(h: &HostFigures) -> Option<String> {
    let mut out = Vec::new();
    if let Some(load) = h.load1 {
        out.push(format!("ld {}", short(load)));
    }
    if let Some(n) = h.procs_running {
        out.push(format!("r{n}"));
    }
    if let Some(n) = h.procs_blocked {
        out.push(format!("b{n}"));
    }
    if let Some(pct) = h.iowait_pct {
        out.push(format!("wa {}%", short(pct)));
    }
    match (h.psi_io_some_avg10, h.psi_io_full_avg10) {
        (Some(some), Some(full)) => out.push(format!("psi {}/{}", short(some), short(full))),
        (Some(some), None) => out.push(format!("psi {}", short(some))),
        _ => {}
    }
    if let Some(bytes) = h.dirty_bytes {
        out.push(format!("dirty {}", byte_count(bytes)));
    }
    (!out.is_empty()).then(|| out.join(" "))
}

/// `load 2.10 1.50 0.80 run 3 blk 1 iowait 4.0% psi 12.34/3.02 dirty 40M wb 2.0M`.
fn host_long(h: &HostFigures) -> Option<String> {
    let mut out = Vec::new();
    if let (Some(one), Some(five), Some(fifteen)) = (h.load1, h.load5, h.load15) {
        out.push(format!("load {one:.2} {five:.2} {fifteen:.2}"));
    }
    if let Some(n) = h.procs_running {
        out.push(format!("run {n}"));
    }
    if let Some(n) = h.procs_blocked {
        out.push(format!("blk {n}"));
    }
    if let Some(pct) = h.iowait_pct {
        out.push(format!("iowait {pct:.1}%"));
    }
    match (h.psi_io_some_avg10, h.psi_io_full_avg10) {
        (Some(some), Some(full)) => out.push(format!("psi {some:.2}/{full:.2}")),
        (Some(some), None) => out.push(format!("psi {some:.2}")),
        _ => {}
    }
    if let Some(bytes) = h.dirty_bytes {
        out.push(format!("dirty {}", byte_count(bytes)));
    }
    if let Some(bytes) = h.writeback_bytes {
        out.push(format!("wb {}", byte_count(bytes)));
    }
    (!out.is_empty()).then(|| out.join(" "))
}

fn byte_count(bytes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "display")]
    units::bytes(bytes as f64)
}

/// `[PAUSED 12:03:04Z]`, and while stepping back `[PAUSED 12:03:04Z -42s]`: the wall-clock
/// time (UTC) of the interval on screen, and how far behind the newest it is.
fn paused_label(snap: &Snapshot, ui: &UiState) -> String {
    let clock = clock::time_of_day(ui.started_unix_ms + snap.elapsed_ns / 1_000_000);
    if ui.back == 0 {
        format!("[PAUSED {clock}Z]")
    } else {
        let behind = ui.back * snap.interval_ns / 1_000_000_000;
        format!("[PAUSED {clock}Z -{behind}s]")
    }
}

/// The hints of the key line, most useful first: those that do not fit are left out whole.
const HINTS: [(&str, &str); 11] = [
    ("q", "quit"),
    ("?", "help"),
    ("Tab", "pane"),
    ("spc", "pause"),
    ("/", "filter"),
    ("s/<>", "sort"),
    ("x", "workers"),
    ("c", "totals"),
    ("H", "heat map"),
    ("[ ]", "past"),
    ("w", "save"),
];

/// The bottom line in `width` columns: the filter being typed, a message, the demo's
/// caption, a degraded note, or the key hints (as many whole ones as fit).
pub fn key_line(ui: &UiState, theme: &Theme, width: usize) -> Line<'static> {
    let line = if ui.editing_filter {
        Line::from(vec![
            Span::styled("Filter (comm or pid): ", theme.key),
            Span::raw(format!("{}_", ui.filter)),
            Span::styled("  Enter apply  Esc clear", theme.dim),
        ])
    } else if let Some(message) = &ui.message {
        Line::from(Span::styled(message.clone(), theme.key))
    } else if let Some(Link::Lost { why }) = &ui.link {
        Line::from(vec![
            Span::styled("disconnected: ", theme.warn),
            Span::raw(format!("{why}; trying again (q quits)")),
        ])
    } else if let Some(caption) = &ui.caption {
        Line::from(Span::styled(caption.clone(), theme.warn))
    } else if let Some(Rec::Stopped(why)) = &ui.recording {
        Line::from(vec![
            Span::styled("recording ", theme.warn),
            Span::raw(format!("{why}; the view goes on")),
        ])
    } else if let Some(note) = ui.notes.first() {
        Line::from(vec![
            Span::styled("degraded: ", theme.warn),
            Span::raw(note.clone()),
        ])
    } else {
        let mut spans = Vec::new();
        let mut used = 0;
        for (key, what) in HINTS {
            let hint = format!(" {what}  ");
            let w = text::width(key) + text::width(&hint);
            if used + w > width + 2 {
                break;
            }
            used += w;
            spans.push(Span::styled(key, theme.key));
            spans.push(Span::raw(hint));
        }
        // The last hint's trailing spaces may hang over the edge: they are only spacing.
        if let Some(last) = spans.last_mut() {
            last.content = last.content.trim_end().to_string().into();
        }
        Line::from(spans)
    };
    text::fit(line, width)
}

pub fn render_keys(frame: &mut Frame, area: Rect, ui: &UiState, theme: &Theme) {
    frame.render_widget(key_line(ui, theme, usize::from(area.width)), area);
}
