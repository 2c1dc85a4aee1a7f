//! The findings engine: pathological I/O patterns, named with who, which file, evidence, why
//! and a fix.
//!
//! Detectors are pure functions of one closed interval's [`Scene`]: the rows the process and
//! disk books just built, whose sync figures are distributions of settled calls (two
//! populations, see [`crate::SyncFigures`]), not interval means. Their thresholds are
//! named constants next to them. [`FindingBook`] keeps a finding listed while its pattern
//! lasts, lets it fade for a while after, and holds back `INFO` findings, and findings whose
//! one interval's evidence is too thin to be a pattern, until they persist, so one-interval
//! blips do not crowd the screen.
//!
//! Severity: `WARN` and `CRIT` mean "a pathology with a fix"; `INFO` is a shape worth a look.

mod dirty_throttled;
mod disk_patterns;
mod empty_syncs;
pub mod io_throttled;
mod latency_shape;
mod long_d_state;
mod noisy_neighbour;
mod read_amplification;
mod sub_block_tail_write;
mod sync_storm;
mod unaligned_direct_io;
pub(crate) mod write_amplification;

use std::collections::BTreeMap;

pub use super::finding::{Evidence, Finding, FindingKind, Severity};
use super::{DStateTask, Dev, DirtySettings, DiskRow, ProcRow};

impl Finding {
    /// A fresh finding of this interval.
    fn new(scene: &Scene, kind: FindingKind, severity: Severity) -> Self {
        Self {
            kind,
            severity,
            tgid: None,
            comm: String::new(),
            dev: None,
            files: Vec::new(),
            summary: String::new(),
            evidence: Vec::new(),
            why: String::new(),
            fix: String::new(),
            active: true,
            first_seen_ns: scene.now_ns,
            last_seen_ns: scene.now_ns,
            persist: 1,
        }
    }

    /// Listed only once seen `intervals` intervals running.
    fn persisting(mut self, intervals: u32) -> Self {
        self.persist = intervals;
        self
    }

    /// Consecutive intervals it must be seen in before it is first listed.
    fn min_streak(&self) -> u32 {
        if self.severity == Severity::Info {
            self.persist.max(INFO_MIN_STREAK)
        } else {
            self.persist
        }
    }

    /// Its subject is a process.
    fn of_process(mut self, proc: &ProcRow) -> Self {
        self.tgid = Some(proc.tgid);
        self.comm.clone_from(&proc.comm);
        self
    }
}

/// What the detectors see of one closed interval.
pub struct Scene<'a> {
    pub now_ns: u64,
    pub interval_ns: u64,
    pub elapsed_ns: u64,
    pub procs: &'a [ProcRow],
    pub disks: &'a [DiskRow],
    pub dstate: &'a [DStateTask],
    /// The memory page size (0 when unknown).
    pub page_size: u32,
    /// `vm.dirty_*`, as last read (when a process was paused).
    pub dirty_settings: Option<DirtySettings>,
    /// The latency each process saw when its disk was its own (`noisy_neighbour`).
    pub baselines: &'a [crate::baseline::Baseline],
}

impl Scene<'_> {
    /// `count` per second over the interval.
    #[expect(clippy::cast_precision_loss, reason = "rates")]
    pub fn rate(&self, count: u64) -> f64 {
        if self.interval_ns == 0 {
            0.0
        } else {
            count as f64 * 1e9 / self.interval_ns as f64
        }
    }

    /// The disk a process used most in the interval.
    fn main_disk(proc: &ProcRow) -> Option<Dev> {
        proc.devices
            .iter()
            .max_by_key(|d| (d.write_bytes + d.read_bytes, d.writes + d.reads))
            .map(|d| d.dev)
    }
}

/// Detectors that judge one process at a time.
const PER_PROCESS: [fn(&Scene, &ProcRow) -> Option<Finding>; 8] = [
    sub_block_tail_write::check,
    write_amplification::check,
    unaligned_direct_io::check,
    sync_storm::check,
    empty_syncs::check,
    io_throttled::check,
    dirty_throttled::check,
    read_amplification::check,
];

