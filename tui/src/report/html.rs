//! `iotop-bpf report REC -o FILE.html`: one self-contained page (inline CSS and SVG, no
//! scripts, nothing fetched) from a recording, for a post-mortem or a ticket. `-o FILE.svg`
//! writes one heat map alone, for slides.
//!
//! Another consumer of [`crate::model::Snapshot`]s: the `report` command (`front/report_cmd.rs`) replays the recording
//! through the same pipeline as `--replay --json` and folds each interval into a [`Timeline`];
//! this draws it.

use std::fmt::Write as _;

use anyhow::{Context as _, Result, bail};

use super::{
    svg::{self, TimeAxis, esc},
    timeline::{DiskCell, ProcTrack, Timeline},
};
use crate::{clock::rfc3339, model::Log2Hist, model::findings::Evidence, units};

mod sections;

/// An evidence value as text (ratios with one decimal, as the findings print them).
pub fn evidence_text(value: &Evidence) -> String {
    match value {
        Evidence::Count(n) => n.to_string(),
        Evidence::Ratio(x) => format!("{x:.1}"),
        Evidence::Text(t) => t.clone(),
    }
}

/// Processes listed per table, and heat maps drawn for the top waiters.
const PROC_HEAT_MAPS: usize = 6;

/// What the page says about the run (from the recording's header).
#[derive(Clone, Debug)]
pub struct Meta {
    pub host: String,
    pub kernel: String,
    /// Wall clock at the start of the run, ms since the epoch.
    pub started_unix_ms: u64,
    /// What the replay met (a cut, damage, the recorder's gaps or stop), one line each: the
    /// page opens with them.
    pub notes: Vec<String>,
    /// The recording ends before its run did (cut, killed, stopped, damaged).
    pub ends_early: bool,
}

fn axis(info: &Meta, t: &Timeline) -> TimeAxis {
    TimeAxis {
        start_ns: 0,
        end_ns: t.end_ns.max(1),
        started_unix_ms: info.started_unix_ms,
    }
}

/// Columns of a disk's heat map: each bucket's span and the chosen histogram.
fn disk_columns(
    t: &Timeline,
    cells: &[DiskCell],
    pick: fn(&DiskCell) -> Log2Hist,
) -> Vec<(u64, u64, Log2Hist)> {
    cells
        .iter()
        .enumerate()
        .map(|(b, c)| {
            (
                t.bucket_start_ns(b),
                t.bucket_start_ns(b + 1).min(t.end_ns),
                pick(c),
            )
        })
        .collect()
}

fn proc_columns(t: &Timeline, p: &ProcTrack, sync: bool) -> Vec<(u64, u64, Log2Hist)> {
    p.cells
        .iter()
        .map(|(&b, c)| {
            (
                t.bucket_start_ns(b),
                t.bucket_start_ns(b + 1).min(t.end_ns),
                if sync { c.sync } else { c.total },
            )
        })
        .collect()
}

/// Per bucket of a disk: (time at the bucket's middle, value).
fn disk_series(
    t: &Timeline,
    cells: &[DiskCell],
    value: impl Fn(&DiskCell, f64) -> f64,
) -> Vec<(u64, f64)> {
    cells
        .iter()
        .enumerate()
        .map(|(b, c)| {
            let from = t.bucket_start_ns(b);
            let to = t.bucket_start_ns(b + 1).min(t.end_ns).max(from + 1);
            #[expect(clippy::cast_precision_loss, reason = "rates")]
            let secs = (to - from) as f64 / 1e9;
            (from + (to - from) / 2, value(c, secs))
        })
        .collect()
}

#[expect(clippy::cast_precision_loss, reason = "rates")]
fn per_s(n: u64, secs: f64) -> f64 {
    n as f64 / secs
}

#[expect(clippy::cast_precision_loss, reason = "latencies")]
fn ns_f(n: u64) -> f64 {
    n as f64
}

fn bytes(n: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let text = units::bytes(n as f64);
    text
}

fn secs(ns: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let s = ns as f64 / 1e9;
    if s >= 10.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.2} s")
    }
}

