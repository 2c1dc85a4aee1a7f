//! Headless output: the batch text report (like `iotop -b`) and the JSON contract.

pub mod html;
pub mod json;
pub mod svg;
pub mod text;
pub mod timeline;

use crate::model::{ProcRow, Snapshot};

/// The processes a report lists by default: enough to show every process that matters on a
/// busy host, few enough that one JSON line stays small (about 2 KiB each) when a thousand
/// short-lived processes pass through an interval.
pub const DEFAULT_MAX_PROCS: usize = 25;

/// The processes of a report beyond its limit, summed: totals stay exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Others {
    pub processes: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub others: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub logical_write_bytes: u64,
    pub syncs: u64,
    pub dstate_ms: u64,
}

impl Others {
    fn add(&mut self, p: &ProcRow) {
        let f = &p.interval;
        self.processes += 1;
        self.reads += f.reads;
        self.writes += f.writes;
        self.flushes += f.flushes;
        self.others += f.others;
        self.read_bytes += f.read_bytes;
        self.write_bytes += f.write_bytes;
        self.logical_write_bytes += f.logical_write_bytes;
        self.syncs += f.sync.syncs;
        self.dstate_ms += f.dstate_ns / 1_000_000;
    }
}

/// The processes a report lists, at most `max`, most relevant first: those with an active
/// finding, then by what they caused (bytes, requests); the rest summed in [`Others`].
pub fn listed_procs<'a>(
    snap: &'a Snapshot,
    pids: &[u32],
    max: usize,
) -> (Vec<&'a ProcRow>, Option<Others>) {
    let mut procs = active_procs(snap, pids);
    let named = |p: &ProcRow| {
        snap.findings
            .iter()
            .any(|f| f.active && f.tgid == Some(p.tgid))
    };
    // Stable: within each group the busiest-first order stays.
    procs.sort_by_key(|p| !named(p));
    if procs.len() <= max {
        return (procs, None);
    }
    let mut others = Others::default();
    for p in procs.drain(max..) {
        others.add(p);
    }
    (procs, Some(others))
}

/// Which processes a report lists: those with I/O in the interval (like `iotop -o`), optionally
/// only some pids, busiest first (bytes, then requests, then pid for a stable order).
pub fn active_procs<'a>(snap: &'a Snapshot, pids: &[u32]) -> Vec<&'a ProcRow> {
    let mut procs: Vec<&ProcRow> = snap
        .procs
        .iter()
        .filter(|p| p.interval.active())
        .filter(|p| pids.is_empty() || pids.contains(&p.tgid))
        .collect();
    procs.sort_by(|a, b| {
        b.interval
            .bytes_caused()
            .cmp(&a.interval.bytes_caused())
            .then(b.interval.ios().cmp(&a.interval.ios()))
            .then(a.tgid.cmp(&b.tgid))
    });
    procs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_whose_calls_settle_later_is_reported_then() {
        use crate::model::{Aggregator, Comm, FileRef, KernelSample, Settings, SyncCall, SyncKind};
        const MS: u64 = 1_000_000;
        let mut model = Aggregator::new(Settings::default(), 0);
        model.ingest_sync(&SyncCall {
            tgid: 42,
            tid: 42,
            comm: Comm::new("dd"),
            kind: SyncKind::DsyncWrite,
            fd: Some(1),
            start_ns: 10 * MS,
            end_ns: 11 * MS,
            ret: 128,
            window_bytes: 128,
            window_writes: 1,
            addr: 0,
            file: FileRef::Path("/x".into()),
            dev: None,
            fs_block_size: 4096,
            fs_dev: None,
            ino: 0,
            name: String::new(),
            dir: false,
        });
        let tick = |model: &mut Aggregator, now_ms| {
            model.tick(&KernelSample {
                now_ns: now_ms * MS,
                ..KernelSample::default()
            })
        };
        let first = tick(&mut model, 100);
        assert_eq!(active_procs(&first, &[]).len(), 1, "the call");
        let second = tick(&mut model, 1_000);
        let rows = active_procs(&second, &[]);
        assert_eq!(rows.len(), 1, "its cost, settled");
        assert_eq!(rows[0].interval.sync.small.calls, 1);
        let third = tick(&mut model, 2_000);
        assert!(active_procs(&third, &[]).is_empty(), "then nothing");
    }

    #[test]
    fn a_report_lists_at_most_its_limit_findings_first_and_sums_the_rest() {
        let snap = crate::model::fixtures::demo_snapshot();
        let all = active_procs(&snap, &[]);
        assert!(all.len() > 3, "{}", all.len());
        let (listed, others) = listed_procs(&snap, &[], 2);
        assert_eq!(listed.len(), 2);
        // Every process with an active finding comes before any without.
        let named = |p: &ProcRow| {
            snap.findings
                .iter()
                .any(|f| f.active && f.tgid == Some(p.tgid))
        };
        assert!(named(listed[0]), "a process with a finding first");
        let others = others.expect("the rest summed");
        assert_eq!(others.processes as usize, all.len() - 2);
        let sum = |f: &dyn Fn(&ProcRow) -> u64| all.iter().map(|p| f(p)).sum::<u64>();
        assert_eq!(
            sum(&|p| p.interval.writes),
            listed.iter().map(|p| p.interval.writes).sum::<u64>() + others.writes,
            "totals stay exact"
        );
        assert_eq!(
            sum(&|p| p.interval.read_bytes),
            listed.iter().map(|p| p.interval.read_bytes).sum::<u64>() + others.read_bytes
        );
        assert!(listed_procs(&snap, &[], 100).1.is_none());
    }
}
