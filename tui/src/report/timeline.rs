//! A recording folded into time buckets for the HTML report: per disk and per process, the
//! rates, percentiles and log2 latency histograms of each bucket, the findings' episodes and
//! the D-state episodes. Reads [`Snapshot`]s only, one at a time, so a recording of any
//! length is drawn from bounded memory: at most [`MAX_BUCKETS`] buckets; when a recording is
//! longer, adjacent buckets merge and each covers twice as many intervals.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Dev, Log2Hist, Snapshot, findings::Finding, findings::FindingKind, wait_site};

/// Columns of the report's charts: one per interval up to this many, then merged.
pub const MAX_BUCKETS: usize = 720;
/// Processes followed through the recording (the rest are folded away, smallest first).
const MAX_PROCS: usize = 512;
/// Distinct findings and D-state episodes kept (the longest episodes first).
const MAX_FINDINGS: usize = 256;
const MAX_EPISODES: usize = 2_000;

/// Latency percentiles of a bucket. When a bucket spans several intervals, p50 is their
/// count-weighted mean and p99 / p99.9 the worst of them (the report says so).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pcts {
    pub count: u64,
    weighted_p50: u128,
    pub p99_ns: u64,
    pub p999_ns: u64,
}

impl Pcts {
    fn add(&mut self, count: u64, p50: u64, p99: u64, p999: u64) {
        self.count += count;
        self.weighted_p50 += u128::from(count) * u128::from(p50);
        self.p99_ns = self.p99_ns.max(p99);
        self.p999_ns = self.p999_ns.max(p999);
    }

    fn merge(&mut self, other: &Self) {
        self.count += other.count;
        self.weighted_p50 += other.weighted_p50;
        self.p99_ns = self.p99_ns.max(other.p99_ns);
        self.p999_ns = self.p999_ns.max(other.p999_ns);
    }

    pub fn p50_ns(&self) -> u64 {
        u64::try_from(self.weighted_p50 / u128::from(self.count.max(1))).unwrap_or(u64::MAX)
    }
}

/// A disk over one bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiskCell {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub latency: Pcts,
    pub total: Log2Hist,
    pub queue: Log2Hist,
    pub device: Log2Hist,
}

impl DiskCell {
    fn merge(&mut self, o: &Self) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.latency.merge(&o.latency);
        self.total += &o.total;
        self.queue += &o.queue;
        self.device += &o.device;
    }
}

/// A process over one bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcCell {
    pub requests: u64,
    pub bytes: u64,
    pub syncs: u64,
    pub sync_ns: u64,
    pub dstate_ns: u64,
    pub total: Log2Hist,
    pub sync: Log2Hist,
}

impl ProcCell {
    fn merge(&mut self, o: &Self) {
        self.requests += o.requests;
        self.bytes += o.bytes;
        self.syncs += o.syncs;
        self.sync_ns += o.sync_ns;
        self.dstate_ns += o.dstate_ns;
        self.total += &o.total;
        self.sync += &o.sync;
    }
}

#[derive(Clone, Debug)]
pub struct DiskTrack {
    pub name: String,
    pub cells: Vec<DiskCell>,
}

/// A process through the recording: its buckets (sparse: only those it was active in).
#[derive(Clone, Debug)]
pub struct ProcTrack {
    pub tgid: u32,
    pub comm: String,
    pub cells: BTreeMap<usize, ProcCell>,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub requests: u64,
    pub syncs: u64,
    pub sync_ns: u64,
    pub dstate_ns: u64,
    pub sync_p99_ns: u64,
    pub p99_ns: u64,
    pub amplification: Option<f64>,
}

impl ProcTrack {
    /// What ranks a process for keeping: its bytes and its waiting.
    fn weight(&self) -> u64 {
        self.read_bytes + self.write_bytes + self.sync_ns / 1_000 + self.dstate_ns / 1_000
    }
}

/// A finding through the recording: its latest wording and when it was active.
#[derive(Clone, Debug)]
pub struct FindingTrack {
    pub finding: Finding,
    /// (from, to) elapsed ns: the start and end of the intervals it was active in.
    pub episodes: Vec<(u64, u64)>,
}

