//! Each process's own latency when its disk was its own: the baseline a noisy neighbour is
//! judged against.
//!
//! Per (process, disk), the latency it sees: its sync calls' p50 where it syncs (a database's
//! commits), else its requests' p50. An interval is **calm** for it when the other processes
//! held less than half of that disk's busy time (device time, summed per process from the
//! streamed requests and, in aggregation mode, from the kernel's sums); only calm intervals
//! feed the baseline, so a neighbour that stays for minutes does not become the norm. The
//! baseline is the median of the last calm intervals, kept [`KEEP_NS`]. A process first seen
//! with its neighbour already there (a cold start) has no baseline, and no finding.

use std::collections::VecDeque;

use crate::{Dev, FastMap, ProcRow};

/// Calm intervals a baseline holds at most, and needs at least.
const MAX_SAMPLES: usize = 20;
pub const MIN_SAMPLES: usize = 3;
/// A calm interval counts this long.
pub const KEEP_NS: u64 = 10 * 60 * 1_000_000_000;
/// The least calls or requests an interval's p50 is taken from.
pub const MIN_SYNCS: u64 = 10;
pub const MIN_REQUESTS: u64 = 20;
/// Others' share of the disk's busy time below which an interval is calm.
pub const CALM_OTHERS_SHARE: f64 = 0.5;
/// Baselines kept (the least recently calm go).
const MAX_BASELINES: usize = 4_096;

/// What latency a process is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Measure {
    /// Its sync calls' p50.
    Sync,
    /// Its requests' p50 (creation to completion).
    Requests,
}

impl Measure {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Requests => "request",
        }
    }
}

/// A process's latency in one interval, on one disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub tgid: u32,
    pub dev: Dev,
    pub measure: Measure,
    pub p50_ns: u64,
}

/// The latency a process sees now, if it did enough to tell.
pub fn seen(proc: &ProcRow) -> Option<Seen> {
    let f = &proc.interval;
    if proc.kernel_thread {
        return None;
    }
    if f.sync.latency.count >= MIN_SYNCS
        && let Some(dev) = f.sync.disk
    {
        return Some(Seen {
            tgid: proc.tgid,
            dev,
            measure: Measure::Sync,
            p50_ns: f.sync.latency.p50_ns,
        });
    }
    let dev = proc
        .devices
        .iter()
        .max_by_key(|d| (d.device_ns, d.reads + d.writes))?;
    (f.latency.count >= MIN_REQUESTS && dev.reads + dev.writes > 0).then_some(Seen {
        tgid: proc.tgid,
        dev: dev.dev,
        measure: Measure::Requests,
        p50_ns: f.latency.p50_ns,
    })
}

/// The device time each process spent on `dev`, and the disk's in all. Kernel threads are
/// left out as themselves: a journal thread writes for the syncing processes (its writes are
/// charged to their calls), and a flusher's write-back is its dirtiers'. A flusher's device
/// time on `dev` is split among the processes whose pages it wrote back, by the bytes it wrote
/// for each: a buffered bulk writer holds the disk through its flusher, and is named as the
/// one who does. (The split is by its bytes on every disk: a flusher that wrote for two
/// processes on two disks in one interval gives each a share of both.) A dirtier that
/// has gone, or whom the probes could not name, holds nobody's share.
pub fn busy_on(procs: &[ProcRow], dev: Dev) -> (Vec<(&ProcRow, u64)>, u64) {
    let device_ns = |p: &ProcRow| {
        p.devices
            .iter()
            .find(|d| d.dev == dev)
            .map_or(0, |d| d.device_ns)
    };
    let mut by: Vec<(&ProcRow, u64)> = procs
        .iter()
        .filter(|p| !p.kernel_thread)
        .map(|p| (p, device_ns(p)))
        .collect();
    for flusher in procs.iter().filter(|p| p.kernel_thread) {
        let f = &flusher.interval;
        let ns = device_ns(flusher);
        let written = f.write_bytes.max(f.wrote_back_bytes);
        if ns == 0 || written == 0 {
            continue;
        }
        for party in &f.wrote_back_for {
            let share = u128::from(ns) * u128::from(party.bytes.min(written)) / u128::from(written);
            if let Some((_, busy)) = by.iter_mut().find(|(p, _)| p.tgid == party.tgid) {
                *busy += u64::try_from(share).unwrap_or(u64::MAX);
            }
        }
    }
    by.retain(|(_, ns)| *ns > 0);
    let total = by.iter().map(|(_, ns)| ns).sum();
    (by, total)
}