const PAGE_CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1240px;color:#222;background:#fff}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}\
h3{font-size:15px;margin:18px 0 6px}table{border-collapse:collapse;margin:6px 0}\
td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #eee}th{background:#f2f4f7}\
td:nth-child(2),th:nth-child(2){text-align:left}.meta{color:#555}\
.finding{border-left:5px solid #999;padding:6px 12px;margin:10px 0;background:#fafafa}\
.finding.critical{border-color:#c62828}.finding.warning{border-color:#ef8f00}.finding.info{border-color:#3b78c2}\
.finding .sum{font-weight:600}.ev{font-family:ui-monospace,monospace;font-size:12px;color:#444}\
.note{color:#666;font-size:12px}.banner{border:2px solid #c62828;background:#fdecea;padding:6px 12px;margin:12px 0}svg.chart{display:block;margin:4px 0 12px;max-width:100%;height:auto}";

/// The whole page.
pub fn page(info: &Meta, t: &Timeline, top: usize) -> String {
    let axis = axis(info, t);
    let mut out = String::with_capacity(256 << 10);
    let start = rfc3339(info.started_unix_ms);
    let end = rfc3339(info.started_unix_ms + t.end_ns / 1_000_000);
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>iotop-bpf report: {host}</title><style>{PAGE_CSS}{}</style></head><body>\
         <h1>iotop-bpf report: {host}</h1>\
         <p class=\"meta\">kernel {kernel} &middot; {start} to {end} (UTC) &middot; {} &middot; {} intervals of {:.1} s{} &middot; {} events, {} dropped</p>",
        svg::css(),
        secs(t.end_ns),
        t.intervals,
        t.interval_ns as f64 / 1e9,
        if t.per_bucket > 1 {
            format!(
                ", drawn {} intervals per column (p50 averaged, p99 and p99.9 the worst of them)",
                t.per_bucket
            )
        } else {
            String::new()
        },
        t.events_received,
        t.events_dropped,
        host = esc(&info.host),
        kernel = esc(&info.kernel),
    );

    if !info.notes.is_empty() {
        let _ = write!(
            out,
            "<div class=\"banner\" id=\"ends-early\"><b>{}</b><ul>",
            if info.ends_early {
                "This report ends early: the recording stops before the run did, and the report covers it up to there."
            } else {
                "The recording has gaps."
            }
        );
        for note in &info.notes {
            let _ = write!(out, "<li>{}</li>", esc(note));
        }
        out.push_str("</ul></div>");
    }
    // Findings first: they are the point; each is placed on the timeline and linked.
    sections::findings(&mut out, t, &axis);
    // Disks: rates, throughput, percentiles, then queue and device heat maps.
    sections::disks(&mut out, t, &axis);
    // Processes: the top movers and the top waiters, with the waiters' heat maps.
    sections::processes(&mut out, t, &axis, top);
    // D state.
    sections::dstate(&mut out, t, &axis);
    let _ = write!(
        out,
        "<p class=\"note\">Made by iotop-bpf {} from a recording, offline: no script, nothing fetched.</p></body></html>",
        env!("CARGO_PKG_VERSION")
    );
    out
}

/// Whom a finding is about: a process, or a disk by its name.
fn subject(f: &crate::model::findings::Finding, t: &Timeline) -> String {
    match (f.tgid, &f.dev) {
        (Some(pid), _) => format!("{} (pid {pid})", f.comm),
        (None, Some(dev)) => format!(
            "disk {}",
            t.disks
                .get(dev)
                .map_or_else(|| dev.to_string(), |d| d.name.clone())
        ),
        (None, None) => String::new(),
    }
}

fn proc_table(out: &mut String, title: &str, procs: &[&ProcTrack]) {
    let _ = write!(out, "<h3>{}</h3>", esc(title));
    if procs.is_empty() {
        out.push_str("<p>None.</p>");
        return;
    }
    out.push_str(
        "<table><tr><th>pid</th><th>command</th><th>read</th><th>written</th><th>requests</th>\
         <th>p99 (worst)</th><th>syncs</th><th>time in sync</th><th>sync p99 (worst)</th>\
         <th>amplification</th><th>time in D</th></tr>",
    );
    for p in procs {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            p.tgid,
            esc(&p.comm),
            bytes(p.read_bytes),
            bytes(p.write_bytes),
            p.requests,
            units::latency(p.p99_ns),
            p.syncs,
            secs(p.sync_ns),
            if p.syncs > 0 {
                units::latency(p.sync_p99_ns)
            } else {
                "-".into()
            },
            p.amplification
                .map_or_else(|| "-".into(), |a| format!("{a:.0}x")),
            secs(p.dstate_ns),
        );
    }
    out.push_str("</table>");
}

/// Which heat map [`single_heat_map`] draws (the `report` command checks the arguments
/// that name it, so this draws and never parses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeatMapSpec {
    /// A disk (by name; `None`: the busiest) and which of its latencies.
    Disk {
        name: Option<String>,
        latency: DiskLatency,
    },
    /// A process and whether its sync call latency (`None`: that when it synced, else its
    /// request latency).
    Process { pid: u32, sync: Option<bool> },
}

/// The latencies of a disk a heat map can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskLatency {
    Total,
    Queue,
    Device,
}

/// One heat map alone (`-o FILE.svg`). `source` names the recording in errors (a disk or a
/// process it does not have).
pub fn single_heat_map(
    info: &Meta,
    t: &Timeline,
    spec: &HeatMapSpec,
    source: &std::path::Path,
) -> Result<String> {
    let axis = axis(info, t);
    let (name, latency) = match spec {
        HeatMapSpec::Process { pid, sync } => {
            let pid = *pid;
            let Some(p) = t.procs.get(&pid) else {
                bail!(
                    "{}: pid {pid} did no I/O in this recording (or was not among the {} busiest)",
                    source.display(),
                    t.procs.len()
                );
            };
            let sync = sync.unwrap_or(p.syncs > 0);
            let what = if sync {
                "sync call latency"
            } else {
                "request latency"
            };
            return Ok(svg::heat_map(
                &format!("{}: pid {pid} {} {what}", info.host, p.comm),
                &axis,
                &proc_columns(t, p, sync),
                true,
            ));
        }
        HeatMapSpec::Disk { name, latency } => (name, *latency),
    };
    let track = match name {
        Some(name) => t
            .disks
            .values()
            .find(|d| &d.name == name)
            .with_context(|| {
                let names: Vec<&str> = t.disks.values().map(|d| d.name.as_str()).collect();
                format!(
                    "{}: no disk {name} in this recording (it has {})",
                    source.display(),
                    names.join(", ")
                )
            })?,
        None => t
            .disks
            .values()
            .max_by_key(|d| d.cells.iter().map(|c| c.reads + c.writes).sum::<u64>())
            .with_context(|| format!("{}: no disk in this recording", source.display()))?,
    };
    let (pick, what): (fn(&DiskCell) -> Log2Hist, &str) = match latency {
        DiskLatency::Total => (|c| c.total, "total latency"),
        DiskLatency::Queue => (|c| c.queue, "queue time"),
        DiskLatency::Device => (|c| c.device, "device time"),
    };
    Ok(svg::heat_map(
        &format!("{}: {} {what}", info.host, track.name),
        &axis,
        &disk_columns(t, &track.cells, pick),
        true,
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::history::fixtures::snapshot_at;

    pub(crate) fn timeline() -> (Meta, Timeline) {
        let info = Meta {
            host: "db<01>".into(),
            kernel: "6.18".into(),
            started_unix_ms: 1_795_305_600_000,
            notes: Vec::new(),
            ends_early: false,
        };
        let mut t = Timeline::new();
        for seq in 1..=90 {
            t.add(&snapshot_at(seq));
        }
        (info, t)
    }

    #[test]
    fn the_page_has_everything_and_no_script() {
        let (info, t) = timeline();
        let html = page(&info, &t, 10);
        for part in [
            "<h1>iotop-bpf report: db&lt;01&gt;</h1>",
            "2026-11-22T00:00:00.000Z to 2026-11-22T00:01:30.000Z",
            "write_amplification",
            "why:",
            "fix:",
            "loop0 device time heat map",
            "loop0 queue time heat map",
            "loop0 latency percentiles",
            "pid 5689 lab001: sync call latency heat map",
            "By time waiting in sync calls",
            "Threads in D state",
            "href=\"#finding-0\"",
        ] {
            assert!(html.contains(part), "{part} missing");
        }
        assert!(!html.to_lowercase().contains("<script"));
        assert!(
            !html.contains("http://")
                || html.matches("http://www.w3.org/2000/svg").count()
                    == html.matches("http://").count()
        );
        assert!(!html.contains("https://"));
        assert!(html.len() < 2 << 20, "{} bytes", html.len());
        assert!(
            !html.contains("ends early"),
            "a whole recording has no banner"
        );
    }

    #[test]
    fn a_recording_cut_short_opens_the_page_with_a_banner_that_says_where() {
        let (mut info, t) = timeline();
        info.notes = vec!["x.rec: cut short at byte 371613 <here>".into()];
        info.ends_early = true;
        let html = page(&info, &t, 10);
        let banner = html.find("This report ends early").expect("a banner");
        assert!(banner < html.find("Findings").unwrap(), "before everything");
        assert!(html.contains("<li>x.rec: cut short at byte 371613 &lt;here&gt;</li>"));
    }
}