/// A thread's stay in D state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Episode {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    /// Elapsed ns since the start of the recording.
    pub from_ns: u64,
    pub to_ns: u64,
    pub site: String,
    /// Still blocked at the end of the recording.
    pub open: bool,
}

/// The recording, bucketed.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Intervals per bucket (a power of two).
    pub per_bucket: u64,
    pub intervals: u64,
    pub interval_ns: u64,
    /// Elapsed ns at the end of the last interval.
    pub end_ns: u64,
    pub disks: BTreeMap<Dev, DiskTrack>,
    pub procs: HashMap<u32, ProcTrack>,
    pub findings: BTreeMap<(FindingKind, Option<u32>, Option<Dev>), FindingTrack>,
    pub episodes: Vec<Episode>,
    /// Events received and dropped, since start (from the last interval).
    pub events_received: u64,
    pub events_dropped: u64,
}

impl Timeline {
    pub fn new() -> Self {
        Self {
            per_bucket: 1,
            ..Self::default()
        }
    }

    /// Buckets in use.
    #[cfg(test)]
    pub fn buckets(&self) -> usize {
        usize::try_from(self.intervals.div_ceil(self.per_bucket)).unwrap_or(usize::MAX)
    }

    /// Elapsed ns where bucket `b` starts.
    pub fn bucket_start_ns(&self, b: usize) -> u64 {
        b as u64 * self.per_bucket * self.interval_ns
    }

    pub fn add(&mut self, snap: &Snapshot) {
        if self.interval_ns == 0 {
            self.interval_ns = snap.interval_ns.max(1);
        }
        let index = self.intervals;
        self.intervals += 1;
        while index / self.per_bucket >= MAX_BUCKETS as u64 {
            self.halve();
        }
        let b = usize::try_from(index / self.per_bucket).unwrap_or(MAX_BUCKETS - 1);
        let from_ns = snap.elapsed_ns.saturating_sub(snap.interval_ns);
        self.end_ns = snap.elapsed_ns;
        self.events_received = snap.events.received_total;
        self.events_dropped = snap.events.dropped_total;

        self.add_disks(snap, b);
        self.add_procs(snap, b);
        self.add_findings(snap, from_ns);
        self.add_dstate(snap);
    }

    /// Each disk's interval figures into its bucket `b`.
    fn add_disks(&mut self, snap: &Snapshot, b: usize) {
        for d in &snap.disks {
            let track = self.disks.entry(d.dev).or_insert_with(|| DiskTrack {
                name: d.name.clone(),
                cells: Vec::new(),
            });
            if track.cells.len() <= b {
                track.cells.resize(b + 1, DiskCell::default());
            }
            let f = &d.interval;
            let cell = &mut track.cells[b];
            cell.reads += f.reads;
            cell.writes += f.writes;
            cell.read_bytes += f.read_bytes;
            cell.write_bytes += f.write_bytes;
            cell.latency.add(
                f.latency.count,
                f.latency.p50_ns,
                f.latency.p99_ns,
                f.latency.p999_ns,
            );
            cell.total += &f.total_hist;
            cell.queue += &f.queue_hist;
            cell.device += &f.device_hist;
        }
    }