/// A baseline as the detector sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Baseline {
    pub tgid: u32,
    pub dev: Dev,
    pub measure: Measure,
    pub p50_ns: u64,
    /// Calm intervals it is the median of.
    pub intervals: u32,
}

impl Baseline {
    /// The median of a process's calm samples.
    fn of(tgid: u32, dev: Dev, measure: Measure, samples: &VecDeque<(u64, u64)>) -> Self {
        let mut p50s: Vec<u64> = samples.iter().map(|&(_, p50)| p50).collect();
        p50s.sort_unstable();
        Self {
            tgid,
            dev,
            measure,
            p50_ns: p50s[p50s.len() / 2],
            intervals: u32::try_from(p50s.len()).unwrap_or(u32::MAX),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Baselines {
    calm: FastMap<(u32, Dev, Measure), VecDeque<(u64, u64)>>,
}

impl Baselines {
    /// The baselines of the processes seen now (from calm intervals before this one); then
    /// this interval joins theirs where it was calm. A process present but not seen (too few
    /// calls or requests finished: idle, or stalled in one) gets its baselines too: a call
    /// stalled behind a neighbour is the worst of waits, and it finishes nothing.
    pub(crate) fn observe(&mut self, procs: &[ProcRow], now_ns: u64) -> Vec<Baseline> {
        let horizon = now_ns.saturating_sub(KEEP_NS);
        let mut found = Vec::new();
        let unseen: FastMap<u32, ()> = procs
            .iter()
            .filter(|p| !p.kernel_thread && seen(p).is_none())
            .map(|p| (p.tgid, ()))
            .collect();
        if !unseen.is_empty() {
            for (&(tgid, dev, measure), samples) in &self.calm {
                if samples.len() >= MIN_SAMPLES
                    && samples.back().is_some_and(|&(at, _)| at >= horizon)
                    && unseen.contains_key(&tgid)
                {
                    found.push(Baseline::of(tgid, dev, measure, samples));
                }
            }
        }
        for seen in procs.iter().filter_map(seen) {
            let key = (seen.tgid, seen.dev, seen.measure);
            if let Some(samples) = self.calm.get_mut(&key) {
                samples.retain(|&(at, _)| at >= horizon);
                if samples.len() >= MIN_SAMPLES {
                    found.push(Baseline::of(seen.tgid, seen.dev, seen.measure, samples));
                }
            }
            let (by, total) = busy_on(procs, seen.dev);
            let own = by
                .iter()
                .find(|(p, _)| p.tgid == seen.tgid)
                .map_or(0, |(_, ns)| *ns);
            #[expect(clippy::cast_precision_loss, reason = "a share")]
            let others = if total == 0 {
                0.0
            } else {
                total.saturating_sub(own) as f64 / total as f64
            };
            if others < CALM_OTHERS_SHARE {
                if self.calm.len() >= MAX_BASELINES && !self.calm.contains_key(&key) {
                    self.calm
                        .retain(|_, s| s.back().is_some_and(|&(at, _)| at >= horizon));
                    if self.calm.len() >= MAX_BASELINES {
                        continue;
                    }
                }
                let samples = self.calm.entry(key).or_default();
                if samples.len() >= MAX_SAMPLES {
                    samples.pop_front();
                }
                samples.push_back((now_ns, seen.p50_ns));
            }
        }
        found
    }

    /// Forgets a process that is gone.
    pub(crate) fn forget(&mut self, tgid: u32) {
        self.calm.retain(|(t, _, _), _| *t != tgid);
    }
}
