//! The batch text report: one block per interval, like `iotop -b` with iostat's disk lines.

use std::fmt::Write as _;

use super::listed_procs;
use crate::{
    model::{HostFigures, Snapshot, wait_site},
    names::{pad, show},
    units::{self, mib, ms, us},
};

/// The report of one interval: at most `max_procs` processes (the rest summed in one row);
/// `clock` is the wall-clock time to print (HH:MM:SS). Names are shown ([`show`]): a process
/// or file named with escape sequences prints them as `\x1b`, never raw.
pub fn interval(snap: &Snapshot, clock: &str, pids: &[u32], max_procs: usize) -> String {
    let mut out = String::new();
    let e = &snap.events;
    let _ = writeln!(
        out,
        "iotop-bpf {clock}  interval {:.1}s  events {:.0}/s  dropped {}  unpaired {}",
        snap.interval_secs(),
        snap.rate(e.received),
        e.dropped,
        e.unpaired_total
    );
    if let Some(line) = host_line(&snap.host) {
        let _ = writeln!(out, "{line}");
    }
    disk_lines(&mut out, snap);
    proc_lines(&mut out, snap, pids, max_procs);
    for d in &snap.dstate {
        let blocked = d
            .blocked_ns
            .map_or_else(|| "since start".to_string(), units::latency);
        let _ = writeln!(
            out,
            "D {}/{} {} blocked {blocked} in {}",
            d.tgid,
            d.tid,
            show(&d.comm),
            show(&wait_site(&d.stack, d.no_stack, 4))
        );
    }
    for f in snap.findings.iter().filter(|f| f.active) {
        let _ = writeln!(
            out,
            "FINDING {} {}: {}",
            f.severity.name(),
            f.kind.name(),
            show(&f.summary)
        );
        let _ = writeln!(out, "  why: {}", show(&f.why));
        let _ = writeln!(out, "  fix: {}", show(&f.fix));
    }
    out
}

/// The disks' lines, as iostat writes them: rates, awaits, queue size, utilisation.
fn disk_lines(out: &mut String, snap: &Snapshot) {
    let _ = writeln!(
        out,
        "{:<12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>8}",
        "DEVICE",
        "r/s",
        "w/s",
        "rMB/s",
        "wMB/s",
        "r_await",
        "w_await",
        "aqu-sz",
        "%util",
        "flush/s"
    );
    for d in &snap.disks {
        let f = &d.interval;
        let _ = writeln!(
            out,
            "{} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7.2} {:>6.1} {:>8.1}",
            pad(&d.name, 12),
            snap.rate(f.reads),
            snap.rate(f.writes),
            mib(snap.rate(f.read_bytes)),
            mib(snap.rate(f.write_bytes)),
            ms(f.read_await_ns),
            ms(f.write_await_ns),
            f.queue_size,
            f.util_pct,
            snap.rate(f.flushes),
        );
    }
}

/// The processes' lines: at most `max_procs` of them (`pids` only, when given), the rest
/// summed in one row.
fn proc_lines(out: &mut String, snap: &Snapshot, pids: &[u32], max_procs: usize) {
    let _ = writeln!(
        out,
        "{:>8} {:<16} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>9} {:>6} {:>7} {:>9} {:>8} {:>9}",
        "PID",
        "COMM",
        "R/s",
        "W/s",
        "RMB/s",
        "WMB/s",
        "p50(us)",
        "p99(us)",
        "SYNC/s",
        "Sp99(us)",
        "AMP",
        "D(ms)",
        "Cp99(us)",
        "PREQ(ms)",
        "PAUSE(ms)"
    );
    let (procs, others) = listed_procs(snap, pids, max_procs);
    for p in procs {
        let f = &p.interval;
        let _ = writeln!(
            out,
            "{:>8} {} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>9.0} {:>9.0} {:>7.1} {:>9.0} {:>6.1} {:>7} {:>9.0} {:>8} {:>9}",
            p.tgid,
            pad(&p.comm, 16),
            snap.rate(f.reads),
            snap.rate(f.writes),
            mib(snap.rate(f.read_bytes)),
            mib(snap.rate(f.write_bytes_caused())),
            us(f.latency.p50_ns),
            us(f.latency.p99_ns),
            snap.rate(f.sync.syncs),
            us(f.sync.latency.p99_ns),
            f.sync.amplification().unwrap_or(0.0),
            f.dstate_ns / 1_000_000,
            us(f.waits.calls.latency.p99_ns),
            f.waits.calls.prequeue_ns / 1_000_000,
            f.waits.dirty.pause_ns / 1_000_000,
        );
    }
    if let Some(o) = others {
        let _ = writeln!(
            out,
            "{:>8} {:<16} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>9} {:>9} {:>7.1} {:>9} {:>6} {:>7}",
            "+",
            format!("({} others)", o.processes),
            snap.rate(o.reads),
            snap.rate(o.writes),
            mib(snap.rate(o.read_bytes)),
            mib(snap.rate(o.write_bytes)),
            "",
            "",
            snap.rate(o.syncs),
            "",
            "",
            o.dstate_ms,
        );
    }
}