    /// Each process with I/O, syncs or time in D into its bucket `b`; past [`MAX_PROCS`], the
    /// lightest are dropped.
    fn add_procs(&mut self, snap: &Snapshot, b: usize) {
        for p in &snap.procs {
            let f = &p.interval;
            if f.ios() == 0 && f.sync.syncs == 0 && f.dstate_ns == 0 {
                continue;
            }
            let track = self.procs.entry(p.tgid).or_insert_with(|| ProcTrack {
                tgid: p.tgid,
                comm: p.comm.clone(),
                cells: BTreeMap::new(),
                read_bytes: 0,
                write_bytes: 0,
                requests: 0,
                syncs: 0,
                sync_ns: 0,
                dstate_ns: 0,
                sync_p99_ns: 0,
                p99_ns: 0,
                amplification: None,
            });
            track.comm.clone_from(&p.comm);
            track.read_bytes += f.read_bytes;
            track.write_bytes += f.write_bytes;
            track.requests += f.ios();
            track.syncs += f.sync.syncs;
            track.sync_ns += f.sync.time_ns;
            track.dstate_ns += f.dstate_ns;
            track.sync_p99_ns = track.sync_p99_ns.max(f.sync.latency.p99_ns);
            track.p99_ns = track.p99_ns.max(f.latency.p99_ns);
            if let Some(amp) = p.total().sync.amplification() {
                track.amplification = Some(amp);
            }
            let cell = track.cells.entry(b).or_default();
            cell.merge(&ProcCell {
                requests: f.ios(),
                bytes: f.bytes(),
                syncs: f.sync.syncs,
                sync_ns: f.sync.time_ns,
                dstate_ns: f.dstate_ns,
                total: f.total_hist,
                sync: f.sync.hist,
            });
        }
        if self.procs.len() > MAX_PROCS {
            let mut weights: Vec<(u64, u32)> =
                self.procs.values().map(|t| (t.weight(), t.tgid)).collect();
            weights.sort_unstable();
            for (_, tgid) in weights.into_iter().take(self.procs.len() - MAX_PROCS) {
                self.procs.remove(&tgid);
            }
        }
    }

    /// Each active finding: its worst wording, and its episode extended or begun at `from_ns`.
    fn add_findings(&mut self, snap: &Snapshot, from_ns: u64) {
        for f in snap.findings.iter().filter(|f| f.active) {
            let key = (f.kind, f.tgid, f.dev);
            if !self.findings.contains_key(&key) && self.findings.len() >= MAX_FINDINGS {
                continue;
            }
            let track = self.findings.entry(key).or_insert_with(|| FindingTrack {
                finding: f.clone(),
                episodes: Vec::new(),
            });
            // The worst wording wins, then the latest.
            if f.severity >= track.finding.severity {
                track.finding = f.clone();
            }
            match track.episodes.last_mut() {
                Some((_, to)) if *to >= from_ns => *to = snap.elapsed_ns,
                _ => track.episodes.push((from_ns, snap.elapsed_ns)),
            }
        }
    }

    /// D state: finished episodes as the model lists them, and threads blocked now.
    fn add_dstate(&mut self, snap: &Snapshot) {
        let base = snap.now_ns.saturating_sub(snap.elapsed_ns);
        for e in &snap.dstate_recent {
            let to = e.ended_ns.saturating_sub(base);
            let from = to.saturating_sub(e.duration_ns);
            self.episode(
                e.tid,
                e.tgid,
                &e.comm,
                from,
                to,
                wait_site(&e.stack, e.no_stack, 2),
                false,
            );
        }
        for d in &snap.dstate {
            let blocked = d.blocked_ns.unwrap_or(snap.elapsed_ns);
            let from = snap.elapsed_ns.saturating_sub(blocked);
            self.episode(
                d.tid,
                d.tgid,
                &d.comm,
                from,
                snap.elapsed_ns,
                wait_site(&d.stack, d.no_stack, 2),
                true,
            );
        }
        // An episode seen open but not blocked now has ended (its record may come later).
        let now = snap.elapsed_ns;
        for e in &mut self.episodes {
            if e.open && e.to_ns < now && !snap.dstate.iter().any(|d| d.tid == e.tid) {
                e.open = false;
            }
        }
    }

