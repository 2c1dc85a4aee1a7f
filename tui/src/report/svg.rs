//! Inline SVG charts for the HTML report: latency heat maps, line charts and episode bars,
//! all on one time axis so they line up on the page. Plain strings, no scripts: the page must
//! render anywhere, offline.

use std::fmt::Write as _;

use iotop_bpf_common::hist::SLOTS;

use crate::{clock, model::Log2Hist, units};

pub const WIDTH: f64 = 1200.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 16.0;
const PLOT: f64 = WIDTH - LEFT - RIGHT;

/// Heat map shades, light to dark (Gregg's maps deepen with the count); the legend prints
/// the counts each starts at, so the map also reads in grey.
pub const HEAT_COLOURS: [&str; 8] = [
    "#fde9b8", "#fcd28b", "#fbb567", "#f89448", "#ee6f33", "#d84a2a", "#b22d22", "#7a1719",
];

/// The CSS the charts need (in the page's `<style>`, or inside a standalone SVG).
pub fn css() -> String {
    let mut css = String::from(
        "svg{font:11px system-ui,sans-serif}.ax{stroke:#999;stroke-width:1}\
         .grid{stroke:#e4e4e4;stroke-width:1}.lbl{fill:#444}.ttl{font-weight:600;font-size:13px}\
         .s0,.s1,.s2,.s3{fill:none;stroke-width:1.5}.s0{stroke:#1f77b4}.s1{stroke:#d62728}\
         .s2{stroke:#2ca02c}.s3{stroke:#9467bd}.sw0{fill:#1f77b4}.sw1{fill:#d62728}\
         .sw2{fill:#2ca02c}.sw3{fill:#9467bd}.crit{fill:#c62828}.warn{fill:#ef8f00}\
         .info{fill:#3b78c2}.dst{fill:#6a4c93}.open{fill:#b07ad8}",
    );
    for (i, colour) in HEAT_COLOURS.iter().enumerate() {
        let _ = write!(css, ".h{}{{fill:{colour}}}", i + 1);
    }
    css
}

/// Text for HTML and SVG: names shown as on a terminal (`crate::names::show`: a control
/// character is `\x1b`, never raw), then escaped as HTML.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in crate::names::show(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The shared time axis: elapsed ns of the recording to x pixels, and wall-clock labels.
#[derive(Clone, Copy, Debug)]
pub struct TimeAxis {
    pub start_ns: u64,
    pub end_ns: u64,
    pub started_unix_ms: u64,
}

impl TimeAxis {
    pub fn x(&self, ns: u64) -> f64 {
        let span = self.end_ns.saturating_sub(self.start_ns).max(1);
        #[expect(clippy::cast_precision_loss, reason = "pixels")]
        let frac = ns.saturating_sub(self.start_ns).min(span) as f64 / span as f64;
        LEFT + frac * PLOT
    }

    /// `HH:MM:SS` (UTC) of an elapsed time.
    pub fn clock(&self, ns: u64) -> String {
        clock::time_of_day(self.started_unix_ms + ns / 1_000_000)
    }

    /// Tick positions: a round step giving 6 to 12 ticks.
    fn ticks(&self) -> Vec<u64> {
        const STEPS_S: [u64; 14] = [
            1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200,
        ];
        let span_s = self.end_ns.saturating_sub(self.start_ns) / 1_000_000_000;
        let step = STEPS_S
            .iter()
            .copied()
            .find(|s| span_s / s <= 10)
            .unwrap_or(21_600)
            * 1_000_000_000;
        (0..)
            .map(|i| i * step)
            .take_while(|t| *t <= self.end_ns.saturating_sub(self.start_ns))
            .map(|t| self.start_ns + t)
            .collect()
    }

    /// Grid lines and clock labels under a plot of `height` starting at `top`.
    fn draw(&self, out: &mut String, top: f64, height: f64) {
        let bottom = top + height;
        let _ = write!(
            out,
            r#"<line class="ax" x1="{LEFT}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}"/>"#,
            LEFT + PLOT
        );
        for t in self.ticks() {
            let x = self.x(t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}"/><text class="lbl" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                bottom + 13.0,
                self.clock(t)
            );
        }
    }
}