/// `host load 2.10 1.50 0.80 running 3 blocked 1 iowait 4.0% psi_io some 12.34 full 3.02
/// dirty 40.0MiB writeback 2.0MiB`: what is known of it; `None` when nothing is (a replay of
/// a recording made before the host was sampled).
fn host_line(h: &HostFigures) -> Option<String> {
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let mib = |bytes: u64| format!("{:.1}MiB", bytes as f64 / (1024.0 * 1024.0));
    let mut out = Vec::new();
    if let (Some(one), Some(five), Some(fifteen)) = (h.load1, h.load5, h.load15) {
        out.push(format!("load {one:.2} {five:.2} {fifteen:.2}"));
    }
    if let Some(n) = h.procs_running {
        out.push(format!("running {n}"));
    }
    if let Some(n) = h.procs_blocked {
        out.push(format!("blocked {n}"));
    }
    if let Some(pct) = h.iowait_pct {
        out.push(format!("iowait {pct:.1}%"));
    }
    match (h.psi_io_some_avg10, h.psi_io_full_avg10) {
        (Some(some), Some(full)) => out.push(format!("psi_io some {some:.2} full {full:.2}")),
        (Some(some), None) => out.push(format!("psi_io some {some:.2}")),
        _ => {}
    }
    if let Some(bytes) = h.dirty_bytes {
        out.push(format!("dirty {}", mib(bytes)));
    }
    if let Some(bytes) = h.writeback_bytes {
        out.push(format!("writeback {}", mib(bytes)));
    }
    (!out.is_empty()).then(|| format!("host {}", out.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::demo_snapshot;

    #[test]
    fn each_interval_has_a_host_line_under_its_header() {
        let report = interval(&demo_snapshot(), "00:00:07", &[], usize::MAX);
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(
            lines[1],
            "host load 2.10 1.50 0.80 running 3 blocked 1 iowait 4.0% psi_io some 12.34 full 3.02 dirty 40.0MiB writeback 2.0MiB",
            "{report}"
        );
        assert!(lines[2].starts_with("DEVICE"), "{report}");
    }

    #[test]
    fn names_are_shown_not_sent_to_the_terminal_and_columns_stay_aligned() {
        let mut snap = demo_snapshot();
        let hostile = "\u{1b}]2;PWNED\u{7}z";
        snap.procs[0].comm = hostile.into();
        snap.procs[1].comm = "数据库".into();
        if let Some(f) = snap.findings.iter_mut().find(|f| f.active) {
            f.summary = format!("{hostile} fsyncs /data/a\u{1b}[2J\nb.log");
        }
        let report = interval(&snap, "00:00:07", &[], usize::MAX);
        assert!(
            !report.chars().any(|c| c.is_control() && c != '\n'),
            "{report}"
        );
        assert!(report.contains("\\x1b]2;PWNED\\x07z"), "{report}");
        assert!(report.contains("/data/a\\x1b[2J\\x0ab.log"), "{report}");
        // The first figure after a name that fits its column (right-aligned) ends in the same
        // column whatever the name, wide characters counted as two.
        let figure_ends_at = |tgid: u32| {
            let row = report
                .lines()
                .find(|l| l.starts_with(&format!("{tgid:>8} ")))
                .unwrap_or_else(|| panic!("no row of {tgid}: {report}"));
            let name_end = 9 + row[9..].find("  ").expect("a name, then spaces");
            let figure = row[name_end..].trim_start();
            let end = row.len() - figure.len() + figure.find(' ').unwrap();
            crate::names::width(&row[..end])
        };
        for p in &snap.procs[1..4] {
            assert_eq!(figure_ends_at(p.tgid), figure_ends_at(4242), "{report}");
        }
    }

    #[test]
    fn a_replay_without_host_figures_has_no_host_line() {
        let mut snap = demo_snapshot();
        snap.host = HostFigures::default();
        let report = interval(&snap, "00:00:07", &[], usize::MAX);
        assert!(!report.lines().any(|l| l.starts_with("host")), "{report}");
        snap.host.procs_blocked = Some(0);
        let report = interval(&snap, "00:00:07", &[], usize::MAX);
        assert_eq!(report.lines().nth(1), Some("host blocked 0"), "{report}");
    }
}
