//! Per-workload totals under a cardinality bound.
//!
//! Workloads are grouped by command name (`comm`), never by pid: pids are unbounded and
//! short-lived, so a pid label would make a new set of series for every process. Even comms
//! are unbounded (`kworker/u8:3`, build jobs, `sh -c` children), so only the top N comms by
//! recent activity get series of their own; the rest are summed into `comm="other"`.
//!
//! Every unit of I/O lands in exactly one series, in the interval it happened in, so
//! `sum by (…)` over all comms, "other" included, is the host's total and no counter ever
//! goes backwards:
//!
//! - a comm entering the top N starts at the totals it had when it last left (zero the first
//!   time); the interval that promoted it still goes to "other";
//! - a comm leaving the top N keeps its totals in the exporter (bounded, oldest forgotten),
//!   its series disappears and its later I/O goes to "other".
//!
//! Ranking uses an activity score that decays with a half-life of [`HALF_LIFE_NS`]; a comm
//! displaces the weakest member only when its score is over [`HYSTERESIS`] times the
//! member's, so two comms of similar activity do not swap places (and series) every interval.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Log2Hist, ProcFigures, ProcRow};

/// The comm label of everything outside the top N.
pub const OTHER: &str = "other";
/// Default number of comms with series of their own (`--top`).
pub const DEFAULT_TOP: usize = 20;
/// The largest `--top` accepted: each comm costs about 33 series.
pub const MAX_TOP: usize = 200;
/// A comm replaces the weakest member when its score exceeds this many times the member's.
pub const HYSTERESIS: f64 = 2.0;
/// Scores halve every 30 s without activity.
pub const HALF_LIFE_NS: f64 = 30e9;
/// Non-member comms whose score is remembered (the highest win).
const CANDIDATES_MAX: usize = 1_024;
/// Comms that left the top N whose totals are kept, to resume their counters if they come
/// back; beyond this the longest gone are forgotten (a later return then starts at zero,
/// which Prometheus reads as a counter reset).
const RETIRED_MAX: usize = 1_024;
/// Scores below this (a fraction of one byte) are forgotten.
const MIN_SCORE: f64 = 1.0;
/// Each request and sync call counts as this many bytes of activity, so a process doing
/// small synchronous I/O ranks alongside one streaming large requests.
const OP_WEIGHT_BYTES: f64 = 4096.0;

/// What one comm did, cumulative.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadTotals {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Sync-call latencies (log2 µs slots), their exact sum and their count.
    pub sync_hist: Log2Hist,
    pub sync_sum_ns: u64,
    pub syncs: u64,
    /// Time its threads spent in D state.
    pub dstate_ns: u64,
}

impl WorkloadTotals {
    fn add_figures(&mut self, f: &ProcFigures) {
        self.reads += f.reads;
        self.writes += f.writes;
        self.read_bytes += f.read_bytes;
        self.write_bytes += f.write_bytes;
        self.sync_hist += &f.sync.hist;
        self.sync_sum_ns += f.sync.time_ns;
        self.syncs += f.sync.hist.total();
        self.dstate_ns += f.dstate_ns;
    }

    fn add(&mut self, other: &Self) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
        self.sync_hist += &other.sync_hist;
        self.sync_sum_ns += other.sync_sum_ns;
        self.syncs += other.syncs;
        self.dstate_ns += other.dstate_ns;
    }

    fn is_empty(&self) -> bool {
        self.reads == 0
            && self.writes == 0
            && self.read_bytes == 0
            && self.write_bytes == 0
            && self.syncs == 0
            && self.dstate_ns == 0
    }

    #[expect(clippy::cast_precision_loss, reason = "a ranking score")]
    fn activity(&self) -> f64 {
        (self.read_bytes + self.write_bytes) as f64
            + (self.reads + self.writes + self.syncs) as f64 * OP_WEIGHT_BYTES
            // Time blocked counts too (1 ms in D as one request), so a stuck process ranks.
            + (self.dstate_ns / 1_000_000) as f64 * OP_WEIGHT_BYTES
    }
}

