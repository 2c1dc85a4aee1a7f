//! The batch text report: one block per interval, like `iotop -b` with iostat's disk lines.

use std::fmt::Write as _;

use super::active_procs;
use crate::{
    model::{Snapshot, wait_site},
    units::{self, mib, ms, us},
};

/// The report of one interval; `clock` is the wall-clock time to print (HH:MM:SS).
pub fn interval(snap: &Snapshot, clock: &str, pids: &[u32]) -> String {
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
            "{:<12} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7.2} {:>6.1} {:>8.1}",
            d.name,
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
    let _ = writeln!(
        out,
        "{:>8} {:<16} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>9} {:>6} {:>7}",
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
        "D(ms)"
    );
    for p in active_procs(snap, pids) {
        let f = &p.interval;
        let _ = writeln!(
            out,
            "{:>8} {:<16} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>9.0} {:>9.0} {:>7.1} {:>9.0} {:>6.1} {:>7}",
            p.tgid,
            p.comm,
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
        );
    }
    for d in &snap.dstate {
        let blocked = d
            .blocked_ns
            .map_or_else(|| "since start".to_string(), units::latency);
        let _ = writeln!(
            out,
            "D {}/{} {} blocked {blocked} in {}",
            d.tgid,
            d.tid,
            d.comm,
            wait_site(&d.stack, 4)
        );
    }
    for f in snap.findings.iter().filter(|f| f.active) {
        let _ = writeln!(
            out,
            "FINDING {} {}: {}",
            f.severity.name(),
            f.kind.name(),
            f.summary
        );
        let _ = writeln!(out, "  why: {}", f.why);
        let _ = writeln!(out, "  fix: {}", f.fix);
    }
    out
}