fn open_svg(out: &mut String, height: f64, title: &str, standalone: bool) {
    if standalone {
        let _ = write!(
            out,
            r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0}" width="{WIDTH}" height="{height:.0}"><style>{}</style><rect width="100%" height="100%" fill="#fff"/>"##,
            css()
        );
    } else {
        let _ = write!(
            out,
            r#"<svg class="chart" viewBox="0 0 {WIDTH} {height:.0}" width="{WIDTH}" height="{height:.0}" role="img">"#
        );
    }
    let _ = write!(
        out,
        r#"<title>{t}</title><text class="ttl" x="{LEFT}" y="15">{t}</text>"#,
        t = esc(title)
    );
}

/// Lower bound of a log2 slot, short (`<1us`, `64us`, `2ms`, `1s`).
fn slot_label(slot: usize) -> String {
    if slot == 0 {
        return "<1us".into();
    }
    let us = 1u64 << (slot - 1);
    match us {
        0..1_000 => format!("{us}us"),
        1_000..1_000_000 => format!("{}ms", us / 1_000),
        _ => format!("{}s", us / 1_000_000),
    }
}

/// Shade level 1..=8 of a count on a log scale relative to the busiest cell (0: empty). Any
/// non-zero count gets a shade: an outlier must stay visible.
fn heat_level(count: u64, max: u64) -> usize {
    if count == 0 {
        return 0;
    }
    if max <= 1 || count >= max {
        return 8;
    }
    #[expect(clippy::cast_precision_loss, reason = "a shade")]
    let frac = (count as f64).ln() / (max as f64).ln();
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a level from 1 to 8"
    )]
    let level = 1 + (frac * 7.0 + 1e-9).floor() as usize;
    level.clamp(1, 8)
}

/// A latency heat map: one column per bucket (`from_ns`, `to_ns`, its log2 histogram), log2
/// latency rows from the fastest bucket used (bottom) to the slowest (top).
pub fn heat_map(
    title: &str,
    axis: &TimeAxis,
    columns: &[(u64, u64, Log2Hist)],
    standalone: bool,
) -> String {
    let mut out = String::new();
    let used =
        |f: fn(&[u64]) -> Option<usize>| columns.iter().filter_map(move |(_, _, h)| f(&h.slots));
    let lo = used(|s| s.iter().position(|&n| n > 0)).min();
    let hi = used(|s| s.iter().rposition(|&n| n > 0)).max();
    let (Some(lo), Some(hi)) = (lo, hi) else {
        open_svg(&mut out, 40.0, title, standalone);
        let _ = write!(
            out,
            r#"<text class="lbl" x="{LEFT}" y="32">no requests in this recording</text></svg>"#
        );
        return out;
    };
    let hi = hi.min(SLOTS - 1);
    let rows = hi + 1 - lo;
    #[expect(clippy::cast_precision_loss, reason = "pixels")]
    let row_h = (260.0 / rows as f64).clamp(7.0, 18.0);
    let top = 24.0;
    #[expect(clippy::cast_precision_loss, reason = "pixels")]
    let plot_h = row_h * rows as f64;
    let height = top + plot_h + 44.0;
    open_svg(&mut out, height, title, standalone);
    let max = columns
        .iter()
        .flat_map(|(_, _, h)| h.slots[lo..=hi].iter().copied())
        .max()
        .unwrap_or(0);
    for slot in lo..=hi {
        #[expect(clippy::cast_precision_loss, reason = "pixels")]
        let y = top + (hi - slot) as f64 * row_h;
        if (hi - slot) % (rows / 14 + 1) == 0 {
            let _ = write!(
                out,
                r#"<text class="lbl" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 4.0,
                y + row_h / 2.0 + 4.0,
                slot_label(slot)
            );
        }
        // Runs of one shade become one rectangle: the page stays small.
        let mut run: Option<(usize, f64, f64)> = None;
        let flush = |run: Option<(usize, f64, f64)>, out: &mut String| {
            if let Some((level, x0, x1)) = run {
                let _ = write!(
                    out,
                    r#"<rect class="h{level}" x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{row_h:.1}"/>"#,
                    (x1 - x0).max(0.5)
                );
            }
        };
        for (from, to, hist) in columns {
            let level = heat_level(hist.slots[slot], max);
            let (x0, x1) = (axis.x(*from), axis.x(*to));
            run = match run {
                Some((l, a, b)) if l == level && (x0 - b).abs() < 0.01 => Some((l, a, x1)),
                other => {
                    flush(other.filter(|(l, _, _)| *l > 0), &mut out);
                    Some((level, x0, x1))
                }
            };
        }
        flush(run.filter(|(l, _, _)| *l > 0), &mut out);
    }
    axis.draw(&mut out, top, plot_h);
    // Legend: each shade and the count it starts at.
    let legend_y = top + plot_h + 30.0;
    let _ = write!(
        out,
        r#"<text class="lbl" x="{LEFT}" y="{:.1}">count per cell:</text>"#,
        legend_y + 9.0
    );
    let mut x = LEFT + 90.0;
    let mut last = 0;
    for level in 1..=8 {
        let Some(from) = (1..=max)
            .find(|c| heat_level(*c, max) >= level)
            .filter(|c| heat_level(*c, max) == level)
        else {
            continue;
        };
        if from == last {
            continue;
        }
        last = from;
        let _ = write!(
            out,
            r#"<rect class="h{level}" x="{x:.1}" y="{legend_y:.1}" width="14" height="11"/><text class="lbl" x="{:.1}" y="{:.1}">≥{}</text>"#,
            x + 17.0,
            legend_y + 9.0,
            units::count(from)
        );
        x += 70.0;
    }
    out.push_str("</svg>");
    out
}

