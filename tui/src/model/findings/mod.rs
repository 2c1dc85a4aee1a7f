//! The findings engine: pathological I/O patterns, named with who, evidence, why and a fix.
//!
//! Detectors are pure functions of one interval's [`Snapshot`]; their thresholds are named
//! constants next to them. [`FindingBook`] keeps a finding on screen while its pattern lasts
//! and lets it fade for a while after.

mod disk_patterns;
mod latency_shape;
mod long_d_state;
mod sub_block_tail_write;
mod sync_storm;
mod unaligned_direct_io;
mod write_amplification;

use std::collections::BTreeMap;

use super::{Dev, ProcRow, Snapshot};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FindingKind {
    SubBlockTailWrite,
    WriteAmplification,
    UnalignedDirectIo,
    SyncStorm,
    QueueDominated,
    BimodalLatency,
    SmallRandomIo,
    FlushHeavy,
    LongDState,
}

impl FindingKind {
    /// The name in JSON and on screen (a public contract).
    pub fn name(self) -> &'static str {
        match self {
            Self::SubBlockTailWrite => "sub_block_tail_write",
            Self::WriteAmplification => "write_amplification",
            Self::UnalignedDirectIo => "unaligned_direct_io",
            Self::SyncStorm => "sync_storm",
            Self::QueueDominated => "queue_dominated",
            Self::BimodalLatency => "bimodal_latency",
            Self::SmallRandomIo => "small_random_io",
            Self::FlushHeavy => "flush_heavy",
            Self::LongDState => "long_d_state",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

/// A number or a word backing a finding.
#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    Count(u64),
    Ratio(f64),
    Text(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    pub tgid: Option<u32>,
    pub comm: String,
    pub dev: Option<Dev>,
    /// The file involved, where known (a path, or `inode N`).
    pub file: Option<String>,
    /// One line: what happens, to whom, how much.
    pub summary: String,
    pub evidence: Vec<(&'static str, Evidence)>,
    /// One line: the mechanism.
    pub why: String,
    /// One line: what to do about it.
    pub fix: String,
    /// Seen in the interval just closed (else fading).
    pub active: bool,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
}

/// Detectors that judge one process at a time.
const PER_PROCESS: [fn(&Snapshot, &ProcRow) -> Option<Finding>; 4] = [
    sub_block_tail_write::check,
    write_amplification::check,
    unaligned_direct_io::check,
    sync_storm::check,
];

/// Runs every detector on one interval.
pub fn detect(snap: &Snapshot) -> Vec<Finding> {
    let mut found: Vec<Finding> = PER_PROCESS
        .iter()
        .flat_map(|check| snap.procs.iter().filter_map(|p| check(snap, p)))
        .collect();
    found.extend(disk_patterns::detect(snap));
    found.extend(latency_shape::detect(snap));
    found.extend(long_d_state::detect(snap));
    found
}

/// How long a finding stays listed after its pattern stopped.
pub const FADE_NS: u64 = 30_000_000_000;

/// Findings by subject across intervals.
#[derive(Debug, Default)]
pub struct FindingBook {
    known: BTreeMap<(FindingKind, Option<u32>, Option<Dev>), Finding>,
}

impl FindingBook {
    /// Records this interval's findings; returns every listed finding, active ones first,
    /// then by severity, then newest.
    pub fn update(&mut self, now_ns: u64, fresh: Vec<Finding>) -> Vec<Finding> {
        for finding in self.known.values_mut() {
            finding.active = false;
        }
        for mut finding in fresh {
            let key = (finding.kind, finding.tgid, finding.dev);
            finding.active = true;
            finding.last_seen_ns = now_ns;
            finding.first_seen_ns = self.known.get(&key).map_or(now_ns, |f| f.first_seen_ns);
            self.known.insert(key, finding);
        }
        self.known
            .retain(|_, f| f.active || now_ns.saturating_sub(f.last_seen_ns) < FADE_NS);
        let mut listed: Vec<Finding> = self.known.values().cloned().collect();
        listed.sort_by(|a, b| {
            b.active
                .cmp(&a.active)
                .then(b.severity.cmp(&a.severity))
                .then(b.last_seen_ns.cmp(&a.last_seen_ns))
                .then(b.first_seen_ns.cmp(&a.first_seen_ns))
        });
        listed
    }
}

/// `count` per second over the snapshot's interval.
fn per_second(snap: &Snapshot, count: u64) -> f64 {
    snap.rate(count)
}

#[cfg(test)]
mod tests;