/// Runs every detector on one interval.
pub fn detect(scene: &Scene) -> Vec<Finding> {
    let mut found: Vec<Finding> = PER_PROCESS
        .iter()
        .flat_map(|check| scene.procs.iter().filter_map(|p| check(scene, p)))
        .collect();
    // Tiny writes each synced are a storm too; the amplification says more (and the same
    // fix), so a process named for it is not named twice.
    let amplified: Vec<Option<u32>> = found
        .iter()
        .filter(|f| f.kind == FindingKind::WriteAmplification)
        .map(|f| f.tgid)
        .collect();
    found.retain(|f| f.kind != FindingKind::SyncStorm || !amplified.contains(&f.tgid));
    found.extend(disk_patterns::detect(scene));
    found.extend(latency_shape::detect(scene));
    found.extend(long_d_state::detect(scene));
    found.extend(noisy_neighbour::detect(scene));
    found
}

/// How long a finding stays listed after its pattern stopped.
pub const FADE_NS: u64 = 30_000_000_000;
/// Consecutive intervals an `INFO` finding must be seen before it is listed.
pub const INFO_MIN_STREAK: u32 = 3;
/// Findings remembered at once (a bound: every subject could have one).
const MAX_KNOWN: usize = 1_024;

type Key = (FindingKind, Option<u32>, Option<Dev>);

#[derive(Debug)]
struct Known {
    finding: Finding,
    /// Consecutive intervals it has been seen in, up to now.
    streak: u32,
    /// Listed at least once (an INFO finding that passed its streak keeps fading normally).
    listed: bool,
}

/// Findings by subject across intervals. A finding is listed once it has been seen as many
/// intervals running as it asks ([`INFO_MIN_STREAK`] for `INFO`), then stays listed while it
/// lasts and fades for [`FADE_NS`] after.
#[derive(Debug, Default)]
pub struct FindingBook {
    known: BTreeMap<Key, Known>,
}

impl FindingBook {
    /// Records this interval's findings; returns every listed finding, active ones first,
    /// then by severity, then newest.
    pub fn update(&mut self, now_ns: u64, fresh: Vec<Finding>) -> Vec<Finding> {
        for known in self.known.values_mut() {
            known.finding.active = false;
        }
        for mut finding in fresh {
            let key = (finding.kind, finding.tgid, finding.dev);
            finding.active = true;
            finding.last_seen_ns = now_ns;
            match self.known.get_mut(&key) {
                Some(known) => {
                    finding.first_seen_ns = known.finding.first_seen_ns;
                    known.streak = if known.finding.last_seen_ns == now_ns {
                        known.streak
                    } else {
                        known.streak + 1
                    };
                    known.finding = finding;
                }
                None => {
                    self.known.insert(
                        key,
                        Known {
                            finding,
                            streak: 1,
                            listed: false,
                        },
                    );
                }
            }
        }
        self.known.retain(|_, k| {
            if !k.finding.active {
                k.streak = 0;
            }
            k.finding.active
                || (k.listed && now_ns.saturating_sub(k.finding.last_seen_ns) < FADE_NS)
        });
        if self.known.len() > MAX_KNOWN {
            let mut by_age: Vec<(u64, Key)> = self
                .known
                .iter()
                .map(|(key, k)| (k.finding.last_seen_ns, *key))
                .collect();
            by_age.sort_unstable();
            for (_, key) in by_age.into_iter().take(self.known.len() - MAX_KNOWN) {
                self.known.remove(&key);
            }
        }
        let mut listed: Vec<Finding> = Vec::new();
        for known in self.known.values_mut() {
            if !known.listed && known.streak < known.finding.min_streak() {
                continue;
            }
            known.listed = true;
            listed.push(known.finding.clone());
        }
        listed.sort_by(|a, b| {
            b.active
                .cmp(&a.active)
                .then(b.severity.cmp(&a.severity))
                .then(b.last_seen_ns.cmp(&a.last_seen_ns))
                .then(b.first_seen_ns.cmp(&a.first_seen_ns))
                .then(a.tgid.cmp(&b.tgid))
        });
        listed
    }
}

/// Rounds for evidence: one decimal.
fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