/// What a line chart's y axis shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Counts per second, from zero.
    Rate,
    /// Bytes per second, from zero.
    Bytes,
    /// Latency in ns, logarithmic (p50 and p99.9 differ by orders of magnitude).
    Latency,
}

fn format_y(scale: Scale, v: f64) -> String {
    match scale {
        Scale::Rate => units::count(v.round().max(0.0) as u64),
        Scale::Bytes => units::bytes(v) + "/s",
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a label"
        )]
        Scale::Latency => units::latency(v as u64),
    }
}

/// A line chart of `series` (name, points of (elapsed ns, value)).
pub fn lines(
    title: &str,
    axis: &TimeAxis,
    scale: Scale,
    series: &[(&str, Vec<(u64, f64)>)],
) -> String {
    let mut out = String::new();
    let top = 24.0;
    let plot_h = 130.0;
    open_svg(&mut out, top + plot_h + 40.0, title, false);
    let values = || series.iter().flat_map(|(_, p)| p.iter().map(|(_, v)| *v));
    let max = values().fold(0.0, f64::max);
    let (lo, hi) = if scale == Scale::Latency {
        let min = values().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
        if max <= 0.0 {
            (1_000.0, 1_000_000.0)
        } else {
            (
                10f64.powf(min.log10().floor()),
                10f64.powf(max.log10().ceil()).max(min * 10.0),
            )
        }
    } else {
        (0.0, if max > 0.0 { max * 1.08 } else { 1.0 })
    };
    let y = |v: f64| -> f64 {
        let frac = if scale == Scale::Latency {
            if v <= 0.0 {
                return top + plot_h;
            }
            (v.log10() - lo.log10()) / (hi.log10() - lo.log10())
        } else {
            (v - lo) / (hi - lo)
        };
        top + plot_h - frac.clamp(0.0, 1.0) * plot_h
    };
    // Horizontal grid with labels: decades for latency, quarters otherwise.
    let marks: Vec<f64> = if scale == Scale::Latency {
        let mut m = Vec::new();
        let mut v = lo;
        while v <= hi * 1.0001 {
            m.push(v);
            v *= 10.0;
        }
        m
    } else {
        (0..=4)
            .map(|i| lo + (hi - lo) * f64::from(i) / 4.0)
            .collect()
    };
    for v in marks {
        let yy = y(v);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}"/><text class="lbl" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT + PLOT,
            LEFT - 4.0,
            yy + 4.0,
            format_y(scale, v)
        );
    }
    axis.draw(&mut out, top, plot_h);
    for (i, (name, points)) in series.iter().enumerate() {
        // A latency of an interval without requests is no value: the line breaks there.
        let segments = points.split(|(_, v)| scale == Scale::Latency && *v <= 0.0);
        for segment in segments.filter(|s| !s.is_empty()) {
            let mut path = String::new();
            for (t, v) in segment {
                let _ = write!(path, "{:.1},{:.1} ", axis.x(*t), y(*v));
            }
            if segment.len() == 1 {
                // One point alone: a dot, or it would not show.
                let (t, v) = segment[0];
                let _ = write!(
                    out,
                    r#"<circle class="sw{i}" cx="{:.1}" cy="{:.1}" r="2"/>"#,
                    axis.x(t),
                    y(v)
                );
            } else {
                let _ = write!(
                    out,
                    r#"<polyline class="s{i}" points="{}"/>"#,
                    path.trim_end()
                );
            }
        }
        #[expect(clippy::cast_precision_loss, reason = "pixels")]
        let lx = LEFT + PLOT - 110.0 * (series.len() - i) as f64;
        let _ = write!(
            out,
            r#"<rect class="sw{i}" x="{lx:.1}" y="6" width="10" height="10"/><text class="lbl" x="{:.1}" y="15">{}</text>"#,
            lx + 14.0,
            esc(name)
        );
    }
    out.push_str("</svg>");
    out
}