    #[expect(clippy::too_many_arguments, reason = "one episode's fields")]
    fn episode(
        &mut self,
        tid: u32,
        tgid: u32,
        comm: &str,
        from: u64,
        to: u64,
        site: String,
        open: bool,
    ) {
        // The same stay seen again (every interval while it lasts; then as a finished
        // episode): same thread, starting within 10 ms of the one known.
        if let Some(known) = self
            .episodes
            .iter_mut()
            .find(|e| e.tid == tid && e.from_ns.abs_diff(from) < 10_000_000)
        {
            known.to_ns = known.to_ns.max(to);
            known.open = open;
            return;
        }
        self.episodes.push(Episode {
            tid,
            tgid,
            comm: comm.to_string(),
            from_ns: from,
            to_ns: to,
            site,
            open,
        });
        if self.episodes.len() > MAX_EPISODES {
            // The shortest goes.
            if let Some((at, _)) = self
                .episodes
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.to_ns - e.from_ns)
            {
                self.episodes.swap_remove(at);
            }
        }
    }

    /// Halves the resolution: bucket `2k` and `2k + 1` become `k`.
    fn halve(&mut self) {
        self.per_bucket *= 2;
        for track in self.disks.values_mut() {
            let mut merged: Vec<DiskCell> = Vec::with_capacity(track.cells.len().div_ceil(2));
            for pair in track.cells.chunks(2) {
                let mut cell = pair[0].clone();
                if let Some(second) = pair.get(1) {
                    cell.merge(second);
                }
                merged.push(cell);
            }
            track.cells = merged;
        }
        for track in self.procs.values_mut() {
            let mut merged: BTreeMap<usize, ProcCell> = BTreeMap::new();
            for (b, cell) in std::mem::take(&mut track.cells) {
                merged.entry(b / 2).or_default().merge(&cell);
            }
            track.cells = merged;
        }
    }

    /// Processes by a key, largest first, ties by pid.
    pub fn top_procs(&self, key: impl Fn(&ProcTrack) -> u64, n: usize) -> Vec<&ProcTrack> {
        let mut procs: Vec<&ProcTrack> = self.procs.values().filter(|p| key(p) > 0).collect();
        procs.sort_by(|a, b| key(b).cmp(&key(a)).then(a.tgid.cmp(&b.tgid)));
        procs.truncate(n);
        procs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::fixtures::snapshot_at;

    #[test]
    fn a_long_recording_merges_buckets_and_keeps_every_count() {
        let mut timeline = Timeline::new();
        let mut requests = 0;
        for seq in 1..=2_000 {
            let snap = snapshot_at(seq % 90 + 1);
            requests += snap
                .disks
                .iter()
                .map(|d| d.interval.requests())
                .sum::<u64>();
            let snap = Snapshot {
                seq,
                elapsed_ns: seq * 1_000_000_000,
                ..snap
            };
            timeline.add(&snap);
        }
        assert_eq!(
            timeline.per_bucket, 4,
            "2000 intervals in at most 720 buckets"
        );
        assert!(timeline.buckets() <= MAX_BUCKETS);
        let counted: u64 = timeline
            .disks
            .values()
            .flat_map(|t| &t.cells)
            .map(|c| c.reads + c.writes)
            .sum();
        // Per demo interval: 30 flushes and others by the database, 200 by jbd2 (lab001's commits).
        let flushes_and_others: u64 = 2_000 * (30 + 200);
        assert_eq!(counted + flushes_and_others, requests);
        let lab001 = &timeline.procs[&5689];
        assert_eq!(lab001.syncs, 2_000 * 200);
        assert!(lab001.cells.len() <= MAX_BUCKETS);
    }

    #[test]
    fn findings_and_d_state_become_episodes() {
        let mut timeline = Timeline::new();
        // The fixture's `make` has been blocked 7 s in every interval: one stay from 0.
        for seq in 1..=5 {
            timeline.add(&snapshot_at(seq));
        }
        let write_amp = timeline
            .findings
            .values()
            .find(|t| t.finding.kind == FindingKind::WriteAmplification)
            .unwrap();
        assert_eq!(
            write_amp.episodes,
            [(0, 5_000_000_000)],
            "active in every interval: one episode"
        );
        let make = timeline.episodes.iter().find(|e| e.comm == "make").unwrap();
        assert!(make.open);
        assert!(make.site.contains("kernel_clone"), "{make:?}");
        assert_eq!(
            timeline
                .episodes
                .iter()
                .filter(|e| e.comm == "make")
                .count(),
            1,
            "one stay, seen in every interval"
        );
    }
}