#[derive(Clone, Debug)]
struct Member {
    totals: WorkloadTotals,
    score: f64,
}

/// The top-N comms, "other", and what is needed to keep their counters monotonic.
#[derive(Debug)]
pub struct Workloads {
    top: usize,
    members: BTreeMap<String, Member>,
    other: WorkloadTotals,
    candidates: HashMap<String, f64>,
    /// Totals of comms that left the top N, and the update that retired them.
    retired: HashMap<String, (WorkloadTotals, u64)>,
    /// Comms with activity in the last interval that were summed into "other".
    folded: usize,
    updates: u64,
}

impl Workloads {
    pub fn new(top: usize) -> Self {
        Self {
            top: top.clamp(1, MAX_TOP),
            members: BTreeMap::new(),
            other: WorkloadTotals::default(),
            candidates: HashMap::new(),
            retired: HashMap::new(),
            folded: 0,
            updates: 0,
        }
    }

    /// Adds one closed interval: each process's interval figures go to its comm's series
    /// when the comm is in the top N, to "other" otherwise; then the top N is revised.
    pub fn update(&mut self, procs: &[ProcRow], interval_ns: u64) {
        self.updates += 1;
        let mut deltas: HashMap<&str, WorkloadTotals> = HashMap::new();
        for p in procs {
            let mut delta = WorkloadTotals::default();
            delta.add_figures(&p.interval);
            if !delta.is_empty() {
                deltas.entry(p.comm.as_str()).or_default().add(&delta);
            }
        }
        #[expect(clippy::cast_precision_loss, reason = "a decay factor")]
        let decay = 0.5f64.powf(interval_ns as f64 / HALF_LIFE_NS);
        for member in self.members.values_mut() {
            member.score *= decay;
        }
        for score in self.candidates.values_mut() {
            *score *= decay;
        }
        for (comm, delta) in &deltas {
            let activity = delta.activity();
            if let Some(member) = self.members.get_mut(*comm) {
                member.score += activity;
            } else if *comm != OTHER && !comm.is_empty() {
                // A process really named "other" (or nameless) stays in "other": its own
                // series would be indistinguishable from the fold.
                *self.candidates.entry((*comm).to_string()).or_default() += activity;
            }
        }
        // Membership changes first, so this interval goes to "other" for a comm that just
        // joined (its series starts where it was) or just left (its series is gone): each
        // exported series only ever grows by I/O done while it was exported.
        let joined = self.promote();
        self.folded = 0;
        for (comm, delta) in deltas {
            match self.members.get_mut(comm) {
                Some(member) if !joined.iter().any(|j| j == comm) => member.totals.add(&delta),
                _ => {
                    self.other.add(&delta);
                    self.folded += 1;
                }
            }
        }
        self.bound();
    }

    /// Fills free places, then lets candidates displace the weakest members when they are
    /// clearly (by [`HYSTERESIS`]) more active. Returns the comms that joined.
    fn promote(&mut self) -> Vec<String> {
        let mut joined = Vec::new();
        let mut ranked: Vec<(String, f64)> = self
            .candidates
            .iter()
            .map(|(comm, &score)| (comm.clone(), score))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        for (comm, score) in ranked {
            if self.members.len() >= self.top {
                let Some((weakest, weakest_score)) = self
                    .members
                    .iter()
                    .min_by(|a, b| a.1.score.total_cmp(&b.1.score).then_with(|| b.0.cmp(a.0)))
                    .map(|(comm, m)| (comm.clone(), m.score))
                else {
                    break;
                };
                // Candidates come strongest first: once one fails, the rest fail too.
                if score <= HYSTERESIS * weakest_score {
                    break;
                }
                let member = self
                    .members
                    .remove(&weakest)
                    .unwrap_or_else(|| unreachable!("the weakest was just found"));
                self.candidates.insert(weakest.clone(), member.score);
                self.retired.insert(weakest, (member.totals, self.updates));
            }
            self.candidates.remove(&comm);
            let totals = self
                .retired
                .remove(&comm)
                .map(|(totals, _)| totals)
                .unwrap_or_default();
            joined.push(comm.clone());
            self.members.insert(comm, Member { totals, score });
        }
        joined
    }