/// One row of an episode chart.
pub struct BarRow {
    pub label: String,
    /// CSS class of its bars (`crit`, `warn`, `info`, `dst`, `open`).
    pub class: &'static str,
    pub spans: Vec<(u64, u64)>,
    /// An anchor on the page to link the row to (`#finding-3`).
    pub link: Option<String>,
}

/// Rows of bars over time (findings while active, D-state stays), each labelled above its
/// bars.
pub fn bars(title: &str, axis: &TimeAxis, rows: &[BarRow]) -> String {
    let mut out = String::new();
    let top = 24.0;
    let row_h = 26.0;
    #[expect(clippy::cast_precision_loss, reason = "pixels")]
    let plot_h = row_h * rows.len().max(1) as f64;
    open_svg(&mut out, top + plot_h + 30.0, title, false);
    axis.draw(&mut out, top, plot_h);
    for (i, row) in rows.iter().enumerate() {
        #[expect(clippy::cast_precision_loss, reason = "pixels")]
        let y = top + i as f64 * row_h;
        if let Some(link) = &row.link {
            let _ = write!(out, r##"<a href="#{}">"##, esc(link));
        }
        let _ = write!(
            out,
            r#"<text class="lbl" x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + 2.0,
            y + 11.0,
            esc(&row.label)
        );
        for (from, to) in &row.spans {
            let (x0, x1) = (axis.x(*from), axis.x(*to));
            let _ = write!(
                out,
                r#"<rect class="{}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="9"><title>{}–{}</title></rect>"#,
                row.class,
                y + 14.0,
                (x1 - x0).max(2.0),
                axis.clock(*from),
                axis.clock(*to)
            );
        }
        if row.link.is_some() {
            out.push_str("</a>");
        }
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn heat_levels_are_logarithmic_and_never_hide_a_count() {
        assert_eq!(heat_level(0, 1_000), 0);
        assert_eq!(heat_level(1, 1_000), 1);
        assert_eq!(heat_level(1_000, 1_000), 8);
        assert!(heat_level(100, 1_000) > heat_level(10, 1_000));
    }

    #[test]
    fn a_heat_map_draws_its_cells_in_runs() {
        let axis = TimeAxis {
            start_ns: 0,
            end_ns: 4_000_000_000,
            started_unix_ms: 0,
        };
        let mut busy = Log2Hist::default();
        busy.slots[8] = 100;
        let mut slow = busy;
        slow.slots[12] = 1;
        let columns = vec![
            (0, 1_000_000_000, busy),
            (1_000_000_000, 2_000_000_000, busy),
            (2_000_000_000, 3_000_000_000, slow),
            (3_000_000_000, 4_000_000_000, busy),
        ];
        let svg = heat_map("disk sda: device time", &axis, &columns, true);
        assert!(svg.starts_with("<svg xmlns="), "{svg}");
        // Slot 8 busy throughout: one rectangle; the outlier at 2-4 ms: one light cell.
        assert_eq!(svg.matches(r#"<rect class="h8""#).count(), 2, "{svg}");
        assert_eq!(
            svg.matches(r#"<rect class="h1""#).count(),
            2,
            "cell and legend: {svg}"
        );
        assert!(svg.contains(">2ms<") && svg.contains(">128us<"), "{svg}");
        assert!(svg.contains(">00:00:02<"), "{svg}");
    }
}