    fn bound(&mut self) {
        self.candidates.retain(|_, score| *score >= MIN_SCORE);
        if self.candidates.len() > CANDIDATES_MAX {
            let mut scores: Vec<f64> = self.candidates.values().copied().collect();
            scores.sort_by(|a, b| b.total_cmp(a));
            let cut = scores[CANDIDATES_MAX - 1];
            self.candidates.retain(|_, score| *score >= cut);
            // Ties at the cut could leave a few over: drop arbitrary ones among them.
            let excess = self.candidates.len().saturating_sub(CANDIDATES_MAX);
            let tied: Vec<String> = self
                .candidates
                .iter()
                .filter(|(_, score)| **score <= cut)
                .map(|(comm, _)| comm.clone())
                .take(excess)
                .collect();
            for comm in tied {
                self.candidates.remove(&comm);
            }
        }
        if self.retired.len() > RETIRED_MAX {
            let mut ages: Vec<(u64, String)> = self
                .retired
                .iter()
                .map(|(comm, (_, at))| (*at, comm.clone()))
                .collect();
            ages.sort();
            for (_, comm) in ages.into_iter().take(self.retired.len() - RETIRED_MAX) {
                self.retired.remove(&comm);
            }
        }
    }

    /// The exported series: every member by name, then "other".
    pub fn series(&self) -> impl Iterator<Item = (&str, &WorkloadTotals)> {
        self.members
            .iter()
            .map(|(comm, m)| (comm.as_str(), &m.totals))
            .chain(std::iter::once((OTHER, &self.other)))
    }

    /// Comms with I/O in the last interval that had no series of their own.
    pub fn folded(&self) -> usize {
        self.folded
    }

    /// Bytes written by comms that left the top N, kept for their return (for tests of
    /// conservation).
    #[cfg(test)]
    pub fn retired_write_bytes(&self) -> u64 {
        self.retired.values().map(|(t, _)| t.write_bytes).sum()
    }

    /// Comms the exporter remembers (members, candidates, retired): the memory bound.
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.members.len() + self.candidates.len() + self.retired.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn proc(tgid: u32, comm: &str, write_bytes: u64) -> ProcRow {
        ProcRow {
            tgid,
            comm: comm.to_string(),
            kernel_thread: false,
            exited: false,
            cgroup: None,
            interval: ProcFigures {
                writes: write_bytes.div_ceil(4096),
                write_bytes,
                ..ProcFigures::default()
            },
            since_start: None,
            devices: Vec::new(),
            recent_syncs: Vec::new(),
            io_limits: None,
            dirty_state: None,
        }
    }

    fn value(w: &Workloads, comm: &str) -> Option<u64> {
        w.series()
            .find(|(c, _)| *c == comm)
            .map(|(_, t)| t.write_bytes)
    }

    fn total(w: &Workloads) -> u64 {
        w.series().map(|(_, t)| t.write_bytes).sum::<u64>()
            + w.retired.values().map(|(t, _)| t.write_bytes).sum::<u64>()
    }

    #[test]
    fn the_top_n_get_series_and_the_rest_is_other() {
        let mut w = Workloads::new(2);
        let procs = [
            proc(1, "postgres", 1 << 20),
            proc(2, "rsync", 1 << 24),
            proc(3, "cron", 4096),
        ];
        w.update(&procs, SECOND);
        // The interval that promoted them went to "other": their series start at zero.
        assert_eq!(value(&w, "rsync"), Some(0));
        assert_eq!(value(&w, "postgres"), Some(0));
        assert_eq!(value(&w, "cron"), None, "only two places");
        assert_eq!(value(&w, OTHER), Some((1 << 20) + (1 << 24) + 4096));
        assert_eq!(w.folded(), 3);
        w.update(&procs, SECOND);
        assert_eq!(value(&w, "rsync"), Some(1 << 24));
        assert_eq!(value(&w, "postgres"), Some(1 << 20));
        assert_eq!(value(&w, OTHER), Some((1 << 20) + (1 << 24) + 2 * 4096));
        assert_eq!(w.folded(), 1);
        assert_eq!(total(&w), 2 * ((1 << 20) + (1 << 24) + 4096));
    }

    #[test]
    fn processes_of_one_comm_are_summed_and_pids_never_matter() {
        let mut w = Workloads::new(5);
        w.update(&[proc(1, "make", 4096)], SECOND);
        w.update(&[proc(7, "make", 4096), proc(8, "make", 8192)], SECOND);
        assert_eq!(value(&w, "make"), Some(12_288));
        assert_eq!(w.series().count(), 2, "make and other");
    }

    #[test]
    fn similar_workloads_do_not_swap_places_every_interval() {
        let mut w = Workloads::new(1);
        let mut members = BTreeSet::new();
        for i in 0..100u64 {
            // Two comms alternate being slightly busier.
            let (a, b) = if i % 2 == 0 { (110, 100) } else { (100, 110) };
            w.update(&[proc(1, "a", a << 20), proc(2, "b", b << 20)], SECOND);
            members.insert(w.members.keys().next().cloned().unwrap());
        }
        assert_eq!(members.len(), 1, "no flapping: {members:?}");
    }

    #[test]
    fn a_clearly_busier_newcomer_displaces_an_idle_member_and_counters_never_go_back() {
        let mut w = Workloads::new(1);
        let mut last: HashMap<String, u64> = HashMap::new();
        let mut check = |w: &Workloads| {
            for (comm, t) in w.series() {
                let before = last.insert(comm.to_string(), t.write_bytes).unwrap_or(0);
                assert!(t.write_bytes >= before, "{comm} went back");
            }
        };
        for _ in 0..5 {
            w.update(&[proc(1, "old", 1 << 20)], SECOND);
            check(&w);
        }
        // "new" is 4x busier: it takes the place; "old" keeps its totals, out of sight.
        let mut old = 0;
        for _ in 0..10 {
            w.update(&[proc(1, "old", 1 << 20), proc(2, "new", 4 << 20)], SECOND);
            check(&w);
            old = value(&w, "old").unwrap_or(old);
        }
        assert!(value(&w, "new").is_some());
        assert_eq!(value(&w, "old"), None);
        assert_eq!(w.retired.get("old").map(|(t, _)| t.write_bytes), Some(old));
        // "new" stops; after a few half-lives "old" is clearly busier again and returns,
        // resuming from where it left off.
        for _ in 0..200 {
            w.update(&[proc(1, "old", 1 << 20)], SECOND);
            check(&w);
        }
        assert_eq!(value(&w, "new"), None);
        assert!(value(&w, "old").unwrap() > old);
        assert_eq!(total(&w), 215 * (1 << 20) + 10 * (4 << 20), "nothing lost");
    }

    #[test]
    fn a_process_named_other_is_folded() {
        let mut w = Workloads::new(3);
        w.update(&[proc(1, OTHER, 4096), proc(2, "", 4096)], SECOND);
        w.update(&[proc(1, OTHER, 4096), proc(2, "", 4096)], SECOND);
        assert_eq!(w.series().count(), 1);
        assert_eq!(value(&w, OTHER), Some(4 * 4096));
    }

    #[test]
    fn memory_stays_bounded_with_endless_new_names() {
        let mut w = Workloads::new(DEFAULT_TOP);
        for i in 0..5_000u32 {
            w.update(
                &[proc(i, &format!("job-{i}"), 4096 * u64::from(i % 7 + 1))],
                SECOND,
            );
            assert!(w.members.len() <= DEFAULT_TOP);
        }
        assert!(
            w.remembered() <= DEFAULT_TOP + CANDIDATES_MAX + RETIRED_MAX,
            "{}",
            w.remembered()
        );
    }
}
